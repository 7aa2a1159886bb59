"""Track A's initialization as a measured source of variance (``mebench.probes.variance``; off unless
the config names it: ``measure: {init_variance: {inits: 5}}``).

At the largest checkpoint, Track A's D_B is trained again from ``inits`` other initializations
(batch order unchanged) and each model is scored like Track A and, when transferability is
measured, by the same transfer and fidelity rows (its own evaluator, drawn from the same seeded
streams as the transfer probe's, so the image subset is the same). Rows in ``init_variance.csv``.
See docs/transferability.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mebench.run import artifacts
from mebench.probes import variance as init_variance
from mebench.probes.base import Emit, Probe, register_probe
from mebench.probes.transferability.transfer import evaluator_for, victim_seeds

if TYPE_CHECKING:
    from mebench.run.world import World


@dataclass(frozen=True)
class InitVarianceParams:
    """``inits``: how many other initializations Track A is retrained from at the largest checkpoint."""

    inits: int = 5


@register_probe("init_variance")
class InitVariance(Probe):
    """The spread of each Track A metric over initializations, on the largest checkpoint's D_B."""

    Params = InitVarianceParams
    metrics = ("agreement", "acc_gt", "kl_mean", "l1_mean")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"init_variance": 0.0}
        self.rows: list[dict[str, Any]] = []

    @classmethod
    def check(cls, params: InitVarianceParams, scope: Any) -> None:
        from mebench.errors import ConfigError

        if params.inits < 1:
            raise ConfigError("measure.init_variance.inits", params.inits, "must be a positive number of initializations")

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        if budget != max(world.plan.checkpoints):
            return
        t0 = time.perf_counter()
        trainer = world.track_a_trainer()
        transfer = world.probe_params("transfer")
        evaluator = evaluator_for(transfer, world.prep, world.seed) if transfer is not None else None
        x, y = world.state.store.prefix(budget, world.prep.device)
        self.rows = init_variance.measure(trainer, x, y, world.prep.evaluator, world.seed, self.params.inits,
                                          evaluator, victim_seeds(world.plan, world.site))
        self.timings["init_variance"] += time.perf_counter() - t0

    def write(self, seed_dir: Path, final: bool) -> None:
        if self.rows:
            artifacts.write_csv(seed_dir / "init_variance.csv", init_variance.INIT_VARIANCE_COLUMNS, self.rows)
