"""What the data-free attacks that pit a generator against their own students share.

DisGUIDE and Dual Students (and their reference code, both descended from DFME's) run the same
loop: at the start of each iteration the generator takes Adam steps against the students alone
(no query), then every query phase samples ``k`` images from the generator in eval mode and the
students learn from the answers; both learning rates are multiplied by ``lr_gamma`` at fractions
of the budget. Only the generator's objective and the students' update differ, so those are the
hooks (:meth:`StudentsVsGenerator.generator_objective`, ``observe``).
See docs/attacks/disguide.md and docs/attacks/dual_students.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional

import torch

from mebench.attacks.base import Attack
from mebench.errors import DivergenceError
from mebench.models.generators import to_pixels
from mebench.types import QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState


class StudentsVsGenerator(Attack):
    """The shared loop; a subclass sets ``generator``, ``students``, ``opt_g``, ``rng``, ``hp``,
    ``device``, ``phase``, ``iteration``, ``pending`` and ``last_generator_loss`` in ``__init__``."""

    generator: torch.nn.Module
    students: torch.nn.ModuleList
    opt_g: torch.optim.Optimizer
    rng: torch.Generator
    pending: Optional[QueryBatch]

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        return 0

    def next_batch_size(self, state: "EngineState") -> int:
        return max(1, min(self.hp.batch_size, state.budget_left))

    def student_optimizers(self) -> Iterable[torch.optim.Optimizer]:
        """The students' optimizers (one shared, or one each)."""
        raise NotImplementedError

    def lr_drops(self, state: "EngineState") -> int:
        """How many ``lr_gamma`` steps have fallen: the milestones, fractions of the budget, that the
        queries spent so far have reached (DFME's schedule, read as its papers state it)."""
        progress = state.queries_used / max(1, state.max_budget)
        return sum(progress >= x for x in self.hp.lr_milestones)

    def _set_learning_rates(self, state: "EngineState") -> None:
        factor = self.hp.lr_gamma ** self.lr_drops(state)
        pairs = [(o, self.hp.lr_student) for o in self.student_optimizers()] + [(self.opt_g, self.hp.lr_generator)]
        for opt, base in pairs:
            for group in opt.param_groups:
                group["lr"] = base * factor

    def query_pixels(self, pre: torch.Tensor) -> torch.Tensor:
        """The generator's output as query pixels (``pixel_map``)."""
        return to_pixels(pre, self.hp.pixel_map, self.ctx.profile.mean, self.ctx.profile.std)

    def generator_objective(self, pre: torch.Tensor) -> torch.Tensor:
        """The loss the generator minimises on its pre-activation output ``pre`` (students only)."""
        raise NotImplementedError

    def _generator_steps(self) -> None:
        """``generator_steps`` Adam steps of G against the students (eval mode); no query is made."""
        self.generator.train()
        self.students.eval()
        for _ in range(self.hp.generator_steps):
            z = torch.randn(self.hp.batch_size, self.hp.nz, generator=self.rng, device=self.device)
            self.opt_g.zero_grad(set_to_none=True)
            loss = self.generator_objective(self.generator(z))
            if not bool(torch.isfinite(loss)):
                raise DivergenceError(f"{self.name}: generator loss is NaN/inf at iteration {self.iteration}")
            loss.backward()
            self.opt_g.step()
            self.last_generator_loss = float(loss.detach())
        self.students.zero_grad(set_to_none=True)

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if k < 1:
            raise ValueError(f"{self.name}: propose needs k >= 1 images, got {k}")
        if self.pending is not None:
            raise RuntimeError(f"{self.name}: propose called twice without observe")
        self._set_learning_rates(state)
        if self.phase == 0:
            self._generator_steps()
        z = torch.randn(k, self.hp.nz, generator=self.rng, device=self.device)
        # both references sample the students' queries in eval mode; sample_mode "train" (a named
        # variant) normalises each query batch by its own statistics, as an untrained generator does
        self.generator.train(self.hp.sample_mode == "train")
        with torch.no_grad():
            x = self.query_pixels(self.generator(z))
        if not bool(torch.isfinite(x).all()):
            raise DivergenceError(f"{self.name}: the generator produced NaN/inf images at iteration {self.iteration}")
        self.pending = QueryBatch(x, {"iteration": self.iteration, "phase": self.phase})
        return self.pending
