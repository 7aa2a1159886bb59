"""Training health (``mebench.training.health``): every scored substitute's prediction spread and
Track A's loss curve, with the flags they raise; an attack's divergence restarts are flags too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mebench.probes.base import Probe, Scored, measurement, register_probe
from mebench.training.health import assess, restart_flag

if TYPE_CHECKING:
    from mebench.run.world import World

#: Numeric keys of a health record written to ``measurements.csv`` (present ones only).
HEALTH_METRICS = ("pred_top_share", "victim_top_share", "loss_first", "loss_last", "loss_best", "loss_window")


@register_probe("health")
class Health(Probe):
    """One record per scored substitute (``training_health``) and the run's ``health_flags``."""

    metrics = HEALTH_METRICS
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.records: list[dict[str, Any]] = []
        self.seed = 0

    def start(self, world: World) -> None:
        self.seed = world.seed

    def substitute(self, world: World, scored: Scored) -> None:
        record = assess(scored.track, scored.budget, scored.pred_top_share,
                        world.prep.evaluator.victim_top_share, scored.curve)
        self.records.append(record)
        for flag in record["flags"]:
            if world.say is not None:
                world.say(f"WARNING {flag}")

    def measurements(self) -> list[dict[str, Any]]:
        return [measurement(self.seed, r["checkpoint_B"], r["track"], self.name, m, r[m])
                for r in self.records for m in HEALTH_METRICS if r.get(m) is not None]

    def summary(self, world: World) -> dict[str, Any]:
        restarts = list(world.attack.ctx.restarts) if world.attack is not None else []
        return {"training_health": self.records, "attack_restarts": restarts,
                "health_flags": [f for r in self.records for f in r["flags"]] + [restart_flag(r) for r in restarts]}
