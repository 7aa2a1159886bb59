"""DisGUIDE: disagreement-guided data-free model extraction.

Rosenthal, Enouen, Pham, Tan, "DisGUIDE: Disagreement-Guided Data-Free Model Extraction", AAAI 2023;
reference github.com/lin-tan/disguide at c3e2a7d. A DFME-style generator ascends the disagreement of
an ensemble of students without querying the victim, so every query trains the students; queried
batches are replayed from a buffer of ``replay_size`` images. The procedure, every default with its
``file:line`` and the deviations: docs/attacks/disguide.md (a contract test checks ``Params``'
defaults against that page).
"""
# Rosenthal, Enouen, Pham, Tan, "DisGUIDE: Disagreement-Guided Data-Free Model Extraction", AAAI 2023.
# A DFME-style generator is trained *without* querying the victim: it ascends the disagreement (the
# per-class standard deviation of the softmax outputs) of an ensemble of students plus a class-diversity
# term, so every query is a student-training query and one iteration costs ``d_iter * batch_size``
# images. Each queried batch is stored in an experience-replay buffer; ``rep_iter`` replayed batches
# follow each iteration's queries.
#
# The reference (github.com/lin-tan/disguide at c3e2a7d) keeps a FIFO buffer of 1,000,000 images
# (``run_cifar-10.sh:16,22``); here its capacity is ``replay_size`` and its memory is allocated for
# ``min(replay_size, max_budget)`` images only, so it never holds more than the run can query.
# The procedure, every default with its ``file:line`` and the deviations are on
# ``docs/attacks/disguide.md``; a contract test checks ``Params``' defaults against that page.

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks._generative import StudentsVsGenerator
from mebench.attacks.base import (Attack, AttackContext, TrainingCost, check_param_ranges, fresh_substitute,
                                  register_attack)
from mebench.attacks.dfme import check_generator_params, check_lr_schedule, draw_seed, recover_logits
from mebench.errors import ConfigError, DivergenceError
from mebench.models.generators import seeded_generator
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

#: Added to the students' probabilities before the diversity term's log (train.py:71).
DIVERSITY_FLOOR = 1e-6


@dataclass(frozen=True)
class Params:
    """DisGUIDE hyperparameters; the defaults are the reference's CIFAR-10 command (docs/attacks/disguide.md)."""

    batch_size: int = 256
    ensemble_size: int = 2
    generator_steps: int = 1
    query_steps: int = 1
    replay_steps: int = 3
    replay_size: int = 1000000
    lambda_div: float = 0.2
    nz: int = 256
    generator_width: int = 64
    lr_student: float = 0.03
    lr_generator: float = 1e-4
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_gamma: float = 0.3
    lr_milestones: tuple[float, ...] = (0.4, 0.8)
    pixel_map: str = "unit_tanh"
    sample_mode: str = "eval"
    lr_schedule: str = "epochs"
    epoch_iterations: int = 150


#: ``lr_schedule`` values: ``epochs`` steps as the reference's code does, ``budget`` at fractions of the budget.
LR_SCHEDULES = ("epochs", "budget")


def epoch_milestones(params: "Params", max_budget: int) -> tuple[int, int, list[int]]:
    """The reference's schedule in whole epochs (``disguide/train.py:311, 322-327, 341-353``): an epoch
    is ``epoch_iterations`` iterations of ``query_steps * batch_size`` queries, the run has
    ``N = max_budget // epoch_queries + 1`` epochs, and ``MultiStepLR`` drops at epochs
    ``int(m * N)``, stepped once after each epoch. Returns (epoch_queries, N, milestones): below one
    epoch's queries (38,400 at the defaults) every milestone is epoch 0, so the whole run is at
    ``lr_gamma ** len(lr_milestones)`` of the base rates."""
    epoch_queries = params.epoch_iterations * params.query_steps * params.batch_size
    n = max_budget // epoch_queries + 1
    return epoch_queries, n, sorted(int(m * n) for m in params.lr_milestones)


