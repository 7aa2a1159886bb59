"""Ownership verification on every checkpoint substitute (issue 56): each named verifier's score.

Off unless the config names it (``measure: {verification: {methods: [akh, sac]}}``). At the start
the owner prepares each method's key from the victim and its own data (the victim's training split,
the test split as public points); a method that reads a defense's state (DAWN) prepares at each
checkpoint from the run's defense. Every substitute a track scores is then queried as a suspect:
``<method>_score`` and ``<method>_queries`` rows in ``measurements.csv``. Verification queries the
suspect only: the oracle and its budget never move. Decisions against negatives are made from the
rows. See docs/verification/index.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from mebench.probes.base import Emit, Probe, Scored, measurement, register_probe
from mebench.support.seeding import generator

if TYPE_CHECKING:
    from mebench.run.world import World


@dataclass(frozen=True)
class VerificationParams:
    """``methods``: registered verifiers (``mebench list verifiers``), each with its default parameters."""

    methods: tuple[str, ...] = ("akh", "sac")


@register_probe("verification")
class VerificationProbe(Probe):
    """Scores of every named verifier on each checkpoint substitute (Track A and Track B)."""

    Params = VerificationParams
    metrics = ("<method>_score", "<method>_queries")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"verification": 0.0}
        self.rows: list[dict[str, Any]] = []
        self.methods: dict[str, Any] = {}
        self.states: dict[str, Any] = {}
        self.owner: Any = None

    @classmethod
    def check(cls, params: VerificationParams, scope: Any) -> None:
        from mebench.errors import ConfigError
        from mebench.verification import VERIFIERS

        unknown = [m for m in params.methods if m not in VERIFIERS]
        if unknown or not params.methods or len(set(params.methods)) != len(params.methods):
            raise ConfigError("measure.verification.methods", list(params.methods),
                              f"distinct registered verifiers among {VERIFIERS.names()}")

    @classmethod
    def applies(cls, plan: Any, params: VerificationParams) -> bool:
        return bool(params.methods)

    def start(self, world: World) -> None:
        from mebench.verification import VERIFIERS, OwnerData, make_verifier

        t0 = time.perf_counter()
        prep = world.prep
        name = prep.profile.name
        self.owner = OwnerData.from_uint8(prep.split(name, True), prep.split(name, False))
        for method in self.params.methods:
            cls = VERIFIERS.get(method)
            if cls.needs_defense is not None and cls.needs_defense != world.plan.defense.name:
                continue  # it reads the state of a defense this run does not have
            self.methods[method] = make_verifier(method)
            if cls.needs_defense is None:  # the owner's key, from the victim and the owner's data only
                self.states[method] = self.methods[method].prepare(
                    prep.victim, self.owner, generator(world.seed, f"verification:{method}"))
        self.timings["verification"] += time.perf_counter() - t0

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        t0 = time.perf_counter()
        for method, verifier in self.methods.items():
            if verifier.needs_defense is not None:  # what the defense served up to this checkpoint
                defense = _served_by(world, verifier.needs_defense)
                self.states[method] = verifier.prepare(world.prep.victim, self.owner,
                                                       generator(world.seed, f"verification:{method}"),
                                                       defense=defense, upto=budget)
        self.timings["verification"] += time.perf_counter() - t0

    def substitute(self, world: World, scored: Scored) -> None:
        from mebench.verification import Suspect

        t0 = time.perf_counter()
        for method, verifier in self.methods.items():
            if method not in self.states:
                continue
            suspect = Suspect(scored.model)
            value = verifier.score(self.states[method], suspect)
            self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, f"{method}_score",
                                         value))
            self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, f"{method}_queries",
                                         float(suspect.queries)))
        self.timings["verification"] += time.perf_counter() - t0

    def measurements(self) -> list[dict[str, Any]]:
        return list(self.rows)

    def summary(self, world: World) -> dict[str, Any]:
        return {"verification": {m: v.describe() for m, v in self.methods.items()}}


def _served_by(world: World, name: str) -> Optional[Any]:
    """The run's instance of defense ``name`` in the oracle's answer pipeline (its served state)."""
    transforms = getattr(getattr(world.oracle, "answers", None), "transforms", ())
    return next((t for t in transforms if getattr(t, "name", None) == name), None)
