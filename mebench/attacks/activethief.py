"""ActiveThief (Pal et al., AAAI 2020): pool-based active learning for model extraction.

The attack loop (seed and validation sets, rounds of training from scratch and selection by
``mebench.attacks.selection``, a round ending at every checkpoint), the reference values
(shukla-aditya-csa/activethief at 35a505d and the paper) with their sources, and the deviations
are documented once, in ``docs/attacks/activethief.md``; a contract test checks
``ActiveThiefParams``' defaults against that page.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from mebench.attacks import selection as sel
from mebench.attacks.base import Attack, AttackContext, TrainingCost, register_attack
from mebench.errors import ConfigError, DivergenceError
from mebench.support.seeding import derive_seed
from mebench.support.inference import eval_logits
from mebench.training.loop import OPTIMIZER_NAMES, OptimizerSpec, make_optimizer
from mebench.training.losses import loss_for
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

STRATEGIES = ("random", "uncertainty", "k_center", "dfal", "dfal_k_center")
DFAL_STRATEGIES = ("dfal", "dfal_k_center")
"""The strategies that rank candidates by DeepFool's perturbation norm (and cost its steps)."""
# Fields that choose *what* to run, not how the authors ran it: no reference value.
NOT_PROCEDURE = ("strategy", "schedule", "chunk_size")
SCHEDULES = ("per_checkpoint", "max_budget")
# The cost estimate only (:meth:`ActiveThief.training_cost`): a DeepFool step costs one forward and,
# per rival class, an input gradient of about 1.5 forwards of the calibration probe's (batch 256): a
# DFAL cell of configs/benchmarks/activethief/mnist.yaml (79,000 candidates x 20 steps, 10 classes)
# took 1,558 s on one thread where its k-center cell took about 120 s, 0.92 ms a candidate and step
# against a 0.066 ms forward. A pool of 60,000 images (the MNIST and FashionMNIST train splits) where
# ``candidate_factor`` is null; 10 classes where ``dfal_classes`` is.
DEEPFOOL_FORWARDS_PER_RIVAL = 1.5
POOL_FOR_ESTIMATE = 60_000
CLASSES_FOR_ESTIMATE = 10
RANDOM_KINDS = ("seed", "val")


@dataclass(frozen=True)
class ActiveThiefParams:
    """``attack.params`` of ActiveThief; the defaults are the authors' procedure (cited in docs/attacks/activethief.md).

    ``strategy`` and ``schedule`` choose the variant; ``chunk_size`` only bounds memory.
    """

    strategy: str = "k_center"
    schedule: str = "per_checkpoint"
    initial_fraction: float = 0.1
    val_fraction: float = 0.2
    rounds: int = 10
    batch_size: int = 150
    max_epochs: int = 1000
    patience: int = 100
    max_steps: Optional[int] = None
    optimizer: OptimizerSpec = OptimizerSpec(name="adam", lr=1e-3, momentum=0.0, weight_decay=1e-3)
    candidate_factor: Optional[float] = None
    dfal_prefilter: Optional[int] = None
    dfal_max_iter: int = 20
    dfal_early_stop: bool = False
    dfal_space: str = "probs"
    dfal_classes: Optional[int] = None
    dfal_overshoot: float = 0.01
    dfal_step: str = "gap"
    chunk_size: int = 4096


@dataclass(frozen=True)
class Phase:
    """Queries ``[start, stop)`` of the run: ``seed``/``val`` (random) or ``active`` (one round)."""

    start: int
    stop: int
    kind: str


