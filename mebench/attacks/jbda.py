"""JBDA and its PRADA variants (``jb_self``, ``jb_top``): Jacobian-based dataset augmentation.

Papernot et al., AsiaCCS 2017, and Juuti et al., EuroS&P 2019, following the implementation behind
Prediction Poisoning's Table 1 (tribhuvanesh/prediction-poisoning at 1ddff8b,
``defenses/adversary/jacobian.py``). The procedure, every default with its ``file:line``, the
named variants that reproduce the reference code's quirks (``step_space``, ``dataset_update``,
``stored_image``) and the deviations are documented once, in ``docs/attacks/jbda.md``; a contract
test checks ``JbdaParams``' defaults against that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import Attack, AttackContext, TrainingCost, register_attack, train_fresh
from mebench.errors import ConfigError
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

AUGMENTATIONS = ("jbda", "jb_self", "jb_top")
CHUNK = 4096


@dataclass(frozen=True)
class JbdaParams:
    """``attack.params`` of ``jbda``; the defaults are the reference procedure (cited in docs/attacks/jbda.md)."""

    augmentation: str = "jbda"
    step_size: float = 0.1
    tau: Optional[int] = 5
    kappa: Optional[int] = None
    sigma: int = 3
    topk: int = 3
    pgd_steps: int = 8
    pgd_alpha: float = 0.01
    batch_size: int = 64
    round_epochs: int = 20
    round_lr: float = 0.1
    final_epochs: int = 100
    final_lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_step: Optional[int] = 30
    lr_gamma: float = 0.1
    norm_mean: float = 0.1307
    norm_std: float = 0.3081
    step_space: str = "pixel"
    dataset_update: str = "union"
    stored_image: str = "queried"


STEP_SPACES = ("pixel", "normalized")
DATASET_UPDATES = ("union", "reference_inplace")
STORED_IMAGES = ("queried", "reference_x_plus_delta")


def step_for_round(step_size: float, tau: Optional[int], r: int) -> float:
    """λ_r: the step's sign flips with period ``tau`` as in the reference (Python's ``round``)."""
    return step_size if tau is None else step_size * (-1) ** round(r / tau)


def labels_of(y: torch.Tensor) -> torch.Tensor:
    """The victim's label of each answer (argmax of a probability vector, or the label itself)."""
    return y.argmax(dim=1) if y.dim() == 2 else y


