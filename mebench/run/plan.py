"""What one seed-run runs, resolved once: ``resolve(cfg, seed) -> RunPlan`` (issue 35).
See docs/guide/resume.md.
"""
# A config says what the user typed; a plan says what runs: the attack and its typed parameters
# *with every default filled in*, the defense(s) likewise, the output and data modes, the
# attacker's pool (its source, size and the distinct images the attack needs), the Track A
# recipe, the input shape, the victim's identity (including the SHA-256 of its file, so a
# retrained victim is a different plan), the budget and the measurement probes with their parameters (``mebench.probes``). The plan is
# frozen; ``summary.json`` stores ``plan.to_dict()`` and ``plan_hash`` (SHA-256 of its canonical
# JSON), and ``--resume`` keeps a stored result only when its plan hash, the code identity
# (``mebench.support.identity``) and the torch thread count equal the ones that would run now
# (``stale_reason``).
#
# Not in the plan, on purpose: the run name, the output folder, the device and the cache
# settings (where and how a run is stored, not what it computes; the device and threads are
# recorded in ``summary.json``'s ``machine``). This module imports no torch at module level;
# ``resolve`` loads the registries (attacks, defenses, datasets), which do.

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, Mapping, Optional

from mebench.support.serial import jsonable
from mebench.victims.registry import reads_file

if TYPE_CHECKING:
    from mebench.config import RunConfig

#: Bumped when the plan's layout changes, so old plans never compare equal to new ones by accident.
PLAN_VERSION = 2


@dataclass(frozen=True)
class AttackPlan:
    """The attack that runs: registry ``name``, report ``label`` and its typed ``Params`` (defaults filled in)."""

    name: str
    label: str
    output_mode: str
    params: Any
    divergence_restarts: int
    state_dependent: bool
    #: the adaptive strategy and its parameters (``mebench.attacks.adaptive``); ``None``: naive
    adaptive: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class DefensePlan:
    """One answer transform or detector between the victim and the attacker, with its typed ``Params``."""

    name: str
    label: str
    params: Any


@dataclass(frozen=True)
class PoolPlan:
    """The attacker's pool (§3): ``kind`` surrogate | seed | none, its images and what the attack needs;
    ``seed_size``: the seed set (the seed pool's raw images, or the images JBDA draws from a surrogate pool)."""

    kind: str
    source: Optional[str]
    size: Optional[int]
    need: int
    seed_size: Optional[int]


@dataclass(frozen=True)
class TrackAPlan:
    """Track A's fixed recipe (§8): the substitute, its batch size, steps rule, optimizer and loss.

    ``fast``: the opt-in speed options (``substitute.trackA.fast``) when any is on, else ``None``;
    they change the floating-point results, so they are part of what runs. ``None`` is left out of
    ``RunPlan.to_dict`` so a default plan hashes as it did before the options existed.
    """

    arch: str
    init_seed: int
    batch_size: int
    steps_coeff_c: float
    optimizer: Any
    loss: str
    fast: Any = None


@dataclass(frozen=True)
class VictimPlan:
    """Which victim answers: its id, file format and content hash, and the answer settings."""

    victim_id: str
    dataset: str
    num_classes: int
    format: str
    outputs: str
    layout: str
    normalizes: bool
    arch: Optional[str]
    checkpoint_sha256: Optional[str]
    callable_ref: Optional[str]
    normalization: Mapping[str, Any]
    temperature: float
    oracle_profile: str


@dataclass(frozen=True)
class ProbePlan:
    """One measurement that runs (``mebench.probes``): its registry name and typed ``Params``."""

    name: str
    params: Any


@dataclass(frozen=True)
class RunPlan:
    """One seed-run, resolved: everything that decides its numbers, nothing that only stores them."""

    seed: int
    attack: AttackPlan
    defenses: tuple[DefensePlan, ...]
    output_mode: str
    data_mode: str
    dataset: str
    pool: PoolPlan
    track_a: TrackAPlan
    input_shape: tuple[int, ...]
    victim: VictimPlan
    max_budget: int
    checkpoints: tuple[int, ...]
    probes: tuple[ProbePlan, ...] = ()
    version: int = PLAN_VERSION

    @property
    def defense(self) -> DefensePlan:
        """The run's one defense (``none`` when undefended); stacked defenses are not configurable yet."""
        return self.defenses[0]

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain JSON types (what ``summary.json`` stores under ``plan``)."""
        d = jsonable(dataclasses.asdict(self))
        if d["attack"].get("adaptive") is None:  # naive plans hash as they did before the axis existed
            d["attack"].pop("adaptive", None)
        if d["track_a"].get("fast") is None:
            del d["track_a"]["fast"]
        return d

    @cached_property
    def hash(self) -> str:
        """SHA-256 (hex) of the plan's canonical JSON (``canonical_json``)."""
        return hashlib.sha256(canonical_json(self.to_dict()).encode()).hexdigest()


