"""Black-box Dissector (Wang et al., ECCV 2022): hard-label stealing with CAM-driven erasing and
random-erasing self-knowledge distillation, in rounds.

The procedure, the reference code (yxwang-10/Blackbox-Dissector at 5b4dc6b) with ``file:line`` for
every default, and the deviations are documented once, in ``docs/attacks/dissector.md``; a
contract test checks ``DissectorParams``' defaults against that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import Attack, AttackContext, TrainingCost, register_attack, train_fresh
from mebench.attacks.random import PoolPermutation
from mebench.errors import ConfigError
from mebench.support.seeding import derive_seed
from mebench.training.losses import kl_to_victim
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState


@dataclass(frozen=True)
class DissectorParams:
    """``attack.params`` of ``dissector``; the defaults are the reference procedure (cited in docs/attacks/dissector.md)."""

    initial_budget: int = 100
    splits: tuple[int, ...] = (100, 200, 500, 800, 1000, 2000, 5000, 10000, 20000, 30000)
    erase_rate: float = 0.25
    num_erasings: int = 10
    erase_area_low: float = 0.02
    erase_area_high: float = 0.1
    erase_ratio: float = 0.3
    epochs: int = 200
    batch_size: int = 128
    lr: float = 0.02
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_step: Optional[int] = 60
    lr_gamma: float = 0.1


def round_ends(p: DissectorParams, checkpoints: tuple[int, ...], max_budget: int) -> list[int]:
    """Queries answered when each round's training starts: the reference's splits below the budget,
    every checkpoint, and the initial budget (capped by the budget)."""
    ends = {min(p.initial_budget, max_budget), *checkpoints, max_budget}
    ends |= {s for s in p.splits if s < max_budget}
    return sorted(e for e in ends if e >= min(p.initial_budget, max_budget))


def last_conv(model: nn.Module) -> nn.Module:
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        raise ConfigError("substitute.arch", type(model).__name__, "Black-box Dissector needs a convolutional "
                          "substitute (Grad-CAM is taken at its last convolution)")
    return convs[-1]


def grad_cam(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Grad-CAM maps ``[N, H, W]`` in [0, 1] for the model's own top class, at its last convolution."""
    layer, store = last_conv(model), {}
    handle = layer.register_forward_hook(lambda m, i, o: store.__setitem__("a", o))
    try:
        model.eval()
        x = x.detach().requires_grad_(False)
        with torch.enable_grad():
            logits = model(x)
            act = store["a"]
            top = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
            grads = torch.autograd.grad(top, act)[0]
    finally:
        handle.remove()
    cam = F.relu((grads.mean(dim=(2, 3), keepdim=True) * act).sum(1, keepdim=True)).detach()
    cam = F.interpolate(cam, size=x.shape[-2:], mode="bilinear", align_corners=False).squeeze(1)
    lo = cam.flatten(1).min(1).values.view(-1, 1, 1)
    hi = cam.flatten(1).max(1).values.view(-1, 1, 1)
    return (cam - lo) / (hi - lo).clamp_min(1e-12)


