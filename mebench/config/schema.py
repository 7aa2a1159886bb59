"""The run configuration's types (contract §15.1), parsing and path resolution.

``parse_config`` builds the frozen dataclasses from a YAML mapping (through
``mebench.config.builder``); every mistake is one ``ConfigError`` naming the key, the
value and the rule. The §15.2 rules that need the registries (attacks, models,
datasets) and ``load_config`` live in ``mebench.config.validation``, so importing this
module loads no attack. Relative paths in a config file are looked up from the
current folder, then from the file's own folder (``resolve_paths``). See docs/guide/configs.md.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import yaml

from mebench.config import builder
from mebench.errors import ConfigDeprecationWarning, ConfigError
from mebench.support.serial import config_hash, jsonable
from mebench.training.spec import FastSpec, OptimizerSpec
from mebench.types import OUTPUT_MODES
from mebench.victims.registry import reads_file


@dataclass(frozen=True)
class RunSection:
    name: str
    seeds: tuple[int, ...] = (0, 1, 2)
    device: str = "cpu"
    output_dir: str = "runs"


@dataclass(frozen=True)
class Normalization:
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class VictimInference:
    """§4.1: the victim answers every query in ``eval()`` and under ``no_grad``."""

    eval: bool = True
    no_grad: bool = True


@dataclass(frozen=True)
class VictimSection:
    victim_id: str
    checkpoint_ref: str
    input_size: tuple[int, int]
    channels: int
    normalization: Normalization
    output_mode: str = "soft_prob"
    temperature: float = 1.0
    oracle_profile: str = "default"
    output_modes_supported: tuple[str, ...] = OUTPUT_MODES
    arch: Optional[str] = None
    inference: VictimInference = VictimInference()
    format: str = "mebench"            # mebench | torchscript | onnx | callable (mebench.victims.formats)
    outputs: str = "logits"            # what a non-mebench model returns: logits | probs
    layout: str = "nchw"               # a callable's input: nchw torch tensors | nhwc numpy arrays
    normalizes: bool = False           # the model normalizes its [0, 1] input itself
    throughput_floor: float = 100.0    # images/s below which the run warns (with its estimated time)
    zoo: Optional[str] = None          # the victim zoo it belongs to; the report also aggregates over a zoo


@dataclass(frozen=True)
class DatasetSection:
    name: str
    data_mode: str
    seed_size: int = 100
    surrogate_name: Optional[str] = None
    seed_pool_size: Optional[int] = None
    data_root: Optional[str] = None
    download: bool = False


@dataclass(frozen=True)
class TrackASection:
    batch_size: int = 128
    steps_coeff_c: float = 0.2
    reset_each_checkpoint: bool = True
    fast: FastSpec = FastSpec()


@dataclass(frozen=True)
class LossSection:
    soft: str = "kl"
    hard: str = "ce"


@dataclass(frozen=True)
class SubstituteSection:
    """The substitute. ``allow_victim_init``: a Track A ``init_seed`` that reproduces the victim's
    own initialization (same architecture, the victim recipe's seed) is refused unless this says
    the experiment means it (``mebench.config.validation.check_init_is_not_the_victims``)."""

    arch: str
    init_seed: int = 1234
    allow_victim_init: bool = False
    trackA: TrackASection = TrackASection()
    optimizer: OptimizerSpec = OptimizerSpec()
    loss: LossSection = LossSection()


@dataclass(frozen=True)
class AttackSection:
    """The attack (``name``, ``params``), its answers' ``output_mode`` and the ``label`` that names it.

    ``divergence_restarts``: when a model the attack trains in its own loop reaches a NaN or
    infinite loss (``DivergenceError``), it is trained again from a fresh initialisation and
    batch order, at the same hyperparameters, at most this many times; each restart is recorded
    in ``summary.json`` (``attack_restarts``, ``health_flags``). 0 ends the run instead.
    """

    name: str
    output_mode: str
    label: Optional[str] = None
    params: dict = field(default_factory=dict)
    divergence_restarts: int = 2
    #: ``{strategy: <name>, ...}``: the adaptive attacker (``mebench.attacks.adaptive``); empty: naive
    adaptive: dict = field(default_factory=dict)


#: The ``metrics:`` keys of earlier releases and the ``measure.<probe>.<param>`` key each became.
#: Still read (with a ``ConfigDeprecationWarning`` naming the new key) until the next release.
LEGACY_METRICS: dict[str, tuple[str, str]] = {
    "transfer": ("transfer", "methods"), "transfer_images": ("transfer", "images"),
    "transfer_eps": ("transfer", "eps"), "transfer_references": ("transfer", "references"),
    "init_variance": ("init_variance", "inits"),
    "benign_streams": ("detection", "benign_streams"), "benign_dataset": ("detection", "benign_dataset"),
}


@dataclass(frozen=True)
class DefenseSection:
    """The defense between the victim and the attacker (``mebench.defenses``); ``none`` by default."""

    name: str = "none"
    params: dict = field(default_factory=dict)
    label: Optional[str] = None  # names a parametrised defense in reports (e.g. mad_argmax); default the name


@dataclass(frozen=True)
class BudgetSection:
    max_budget: int
    checkpoints: tuple[int, ...]


@dataclass(frozen=True)
class CacheSection:
    enabled: bool = True
    policy: str = "temporary"
    delete_on_finish: bool = True


#: Where a RunConfig keeps the typed parameters built from it (``RunConfig.typed``); not a field.
TYPED = "_typed_params"


@dataclass(frozen=True)
class RunConfig:
    """A whole run: one victim, one dataset/data mode, one attack and output mode, N seeds."""

    run: RunSection
    victim: VictimSection
    dataset: DatasetSection
    substitute: SubstituteSection
    attack: AttackSection
    budget: BudgetSection
    cache: CacheSection = CacheSection()
    defense: DefenseSection = DefenseSection()
    #: ``measure.<probe>``: each measurement probe's parameters (``mebench.probes``), e.g.
    #: ``{transfer: {methods: [fgsm, pgd], images: 1000}, detection: {benign_streams: 4}}``.
    measure: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = jsonable(dataclasses.asdict(self))
        if not d["attack"].get("adaptive"):  # the naive attacker: its configs and hashes stay as they were
            d["attack"].pop("adaptive", None)
        return d

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def config_hash(self, ignore_run_keys: Sequence[str] = ("seeds", "output_dir")) -> str:
        """sha256 (16 hex digits) of the canonical JSON of the config, without the named ``run`` keys."""
        d = self.to_dict()
        for key in ignore_run_keys:
            d["run"].pop(key, None)
        return config_hash(d)

    def measure_params(self, probe: str) -> dict[str, Any]:
        """The raw ``measure.<probe>`` mapping (empty when the config does not name the probe)."""
        return dict(self.measure.get(probe) or {})

    def attack_label(self) -> str:
        """The attack's label; an adaptive attacker's carries its strategy (``random.argmax``), so
        naive and adaptive rows are never one condition in any report."""
        label = self.attack.label or self.attack.name
        strategy = (self.attack.adaptive or {}).get("strategy")
        return label if strategy in (None, "naive") else f"{label}.{strategy}"

    def replace(self, **sections: Any) -> "RunConfig":
        """A copy with ``sections`` replaced; typed parameters already built (``typed``) are kept
        for the sections they were read from when those sections are unchanged."""
        new = dataclasses.replace(self, **sections)
        kept = {k: v for k, v in self.__dict__.get(TYPED, {}).items() if not set(k[1]) & set(sections)}
        if kept:
            new.__dict__[TYPED] = kept
        return new

    def typed(self, key: str, reads: tuple[str, ...], build: Any) -> Any:
        """The typed parameters ``key`` of this config (read from the sections ``reads``), built once by
        ``build()`` and kept with the config: validation, the grid and the plan share one ``Params``
        object per plugin instead of parsing the same mapping again (the config is frozen)."""
        cache = self.__dict__.setdefault(TYPED, {})
        if (key, reads) not in cache:
            cache[(key, reads)] = build()
        return cache[(key, reads)]


# --------------------------------------------------------------------------- parsing
def build_dataclass(cls: type, raw: Mapping[str, Any], prefix: str) -> Any:
    """``mebench.config.builder.build_dataclass`` raising ``ConfigError``."""
    return builder.build_dataclass(cls, raw, prefix, ConfigError)


def build_params(cls: type, raw: Mapping[str, Any], prefix: str) -> Any:
    """A plugin's ``Params`` (attack, defense, probe, adaptive strategy) from config values: unknown keys
    and bad types refused by :func:`build_dataclass`, then every number finite and within its upper
    bound (``mebench.config.limits``), each a ``ConfigError`` naming key, value and rule."""
    from mebench.config.limits import check_limits

    params = builder.build_dataclass(cls, raw, prefix, ConfigError)
    check_limits(params, prefix, ConfigError)
    return params


def read_yaml_file(path: Path, missing: str) -> Any:
    """``yaml.safe_load`` of a file; a missing, unreadable or invalid file is one ``ConfigError``."""
    return builder.read_yaml_file(path, missing, ConfigError)


def parse_config(raw: Any) -> RunConfig:
    """A ``RunConfig`` from the mapping that ``yaml.safe_load`` returned (schema checks only)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", type(raw).__name__, "a config file must hold a mapping of sections")
    raw = _old_spellings(dict(raw))
    victim = raw.get("victim")
    # The victim's input size, channels and normalization default to the dataset profile's.
    if isinstance(victim, Mapping) and isinstance(raw.get("dataset"), Mapping):
        raw["victim"] = _victim_defaults(dict(victim), raw["dataset"].get("name"))
    if "metrics" in raw:
        raw = _legacy_metrics(raw)
    if not isinstance(raw.get("measure") or {}, Mapping):
        raise ConfigError("measure", raw["measure"], "must be a mapping of probe names to their parameters")
    return build_dataclass(RunConfig, raw, "")


def _legacy_metrics(raw: dict) -> dict:
    """Move the old ``metrics:`` keys to ``measure.<probe>.<param>``, warning once per key (``LEGACY_METRICS``)."""
    import warnings

    old = raw.pop("metrics") or {}
    if not isinstance(old, Mapping):
        raise ConfigError("metrics", old, "must be a mapping (and is deprecated: write measure.<probe> instead)")
    measure = {k: dict(v or {}) if isinstance(v, Mapping) or v is None else v
               for k, v in dict(raw.get("measure") or {}).items()}
    for key, value in old.items():
        if key not in LEGACY_METRICS:
            raise ConfigError(f"metrics.{key}", value, f"unknown key (valid, deprecated: {', '.join(LEGACY_METRICS)})")
        probe, param = LEGACY_METRICS[key]
        section = measure.setdefault(probe, {})
        if not isinstance(section, dict) or param in section:
            raise ConfigError(f"metrics.{key}", value, f"set twice: remove it and keep measure.{probe}.{param}")
        warnings.warn(f"config key metrics.{key} is deprecated: write measure.{probe}.{param} "
                      "(the old key is read until the next release)", ConfigDeprecationWarning, stacklevel=4)
        section[param] = value
    return {**raw, "measure": measure}


def _old_spellings(raw: dict) -> dict:
    """``raw`` with deprecated spellings rewritten to the current ones, each with one
    ``ConfigDeprecationWarning`` naming old and new.

    Temperature has one spelling, the victim's (contract §1.2: T != 1 is an explicit oracle profile):
    ``victim: {oracle_profile: tempered, temperature: T}``. The ``temperature`` defense
    (``defense: {name: temperature, params: {temperature: T}}``) answered the same, through the
    same transform, and is read as that victim section with no defense.
    """
    import warnings


    defense, victim = raw.get("defense"), raw.get("victim")
    if not (isinstance(defense, Mapping) and defense.get("name") == "temperature" and isinstance(victim, Mapping)):
        return raw
    params = defense.get("params") or {}
    t = params.get("temperature", 1.0) if isinstance(params, Mapping) else 1.0
    if victim.get("temperature", 1.0) != 1.0 or not isinstance(params, Mapping) or set(params) - {"temperature"}:
        return raw  # validation names what is wrong with it
    warnings.warn(f"defense 'temperature' is deprecated: write victim.oracle_profile: tempered and "
                  f"victim.temperature: {t} (contract §1.2); read as that, with no defense",
                  ConfigDeprecationWarning, stacklevel=3)
    tempered = {"oracle_profile": "tempered", "temperature": t} if t != 1.0 else {}
    return {**raw, "victim": {**victim, **tempered}, "defense": {"name": "none"}}


def _victim_defaults(victim: dict, dataset_name: Any) -> dict:
    from mebench.data.profiles import PROFILES

    if not isinstance(dataset_name, str) or dataset_name not in PROFILES:
        return victim
    p = PROFILES.get(dataset_name)
    victim.setdefault("input_size", list(p.input_size))
    victim.setdefault("channels", p.channels)
    victim.setdefault("normalization", {"mean": list(p.mean), "std": list(p.std)})
    return victim


# ------------------------------------------------------------------------------ paths
def resolve_paths(cfg: RunConfig, config_dir: Path) -> RunConfig:
    """Resolve the file's relative ``victim.checkpoint_ref`` and ``dataset.data_root``.

    A relative path that exists from the current folder is kept as written; one
    that exists only from ``config_dir`` (the config file's folder) becomes that
    absolute path; one found in neither place is kept, and ``check_paths``
    names both places tried.
    """
    ref = cfg.victim.checkpoint_ref
    if reads_file(cfg.victim.format):  # a callable is "package.module:function", not a path
        ref = _from_config_dir(ref, config_dir)
    root = cfg.dataset.data_root and _from_config_dir(cfg.dataset.data_root, config_dir)
    return dataclasses.replace(cfg, victim=dataclasses.replace(cfg.victim, checkpoint_ref=ref),
                               dataset=dataclasses.replace(cfg.dataset, data_root=root))


def _from_config_dir(value: str, config_dir: Path) -> str:
    p = Path(value).expanduser()
    if p.is_absolute():
        return str(p) if value.startswith("~") else value
    if p.exists() or not (config_dir / p).exists():
        return value
    return os.path.abspath(config_dir / p)


def describe_places(value: str, config_dir: Optional[Path]) -> str:
    """'at A (from the current folder) nor at B (from the config file's folder)'."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return f"at '{p}'"
    here = Path.cwd() / p
    words = f"at '{here}' (from the current folder)"
    if config_dir is not None and Path(os.path.abspath(config_dir / p)) != Path(os.path.abspath(here)):
        words += f" nor at '{os.path.abspath(config_dir / p)}' (from the config file's folder)"
    return words


def apply_overrides(cfg: RunConfig, seeds: Optional[Sequence[int]] = None,
                    budgets: Optional[Sequence[int]] = None, device: Optional[str] = None,
                    data_root: Optional[str] = None, output_dir: Optional[str] = None,
                    download: Optional[bool] = None, transfer: Optional[Sequence[str]] = None) -> RunConfig:
    """Command-line overrides; ``budgets`` replaces the checkpoints and sets max_budget to their max."""
    run = cfg.run
    if seeds is not None:
        run = dataclasses.replace(run, seeds=tuple(seeds))
    if device is not None:
        run = dataclasses.replace(run, device=device)
    if output_dir is not None:
        run = dataclasses.replace(run, output_dir=output_dir)
    budget = cfg.budget
    if budgets is not None:
        budget = BudgetSection(max_budget=max(budgets) if budgets else 0, checkpoints=tuple(budgets))
    dataset = cfg.dataset if data_root is None else dataclasses.replace(cfg.dataset, data_root=data_root)
    if download:
        dataset = dataclasses.replace(dataset, download=True)
    measure = cfg.measure if transfer is None else \
        {**cfg.measure, "transfer": {**cfg.measure_params("transfer"), "methods": list(transfer)}}
    return dataclasses.replace(cfg, run=run, budget=budget, dataset=dataset, measure=measure)
