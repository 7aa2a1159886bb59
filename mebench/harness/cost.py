"""A rough CPU cost estimate of grid cells, so nobody starts a multi-day grid by accident.

The numbers are orders of magnitude measured on one thread of a 2-core x86 CPU (LeNet-5 Track A
at batch 128: about 15 ms a step; an attack's query loop: about 2 ms an image, DFME's generator
included; a width-32 DCGAN step: about 10 ms an image); other architectures use a conservative
default. An attack's own training outside its query loop (Track B models, round models, GAN
pretraining) comes from ``Attack.training_cost``. Two cells at once on a 2-core machine run about
1.7x slower each. They only size a warning and the large-grid guard, never a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

#: Seconds per Track A step (batch 128, one CPU thread) by substitute architecture.
SECONDS_PER_STEP = {"lenet5": 0.015, "tiny_mlp": 0.001, "resnet8": 0.06, "simple_cnn": 0.12}
DEFAULT_SECONDS_PER_STEP = 0.3
#: Seconds per query of the attack loop (victim forward, selection or synthesis).
SECONDS_PER_QUERY = 0.002
#: Seconds per image of one generator-and-discriminator step of a width-32 DCGAN pair (DFMS).
SECONDS_PER_GAN_EXAMPLE = 0.01
#: A selection above either bound needs ``--budgets`` or ``--mebench-allow-large``.
LARGE_MAX_BUDGET = 100_000
LARGE_CPU_HOURS = 2.0


@dataclass(frozen=True)
class Cost:
    cells: int
    queries: int
    track_a_steps: int
    cpu_hours: float
    max_budget: int

    @property
    def large(self) -> bool:
        return self.max_budget > LARGE_MAX_BUDGET or self.cpu_hours > LARGE_CPU_HOURS

    def line(self) -> str:
        return (f"mebench: {self.cells} grid cells selected: {self.queries:,} queries, "
                f"{self.track_a_steps:,} Track A steps, about {self.cpu_hours:.1f} CPU-hours on one idle thread "
                f"(rough; largest budget {self.max_budget:,})")


def estimate(cfgs: Iterable) -> Cost:
    """Cost of running the run configs ``cfgs`` (one seed each), from ``mebench.config.RunConfig``."""
    from mebench.attacks import ATTACKS
    from mebench.training.loop import steps_for_budget
    from mebench.config.validation import attack_params

    cells = queries = steps = top = 0
    seconds = 0.0
    for cfg in cfgs:
        c = cfg.substitute.trackA.steps_coeff_c
        checkpoints = tuple(cfg.budget.checkpoints)
        s = sum(steps_for_budget(b, c) for b in checkpoints)
        per_step = SECONDS_PER_STEP.get(cfg.substitute.arch, DEFAULT_SECONDS_PER_STEP)
        own = ATTACKS.get(cfg.attack.name).training_cost(attack_params(cfg), checkpoints, cfg.budget.max_budget)
        cells, queries, steps = cells + 1, queries + cfg.budget.max_budget, steps + s
        top = max(top, cfg.budget.max_budget)
        seconds += (s * per_step + cfg.budget.max_budget * SECONDS_PER_QUERY
                    + own.substitute_examples * per_step / 128 + own.gan_examples * SECONDS_PER_GAN_EXAMPLE)
    return Cost(cells, queries, steps, seconds / 3600.0, top)
