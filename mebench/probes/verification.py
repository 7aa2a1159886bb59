"""Ownership verification on every checkpoint substitute (issue 56): each named verifier's score, and
the owner's negatives scored the same way (``measure: {verification: {methods: [akh, sac]}}``).

The owner's keys come from the victim and its own data (training split private, the test split's
first half public), seeded by ``owner_seed``, not the run seed; its negatives (ground truth only, the
test split's second half) are scored with the same keys once per machine (cached). DAWN prepares at
each checkpoint from what the run's defense served. Rows ``<method>_score`` / ``<method>_queries`` and
``summary.json`` ``verification``; the suspect is the only model queried. See docs/verification/index.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from mebench.probes.base import Emit, Probe, Scored, measurement, register_probe
from mebench.support.seeding import generator

if TYPE_CHECKING:
    from mebench.run.world import World

#: The cache kind of a population's scores under one owner key (``mebench.support.cachedir``).
SCORES_KIND = "negative-scores"
#: Index entries: which cached negatives and scores a run plan's verification reads (``negatives_key``),
#: so a cost estimate can tell, without loading any data, that a run will not train or score them.
INDEX_KIND = "negative-index"


def negatives_key(plan: Any, params: "VerificationParams", threads: int) -> dict[str, Any]:
    """What a plan's negatives and their scores depend on, as the plan states it: dataset, victim file
    hash, the probe's parameters, the substitute's architecture (the default negative architectures),
    the torch build and thread count (not the data's bytes: an estimate does not read the data)."""
    import torch

    from mebench.support.serial import jsonable

    return {"dataset": plan.dataset, "victim_sha256": plan.victim.checkpoint_sha256,
            "params": jsonable(dataclasses.asdict(params)), "substitute": plan.track_a.arch,
            "victim_arch": plan.victim.arch, "torch": torch.__version__, "threads": int(threads)}


def negatives_cached(key: dict[str, Any]) -> bool:
    """Whether a run with this ``negatives_key`` found (or left) every negative and score in the cache."""
    from mebench.support import cachedir

    return cachedir.index_complete(INDEX_KIND, key)


@dataclass(frozen=True)
class VerificationParams:
    """``methods``: registered verifiers (``mebench list verifiers``); ``owner_seed`` seeds the owner's
    keys; ``negatives`` models (``negative_archs`` in turn, empty: the victim's and the substitute's
    architecture; ``negative_steps`` Adam steps each) set the thresholds; 100 resolve FPR 1 %, 1,000
    FPR 0.1 %. ``method_params`` is filled from the ``measure.verification.<method>`` sections."""

    methods: tuple[str, ...] = ("akh", "sac")
    owner_seed: int = 0
    negatives: int = 100
    negative_archs: tuple[str, ...] = ()
    negative_steps: int = 500
    method_params: Any = dataclasses.field(default=(), metadata={"internal": True})  # filled by configure

    def params_of(self, method: str) -> Any:
        """The parsed parameters of ``method`` (its defaults when the config gave none)."""
        return dict(self.method_params).get(method)


@register_probe("verification")
class VerificationProbe(Probe):
    """Scores of every named verifier on each checkpoint substitute (Track A and Track B)."""

    Params = VerificationParams
    metrics = ("<method>_score", "<method>_queries")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"verification": 0.0, "negatives": 0.0}
        self.rows: list[dict[str, Any]] = []
        self.scores: list[dict[str, Any]] = []
        self.methods: dict[str, Any] = {}
        self.states: dict[str, Any] = {}
        self.owner: Any = None
        self.negatives: list[Any] = []
        self.negative_paths: list[Path] = []  # their cache entries (for the index)
        self.negative_scores: dict[str, dict[str, list[float]]] = {}
        self.population: Any = None
        self.prepared_at: dict[str, int] = {}
        self.score_paths: list[Path] = []

    @classmethod
    def configure(cls, raw: Mapping[str, Any]) -> VerificationParams:
        from mebench.config import build_params
        from mebench.errors import ConfigError
        from mebench.verification import VERIFIERS

        raw = dict(raw or {})
        if "method_params" in raw:
            raise ConfigError("measure.verification.method_params", raw["method_params"],
                              "not a key: give a method's parameters as measure.verification.<method>")
        sections = {k: raw.pop(k) for k in list(raw) if k in VERIFIERS.names()}
        base = build_params(VerificationParams, raw, "measure.verification")
        per = []
        for name in sorted(sections):
            section = sections[name] if sections[name] is not None else {}
            if not isinstance(section, Mapping):
                raise ConfigError(f"measure.verification.{name}", section, "must be a mapping of the method's parameters")
            per.append((name, build_params(VERIFIERS.get(name).Params, section, f"measure.verification.{name}")))
        return dataclasses.replace(base, method_params=tuple(per))

    @classmethod
    def check(cls, params: VerificationParams, scope: Any) -> None:
        from mebench.errors import ConfigError
        from mebench.verification import VERIFIERS

        unknown = [m for m in params.methods if m not in VERIFIERS]
        if unknown or not params.methods or len(set(params.methods)) != len(params.methods):
            raise ConfigError("measure.verification.methods", list(params.methods),
                              f"distinct registered verifiers among {VERIFIERS.names()}")
        for name, p in params.method_params:
            if name not in params.methods:
                raise ConfigError(f"measure.verification.{name}", dataclasses.asdict(p),
                                  f"parameters of a method not in measure.verification.methods {list(params.methods)}")
            VERIFIERS.get(name).check_params(p)
        if params.negatives < 1:
            raise ConfigError("measure.verification.negatives", params.negatives,
                              "must be at least 1 (100 resolve FPR 1 %, 1,000 FPR 0.1 %)")
        if params.negative_steps < 1:
            raise ConfigError("measure.verification.negative_steps", params.negative_steps, "must be at least 1")
        if params.owner_seed < 0:
            raise ConfigError("measure.verification.owner_seed", params.owner_seed, "must be >= 0")
        from mebench.models.registry import MODELS

        bad = [a for a in params.negative_archs if a not in MODELS]
        if bad:
            raise ConfigError("measure.verification.negative_archs", list(params.negative_archs),
                              f"registered models among {MODELS.names()}")

    @classmethod
    def applies(cls, plan: Any, params: VerificationParams) -> bool:
        return bool(params.methods)

    def start(self, world: World) -> None:
        from mebench.models.registry import build_model
        from mebench.verification import VERIFIERS, OwnerData, make_verifier
        from mebench.verification.negatives import Population, population, split_public

        t0 = time.perf_counter()
        prep, plan, p = world.prep, world.plan, self.params
        name = prep.profile.name
        tx, ty = prep.split(name, False)
        public, held = split_public(tx, ty)
        self.owner = OwnerData.from_uint8(prep.split(name, True), public)
        shape, norm = tuple(plan.input_shape), plan.victim.normalization
        victim_arch = prep.victim_meta.get("arch") or plan.track_a.arch
        archs = tuple(p.negative_archs) or tuple(dict.fromkeys([victim_arch, plan.track_a.arch]))

        def make_model(arch: str) -> Any:
            return build_model(arch, shape[0], prep.num_classes, tuple(shape[1:]), norm["mean"], norm["std"])

        self.population = Population(p.negatives, archs, p.negative_steps, p.owner_seed)
        hx = OwnerData.from_uint8(held, held).train_x  # float pixels in [0, 1]
        self.negatives, self.negative_paths = population(self.population, make_model, hx, held[1].long())
        self.timings["negatives"] += time.perf_counter() - t0
        t0 = time.perf_counter()  # "verification" below: the owner's keys and the negatives' scores, not their training
        for method in p.methods:
            cls = VERIFIERS.get(method)
            if cls.needs_defense is not None and cls.needs_defense != plan.defense.name:
                continue  # it reads the state of a defense this run does not have
            self.methods[method] = make_verifier(method, p.params_of(method))
            if cls.needs_defense is None:  # the owner's key, from the victim and the owner's data only
                self.states[method] = self.methods[method].prepare(
                    prep.victim, self.owner, generator(p.owner_seed, f"verification:{method}"))
                self.negative_scores[method] = {"*": self._cached_negative_scores(world, method)}
        self._write_index(world)
        self.timings["verification"] += time.perf_counter() - t0

    def _write_index(self, world: World) -> None:
        import torch

        from mebench.support import cachedir

        cachedir.write_index(INDEX_KIND, negatives_key(world.plan, self.params, torch.get_num_threads()),
                             self.negative_paths + self.score_paths)

    def _score_negatives(self, method: str) -> list[float]:
        from mebench.verification import Suspect

        return [float(self.methods[method].score(self.states[method], Suspect(m))) for m in self.negatives]

    def _cached_negative_scores(self, world: World, method: str) -> list[float]:
        """The negatives' scores under the owner's key of ``method``: from the machine-wide cache, else
        scored once and stored (a set of runs meets one owner)."""
        from mebench.run import artifacts
        from mebench.support import cachedir
        from mebench.verification.negatives import fingerprint

        victim = world.plan.victim
        key = {"method": method, "params": dataclasses.asdict(self.methods[method].params),
               "owner_seed": self.params.owner_seed, "negatives": [p.stem for p in self.negative_paths],
               "victim": victim.checkpoint_sha256 or fingerprint(*[t for t in world.prep.victim.model.state_dict().values()]),
               "owner": fingerprint(self.owner.train_x[:1000], self.owner.train_y, self.owner.public_x, self.owner.public_y),
               "code": 1}
        path = cachedir.entry_path(SCORES_KIND, key, ".json")
        self.score_paths.append(path)
        try:
            cached = json.loads(path.read_text())
            if cached.get("key") == json.loads(json.dumps(key)) and len(cached["scores"]) == len(self.negatives):
                return [float(v) for v in cached["scores"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        scores = self._score_negatives(method)
        path.parent.mkdir(parents=True, exist_ok=True)
        artifacts.atomic_write_text(path, json.dumps({"key": key, "scores": scores}))
        return scores

    def _watermarks_at(self, world: World, method: str, budget: int) -> None:
        """Prepare a defense-reading method (DAWN) from what the run's defense served among the first
        ``budget`` answers, and score the negatives on it; once per checkpoint. A track may score its
        substitute before this probe's own ``checkpoint`` hook runs, so both call it."""
        if self.prepared_at.get(method) == budget:
            return
        verifier = self.methods[method]
        defense = _served_by(world, verifier.needs_defense)
        self.states[method] = verifier.prepare(world.prep.victim, self.owner,
                                               generator(self.params.owner_seed, f"verification:{method}"),
                                               defense=defense, upto=budget)
        self.negative_scores.setdefault(method, {})[str(budget)] = self._score_negatives(method)
        self.prepared_at[method] = budget

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        t0 = time.perf_counter()
        for method, verifier in self.methods.items():
            if verifier.needs_defense is not None:
                self._watermarks_at(world, method, budget)
        self.timings["verification"] += time.perf_counter() - t0

    def substitute(self, world: World, scored: Scored) -> None:
        from mebench.verification import Suspect

        t0 = time.perf_counter()
        for method, verifier in self.methods.items():
            if verifier.needs_defense is not None:
                self._watermarks_at(world, method, int(scored.budget))
            suspect = Suspect(scored.model)
            value = verifier.score(self.states[method], suspect)
            self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, f"{method}_score",
                                         value))
            self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, f"{method}_queries",
                                         float(suspect.queries)))
            self.scores.append({"track": scored.track, "checkpoint_B": int(scored.budget), "method": method,
                                "score": _finite(value), "queries": int(suspect.queries)})
        self.timings["verification"] += time.perf_counter() - t0

    def measurements(self) -> list[dict[str, Any]]:
        return list(self.rows)

    def summary(self, world: World) -> dict[str, Any]:
        pop = self.population
        return {"verification": {
            "methods": {m: v.describe() for m, v in self.methods.items()},
            "owner_seed": self.params.owner_seed,
            "negatives": {"count": len(self.negatives), "archs": list(pop.archs) if pop else [],
                          "steps": pop.steps if pop else None,
                          "trained_on": "ground truth, the test split's second half",
                          "scores": {m: {b: [_finite(v) for v in s] for b, s in per.items()}
                                     for m, per in self.negative_scores.items()}},
            "scores": list(self.scores),
            "seconds": {k: round(v, 3) for k, v in self.timings.items()}}}


def _finite(value: float) -> Optional[float]:
    """``value``, or ``None`` for no evidence (``-inf``) so the record stays strict JSON."""
    value = float(value)
    return value if math.isfinite(value) else None


def _served_by(world: World, name: str) -> Optional[Any]:
    """The run's instance of defense ``name`` in the oracle's answer pipeline (its served state)."""
    transforms = getattr(getattr(world.oracle, "answers", None), "transforms", ())
    return next((t for t in transforms if getattr(t, "name", None) == name), None)
