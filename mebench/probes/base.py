"""What a measurement is to the engine: a ``Probe`` that hears the run's events (issue 35).

The engine drives one seed's query loop and tells every probe of the run, in registry order, the
events listed in the comment below. See docs/extending/probe.md.
"""
# - ``start(world)`` once the shared world and the oracle are built, before the query store and the
#   attack are (so nothing a probe draws can reach the attack's randomness);
# - ``checkpoint(world, budget, emit)`` at every checkpoint B; a probe that scores a substitute
#   (Track A, Track B) hands it to ``emit``, which writes its ``metrics.csv`` row and tells every
#   probe ``substitute(world, scored)`` at once (health and transferability measure it there);
# - ``finish(world)`` after the last query, when the seed completed.
#
# A probe keeps its own numbers: ``measurements()`` are its long-format rows for
# ``measurements.csv`` (``MEASUREMENT_COLUMNS``), ``summary()`` its ``summary.json`` section(s),
# ``write(seed_dir, final)`` any file of its own (e.g. ``transfer.csv``), ``timings`` its seconds.
# A probe class declares its ``name``, its typed ``Params`` (a frozen dataclass, read from the
# config's ``measure.<name>`` section), the ``metrics`` it reports and when it ``applies``.

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional

from mebench.registry import Registry

if TYPE_CHECKING:
    from mebench.run.plan import RunPlan
    from mebench.training.health import LossCurve
    from mebench.types import CheckpointResult
    from mebench.run.world import World

#: Columns of ``measurements.csv``: one number per row, from the probes other than Track A/B.
MEASUREMENT_COLUMNS: tuple[str, ...] = ("seed", "checkpoint_B", "track", "probe", "metric", "value")



@dataclass(frozen=True)
class ProbeScope:
    """What a probe's ``check`` may know of the run it would measure (the plan's own fields)."""

    dataset: str
    data_mode: str
    output_mode: str

@dataclass(frozen=True)
class NoParams:
    """Parameters of a probe that has none."""


@dataclass
class Scored:
    """One substitute scored at a checkpoint: its track, the model, its metrics row and what health reads."""

    track: str
    budget: int
    model: Any
    result: "CheckpointResult"
    pred_top_share: float
    curve: Optional["LossCurve"] = None


Emit = Callable[[Scored], None]


class Probe:
    """Base of every measurement; subclasses override the events they need (all default to nothing)."""

    name: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    #: The metric names this probe reports (its ``measurements.csv`` ``metric`` values or its columns).
    metrics: ClassVar[tuple[str, ...]] = ()
    #: False: the probe runs only when the config names it (``measure.<name>``, even empty); True:
    #: whenever ``applies`` says so (the built-ins).
    runs_by_default: ClassVar[bool] = False

    def __init__(self, params: Any = None) -> None:
        self.params = self.Params() if params is None else params
        self.timings: dict[str, float] = {}

    @classmethod
    def configure(cls, raw: Mapping[str, Any]) -> Any:
        """This probe's typed ``Params`` from the config's ``measure.<name>`` section ``raw`` (defaults
        filled in); an unknown key or a wrong type is one ``ConfigError`` naming ``measure.<name>.<key>``."""
        from mebench.config import build_params

        return build_params(cls.Params, raw, f"measure.{cls.name}")

    @classmethod
    def check(cls, params: Any, scope: ProbeScope) -> None:
        """Rules on the parameters beyond their types (raise ``ConfigError``), given what the run is
        (``scope``: dataset, data and output mode); checked when the plan is resolved, before any work."""

    @classmethod
    def applies(cls, plan: "RunPlan", params: Any) -> bool:
        """Whether a run of ``plan`` measures it (e.g. defense utility only behind a defense)."""
        return True

    def start(self, world: "World") -> None:
        """Before the first query."""

    def checkpoint(self, world: "World", budget: int, emit: Emit) -> None:
        """At checkpoint ``budget``, once the oracle has answered exactly ``budget`` images."""

    def substitute(self, world: "World", scored: Scored) -> None:
        """A probe scored a substitute at this checkpoint (``emit``)."""

    def finish(self, world: "World") -> None:
        """After the last query of a seed that completed."""

    def measurements(self) -> list[dict[str, Any]]:
        """Rows for ``measurements.csv`` (``MEASUREMENT_COLUMNS``)."""
        return []

    def summary(self, world: "World") -> dict[str, Any]:
        """Top-level ``summary.json`` keys this probe owns (a dict value is merged into an existing one)."""
        return {}

    def write(self, seed_dir: Path, final: bool) -> None:
        """Write this probe's own files (at every checkpoint, and ``final`` once at the end)."""



PROBES: Registry[type[Probe]] = Registry("probe", "mebench.probes")


def register_probe(name: str) -> Callable[[type[Probe]], type[Probe]]:
    """Class decorator: ``@register_probe("transfer")`` sets ``cls.name`` and registers it (duplicates raise)."""

    def deco(cls: type[Probe]) -> type[Probe]:
        cls.name = name
        return PROBES.register(name)(cls)

    return deco


def measurement(seed: int, budget: int, track: str, probe: str, metric: str, value: Any) -> dict[str, Any]:
    """One ``measurements.csv`` row."""
    return {"seed": seed, "checkpoint_B": budget, "track": track, "probe": probe, "metric": metric, "value": value}


def merge_section(summary: dict[str, Any], section: dict[str, Any]) -> None:
    """Add a probe's ``summary.json`` keys; a dict merges into an existing dict (e.g. ``defense``)."""
    for key, value in section.items():
        if isinstance(value, dict) and isinstance(summary.get(key), dict):
            summary[key].update(value)
        else:
            summary[key] = value
