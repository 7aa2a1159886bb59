"""Dual Students: data-free model stealing with two students whose disagreement guides the generator.

Beetham, Kardan, Mian, Shah, "Dual Student Networks for Data-Free Model Stealing" (arXiv:2309.10058);
reference github.com/James-Beetham/dual_students at 994b731. DFME's generator is trained *without*
querying the victim: it ascends the l1 distance between the two students' logits on its images, so
every query trains the students and one iteration costs ``student_steps * batch_size`` images. The
reported model is an exponential moving average of the first student, refreshed every
``ema_interval`` iterations. The procedure, every default with its ``file:line`` and the deviations:
docs/attacks/dual_students.md (a contract test checks ``Params``' defaults against that page).
"""

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


@dataclass(frozen=True)
class Params:
    """Dual Students hyperparameters; the defaults are the reference's CIFAR-10 command (docs page)."""

    batch_size: int = 256
    num_students: int = 2
    generator_steps: int = 1
    student_steps: int = 5
    nz: int = 256
    generator_width: int = 64
    lr_student: float = 0.3
    lr_generator: float = 1e-4
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_gamma: float = 0.3
    lr_milestones: tuple[float, ...] = (0.1, 0.3, 0.5)
    ema_momentum: float = 0.9
    ema_interval: int = 10
    generator_pre_tanh: bool = True
    pixel_map: str = "normalized_tanh"
    sample_mode: str = "eval"


def pairwise_l1(logits: list[torch.Tensor]) -> torch.Tensor:
    """Mean over student pairs of the l1 distance between their logits (the quantity G ascends)."""
    pairs = [(i, j) for i in range(len(logits)) for j in range(i + 1, len(logits))]
    return torch.stack([F.l1_loss(logits[i], logits[j]) for i, j in pairs]).mean()


@torch.no_grad()
def ema_update(average: nn.Module, live: nn.Module, momentum: float) -> None:
    """``average <- momentum * average + (1 - momentum) * live`` over parameters and buffers
    (``dual_students/network/moving_averages.py:21-35``)."""
    for a, b in zip(list(average.parameters()) + list(average.buffers()),
                    list(live.parameters()) + list(live.buffers())):
        if a.dtype.is_floating_point:
            a.copy_(momentum * a + (1 - momentum) * b)
        else:
            a.copy_(b)


