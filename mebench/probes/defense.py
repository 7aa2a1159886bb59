"""What a defense costs and what it sees: its utility cost to benign users (``mebench.defenses.utility``)
and, for a detector, its record on the attack's stream and on benign streams
(``mebench.defenses.detection``). Both go to ``summary.json``'s ``defense`` section."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from mebench.defenses import DEFENSES, build_answers
from mebench.defenses.detection import Detector, benign_streams, feed
from mebench.defenses.utility import utility_cost
from mebench.probes.base import Emit, Probe, register_probe

if TYPE_CHECKING:
    from mebench.run.world import World


@register_probe("defense_utility")
class DefenseUtility(Probe):
    """The defended answers against the undefended ones on the test split, from a fresh instance of
    the defense (so the measurement draws none of the oracle's randomness)."""

    metrics = ("test_accuracy", "agreement_with_undefended", "mean_abs_perturbation")
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.section: dict[str, Any] = {}

    @classmethod
    def applies(cls, plan: Any, params: Any) -> bool:
        return plan.defense.name != "none"

    def start(self, world: World) -> None:
        prep = world.prep
        own = world.defense("defense_utility")
        self.section["utility"] = utility_cost(build_answers(prep.victim, world.plan.victim.temperature, own),
                                               prep.answers, prep.evaluator)
        self.section["fitted"] = own.describe()  # resolved params and what was fitted (e.g. the outlier source)

    def summary(self, world: World) -> dict[str, Any]:
        return {"defense": self.section}


@dataclass(frozen=True)
class DetectionParams:
    """``benign_streams`` seeded orders per benign source; ``benign_dataset`` an extra source's test split."""

    benign_streams: int = 4
    benign_dataset: Optional[str] = None


@register_probe("detection")
class Detection(Probe):
    """A detector's record of the attack's stream (marked at every checkpoint) and of benign streams."""

    Params = DetectionParams
    metrics = ("tpr", "fpr")
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.detectors: list[Detector] = []
        self.record: Optional[dict[str, Any]] = None

    @classmethod
    def check(cls, params: DetectionParams, scope: Any) -> None:
        from mebench.data.profiles import PROFILES
        from mebench.errors import ConfigError

        if params.benign_streams <= 0:
            raise ConfigError("measure.detection.benign_streams", params.benign_streams,
                              "must be a positive number of streams per source")
        if params.benign_dataset is not None:
            surrogates = PROFILES.get(scope.dataset).surrogates if scope.dataset in PROFILES else ()
            if params.benign_dataset not in surrogates:
                raise ConfigError("measure.detection.benign_dataset", params.benign_dataset,
                                  f"a benign client's dataset has the victim's input shape: one of {list(surrogates)}")

    @classmethod
    def applies(cls, plan: Any, params: Any) -> bool:
        return any(issubclass(DEFENSES.get(d.name), Detector) for d in plan.defenses)

    def start(self, world: World) -> None:
        self.detectors = [t for t in world.oracle.answers.transforms if isinstance(t, Detector)]

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        for d in self.detectors:
            d.mark([budget])

    def finish(self, world: World) -> None:
        if not self.detectors:
            return
        t0 = time.perf_counter()
        self.record = self.benign_record(world, self.detectors[0])
        self.timings["detection_benign"] = time.perf_counter() - t0

    def benign_record(self, world: World, detector: Detector) -> dict[str, Any]:
        """The detector's record of the attack's stream and of ``benign_streams`` seeded orders of the
        victim's test split and of ``benign_dataset``'s, each through a fresh instance of the defense."""
        prep, plan, seed = world.prep, world.plan, world.seed
        sources = [(f"{prep.profile.name}-test", prep.split(prep.profile.name, False)[0])]
        if self.params.benign_dataset:
            sources.append((f"{self.params.benign_dataset}-test", prep.split(self.params.benign_dataset, False)[0]))
        benign = []
        for source, k, images in benign_streams(sources, world.plan.max_budget, self.params.benign_streams, seed):
            fresh = world.defense(f"defense_benign:{source}:{k}")
            answers = build_answers(prep.victim, plan.victim.temperature, fresh)
            feed(fresh, images, lambda xb: answers.probs(xb), world.plan.checkpoints, prep.device)
            benign.append({"source": source, "stream": k, **fresh.record()})
        return {"params": dataclasses.asdict(detector.params), "attack": detector.record(), "benign": benign}

    def summary(self, world: World) -> dict[str, Any]:
        return {"defense": {"detection": self.record}} if self.record is not None else {}