def fgsm_sign(model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """sign(∇_x CE(model(x), labels)) per image (0 where the gradient is 0)."""
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        loss = F.cross_entropy(model(x), labels, reduction="sum")
        (grad,) = torch.autograd.grad(loss, x)
    return grad.sign()


def targeted_pgd(model: nn.Module, x: torch.Tensor, targets: torch.Tensor, radius: float,
                 alpha: float, steps: int) -> torch.Tensor:
    """Images ``x + δ``: ``steps`` signed-gradient ascents of the ``targets`` logit, δ in the L∞
    ball of ``radius``, the result clipped to [0, 1]."""
    delta = torch.zeros_like(x)
    for _ in range(steps):
        d = delta.clone().requires_grad_(True)
        with torch.enable_grad():
            score = model(x + d).gather(1, targets.view(-1, 1)).sum()
            (grad,) = torch.autograd.grad(score, d)
        delta = (delta + alpha * grad.sign()).clamp(-radius, radius)
    return (x + delta).clamp(0.0, 1.0)


@register_attack
class Jbda(Attack):
    """Jacobian-based dataset augmentation from a small seed set (JBDA, jb-self, jb-top<k>)."""

    name = "jbda"
    paper = ("Papernot et al., Practical Black-Box Attacks against Machine Learning, AsiaCCS 2017; "
             "jb-self / jb-top<k>: Juuti et al., PRADA, EuroS&P 2019")
    data_modes = frozenset({"seed", "surrogate"})
    state_dependent_queries = True
    has_track_b = True
    Params = JbdaParams
    smoke_params = {"round_epochs": 1, "final_epochs": 1, "batch_size": 32}

    @classmethod
    def check_params(cls, params: JbdaParams, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        p, key = params, "attack.params."
        rules = [
            ("augmentation", p.augmentation in AUGMENTATIONS, f"must be one of {', '.join(AUGMENTATIONS)}"),
            ("step_size", p.step_size > 0, "must be > 0"),
            ("tau", p.tau is None or p.tau >= 1, "must be null or >= 1"),
            ("kappa", p.kappa is None or p.kappa >= 1, "must be null or >= 1"),
            ("sigma", p.sigma >= 0, "must be >= 0"),
            ("topk", p.topk >= 1, "must be >= 1"),
            ("pgd_steps", p.pgd_steps >= 1, "must be >= 1"),
            ("pgd_alpha", p.pgd_alpha > 0, "must be > 0"),
            ("batch_size", p.batch_size >= 1, "must be >= 1"),
            ("round_epochs", p.round_epochs >= 1, "must be >= 1"),
            ("round_lr", p.round_lr > 0, "must be > 0"),
            ("final_epochs", p.final_epochs >= 1, "must be >= 1"),
            ("final_lr", p.final_lr > 0, "must be > 0"),
            ("momentum", 0 <= p.momentum < 1, "must be in [0, 1)"),
            ("weight_decay", p.weight_decay >= 0, "must be >= 0"),
            ("lr_step", p.lr_step is None or p.lr_step >= 1, "must be null or >= 1"),
            ("lr_gamma", 0 < p.lr_gamma <= 1, "must be in (0, 1]"),
            ("step_space", p.step_space in STEP_SPACES, f"must be one of {', '.join(STEP_SPACES)}"),
            ("norm_std", p.norm_std > 0, "must be > 0"),
            ("dataset_update", p.dataset_update in DATASET_UPDATES, f"must be one of {', '.join(DATASET_UPDATES)}"),
            ("dataset_update", p.dataset_update == "union" or p.augmentation != "jb_top",
             "reference_inplace is the jbda / jb_self routine's; the reference's jb_top routine appends "
             "(jacobian.py:295), so jb_top takes 'union'"),
            ("stored_image", p.stored_image in STORED_IMAGES, f"must be one of {', '.join(STORED_IMAGES)}"),
            ("stored_image", p.stored_image == "queried" or p.augmentation == "jb_self",
             "reference_x_plus_delta is the reference's jb-self quirk (jacobian.py:223-235); it needs "
             "augmentation 'jb_self'"),
        ]
        for name, ok, rule in rules:
            if not ok:
                raise ConfigError(key + name, getattr(p, name), rule)

    @classmethod
    def required_pool_size(cls, params: JbdaParams, max_budget: int) -> int:
        """Only the seed set comes from the pool; every later query is synthesised."""
        return 1

    @classmethod
    def training_cost(cls, params: JbdaParams, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Round models (``round_epochs`` on everything answered, D growing (1 + k)-fold from a
        100-image seed set) and a final model (``final_epochs`` on D_B) at every checkpoint."""
        grow = 1 + (params.topk if params.augmentation == "jb_top" else 1)
        rounds, n = 0, 100
        while n < max_budget:
            rounds, n = rounds + params.round_epochs * n, n * grow
        return TrainingCost(rounds + params.final_epochs * sum(checkpoints))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ValueError("jbda needs an image pool for its seed set (seed or surrogate data mode)")
        n = ctx.seed_size
        if n > len(ctx.pool):
            raise ValueError(f"the seed set needs {n} images, the pool holds {len(ctx.pool)}")
        # seed mode: the pool's first seed_size images are the raw seed images (AttackContext)
        pick = (torch.arange(n) if ctx.data_mode == "seed"
                else torch.randperm(len(ctx.pool), generator=ctx.generator)[:n])
        self._pending: torch.Tensor = ctx.pool.get(pick, ctx.device)
        self._source = torch.full((n,), -1, dtype=torch.long)  # answer position each image augments
        self.round = -1  # the seed set precedes round 0
        # dataset_update reference_inplace: D as positions in the answer log, and the round in flight
        # (first answer position, number of images, whether its rows rewrite D in place)
        self._d = torch.arange(n)
        self._flight: Optional[tuple[int, int, bool]] = None
        self._track_b: Optional[nn.Module] = None
        self._track_b_n = -1
        # stored_image reference_x_plus_delta: the image D keeps for each query, in query order
        self._mirror = self.params.stored_image != "queried"
        self._stored: list[torch.Tensor] = []
        self._pending_store: torch.Tensor = self._pending

    def _train(self, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, tag: str) -> nn.Module:
        p = self.params
        return train_fresh(self.ctx, x, y, tag, epochs=epochs, lr=lr, momentum=p.momentum,
                           weight_decay=p.weight_decay, batch_size=p.batch_size, lr_step=p.lr_step,
                           lr_gamma=p.lr_gamma)

    # -- the loop ----------------------------------------------------------------------
    def next_batch_size(self, state: "EngineState") -> int:
        """The rest of the current round (built when the previous one is fully answered)."""
        if self._pending.shape[0] == 0:
            self._pending, self._source, self._pending_store = self._augment(state)
        return int(self._pending.shape[0])

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        """The next ``k`` images of the round; ``meta["source"]``: the answer position each one
        augments (-1 for the seed set)."""
        if self._pending.shape[0] == 0:
            self._pending, self._source, self._pending_store = self._augment(state)
        if k > self._pending.shape[0]:
            raise ValueError(f"round {self.round} has {self._pending.shape[0]} images left, {k} were asked for")
        x, self._pending = self._pending[:k], self._pending[k:]
        src, self._source = self._source[:k], self._source[k:]
        if self._mirror:
            kept, self._pending_store = self._pending_store[:k], self._pending_store[k:]
            self._stored.append(kept)
        return QueryBatch(x, {"round": self.round, "augmentation": self.params.augmentation, "source": src})

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        if len(output) != len(batch):
            raise ValueError(f"oracle answered {len(output)} of {len(batch)} images")

    def track_b_model(self, state: "EngineState") -> nn.Module:
        """A fresh substitute trained ``final_epochs`` epochs on everything answered so far (on the
        reference's D for ``dataset_update: reference_inplace``)."""
        n = state.queries_used
        if self._track_b_n != n:
            x, y = self._data_set(state)
            self._track_b = self._train(x, y, self.params.final_epochs, self.params.final_lr, f"jbda-final-{n}")
            self._track_b_n = n
        assert self._track_b is not None
        return self._track_b

    # -- the attacker's data set D ----------------------------------------------------
    def _positions(self, answered: int) -> torch.Tensor:
        """reference_inplace: D's answer positions once ``answered`` queries are in: the round in
        flight rewrites its rows in place as they are answered, and D doubles when it is complete."""
        if self._flight is None:
            return self._d
        start, n, inplace = self._flight
        done = min(max(answered - start, 0), n)
        fresh = torch.arange(start, start + done)
        if not inplace:  # a kappa sample is a copy: D grows by the round's answers when it is complete
            return torch.cat([self._d, fresh]) if done == n else self._d
        d = self._d.clone()
        d[:done] = fresh
        return torch.cat([d, d[:n]]) if done == n else d

    def _data_set(self, state: "EngineState") -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) the attacker trains on: every answer (``union``) or the reference's D."""
        x, y = (t.to(self.ctx.device) for t in state.labelled())
        if self._mirror:  # what the reference keeps in D: x + δ for each jb-self query x − δ
            stored = torch.cat(self._stored).to(x.device)
            if stored.shape[0] != x.shape[0]:
                raise RuntimeError(f"jbda: {stored.shape[0]} images kept for {x.shape[0]} answers")
            x = stored
        if self.params.dataset_update == "union":
            return x, y
        d = self._positions(state.queries_used).to(x.device)
        return x[d], y[d]

    # -- one round of augmentation -----------------------------------------------------
    def _augment(self, state: "EngineState") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next round's images (cut to the budget left), the answer position of each one's source
        and the image D keeps for each (the image itself, or x + δ for ``reference_x_plus_delta``)."""
        p = self.params
        self.round += 1
        r = self.round
        inplace = p.dataset_update == "reference_inplace"
        if inplace:
            self._d, self._flight = self._positions(state.queries_used), None  # the last round is complete
        x, y = self._data_set(state)
        model = self._train(x, y, p.round_epochs, p.round_lr, f"jbda-round-{r}")
        for q in model.parameters():
            q.requires_grad_(False)
        pos = self._d.clone() if inplace else torch.arange(x.shape[0])
        sampled = p.kappa is not None and r >= p.sigma and p.kappa < x.shape[0]
        if sampled:
            keep = torch.zeros(x.shape[0], dtype=torch.bool)
            keep[torch.randperm(x.shape[0], generator=self.ctx.generator)[: p.kappa]] = True  # answer order kept
            x, y, pos = x[keep.to(x.device)], y[keep.to(y.device)], pos[keep]
        left = state.budget_left
        # pixel space: lo = 0, unit = 1; the reference code's normalized space: the step and the
        # [0, 1] clip act on (x - mean) / std, i.e. a step of λ·std and a clip to [mean, mean + std]
        lo, unit = (p.norm_mean, p.norm_std) if p.step_space == "normalized" else (0.0, 1.0)
        step = step_for_round(p.step_size, p.tau, r) * unit
        labels = labels_of(y)
        out, kept = [], []
        if p.augmentation == "jb_top":
            k = min(p.topk, self.ctx.num_classes - 1)
            n = min(x.shape[0], -(-left // k))
            for s in range(0, n, CHUNK):
                xs, ls = x[s:min(n, s + CHUNK)], labels[s:min(n, s + CHUNK)]
                order = model(xs).argsort(dim=1, descending=True)
                targets = order[order != ls.view(-1, 1)].view(xs.shape[0], -1)[:, :k]  # image-major
                rep = xs.repeat_interleave(k, dim=0)
                out.append(targeted_pgd(model, rep, targets.reshape(-1), abs(step), p.pgd_alpha * unit, p.pgd_steps))
            source = pos[:n].repeat_interleave(k)
        else:
            n = min(x.shape[0], left)
            for s in range(0, n, CHUNK):
                xs = x[s:min(n, s + CHUNK)]
                delta = step * fgsm_sign(model, xs, labels[s:min(n, s + CHUNK)])
                # x + δ in [lo, lo + unit] (jacobian.py:316-317: [0, 1] in the space the step is taken in)
                delta = torch.minimum(torch.maximum(delta, lo - xs), lo + unit - xs)
                out.append((xs + delta).clamp(0.0, 1.0) if p.augmentation == "jbda" else (xs - delta).clamp(0.0, 1.0))
                if self._mirror:
                    kept.append((xs + delta).clamp(0.0, 1.0))
            source = pos[:n]
        if inplace:
            self._flight = (state.queries_used, min(int(source.numel()), left), not sampled)
        queries = torch.cat(out)[:left].detach()
        return queries, source[:left], (torch.cat(kept)[:left].detach() if self._mirror else queries)


__all__ = ["Jbda", "JbdaParams", "AUGMENTATIONS", "step_for_round", "fgsm_sign", "targeted_pgd"]