@register_attack
class DualStudents(StudentsVsGenerator):
    """Generator vs. two students; the generator maximizes their disagreement, the students match the victim.

    One iteration: ``generator_steps`` generator updates (no queries), then ``student_steps`` query
    phases of ``batch_size`` images, each one ``propose``/``observe`` pair in which every student takes
    one SGD step. A phase cut by a checkpoint is shortened, so a run stops exactly at any budget.
    """

    name = "dual_students"
    paper = "Beetham et al., Dual Student Networks for Data-Free Model Stealing, ICLR (arXiv:2309.10058)"
    data_modes = frozenset({"data_free"})
    output_modes = frozenset({"soft_prob", "hard_top1"})
    state_dependent_queries = True
    has_track_b = True
    Params = Params
    smoke_params = {"batch_size": 16, "nz": 8, "generator_width": 4, "student_steps": 2, "ema_interval": 2}

    @classmethod
    def check_params(cls, params: Params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        check_param_ranges(params, ints={"batch_size": 1, "num_students": 2, "generator_steps": 0,
                                         "student_steps": 1, "ema_interval": 1},
                           positive=("lr_student", "lr_generator"), nonnegative=("weight_decay",),
                           unit=("momentum", "ema_momentum"))
        check_generator_params(params)
        check_lr_schedule(params)

    @classmethod
    def training_cost(cls, params: Params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Per iteration (``student_steps * batch_size`` queries): every student trains on each queried
        batch; the generator runs forward-backward ``generator_steps`` times through every student."""
        p = params
        n = max_budget / (p.student_steps * p.batch_size)
        width = (p.generator_width / 64) ** 2
        sub = n * p.num_students * p.batch_size * (p.student_steps + p.generator_steps)
        return TrainingCost(substitute_examples=round(sub),
                            generator_examples=n * width * p.batch_size * (p.generator_steps + p.student_steps / 3))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.hp: Params = ctx.params
        self.device = ctx.device
        seed = draw_seed(ctx)
        self.generator = seeded_generator(self.hp.nz, ctx.input_shape, self.hp.generator_width, seed).to(self.device)
        self.students = nn.ModuleList([fresh_substitute(ctx, f"dual-student{i}") for i in range(self.hp.num_students)])
        # the reported model: a separately initialised copy until the first average replaces it
        # (the reference's first step copies the live weights, moving_averages.py:25-27)
        self.average = fresh_substitute(ctx, "dual-student0-average").eval()
        self.averaged = False
        self.rng = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.opt_s = [torch.optim.SGD(s.parameters(), lr=self.hp.lr_student, momentum=self.hp.momentum,
                                      weight_decay=self.hp.weight_decay) for s in self.students]
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hp.lr_generator)
        self.phase = 0
        self.iteration = 0
        self.pending: Optional[QueryBatch] = None
        self.last_generator_loss = float("nan")

    def student_optimizers(self) -> list[torch.optim.Optimizer]:
        return list(self.opt_s)

    def generator_input(self, pre: torch.Tensor) -> torch.Tensor:
        """What the students see in a generator step: with ``generator_pre_tanh`` the generator's
        pre-activation itself, as the reference passes ``pre_x`` (``train.py:56``), written in pixel space
        (``mean + std * a`` for ``normalized_tanh``, ``(a + 1) / 2`` for ``unit_tanh``, unclamped: the
        students are the attacker's own); else the query pixels."""
        if not self.hp.generator_pre_tanh:
            return self.query_pixels(pre)
        if self.hp.pixel_map == "unit_tanh":
            return pre.add(1.0).mul(0.5)
        shape = (1, -1) + (1,) * (pre.dim() - 2)
        mean = torch.as_tensor(self.ctx.profile.mean, dtype=pre.dtype, device=pre.device).view(shape)
        std = torch.as_tensor(self.ctx.profile.std, dtype=pre.dtype, device=pre.device).view(shape)
        return pre * std + mean

    def generator_objective(self, pre: torch.Tensor) -> torch.Tensor:
        """Minus the students' pairwise logit l1 on the generator's batch (``train.py:48-73``)."""
        return -pairwise_l1([s(self.generator_input(pre)) for s in self.students])

    def student_loss(self, logits: torch.Tensor, output: OracleOutput) -> torch.Tensor:
        """l1 to the mean-corrected log-probabilities (soft, ``my_utils.py:164-165,196-206``) or
        cross-entropy to the label (hard, ``my_utils.py:168-170``)."""
        if output.kind == "soft_prob":
            return F.l1_loss(logits, recover_logits(output.y.to(self.device)))
        return F.cross_entropy(logits, output.y.to(self.device).long())

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending:
            raise RuntimeError("dual_students: observe must answer the batch of the last propose")
        if output.kind not in self.output_modes:
            raise ConfigError("victim.output_mode", output.kind, f"dual_students allows {sorted(self.output_modes)}")
        if len(batch) >= 2:  # a one-image step would break batch-norm students
            x = batch.x.to(self.device)
            self.students.train()
            for student, opt in zip(self.students, self.opt_s):  # one optimizer per student (train.py:97-102)
                opt.zero_grad(set_to_none=True)
                loss = self.student_loss(student(x), output)
                if not bool(torch.isfinite(loss)):
                    raise DivergenceError(f"dual_students: student loss is NaN/inf at iteration {self.iteration}")
                loss.backward()
                opt.step()
        self.phase += 1
        if self.phase == self.hp.student_steps:
            self.phase = 0
            self.iteration += 1
            if self.iteration % self.hp.ema_interval == 0:
                self._average_step()

    def _average_step(self) -> None:
        """The moving average of student 0 (``train.py:127-128``): the first step copies it."""
        ema_update(self.average, self.students[0], self.hp.ema_momentum if self.averaged else 0.0)
        self.averaged = True

    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The reported model (contract §8): the moving average of student 0 (``train.py:163``,
        ``multi_student.py:9-12``), or the live student 0 when ``ema_momentum`` is 0 (the reference
        then tests the live model, ``moving_averages.py:18``)."""
        model = self.students[0] if self.hp.ema_momentum == 0 else self.average
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            raise DivergenceError(f"dual_students: Track B weights are NaN/inf at {state.queries_used} queries")
        return model.eval()
