"""SwiftThief (Lee, Han, Lee, IJCAI 2024): pool-based extraction that also learns from the pool
images it never queries, by contrastive learning, and prioritises rarely answered classes.

Written from the reference JEONGHYUN-LEE/MS-SwiftThief at a766aab. mebench runs the reference's plan
toward every checkpoint in turn (the queries before a checkpoint count toward its initial 10 %),
charges every image the victim sees once, and reports the substitute after each checkpoint's last
round as Track B. Defaults, deviations and their effect: docs/attacks/swiftthief.md (a contract
test checks ``SwiftThiefParams`` against that page).
"""
# Written from the reference JEONGHYUN-LEE/MS-SwiftThief at a766aab (``file:line`` below are in that
# tree): swiftthief.py (the loop), attack_tools/sampling.py (selection),
# contrastive_learning/main_sup_soft.py and simsiam/criterion.py (the contrastive phase, in
# ``mebench.attacks._contrastive``), scripts/swiftthief/mnist.sh (the MNIST command). For a budget B
# (swiftthief.py:44-257):
#
# 1. query 10 % of B at random (:50-51); contrastive phase (:106-124); then 50 epochs of output
#    matching (KL to the victim's probabilities, batches of 100, one SGD kept for the whole run,
#    :99-101, :221-228; mnist.sh:28-30: 500 epochs, a round every 50);
# 2. nine rounds of 10 % of B each (:131-170): the round's rule (:18-41) takes the top-entropy
#    unqueried images under the substitute (sampling.py:49-73) unless the budget left is at most
#    ``c_ur * (mean - mean_ur)`` of the victim's class counts, then five sub-rounds each take the
#    unqueried images densest under a Gaussian KDE (bandwidth 0.5) of the backbone features of the
#    queried images the victim put in its rarest non-empty class (sampling.py:76-151); each round
#    ends with a contrastive phase on 5,000 more unqueried images (40 epochs, 100 after the last
#    round, :182-219) and 50 epochs of output matching.

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks import _contrastive as cl
from mebench.attacks import selection as sel
from mebench.attacks.base import (Attack, AttackContext, TrainingCost, check_param_ranges, fresh_substitute,
                                  register_attack)
from mebench.errors import ConfigError, DivergenceError
from mebench.support.seeding import derive_seed
from mebench.training.losses import loss_for
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState


@dataclass(frozen=True)
class SwiftThiefParams:
    """``attack.params`` of ``swiftthief``; defaults are the reference's (docs/attacks/swiftthief.md)."""

    initial_fraction: float = 0.1
    round_fraction: float = 0.1
    kd_epochs: int = 50
    kd_batch_size: int = 100
    kd_lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    cl_epochs: int = 39
    cl_final_epochs: int = 99
    cl_epoch_stride: int = 40
    cl_lr: float = 0.06
    cl_lr_period: int = 800
    cl_batch_size: int = 512
    cl_labeled_batch_size: int = 256
    unlabeled_initial: int = 5000
    unlabeled_step: int = 5000
    feat_dim: int = 2048
    fgsm_eps: float = 0.01
    sharpness_weight: float = 0.01
    cb_beta: float = 0.99
    kde_bandwidth: float = 0.5
    kde_splits: int = 5
    chunk_size: int = 4096


@dataclass(frozen=True)
class Phase:
    """Queries ``[start, stop)``: the random ``initial`` queries (possibly none after the first
    checkpoint) or one selection ``round``; ``j`` counts phases toward ``budget``, the checkpoint
    they lead to; ``final`` marks the last one (its contrastive phase runs ``cl_final_epochs``)."""

    start: int
    stop: int
    kind: str
    j: int
    budget: int
    final: bool