class SoftVote(nn.Module):
    """The students' soft vote as one classifier: logits ``log(mean_i softmax(s_i(x)))``.

    DisGUIDE reports the soft vote's accuracy (``disguide/train.py:177``), so Track B is this model."""

    def __init__(self, students: nn.ModuleList) -> None:
        super().__init__()
        self.students = students

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.stack([F.softmax(s(x), dim=1) for s in self.students]).mean(dim=0)
        return probs.clamp_min(1e-30).log()


class ReplayBuffer:
    """A FIFO ring of (image, target) pairs with uniform sampling without replacement
    (``disguide/replay.py:32-72``), bounded at ``capacity`` images; storage is allocated on the
    first ``add`` for ``capacity`` images, so memory never exceeds what the bound allows."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.x: Optional[torch.Tensor] = None
        self.y: Optional[torch.Tensor] = None
        self.size = 0
        self.head = 0

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.x is None:
            self.x = x.new_zeros((self.capacity, *x.shape[1:]))
            self.y = y.new_zeros((self.capacity, *y.shape[1:]))
        x, y = x[-self.capacity:], y[-self.capacity:]  # a batch larger than the ring keeps its newest
        idx = (self.head + torch.arange(len(x))) % self.capacity
        self.x[idx], self.y[idx] = x, y
        self.head = int((self.head + len(x)) % self.capacity)
        self.size = min(self.capacity, self.size + len(x))

    def sample(self, n: int, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``min(n, size)`` distinct stored pairs, uniformly at random."""
        assert self.x is not None and self.y is not None
        idx = torch.randperm(self.size, generator=rng)[:n]
        return self.x[idx], self.y[idx]


