"""The run configuration's types (contract §15.1), parsing and path resolution.

``parse_config`` builds the frozen dataclasses from a YAML mapping (through
``mebench.builder``); every mistake is one ``ConfigError`` naming the key, the
value and the rule. The §15.2 rules that need the registries (attacks, models,
datasets) and ``load_config`` live in ``mebench.validation``, so importing this
module loads no attack. Relative paths in a config file are looked up from the
current folder, then from the file's own folder (``resolve_paths``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import yaml

from mebench import builder
from mebench.errors import ConfigError
from mebench.serial import config_hash, jsonable
from mebench.training.spec import OptimizerSpec
from mebench.types import OUTPUT_MODES


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


@dataclass(frozen=True)
class LossSection:
    soft: str = "kl"
    hard: str = "ce"


@dataclass(frozen=True)
class SubstituteSection:
    """The substitute. ``allow_victim_init``: a Track A ``init_seed`` that reproduces the victim's
    own initialization (same architecture, the victim recipe's seed) is refused unless this says
    the experiment means it (``mebench.validation.check_init_is_not_the_victims``)."""

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


@dataclass(frozen=True)
class MetricsSection:
    """Optional measurements beyond §1.3: ``transfer`` lists the transferability methods
    (``fgsm``, ``pgd``; ``mebench.transfer``) run on every checkpoint substitute.

    ``benign_streams`` and ``benign_dataset`` set the benign clients a detector defense
    (``prada``) is scored on: that many seeded random orders of the victim's test split and,
    when ``benign_dataset`` names one of the victim dataset's surrogates, of its test split too
    (``mebench.defenses.detection``)."""

    transfer: tuple[str, ...] = ()
    transfer_images: int = 500
    #: ε of the transfer curve; empty: the profile's ``transfer_eps_curve``.
    transfer_eps: tuple[float, ...] = ()
    #: Models in the ``independent`` reference ensemble (0: none); ``mebench.refcache``.
    transfer_references: int = 3
    #: Track A retrained from this many other initializations at the largest checkpoint (0: off);
    #: ``mebench.init_variance``.
    init_variance: int = 0
    benign_streams: int = 4
    benign_dataset: Optional[str] = None


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
    metrics: MetricsSection = MetricsSection()

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def config_hash(self, ignore_run_keys: Sequence[str] = ("seeds", "output_dir")) -> str:
        """sha256 (16 hex digits) of the canonical JSON of the config, without the named ``run`` keys."""
        d = self.to_dict()
        for key in ignore_run_keys:
            d["run"].pop(key, None)
        return config_hash(d)

    def attack_label(self) -> str:
        return self.attack.label or self.attack.name

    def replace(self, **sections: Any) -> "RunConfig":
        return dataclasses.replace(self, **sections)


# --------------------------------------------------------------------------- parsing
def build_dataclass(cls: type, raw: Mapping[str, Any], prefix: str) -> Any:
    """``mebench.builder.build_dataclass`` raising ``ConfigError``."""
    return builder.build_dataclass(cls, raw, prefix, ConfigError)


def read_yaml_file(path: Path, missing: str) -> Any:
    """``yaml.safe_load`` of a file; a missing, unreadable or invalid file is one ``ConfigError``."""
    return builder.read_yaml_file(path, missing, ConfigError)


def parse_config(raw: Any) -> RunConfig:
    """A ``RunConfig`` from the mapping that ``yaml.safe_load`` returned (schema checks only)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", type(raw).__name__, "a config file must hold a mapping of sections")
    raw = dict(raw)
    victim = raw.get("victim")
    # The victim's input size, channels and normalization default to the dataset profile's.
    if isinstance(victim, Mapping) and isinstance(raw.get("dataset"), Mapping):
        raw["victim"] = _victim_defaults(dict(victim), raw["dataset"].get("name"))
    return build_dataclass(RunConfig, raw, "")


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
    if cfg.victim.format != "callable":  # a callable is "package.module:function", not a path
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
    metrics = cfg.metrics if transfer is None else dataclasses.replace(cfg.metrics, transfer=tuple(transfer))
    return dataclasses.replace(cfg, run=run, budget=budget, dataset=dataset, metrics=metrics)