def erase_boxes(x: torch.Tensor, n: int, p: DissectorParams, fill: torch.Tensor, g: torch.Generator,
                peak: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``n`` erased copies of each image, ``[N, n, C, H, W]``: a box of area U(low, high)·HW and
    aspect ratio U(r, 1/r), filled with ``fill`` (per channel); with ``peak`` (``[N, 2]`` row and
    column) the box covers that pixel (CAM-driven), else it is placed uniformly at random."""
    N, C, H, W = x.shape
    area = torch.empty(N, n).uniform_(p.erase_area_low, p.erase_area_high, generator=g) * H * W
    ratio = torch.empty(N, n).uniform_(p.erase_ratio, 1 / p.erase_ratio, generator=g)
    h = (area * ratio).sqrt().round().clamp(1, H - 1).long()
    w = (area / ratio).sqrt().round().clamp(1, W - 1).long()
    u1, u2 = torch.rand(N, n, generator=g), torch.rand(N, n, generator=g)
    if peak is None:
        top = (u1 * (H - h + 1)).floor().long()
        left = (u2 * (W - w + 1)).floor().long()
    else:  # top in [max(0, r - h + 1), min(H - h, r)]: the box holds row r (and likewise for columns)
        r, c = peak[:, 0:1].expand(N, n), peak[:, 1:2].expand(N, n)
        lo_t, hi_t = (r - h + 1).clamp_min(0), torch.minimum(H - h, r)
        lo_l, hi_l = (c - w + 1).clamp_min(0), torch.minimum(W - w, c)
        top = lo_t + (u1 * (hi_t - lo_t + 1)).floor().long()
        left = lo_l + (u2 * (hi_l - lo_l + 1)).floor().long()
    rows = torch.arange(H).view(1, 1, H, 1)
    cols = torch.arange(W).view(1, 1, 1, W)
    box = ((rows >= top[..., None, None]) & (rows < (top + h)[..., None, None])
           & (cols >= left[..., None, None]) & (cols < (left + w)[..., None, None]))  # [N, n, H, W]
    box = box.unsqueeze(2).to(x.device)
    out = x.unsqueeze(1).expand(N, n, C, H, W)
    return torch.where(box, fill.view(1, 1, C, 1, 1).to(x), out)


@register_attack
class Dissector(Attack):
    """Black-box Dissector: CAM-driven erasing re-queries and random-erasing self-distillation."""

    name = "dissector"
    paper = "Wang et al., Black-box Dissector, ECCV 2022 (arXiv:2105.00623)"
    data_modes = frozenset({"surrogate"})
    output_modes = frozenset({"hard_top1"})
    output_mode_reason = "Black-box Dissector is a hard-label attack (the victim answers its top-1 label)"
    state_dependent_queries = True
    has_track_b = True
    Params = DissectorParams
    smoke_params = {"epochs": 1, "batch_size": 32, "initial_budget": 20, "splits": [20, 40, 100], "num_erasings": 3}

    @classmethod
    def check_params(cls, p: DissectorParams, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        for key in ("initial_budget", "num_erasings", "epochs", "batch_size"):
            if not isinstance(getattr(p, key), int) or getattr(p, key) < 1:
                raise ConfigError(f"attack.params.{key}", getattr(p, key), "must be a positive integer")
        if list(p.splits) != sorted(set(p.splits)) or any(s < 1 for s in p.splits):
            raise ConfigError("attack.params.splits", list(p.splits), "must be increasing positive query counts")
        rules = [("erase_rate", 0 <= p.erase_rate <= 1, "must be in [0, 1]"),
                 ("erase_area_low", 0 < p.erase_area_low <= p.erase_area_high, "must be in (0, erase_area_high]"),
                 ("erase_area_high", p.erase_area_high < 1, "must be < 1"),
                 ("erase_ratio", 0 < p.erase_ratio <= 1, "must be in (0, 1]"),
                 ("lr", p.lr > 0, "must be > 0"), ("momentum", 0 <= p.momentum < 1, "must be in [0, 1)"),
                 ("weight_decay", p.weight_decay >= 0, "must be >= 0"),
                 ("lr_step", p.lr_step is None or p.lr_step >= 1, "must be null or >= 1"),
                 ("lr_gamma", 0 < p.lr_gamma <= 1, "must be in (0, 1]")]
        for key, ok, rule in rules:
            if not ok:
                raise ConfigError(f"attack.params.{key}", getattr(p, key), rule)

    @classmethod
    def required_pool_size(cls, params, max_budget: int) -> int:
        return max_budget  # at most every query is a new original

    @classmethod
    def training_cost(cls, params: DissectorParams, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Each round with n answers: a model on the n answers, n pool images pseudo-labelled over
        ``num_erasings`` erasings (forward passes, about a third of a training example each) and a
        model on the 2n answered and pseudo-labelled images."""
        n = sum(round_ends(params, checkpoints, max_budget))
        return TrainingCost(3 * params.epochs * n + (params.num_erasings * n) // 3)

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ValueError("dissector needs an image pool")
        self.p: DissectorParams = ctx.params
        self.sampler = PoolPermutation(ctx.pool, ctx.generator)  # new originals, and pseudo-label images
        self.g = torch.Generator().manual_seed(derive_seed(ctx.seed, "dissector-erasing"))
        self.ends = round_ends(self.p, ctx.checkpoints, ctx.max_budget)
        self.fill = torch.tensor(ctx.profile.mean, dtype=torch.float32)
        self.original: list[int] = []  # query position -> pool index, or -1 for an erased copy
        self.erased: set[int] = set()  # query positions of originals already erased
        self.plan: list[torch.Tensor] = []  # images of the current round still to send
        self.plan_meta: list[torch.Tensor] = []
        self.model: Optional[nn.Module] = None
        self.model_n = -1

    # -- rounds -------------------------------------------------------------------------
    def next_batch_size(self, state: "EngineState") -> int:
        if not self.plan:
            self._plan_round(state)
        return max(1, min(1024, int(self.plan[0].shape[0])))

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if not self.plan:
            self._plan_round(state)
        x, meta = self.plan[0], self.plan_meta[0]
        if k > len(x):
            raise RuntimeError(f"dissector: asked for {k} images, the round's plan holds {len(x)}")
        self.plan[0], self.plan_meta[0] = x[k:], meta[k:]
        if not len(self.plan[0]):
            self.plan.pop(0)
            self.plan_meta.pop(0)
        self.original += meta[:k].tolist()
        return QueryBatch(x[:k].to(self.ctx.device), {"pool_index": meta[:k]})

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        if len(output) != len(batch):
            raise ValueError(f"oracle answered {len(output)} of {len(batch)} images")

    def _plan_round(self, state: "EngineState") -> None:
        """The next round's queries: CDE re-queries (``erase_rate`` of them) then new originals."""
        n = state.queries_used
        nxt = next((e for e in self.ends if e > n), state.max_budget)
        todo = min(nxt, state.max_budget) - n
        if todo <= 0:
            raise RuntimeError("dissector: no budget left to plan")
        n_erase = int(todo * self.p.erase_rate) if n >= min(self.p.initial_budget, state.max_budget) else 0
        parts, metas = [], []
        if n_erase:
            xe = self._cde(state, n_erase)
            parts.append(xe)
            metas.append(torch.full((len(xe),), -1, dtype=torch.long))
        n_orig = todo - sum(len(p) for p in parts)
        if n_orig:
            batch = self.sampler.take(n_orig, "cpu")
            parts.append(batch.x)
            metas.append(batch.meta["pool_index"])
        self.plan, self.plan_meta = parts, metas

    def _cde(self, state: "EngineState", budget: int) -> torch.Tensor:
        """Up to ``budget`` erased copies of answered, never-erased originals (attack.py:410-482)."""
        model = self._round_model(state)
        n = state.queries_used
        cand = [i for i in range(n) if self.original[i] >= 0 and i not in self.erased]
        if not cand:
            return torch.empty(0, *self.ctx.input_shape)
        x_all, y_all = state.labelled(n)
        idx = torch.tensor(cand, dtype=torch.long)
        x, y = x_all[idx.to(x_all.device)].cpu(), y_all[idx.to(y_all.device)].long().cpu()
        best, msp = [], []
        for s in range(0, len(x), 512):
            xs, ys = x[s:s + 512], y[s:s + 512]
            cam = grad_cam(model, xs.to(self.ctx.device)).cpu()
            flat = cam.flatten(1).argmax(1)
            peak = torch.stack([flat // cam.shape[2], flat % cam.shape[2]], 1)
            variants = erase_boxes(xs, self.p.num_erasings, self.p, self.fill, self.g, peak)
            with torch.no_grad():
                prob = torch.softmax(model(variants.flatten(0, 1).to(self.ctx.device)), 1).cpu()
            prob = prob.view(len(xs), self.p.num_erasings, -1)
            pick = prob.gather(2, ys.view(-1, 1, 1).expand(-1, self.p.num_erasings, 1)).squeeze(2).argmin(1)
            best.append(variants[torch.arange(len(xs)), pick])
            msp.append(prob[torch.arange(len(xs)), pick].max(1).values)
        best_x, score = torch.cat(best), torch.cat(msp)
        take = torch.topk(score, min(budget, len(score))).indices
        self.erased.update(cand[i] for i in take.tolist())
        return best_x[take]

    # -- training -----------------------------------------------------------------------
    def _train(self, x: torch.Tensor, t: torch.Tensor, tag: str) -> nn.Module:
        """A fresh substitute trained on probability targets ``t`` (one-hot labels and pseudo-labels)."""
        p = self.p
        return train_fresh(self.ctx, x, t, tag, epochs=p.epochs, lr=p.lr, momentum=p.momentum,
                           weight_decay=p.weight_decay, batch_size=p.batch_size, lr_step=p.lr_step,
                           lr_gamma=p.lr_gamma, loss_fn=kl_to_victim)

    def _round_model(self, state: "EngineState") -> nn.Module:
        """The round's substitute on the first ``queries_used`` answers (trained once per round)."""
        n = state.queries_used
        if self.model_n == n:
            assert self.model is not None
            return self.model
        x, y = state.labelled(n)
        target = F.one_hot(y.long(), self.ctx.num_classes).float()
        first = self._train(x, target, f"dissector-{n}-labelled")
        # random-erasing self-distillation on as many unqueried pool images as answered ones
        k = min(n, len(self.sampler.order) - self.sampler.pos)
        if k > 0:
            rest = self.sampler.order[self.sampler.pos:]  # pool images never queried so far
            unq = rest[torch.randperm(len(rest), generator=self.g)[:k]]
            xp = self.ctx.pool.get(unq, "cpu")
            soft = torch.zeros(k, self.ctx.num_classes)
            first.eval()
            for s in range(0, k, 512):
                v = erase_boxes(xp[s:s + 512], self.p.num_erasings, self.p, self.fill, self.g)
                with torch.no_grad():
                    pr = torch.softmax(first(v.flatten(0, 1).to(self.ctx.device)), 1).cpu()
                soft[s:s + 512] = pr.view(len(v), self.p.num_erasings, -1).mean(1)
            x = torch.cat([x.cpu(), xp])
            target = torch.cat([target.cpu(), soft])
        self.model = self._train(x, target, f"dissector-{n}-distilled")
        self.model_n = n
        return self.model

    def track_b_model(self, state: "EngineState") -> nn.Module:
        """The round's second (distilled) substitute on everything answered so far (Track B, §8)."""
        return self._round_model(state).eval()


__all__ = ["Dissector", "DissectorParams", "erase_boxes", "grad_cam", "round_ends"]