@dataclass(frozen=True)
class RunSite:
    """Where a run reads and stores, never what it computes (so not hashed): the run's name and
    folder, the device, the data root, the cache settings, how to load the victim (its config
    section: file, format, throughput floor) and the config as typed (``summary.json``'s record).
    Built once per config by ``site``; with the plan, the world's only input."""

    run_name: str
    output_dir: str
    device: str
    seeds: tuple[int, ...]
    data_root: Optional[str]
    download: bool
    cache_enabled: bool
    cache_policy: str
    victim: Any
    config: Mapping[str, Any]
    config_hash: str
    config_yaml: str


def site(cfg: "RunConfig") -> RunSite:
    """The storage side of a validated config (``RunSite``)."""
    return RunSite(cfg.run.name, str(cfg.run.output_dir), cfg.run.device, tuple(cfg.run.seeds), cfg.dataset.data_root,
                   bool(cfg.dataset.download), bool(cfg.cache.enabled), cfg.cache.policy, cfg.victim, cfg.to_dict(),
                   cfg.config_hash(), cfg.to_yaml())


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, plain JSON types: equal plans give equal text on every machine."""
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), allow_nan=False)


def resolve(cfg: "RunConfig", seed: Optional[int] = None) -> RunPlan:
    """The plan of one seed of a validated config (the first seed by default).

    Parses ``attack.params`` and ``defense.params`` into the classes' ``Params`` (the one place a
    run reads them raw) and asks the attack for its pool need at the maximum budget.
    """
    from mebench.attacks import ATTACKS
    from mebench.attacks.adaptive import describe as describe_adaptive
    from mebench.data.profiles import PROFILES
    from mebench.config.validation import attack_params, defense_params, pool_size

    cls, params = ATTACKS.get(cfg.attack.name), attack_params(cfg)
    attack = AttackPlan(cfg.attack.name, cfg.attack_label(), cfg.attack.output_mode, params,
                        cfg.attack.divergence_restarts, bool(cls.queries_depend_on_state(params)),
                        adaptive_plan(cfg.attack.adaptive, cfg.attack.output_mode, describe_adaptive))
    defense = DefensePlan(cfg.defense.name, cfg.defense.label or cfg.defense.name, defense_params(cfg))
    d, v, s = cfg.dataset, cfg.victim, cfg.substitute
    kind = d.data_mode if d.data_mode in ("surrogate", "seed") else "none"
    source = {"surrogate": d.surrogate_name, "seed": d.name}.get(kind)
    pool = PoolPlan(kind, source, pool_size(cfg), int(cls.required_pool_size(params, cfg.budget.max_budget)),
                    d.seed_size if kind != "none" else None)  # a pool attack's seed set is drawn from either pool
    track_a = TrackAPlan(s.arch, s.init_seed, s.trackA.batch_size, s.trackA.steps_coeff_c, s.optimizer,
                         s.loss.soft if cfg.attack.output_mode == "soft_prob" else s.loss.hard,
                         s.trackA.fast if s.trackA.fast.any else None)
    plan = RunPlan(
        seed=cfg.run.seeds[0] if seed is None else int(seed), attack=attack, defenses=(defense,),
        output_mode=cfg.attack.output_mode, data_mode=d.data_mode, dataset=d.name, pool=pool, track_a=track_a,
        input_shape=(v.channels, *v.input_size), victim=_victim_plan(cfg, PROFILES.get(d.name).num_classes),
        max_budget=cfg.budget.max_budget, checkpoints=tuple(cfg.budget.checkpoints))
    return dataclasses.replace(plan, probes=_probes(cfg, plan))


def adaptive_plan(raw: Mapping[str, Any], output_mode: str, describe: Any) -> Optional[dict[str, Any]]:
    """The adaptive strategy with its defaults filled in, ``None`` for the naive attacker."""
    d = describe(raw, output_mode)
    return None if d["strategy"] == "naive" else d


def _probes(cfg: "RunConfig", plan: RunPlan) -> tuple[ProbePlan, ...]:
    """The probes a run of ``plan`` measures, in the order the engine tells them its events: the
    built-ins where they apply, any other probe only where ``measure.<name>`` names it."""
    from mebench.config.validation import configured_probe_params
    from mebench.probes import PROBES

    chosen = []
    for cls in PROBES.values():
        params = configured_probe_params(cfg, cls)  # built and checked when the config was validated
        if (cls.runs_by_default or cls.name in cfg.measure) and cls.applies(plan, params):
            chosen.append(ProbePlan(cls.name, params))
    return tuple(chosen)


def _victim_plan(cfg: "RunConfig", num_classes: int) -> VictimPlan:
    v = cfg.victim
    is_file = reads_file(v.format)
    return VictimPlan(v.victim_id, cfg.dataset.name, num_classes, v.format, v.outputs, v.layout, v.normalizes,
                      v.arch, file_sha256(v.checkpoint_ref) if is_file else None,
                      None if is_file else v.checkpoint_ref,
                      {"mean": list(v.normalization.mean), "std": list(v.normalization.std)},
                      v.temperature, v.oracle_profile)


def file_sha256(path: str) -> Optional[str]:
    """SHA-256 of a file, read once per (path, size, mtime); ``None`` when it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _sha256(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------ what ran vs what would run now
def identity_hash(plan_hash: str, code_identity: str, threads: Optional[int]) -> str:
    """The hash of a result's identity: its plan, the code that ran it and the torch thread count
    (CPU numbers depend on it). A grid cell's ``cell_hash``."""
    text = canonical_json({"plan_hash": plan_hash, "code_identity": code_identity, "threads": threads})
    return hashlib.sha256(text.encode()).hexdigest()


def stale_reason(stored: Mapping[str, Any], plan: RunPlan, code_identity: str, threads: Optional[int]) -> Optional[str]:
    """Why a stored ``summary.json`` is not a result of what would run now (one line), else ``None``.

    Compared: the plan (the first differing key is named), the code identity, the torch
    thread count (``machine.torch_threads``; ``threads`` ``None`` skips that check), and, where the
    record names them, the torch build (``versions.torch``), the CPU model (``machine.cpu_model``), the
    instruction set of torch's kernels (``machine.cpu_capability``) and the variables that capped it
    (``machine.isa_overrides``): across machines only distributions compare, so a cell from another
    machine is not resumed into this one's rows (``--keep-stale`` keeps it, marked).
    """
    if not stored.get("plan_hash"):
        return "it records no plan (written before run plans were recorded)"
    why = []
    if stored["plan_hash"] != plan.hash:
        where = first_difference(stored.get("plan"), plan.to_dict())
        why.append(f"its plan differs ({where})" if where else "its plan hash differs")
    if stored.get("code_identity") != code_identity:
        why.append(f"code identity {stored.get('code_identity')} -> {code_identity}")
    ran = (stored.get("machine") or {}).get("torch_threads")
    if threads is not None and ran != threads:
        why.append(f"torch threads {ran} -> {threads}")
    from mebench.support.runinfo import cpu_capability, cpu_model, isa_overrides, library_versions, overrides_text

    machine = stored.get("machine") or {}
    for what, old, new in (("torch build", (stored.get("versions") or {}).get("torch"),
                            library_versions().get("torch")),
                           ("CPU model", machine.get("cpu_model"), cpu_model())):
        if old and new and old != new:
            why.append(f"{what} {old} -> {new}")
    if machine.get("cpu_capability") and machine["cpu_capability"] != cpu_capability():
        why.append(f"instruction set {machine['cpu_capability']} -> {cpu_capability()}")
    if "isa_overrides" in machine and dict(machine["isa_overrides"] or {}) != isa_overrides():
        why.append(f"instruction-set variables {overrides_text(machine['isa_overrides']) or 'none'} -> "
                   f"{overrides_text(isa_overrides()) or 'none'}")
    return "; ".join(why) or None


def first_difference(old: Any, new: Any, path: str = "") -> Optional[str]:
    """``"attack.params.epochs: 10 -> 2"`` for the first key (sorted) where two JSON values differ."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                return f"{sub}: {'absent' if key not in old else _short(old[key])} -> " \
                       f"{'absent' if key not in new else _short(new[key])}"
            found = first_difference(old[key], new[key], sub)
            if found:
                return found
        return None
    if old != new:
        return f"{path or '<plan>'}: {_short(old)} -> {_short(new)}"
    return None


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