def plan_schedule(p: SwiftThiefParams, max_budget: int, checkpoints: tuple[int, ...]) -> list[Phase]:
    """Every phase, checkpoint by checkpoint: toward checkpoint ``b`` (from ``a`` queries) the
    initial queries fill ``initial_fraction * b``, then rounds of about ``round_fraction * b``."""
    ends = sorted({c for c in checkpoints if 0 < c <= max_budget} | {max_budget})
    phases: list[Phase] = []
    for a, b in zip([0] + ends[:-1], ends):
        n0 = min(b, max(int(a == 0), round(p.initial_fraction * b))) - a
        head = a + max(0, n0)
        rest = b - head
        parts = math.ceil(rest / max(1, round(p.round_fraction * b))) if rest else 0
        cuts = [head + rest * i // parts for i in range(parts + 1)] if parts else [head]
        seg = [Phase(a, head, "initial", 0, b, parts == 0)]
        seg += [Phase(s, e, "round", i + 1, b, i + 1 == parts) for i, (s, e) in enumerate(zip(cuts, cuts[1:]))]
        phases += seg
    return phases


def use_kde(counts: torch.Tensor, budget_left: int) -> bool:
    """swiftthief.py:18-41: rare-class KDE once the budget left is at most ``c_ur * (mean - mean_ur)``
    (``c_ur`` classes below the mean count, ``mean_ur`` their mean); entropy otherwise."""
    counts = counts.double()
    under = counts < counts.mean()
    if not bool(under.any()):
        return False
    return budget_left <= float(under.sum() * (counts.mean() - counts[under].mean()))


def kde_scores(points: torch.Tensor, centers: torch.Tensor, bandwidth: float, chunk: int) -> torch.Tensor:
    """Log-density (up to a constant) of a Gaussian KDE on ``centers`` at each of ``points``: the
    exact sum that sampling.py:131-148's sklearn tree approximates (atol 5e-4, rtol 0.01)."""
    out = []
    for s in range(0, len(points), chunk):
        d2 = torch.cdist(points[s:s + chunk], centers).pow(2)
        out.append(torch.logsumexp(-d2 / (2 * bandwidth ** 2), dim=1))
    return torch.cat(out) if out else torch.empty(0)


@register_attack
class SwiftThief(Attack):
    """SwiftThief (Lee et al., IJCAI 2024): entropy / rare-class KDE rounds over the pool, contrastive
    learning on queried and unqueried images, output matching (docs/attacks/swiftthief.md)."""

    name = "swiftthief"
    paper = ("Lee, Han, Lee, SwiftThief: Enhancing Query Efficiency of Model Stealing by Contrastive "
             "Learning, IJCAI 2024")
    data_modes = frozenset({"surrogate"})
    state_dependent_queries = True
    has_track_b = True
    Params = SwiftThiefParams
    smoke_params = {"kd_epochs": 1, "kd_batch_size": 32, "cl_epochs": 1, "cl_final_epochs": 1, "cl_batch_size": 32,
                    "cl_labeled_batch_size": 16, "unlabeled_initial": 32, "unlabeled_step": 0, "feat_dim": 8,
                    "round_fraction": 0.25}

    @classmethod
    def check_params(cls, params: SwiftThiefParams, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        p = params
        check_param_ranges(p, ints={"kd_epochs": 1, "kd_batch_size": 1, "cl_epochs": 0, "cl_final_epochs": 0,
                                    "cl_epoch_stride": 0, "cl_lr_period": 1, "cl_batch_size": 2,
                                    "cl_labeled_batch_size": 1, "unlabeled_initial": 0, "unlabeled_step": 0,
                                    "feat_dim": 4, "kde_splits": 1, "chunk_size": 1},
                           positive=("kd_lr", "cl_lr", "kde_bandwidth"),
                           nonnegative=("weight_decay", "fgsm_eps", "sharpness_weight"),
                           unit=("momentum", "cb_beta"))
        for key in ("initial_fraction", "round_fraction"):
            if not 0 < getattr(p, key) <= 1:
                raise ConfigError(f"attack.params.{key}", getattr(p, key), "must be in (0, 1]")

    @classmethod
    def training_cost(cls, params: SwiftThiefParams, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Output matching over the queried set after every phase, plus each contrastive phase's
        steps (two unqueried and three queried views per pair, one FGSM pass)."""
        kd = cl_ex = 0
        for ph in plan_schedule(params, max_budget, checkpoints):
            kd += params.kd_epochs * ph.stop
            n_u = params.unlabeled_initial + ph.j * params.unlabeled_step
            epochs = params.cl_final_epochs if ph.final else params.cl_epochs
            cl_ex += epochs * (n_u // params.cl_batch_size) * (2 * params.cl_batch_size + 4 * params.cl_labeled_batch_size)
        return TrainingCost(kd + cl_ex)

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ValueError("SwiftThief needs an image pool (surrogate data mode)")
        self.phases = plan_schedule(self.params, ctx.max_budget, tuple(ctx.checkpoints))
        self.used = torch.zeros(len(ctx.pool), dtype=torch.bool)
        self.net = fresh_substitute(ctx, "swiftthief")
        self.tap = cl.FeatureTap(self.net)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, "swiftthief-heads"))
            self.heads = cl.SimSiamHeads(self.tap.dim, self.params.feat_dim).to(ctx.device)
        p = self.params
        self.kd_opt = torch.optim.SGD(self.net.parameters(), lr=p.kd_lr, momentum=p.momentum,
                                      weight_decay=p.weight_decay)
        self.g = torch.Generator().manual_seed(derive_seed(ctx.seed, "swiftthief-train"))
        std = torch.tensor(ctx.profile.std, dtype=torch.float32).view(1, -1, 1, 1)
        self.fgsm_step = (p.fgsm_eps * std).to(ctx.device)  # eps on the normalised input, as the reference
        self.trained = 0  # phases whose contrastive phase and output matching have run
        self.rule: dict[int, str] = {}  # round index -> "entropy" or "kde", decided when it starts

    # -- the loop ---------------------------------------------------------------------
    def _phase_index(self, q: int) -> int:
        for i, ph in enumerate(self.phases):
            if ph.start <= q < ph.stop:
                return i
        raise ValueError(f"query {q} is beyond the planned budget {self.ctx.max_budget}")

    def next_batch_size(self, state: "EngineState") -> int:
        """The rest of the phase, or of the KDE sub-round: a sub-round's selection needs the last one's answers."""
        q = state.queries_used
        i = self._phase_index(q)
        ph = self.phases[i]
        if ph.kind == "initial" or self._rule(i, state) != "kde":
            return ph.stop - q
        n = ph.stop - ph.start
        cuts = [ph.start + n * s // self.params.kde_splits for s in range(1, self.params.kde_splits + 1)]
        return min(c for c in cuts if c > q) - q

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        """``k`` unqueried pool images: random in the initial phase, else by the round's rule."""
        i = self._phase_index(state.queries_used)
        ph = self.phases[i]
        unused = torch.nonzero(~self.used).squeeze(1)
        if unused.numel() < k:
            raise ValueError(f"the pool has {unused.numel()} unqueried images, {k} were asked for")
        if ph.kind == "initial":
            idx, rule = unused[torch.randperm(unused.numel(), generator=self.ctx.generator)[:k]], "random"
        else:
            self._train_before(i, state)
            rule = self._rule(i, state)
            idx = unused[self._kde(unused, k, state) if rule == "kde" else self._entropy(unused, k)]
        self.used[idx] = True
        return QueryBatch(self.ctx.pool.get(idx, self.ctx.device), {"pool_index": idx, "rule": rule})

    def _rule(self, i: int, state: "EngineState") -> str:
        """The rule of round ``i``, decided from the victim's class counts when the round starts."""
        if i not in self.rule:
            counts = torch.bincount(self._labels(state), minlength=self.ctx.num_classes)
            self.rule[i] = "kde" if use_kde(counts, self.phases[i].budget - state.queries_used) else "entropy"
        return self.rule[i]

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        """Nothing per batch: training runs on ``state.labelled()`` when a phase is over."""
        if len(output) != len(batch):
            raise ValueError(f"oracle answered {len(output)} of {len(batch)} images")

    def track_b_model(self, state: "EngineState") -> nn.Module:
        """A copy of the substitute after the checkpoint's last round (contrastive phase and output matching)."""
        last = max(i for i, ph in enumerate(self.phases) if ph.budget <= state.queries_used)
        self._train_before(last + 1, state)
        return copy.deepcopy(self.net).eval()

    # -- training (never queries the victim: it reads the stored answers) ---------------------
    def _train_before(self, i: int, state: "EngineState") -> None:
        while self.trained < i:
            self._train_phase(self.phases[self.trained], state)
            self.trained += 1

    def _targets(self, y: torch.Tensor) -> torch.Tensor:
        """Answers as probabilities: soft answers as given, labels one-hot."""
        return y.float() if y.dim() == 2 else F.one_hot(y.long(), self.ctx.num_classes).float()

    def _labels(self, state: "EngineState") -> torch.Tensor:
        y = state.labelled()[1]
        return (y.argmax(dim=1) if y.dim() == 2 else y).long().cpu()

    def _train_phase(self, ph: Phase, state: "EngineState") -> None:
        """swiftthief.py:182-228: the contrastive phase, then ``kd_epochs`` epochs of output matching."""
        p, dev = self.params, self.ctx.device
        x, y = (t.to(dev) for t in state.labelled(ph.stop))
        t = self._targets(y)
        costs = cl.class_balanced_costs(torch.bincount(t.argmax(1).cpu(), minlength=self.ctx.num_classes), p.cb_beta)
        unqueried = torch.nonzero(~self.used).squeeze(1)
        n_u = min(unqueried.numel(), p.unlabeled_initial + ph.j * p.unlabeled_step)
        subset = unqueried[torch.randperm(unqueried.numel(), generator=self.g)[:n_u]]
        cl.contrastive_phase(self.tap, self.heads, self._load, subset, x, t, costs.to(dev), self.fgsm_step,
                             epochs=p.cl_final_epochs if ph.final else p.cl_epochs,
                             epoch_offset=ph.j * p.cl_epoch_stride, p=p, g=self.g)
        self._match(x, y)

    def _match(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """train_kd (utils/train.py:35-60): KL to the victim's probabilities; cross-entropy on labels
        (train_kd_hard, :63-90). The optimizer lives for the whole run (swiftthief.py:99-101)."""
        loss_fn, finite = loss_for(self.ctx.output_mode), torch.ones((), dtype=torch.bool)
        self.net.train()
        for _ in range(self.params.kd_epochs):
            for idx in torch.randperm(len(x), generator=self.g).to(x.device).split(self.params.kd_batch_size):
                loss = loss_fn(self.net(x[idx]), y[idx])
                self.kd_opt.zero_grad(set_to_none=True)
                loss.backward()
                self.kd_opt.step()
                finite &= torch.isfinite(loss.detach()).cpu()
        if not bool(finite):
            raise DivergenceError("SwiftThief output-matching loss became NaN or infinite")

    # -- selection (sampling.py) --------------------------------------------------------------
    def _load(self, index: torch.Tensor) -> torch.Tensor:
        return self.ctx.pool.get(index, self.ctx.device)

    def _entropy(self, unused: torch.Tensor, k: int) -> torch.Tensor:
        """sampling.py:49-73: the ``k`` unqueried images of highest substitute entropy."""
        probs = sel.predict_probs(self.net, self._load, unused, self.params.chunk_size)
        return sel.entropy_select(probs, k)

    @torch.no_grad()
    def _features(self, index: Optional[torch.Tensor] = None, x: Optional[torch.Tensor] = None) -> torch.Tensor:
        self.net.eval()
        if x is None:
            return torch.cat([self.tap(self._load(c)) for c in index.split(self.params.chunk_size)])
        return torch.cat([self.tap(c) for c in x.split(self.params.chunk_size)])

    def _kde(self, unused: torch.Tensor, k: int, state: "EngineState") -> torch.Tensor:
        """sampling.py:76-151: densest unqueried images under a KDE of the rarest non-empty class."""
        labels = self._labels(state)
        counts = torch.bincount(labels, minlength=self.ctx.num_classes).double()
        rare = int(torch.where(counts > 0, counts, math.inf).argmin())
        x = state.labelled()[0][labels == rare].to(self.ctx.device)
        scores = kde_scores(self._features(unused), self._features(x=x), self.params.kde_bandwidth,
                            self.params.chunk_size)
        return sel.stable_topk(scores, k, largest=True)


__all__ = ["SwiftThief", "SwiftThiefParams", "Phase", "plan_schedule", "use_kde", "kde_scores"]