def _split(start: int, total: int, parts: int) -> list[Phase]:
    """``total`` queries from ``start`` as ``parts`` active rounds whose sizes differ by at most 1."""
    parts = min(parts, total)
    bounds = [start + (total * i) // parts for i in range(parts + 1)] if parts else [start]
    return [Phase(a, b, "active") for a, b in zip(bounds, bounds[1:])]


def _segment(a: int, b: int, p: ActiveThiefParams, first: bool) -> list[Phase]:
    """The phases of one planned run over queries ``(a, b]`` (docs/attacks/activethief.md)."""
    n = b - a
    n_val = round(p.val_fraction * n)
    if first:
        n_seed = max(1, round(p.initial_fraction * n))
        n_val = min(n_val, n - n_seed)
        head = [Phase(a, a + n_seed, "seed"), Phase(a + n_seed, a + n_seed + n_val, "val")]
        return head + _split(a + n_seed + n_val, n - n_seed - n_val, p.rounds)
    return _split(a, n - n_val, p.rounds) + [Phase(b - n_val, b, "val")]


def plan_schedule(p: ActiveThiefParams, max_budget: int, checkpoints: tuple[int, ...]) -> list[Phase]:
    """Every phase of the run in order, split so that each checkpoint ends a phase."""
    ends = sorted({c for c in checkpoints if 0 < c <= max_budget} | {max_budget})
    segments = list(zip([0] + ends[:-1], ends)) if p.schedule == "per_checkpoint" else [(0, max_budget)]
    phases = [ph for i, (a, b) in enumerate(segments) for ph in _segment(a, b, p, i == 0)]
    out: list[Phase] = []
    for ph in phases:
        cuts = [ph.start] + [c for c in ends if ph.start < c < ph.stop] + [ph.stop]
        out += [Phase(s, e, ph.kind) for s, e in zip(cuts, cuts[1:]) if e > s]
    return out


def macro_f1(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    """Macro-averaged F1 over the classes that occur in ``pred`` or ``target``."""
    tp = torch.bincount(target[pred == target], minlength=num_classes).double()
    n_pred = torch.bincount(pred, minlength=num_classes).double()
    n_true = torch.bincount(target, minlength=num_classes).double()
    present = (n_pred + n_true) > 0
    f1 = 2 * tp / (n_pred + n_true).clamp_min(1)
    return float(f1[present].mean()) if bool(present.any()) else 0.0


def _labels(y: torch.Tensor) -> torch.Tensor:
    return y.argmax(dim=1) if y.dim() == 2 else y


def _train_epoch(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                 loss_fn, batch_size: int, generator: torch.Generator, steps_left: Optional[int]) -> int:
    """One pass over ``(x, y)`` in a random order (at most ``steps_left`` steps); returns the steps taken."""
    model.train()
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    batches = torch.randperm(int(x.shape[0]), generator=generator).to(x.device).split(batch_size)
    if steps_left is not None:
        batches = batches[:steps_left]
    for idx in batches:
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        finite &= torch.isfinite(loss.detach())
    if not bool(finite):
        raise DivergenceError("ActiveThief substitute loss became NaN or infinite")
    return len(batches)


def fit_substitute(model: nn.Module, train: tuple[torch.Tensor, torch.Tensor],
                   val: tuple[torch.Tensor, torch.Tensor], p: ActiveThiefParams, output_mode: str,
                   num_classes: int, generator: torch.Generator) -> nn.Module:
    """Train ``model`` with the paper's regime; keep the epoch with the best validation macro-F1.

    Stops after ``max_epochs`` epochs, ``patience`` epochs without a better
    validation F1, or ``max_steps`` steps. Without validation images the model
    after the last epoch is kept. Raises ``DivergenceError`` on a NaN/inf loss.
    """
    opt = make_optimizer(model.parameters(), p.optimizer)
    val_labels = _labels(val[1])
    best, best_state, bad, steps = -1.0, None, 0, 0
    for _ in range(p.max_epochs):
        left = None if p.max_steps is None else p.max_steps - steps
        steps += _train_epoch(model, opt, *train, loss_for(output_mode), p.batch_size, generator, left)
        if val_labels.numel():
            f1 = macro_f1(eval_logits(model, val[0]).argmax(dim=1), val_labels, num_classes)
            best, best_state, bad = ((f1, copy.deepcopy(model.state_dict()), 0) if f1 > best
                                     else (best, best_state, bad + 1))
        if bad >= p.patience or (p.max_steps is not None and steps >= p.max_steps):
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return model.eval()


@register_attack
class ActiveThief(Attack):
    """ActiveThief (Pal et al., AAAI 2020): random seed, then active-learning rounds over the pool."""

    name = "activethief"
    paper = ("Pal et al., ActiveThief: Model Extraction Using Active Learning and Unannotated "
             "Public Data, AAAI 2020")
    data_modes = frozenset({"seed", "surrogate"})
    state_dependent_queries = True
    has_track_b = True
    Params = ActiveThiefParams
    smoke_params = {"strategy": "k_center", "rounds": 2, "max_epochs": 2, "patience": 1, "batch_size": 32}

    @classmethod
    def queries_depend_on_state(cls, params) -> bool:
        """Every strategy but ``random`` selects for the substitute of the round (§9)."""
        return params.strategy != "random"

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ValueError("ActiveThief needs an image pool (seed or surrogate data mode)")
        p = self.params
        self.phases = plan_schedule(p, ctx.max_budget, tuple(ctx.checkpoints))
        self.is_val = torch.zeros(ctx.max_budget, dtype=torch.bool)
        for ph in self.phases:
            if ph.kind == "val":
                self.is_val[ph.start:ph.stop] = True
        self.used = torch.zeros(len(ctx.pool), dtype=torch.bool)
        self._model: Optional[nn.Module] = None
        self._model_n = -1
        self._centers = torch.empty(0, ctx.num_classes)

    # -- parameters -------------------------------------------------------------------
    @classmethod
    def training_cost(cls, params: ActiveThiefParams, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """A lower bound on training: ``rounds`` models per checkpoint, each at least ``patience`` epochs
        over a labelled set of about half the checkpoint (capped by ``max_steps`` batches); and the
        selection's passes over each active round's candidates (``candidate_factor`` x the round's size;
        with none, a pool of :data:`POOL_FOR_ESTIMATE` images less those used): one forward to score
        them and, for the DFAL strategies, ``dfal_max_iter`` DeepFool steps of one forward and one input
        gradient per rival class (:data:`DEEPFOOL_FORWARDS_PER_RIVAL` forwards each, measured), all
        steps counted also with ``dfal_early_stop``."""
        def per_model(b: int) -> int:
            floor = params.patience * b // 2
            return floor if params.max_steps is None else min(floor, params.max_steps * params.batch_size)
        per_candidate = 0.0 if params.strategy == "random" else 1.0
        if params.strategy in DFAL_STRATEGIES:
            rivals = (params.dfal_classes or CLASSES_FOR_ESTIMATE) - 1
            per_candidate += params.dfal_max_iter * (1 + DEEPFOOL_FORWARDS_PER_RIVAL * rivals)
        forwards = 0.0
        for ph in plan_schedule(params, max_budget, checkpoints) if per_candidate else ():
            if ph.kind == "active":
                k = ph.stop - ph.start
                unused = max(POOL_FOR_ESTIMATE - ph.start, k)
                f = params.candidate_factor
                forwards += per_candidate * (unused if f is None else min(math.ceil(f * k), unused))
        return TrainingCost(sum(params.rounds * per_model(b) for b in checkpoints), forward_examples=forwards)

    @classmethod
    def check_params(cls, params: ActiveThiefParams, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        p, key = params, "attack.params."
        rules = [
            ("strategy", p.strategy in STRATEGIES, f"must be one of {', '.join(STRATEGIES)}"),
            ("schedule", p.schedule in SCHEDULES, f"must be one of {', '.join(SCHEDULES)}"),
            ("initial_fraction", 0 < p.initial_fraction < 1, "must be in (0, 1)"),
            ("val_fraction", 0 <= p.val_fraction < 1, "must be in [0, 1)"),
            ("val_fraction", p.initial_fraction + p.val_fraction < 1,
             "initial_fraction + val_fraction must leave room for active rounds (< 1)"),
            ("rounds", p.rounds >= 1, "must be >= 1"),
            ("batch_size", p.batch_size >= 1, "must be >= 1"),
            ("max_epochs", p.max_epochs >= 1, "must be >= 1"),
            ("patience", p.patience >= 1, "must be >= 1"),
            ("max_steps", p.max_steps is None or p.max_steps >= 1, "must be null or >= 1"),
            ("optimizer.name", p.optimizer.name in OPTIMIZER_NAMES, f"must be one of {', '.join(OPTIMIZER_NAMES)}"),
            ("optimizer.lr", p.optimizer.lr > 0, "must be > 0"),
            ("candidate_factor", p.candidate_factor is None or p.candidate_factor >= 1, "must be null or >= 1"),
            ("dfal_prefilter", p.dfal_prefilter is None or p.dfal_prefilter >= 1, "must be null or >= 1"),
            ("dfal_max_iter", p.dfal_max_iter >= 1, "must be >= 1"),
            ("dfal_overshoot", p.dfal_overshoot >= 0, "must be >= 0"),
            ("dfal_space", p.dfal_space in sel.DFAL_SPACES, f"must be one of {', '.join(sel.DFAL_SPACES)}"),
            ("dfal_step", p.dfal_step in sel.DFAL_STEPS, f"must be one of {', '.join(sel.DFAL_STEPS)}"),
            ("dfal_classes", p.dfal_classes is None or p.dfal_classes >= 2, "must be null or >= 2"),
            ("chunk_size", p.chunk_size >= 1, "must be >= 1"),
        ]
        for name, ok, rule in rules:
            if not ok:
                value = getattr(p.optimizer, name.split(".")[1]) if "." in name else getattr(p, name)
                raise ConfigError(key + name, value, rule)

    # -- the loop ---------------------------------------------------------------------
    def _phase_at(self, position: int) -> Phase:
        for ph in self.phases:
            if ph.start <= position < ph.stop:
                return ph
        raise ValueError(f"query {position} is beyond the planned budget {self.ctx.max_budget}")

    def next_batch_size(self, state: "EngineState") -> int:
        """The rest of the current phase: every round (and checkpoint) is a proposal boundary."""
        return self._phase_at(state.queries_used).stop - state.queries_used

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        """``k`` unused pool images: random in seed/validation phases, else by the strategy."""
        phase = self._phase_at(state.queries_used)
        unused = torch.nonzero(~self.used).squeeze(1)
        if unused.numel() < k:
            raise ValueError(f"the pool has {unused.numel()} unused images, {k} were asked for")
        if phase.kind in RANDOM_KINDS or self.params.strategy == "random":
            idx = unused[torch.randperm(unused.numel(), generator=self.ctx.generator)[:k]]
        else:
            idx = self._select(k, unused, state)
        self.used[idx] = True
        meta = {"pool_index": idx, "phase": phase.kind, "strategy": self.params.strategy}
        return QueryBatch(self.ctx.pool.get(idx, self.ctx.device), meta)

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        """Nothing to learn per batch: each round retrains from ``state.labelled()``."""
        if len(output) != len(batch):
            raise ValueError(f"oracle answered {len(output)} of {len(batch)} images")

    def track_b_model(self, state: "EngineState") -> nn.Module:
        """The substitute trained from scratch on everything labelled so far (cached for the next round)."""
        return self._substitute(state)

    # -- internals --------------------------------------------------------------------
    def _load(self, index: torch.Tensor) -> torch.Tensor:
        return self.ctx.pool.get(index, self.ctx.device)

    def _substitute(self, state: "EngineState") -> nn.Module:
        """The model trained on D_n (n = queries so far), trained once per n and cached.

        The k-center initial centers (substitute probabilities of the labelled
        training images) are computed here too, while D_n is in memory.
        """
        n = state.queries_used
        if self._model_n != n:
            x, y = (t.to(self.ctx.device) for t in state.labelled(n))
            val = self.is_val[:n].to(x.device)
            seed = derive_seed(self.ctx.seed, f"activethief-round-{n}")
            with torch.random.fork_rng(devices=self._rng_devices()):
                torch.manual_seed(seed)
                model = self.ctx.make_substitute()
            self._model = fit_substitute(model, (x[~val], y[~val]), (x[val], y[val]), self.params,
                                         self.ctx.output_mode, self.ctx.num_classes,
                                         torch.Generator().manual_seed(seed))
            if self.params.strategy in ("k_center", "dfal_k_center"):
                logits = eval_logits(self._model, x[~val], self.params.chunk_size)
                self._centers = torch.softmax(logits, dim=1)
            self._model_n = n
        assert self._model is not None
        return self._model

    def _rng_devices(self) -> list[int]:
        dev = self.ctx.device
        return [dev.index or 0] if dev.type == "cuda" else []

    def _candidates(self, unused: torch.Tensor, k: int) -> torch.Tensor:
        f = self.params.candidate_factor
        if f is None or unused.numel() <= math.ceil(f * k):
            return unused
        return unused[torch.randperm(unused.numel(), generator=self.ctx.generator)[: math.ceil(f * k)]]

    def _select(self, k: int, unused: torch.Tensor, state: "EngineState") -> torch.Tensor:
        p, model = self.params, self._substitute(state)
        cand = self._candidates(unused, k)
        if k == cand.numel():
            return cand
        if p.strategy in DFAL_STRATEGIES:
            norms = sel.deepfool_norms(model, self._load, cand, max_iter=p.dfal_max_iter,
                                       overshoot=p.dfal_overshoot, num_classes=p.dfal_classes,
                                       space=p.dfal_space, early_stop=p.dfal_early_stop, step=p.dfal_step,
                                       chunk=min(p.chunk_size, 1024))
            if p.strategy == "dfal":
                return cand[sel.stable_topk(norms, k, largest=False)]
            rho = max(k, min(p.dfal_prefilter or self.ctx.max_budget, cand.numel()))
            cand = cand[sel.stable_topk(norms, rho, largest=False)]
        probs = sel.predict_probs(model, self._load, cand, p.chunk_size)
        if p.strategy == "uncertainty":
            return cand[sel.entropy_select(probs, k)]
        return cand[sel.k_center_greedy(probs, self._centers, k, p.chunk_size)]


__all__ = ["ActiveThief", "ActiveThiefParams", "Phase", "plan_schedule", "fit_substitute", "macro_f1",
           "STRATEGIES", "SCHEDULES", "NOT_PROCEDURE"]