@register_attack
class DisGUIDE(StudentsVsGenerator):
    """Generator vs. an ensemble of students; the generator follows the students' disagreement.

    One iteration: ``generator_steps`` generator updates (no queries), ``query_steps`` query phases of
    ``batch_size`` images (each one ``propose``/``observe`` pair that trains every student on its
    answer), then ``replay_steps`` replayed batches. A phase cut by a checkpoint is shortened, so a run
    stops exactly at any budget.
    """

    name = "disguide"
    paper = "Rosenthal et al., DisGUIDE: Disagreement-Guided Data-Free Model Extraction, AAAI 2023"
    data_modes = frozenset({"data_free"})
    output_modes = frozenset({"soft_prob", "hard_top1"})
    state_dependent_queries = True
    has_track_b = True
    Params = Params
    smoke_params = {"batch_size": 16, "nz": 8, "generator_width": 4, "replay_steps": 1, "replay_size": 64}

    @classmethod
    def check_params(cls, params: Params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        check_param_ranges(params, ints={"batch_size": 1, "ensemble_size": 2, "generator_steps": 0,
                                         "query_steps": 1, "replay_steps": 0, "replay_size": 1},
                           positive=("lr_student", "lr_generator"), nonnegative=("lambda_div", "weight_decay"),
                           unit=("momentum",))
        check_generator_params(params)
        check_lr_schedule(params)
        if params.lr_schedule not in LR_SCHEDULES:
            raise ConfigError("attack.params.lr_schedule", params.lr_schedule,
                              f"must be one of {', '.join(LR_SCHEDULES)} (the reference's epochs, or fractions of the budget)")
        check_param_ranges(params, ints={"epoch_iterations": 1})

    @classmethod
    def training_cost(cls, params: Params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Per iteration (``query_steps * batch_size`` queries): every student trains on the queried and
        the replayed batches; the generator runs forward-backward ``generator_steps`` times and forward
        once per query phase."""
        p = params
        n = max_budget / (p.query_steps * p.batch_size)
        width = (p.generator_width / 64) ** 2
        sub = n * p.ensemble_size * p.batch_size * (p.query_steps + p.replay_steps + p.generator_steps)
        return TrainingCost(substitute_examples=round(sub),
                            generator_examples=n * width * p.batch_size * (p.generator_steps + p.query_steps / 3))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.hp: Params = ctx.params
        self.device = ctx.device
        seed = draw_seed(ctx)
        self.generator = seeded_generator(self.hp.nz, ctx.input_shape, self.hp.generator_width, seed).to(self.device)
        self.students = nn.ModuleList([fresh_substitute(ctx, f"disguide-student{i}")
                                       for i in range(self.hp.ensemble_size)])
        self.vote = SoftVote(self.students)
        self.rng = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.replay_rng = torch.Generator().manual_seed(seed + 2)
        self.replay = ReplayBuffer(min(self.hp.replay_size, ctx.max_budget))
        self.opt_s = torch.optim.SGD(self.students.parameters(), lr=self.hp.lr_student,
                                     momentum=self.hp.momentum, weight_decay=self.hp.weight_decay)
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hp.lr_generator)
        self.phase = 0  # query phase within the iteration
        self.iteration = 0
        self.pending: Optional[QueryBatch] = None
        self.last_generator_loss = float("nan")
        self.last_student_loss = float("nan")

    def student_optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.opt_s]

    def lr_drops(self, state: "EngineState") -> int:
        """``lr_schedule: epochs``: the milestones that the epochs completed so far have reached
        (:func:`epoch_milestones`); ``budget``: the fractions of the budget reached."""
        if self.hp.lr_schedule == "budget":
            return super().lr_drops(state)
        epoch_queries, _, milestones = epoch_milestones(self.hp, state.max_budget)
        done = state.queries_used // epoch_queries
        return sum(m <= done for m in milestones)

    # -- generator ----------------------------------------------------------------------
    def generator_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Minus the mean per-class std of the students' softmax, plus ``lambda_div`` times the
        negative entropy of the batch's mean soft vote (``disguide/train.py:58-75``)."""
        probs = torch.stack([F.softmax(s(x), dim=1) for s in self.students], dim=1)  # [n, E, K]
        loss = -probs.std(dim=1).mean()
        if self.hp.lambda_div:
            mean_vote = (probs + DIVERSITY_FLOOR).mean(dim=1).mean(dim=0)
            loss = loss + self.hp.lambda_div * (mean_vote * mean_vote.log()).sum()
        return loss

    def generator_objective(self, pre: torch.Tensor) -> torch.Tensor:
        return self.generator_loss(self.query_pixels(pre))

    def _targets(self, output: OracleOutput) -> torch.Tensor:
        """Mean-corrected log-probabilities (soft, ``my_utils.py:51-52,74-82``) or labels (hard)."""
        if output.kind == "soft_prob":
            return recover_logits(output.y.to(self.device))
        return output.y.to(self.device).long()

    def student_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """l1 to the recovered logits, or cross-entropy to the labels (``my_utils.py:57-69``)."""
        if target.dtype == torch.long:
            return F.cross_entropy(logits, target)
        return F.l1_loss(logits, target)

    def _student_step(self, x: torch.Tensor, target: torch.Tensor) -> None:
        """One SGD step of every student on the same batch (``disguide/train.py:78-90``)."""
        if len(x) < 2:  # a one-image step would break batch-norm students
            return
        self.students.train()
        self.opt_s.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        for s in self.students:
            total = total + self.student_loss(s(x), target)
        if not bool(torch.isfinite(total)):
            raise DivergenceError(f"disguide: student loss is NaN/inf at iteration {self.iteration}")
        total.backward()
        self.opt_s.step()
        self.last_student_loss = float(total.detach()) / len(self.students)

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending:
            raise RuntimeError("disguide: observe must answer the batch of the last propose")
        if output.kind not in self.output_modes:
            raise ConfigError("victim.output_mode", output.kind, f"disguide allows {sorted(self.output_modes)}")
        x, target = batch.x.to(self.device), self._targets(output)
        self.replay.add(x.cpu(), target.cpu())
        self._student_step(x, target)
        self.phase += 1
        if self.phase == self.hp.query_steps:
            for _ in range(self.hp.replay_steps):
                rx, ry = self.replay.sample(self.hp.batch_size, self.replay_rng)
                self._student_step(rx.to(self.device), ry.to(self.device))
            self.phase = 0
            self.iteration += 1

    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The students' soft vote in eval mode (the reference's reported model, contract §8)."""
        if not all(bool(torch.isfinite(p).all()) for p in self.students.parameters()):
            raise DivergenceError(f"disguide: student weights are NaN/inf at {state.queries_used} queries")
        return self.vote.eval()
