"""Every §15.2 rule of a run config, checked before any data or model is loaded.

``load_config`` reads a config file, applies command-line overrides and calls
``validate``; each broken rule is one ``ConfigError`` naming the key, the value
and the rule. The rules read the registries (attacks, models, datasets), which
is why they are apart from the config types in ``mebench.config``. Importing this module
imports no torch; the checks run cheapest first (see below). See docs/guide/configs.md.
"""
# Importing this module imports no torch. ``load_config`` checks in the order of what each
# check costs: the rules that need no registry (``STATIC_RULES``: seeds, budgets, output
# modes, temperature; the dataset profiles are torch-free) and the existence of the files,
# then the rules that import the attack, defense and model registries (``REGISTRY_RULES``,
# which import torch), then the victim file's contents. So the commonest mistakes (a
# ``--budgets`` typo, an untrained victim, a missing data folder) are answered in a fraction
# of a second.

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from mebench.config import (RunConfig, describe_places, apply_overrides, build_params, parse_config,
                            read_yaml_file, resolve_paths)
from mebench.data.profiles import PROFILES
from mebench.errors import ConfigError, VictimLoadError
from mebench.registry import unknown_name_message
from mebench.training.spec import OPTIMIZER_NAMES
from mebench.support.naming import LABEL_RE
from mebench.types import DATA_MODES, OUTPUT_MODES
from mebench.victims.registry import FORMATS, LAYOUTS, OUTPUTS, reads_file


def load_config(path: str | Path, overrides: Optional[Mapping[str, Any]] = None,
                check_files: bool = True) -> RunConfig:
    """Read, override (``--seeds``/``--budgets``/``--device``/``--data-root``/``--download``) and validate.

    Relative paths in the file are resolved by ``resolve_paths`` (the current
    folder first, then the config file's folder); command-line paths are
    relative to the current folder only.
    """
    path = Path(path)
    raw = read_yaml_file(path, "config file not found")
    cfg = resolve_paths(parse_config(raw), path.parent)
    if overrides:
        cfg = apply_overrides(cfg, **overrides)
    from_file = not (overrides and overrides.get("data_root"))
    for rule in STATIC_RULES:  # torch-free: answered before any heavy import
        rule(cfg)
    if check_files:
        check_files_exist(cfg, path.parent, data_root_from_file=from_file)
    for rule in REGISTRY_RULES:
        rule(cfg)
    if check_files:
        check_victim_loads(cfg)
        check_init_is_not_the_victims(cfg)
    return cfg


def check_paths(cfg: RunConfig, config_dir: Optional[Path] = None, data_root_from_file: bool = True) -> None:
    """The files a run needs exist and the victim checkpoint loads (contract §4), before any work.

    ``config_dir`` is the config file's folder, named in the error as the second
    place a relative path was looked for. The checkpoint is read once per file
    version (see ``mebench.victims.load.check_victim_checkpoint``).
    """
    check_files_exist(cfg, config_dir, data_root_from_file)
    check_victim_loads(cfg)
    check_init_is_not_the_victims(cfg)


def check_files_exist(cfg: RunConfig, config_dir: Optional[Path] = None, data_root_from_file: bool = True) -> None:
    """The victim file and a configured data folder exist (torch-free; ``check_paths``'s first half)."""
    ref = cfg.victim.checkpoint_ref
    if reads_file(cfg.victim.format) and not Path(ref).is_file():
        what = "is a folder, not a checkpoint file" if Path(ref).is_dir() else f"not found {describe_places(ref, config_dir)}"
        raise ConfigError("victim.checkpoint_ref", ref,
                          f"victim checkpoint {what} (train one with `mebench victim train RECIPE`)")
    root = cfg.dataset.data_root
    if root and not cfg.dataset.download and not Path(root).expanduser().is_dir():
        tried = describe_places(root, config_dir if data_root_from_file else None)
        raise ConfigError("dataset.data_root", root, f"data folder not found {tried} "
                          "(or set dataset.download: true / pass --download to fetch the dataset there)")


def check_victim_loads(cfg: RunConfig) -> None:
    """The victim file loads and answers a probe batch (``check_paths``'s second half; imports torch)."""
    from mebench.victims.registry import check_victim

    ref = cfg.victim.checkpoint_ref
    try:
        check_victim(cfg.victim, PROFILES.get(cfg.dataset.name).num_classes)
    except VictimLoadError as e:
        raise ConfigError("victim.checkpoint_ref", ref, e.reason) from None


def check_init_is_not_the_victims(cfg: RunConfig) -> None:
    """Track A must not start at the victim's own weights (§8, §15.2): a substitute of the victim
    recipe's architecture seeded with the recipe's seed is built bit for bit as the victim was,
    and its transfer then measures that, not the query set (issue 44).
    ``substitute.allow_victim_init: true`` says the experiment means it. A victim without ``PATH.json``, or one that records no recipe seed and arch, passes."""
    s = cfg.substitute
    side = Path(cfg.victim.checkpoint_ref).with_suffix(".json")
    if s.allow_victim_init or not reads_file(cfg.victim.format) or not side.is_file():
        return
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError):
        return
    recipe = meta.get("recipe") if isinstance(meta, dict) else None
    if not isinstance(recipe, dict):
        return
    arch, seed = recipe.get("arch", meta.get("arch")), recipe.get("seed")
    if arch == s.arch and isinstance(seed, int) and not isinstance(seed, bool) and seed == s.init_seed:
        raise ConfigError("substitute.init_seed", s.init_seed,
                          f"equals the seed of the victim's recipe for the same architecture ({arch}, seed {seed}, "
                          f"{side.name}): Track A would start at the victim's own initialization; pick another "
                          "init_seed, or set substitute.allow_victim_init: true if the experiment means it (§8)")


# ------------------------------------------------------------------------- validation
_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
ORACLE_PROFILES = ("default", "tempered")


def validate(cfg: RunConfig, check_files: bool = True) -> None:
    """Check every rule; the first broken one raises ``ConfigError``.

    Loads no data; with ``check_files`` the victim checkpoint is read (weights
    only) so a wrong or damaged file fails here, see ``check_paths``.
    """
    for rule in STATIC_RULES + REGISTRY_RULES:
        rule(cfg)
    if check_files:
        check_paths(cfg)


def check_folder_name(key: str, name: str) -> None:
    """A name that becomes one folder or file name under a parent folder (a run's, a victim's): letters,
    digits, '_', '-', '.', and, resolved as a path, exactly one entry inside its parent (so neither
    ``..`` nor ``.`` nor anything that climbs out passes, whatever the pattern allows)."""
    if not name or not _NAME_RE.match(name):
        raise ConfigError(key, name, "must be non-empty and use only letters, digits, '_', '-', '.'")
    parent = Path("/mebench-parent")
    if (parent / name).resolve().parent != parent.resolve() or name in (".", ".."):
        raise ConfigError(key, name, "must name one entry inside its folder (not '.' or '..')")


def _check_run(cfg: RunConfig) -> None:
    r = cfg.run
    check_folder_name("run.name", r.name)
    if not r.seeds:
        raise ConfigError("run.seeds", list(r.seeds), "at least one seed is required (§10: 3 by default)")
    if len(set(r.seeds)) != len(r.seeds) or any(s < 0 for s in r.seeds):
        raise ConfigError("run.seeds", list(r.seeds), "seeds must be distinct non-negative integers")
    check_device("run.device", r.device)


def check_device(key: str, device: str, present: bool = True) -> None:
    """``cpu``, ``cuda`` or ``cuda:N`` (that exists on this machine if ``present``), else a ``ConfigError``."""
    if not _DEVICE_RE.match(device):
        raise ConfigError(key, device, "must be 'cpu', 'cuda' or 'cuda:N'")
    if present and device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(key, device, "CUDA is not available on this machine; use 'cpu'")
        index, count = int(device.partition(":")[2] or 0), torch.cuda.device_count()
        if index >= count:
            raise ConfigError(key, device, f"this machine has {count} CUDA device(s): cuda:0..cuda:{count - 1}")


def _check_budget(cfg: RunConfig) -> None:
    b = cfg.budget
    if b.max_budget <= 0:
        raise ConfigError("budget.max_budget", b.max_budget, "must be a positive number of images (§1.1)")
    cps = list(b.checkpoints)
    if not cps:
        raise ConfigError("budget.checkpoints", cps, "at least one checkpoint is required (§15.2)")
    if any(c <= 0 for c in cps):
        raise ConfigError("budget.checkpoints", cps, "checkpoints must be positive (§15.2)")
    if any(a >= bb for a, bb in zip(cps, cps[1:])):
        raise ConfigError("budget.checkpoints", cps, "checkpoints must be strictly increasing (§15.2)")
    if cps[-1] > b.max_budget:
        raise ConfigError("budget.checkpoints", cps,
                          f"checkpoints must be <= budget.max_budget = {b.max_budget} (§15.2)")


def _check_output_modes(cfg: RunConfig) -> None:
    v, a = cfg.victim, cfg.attack
    for key, mode in (("victim.output_mode", v.output_mode), ("attack.output_mode", a.output_mode)):
        if mode not in OUTPUT_MODES:
            raise ConfigError(key, mode, f"must be one of {', '.join(OUTPUT_MODES)} (§1.2)")
    if v.output_mode != a.output_mode:
        raise ConfigError("attack.output_mode", a.output_mode,
                          f"must equal victim.output_mode = {v.output_mode!r} (§15.2)")
    bad = [m for m in v.output_modes_supported if m not in OUTPUT_MODES]
    if bad:
        raise ConfigError("victim.output_modes_supported", list(v.output_modes_supported),
                          f"unknown output mode {bad[0]!r}; valid: {', '.join(OUTPUT_MODES)}")
    if v.output_mode not in v.output_modes_supported:
        raise ConfigError("victim.output_mode", v.output_mode,
                          f"the victim supports only {list(v.output_modes_supported)} (§4)")


def _check_temperature(cfg: RunConfig) -> None:
    v = cfg.victim
    if v.oracle_profile not in ORACLE_PROFILES:
        raise ConfigError("victim.oracle_profile", v.oracle_profile, f"must be one of {', '.join(ORACLE_PROFILES)}")
    if v.oracle_profile == "default" and v.temperature != 1.0:
        raise ConfigError("victim.temperature", v.temperature,
                          "the default soft_prob oracle requires temperature 1.0; use an explicit "
                          "oracle_profile: tempered for T != 1 (§1.2, §15.2)")
    if not v.temperature > 0:
        raise ConfigError("victim.temperature", v.temperature, "must be > 0")


def _check_attack(cfg: RunConfig) -> None:
    from mebench.attacks import ATTACKS

    a = cfg.attack
    if a.name not in ATTACKS:
        raise ConfigError("attack.name", a.name, unknown_name_message("attack", a.name, ATTACKS.names()))
    if a.label is not None and not LABEL_RE.match(a.label):
        raise ConfigError("attack.label", a.label, "use letters, digits and '_' only, e.g. activethief_kcenter "
                          "(the spelling of grid cell ids, where '-' separates their parts)")
    if a.divergence_restarts < 0:  # its type is checked when the config is parsed (build_dataclass)
        raise ConfigError("attack.divergence_restarts", a.divergence_restarts,
                          "must be an integer >= 0 (0: a diverged training ends the run)")
    cls = ATTACKS.get(a.name)
    if cfg.dataset.data_mode not in DATA_MODES:
        raise ConfigError("dataset.data_mode", cfg.dataset.data_mode, f"must be one of {', '.join(DATA_MODES)} (§3)")
    if cfg.dataset.data_mode not in cls.data_modes:
        raise ConfigError("dataset.data_mode", cfg.dataset.data_mode,
                          f"attack '{a.name}' allows only data modes {sorted(cls.data_modes)} (§6.1, §15.2)")
    if a.output_mode not in cls.output_modes:
        why = f": {cls.output_mode_reason}" if cls.output_mode_reason else ""
        raise ConfigError("attack.output_mode", a.output_mode,
                          f"attack '{a.name}' supports only {sorted(cls.output_modes)}{why} (§6.1)")
    params = attack_params(cfg)
    cls.check_params(params, cfg.budget.max_budget, tuple(cfg.budget.checkpoints))
    cls.check_modes(params, cfg.dataset.data_mode, a.output_mode)
    _check_adaptive(cfg)


def _check_adaptive(cfg: RunConfig) -> None:
    """``attack.adaptive`` names a registered strategy with valid parameters, on a pool attack."""
    from mebench.attacks.adaptive import parse_adaptive

    if parse_adaptive(cfg.attack.adaptive, cfg.attack.output_mode) is not None and cfg.dataset.data_mode == "data_free":
        raise ConfigError("attack.adaptive.strategy", cfg.attack.adaptive.get("strategy"),
                          "adaptive strategies wrap pool attacks (data mode seed or surrogate); a data-free "
                          "attack's queries are its generator's gradient probes, which a strategy would break")


def attack_params(cfg: RunConfig) -> Any:
    """The attack's parsed ``Params`` object, its data-set defaults (``Attack.dataset_defaults``)
    under the config's keys (raises ConfigError on unknown keys or bad types)."""
    from mebench.attacks import ATTACKS

    def build() -> Any:
        cls = ATTACKS.get(cfg.attack.name)
        raw = {**cls.dataset_defaults(cfg.dataset.name), **cfg.attack.params}  # the config's keys win
        return build_params(cls.Params, raw, "attack.params")

    return cfg.typed("attack", ("attack", "dataset"), build)


def _check_dataset(cfg: RunConfig) -> None:

    d = cfg.dataset
    if d.name not in PROFILES or not PROFILES.get(d.name).victim_dataset:
        victims = [n for n in PROFILES.names() if PROFILES.get(n).victim_dataset]
        raise ConfigError("dataset.name", d.name, unknown_name_message("victim dataset", d.name, victims) + " (§2.1)")
    prof = PROFILES.get(d.name)
    need = pool_need(cfg, cfg.budget.max_budget)
    if d.data_mode == "surrogate":
        if d.surrogate_name not in prof.surrogates:
            raise ConfigError("dataset.surrogate_name", d.surrogate_name,
                              f"surrogate for {d.name} must be one of {list(prof.surrogates)} (§3.2)")
        size = pool_size(cfg)
        if size < need:
            raise ConfigError("budget.max_budget", cfg.budget.max_budget,
                              f"the {d.surrogate_name} pool holds {size} images but the attack needs {need} "
                              "distinct images; lower the budget or choose a larger surrogate (§3)")
    elif d.surrogate_name is not None:
        raise ConfigError("dataset.surrogate_name", d.surrogate_name,
                          f"only used in surrogate mode, not in {d.data_mode!r} mode")
    if d.data_mode == "seed":
        if d.seed_size <= 0 or (prof.train_size and d.seed_size > prof.train_size):
            raise ConfigError("dataset.seed_size", d.seed_size, f"must be in 1..{prof.train_size} (§3.1)")
        pool = pool_size(cfg)
        if pool < need:
            raise ConfigError("dataset.seed_pool_size", pool,
                              f"the augmented seed pool must hold at least {need} images for this budget")


def seed_pool_size(cfg: RunConfig) -> int:
    """Size of the augmented seed pool: ``dataset.seed_pool_size`` or 2x the max budget."""
    return cfg.dataset.seed_pool_size or 2 * cfg.budget.max_budget


def pool_size(cfg: RunConfig) -> Optional[int]:
    """Images the attacker's pool holds (§3): the surrogate's training split, the augmented
    seed pool, or ``None`` without a pool (data-free). The one pool-size rule."""
    d = cfg.dataset
    if d.data_mode == "surrogate":
        return PROFILES.get(d.surrogate_name).train_size
    if d.data_mode == "seed":
        return seed_pool_size(cfg)
    return None


def pool_need(cfg: RunConfig, budget: int) -> int:
    """Distinct pool images the attack needs to reach ``budget`` (its ``required_pool_size``)."""
    from mebench.attacks import ATTACKS

    return ATTACKS.get(cfg.attack.name).required_pool_size(attack_params(cfg), budget)


def pool_supplies(cfg: RunConfig, budget: int) -> bool:
    """Whether the pool can supply ``budget`` without repeating an image (always, without a pool)."""
    size = pool_size(cfg)
    return size is None or pool_need(cfg, budget) <= size


def _check_victim(cfg: RunConfig) -> None:
    from mebench.models.registry import MODELS

    v, prof = cfg.victim, PROFILES.get(cfg.dataset.name)
    if not v.inference.eval:
        raise ConfigError("victim.inference.eval", False, "the victim must answer every query in eval() mode (§4.1, §15.2)")
    if not v.inference.no_grad:
        raise ConfigError("victim.inference.no_grad", False, "the victim must answer every query under no_grad (§4.1, §15.2)")
    if tuple(v.input_size) != prof.input_size:
        raise ConfigError("victim.input_size", list(v.input_size), f"must match dataset {prof.name}: {list(prof.input_size)} (§2.1)")
    if v.channels != prof.channels:
        raise ConfigError("victim.channels", v.channels, f"must match dataset {prof.name}: {prof.channels} (§2.1)")
    n = v.normalization
    if len(n.mean) != v.channels or len(n.std) != v.channels:
        raise ConfigError("victim.normalization", {"mean": list(n.mean), "std": list(n.std)},
                          f"mean and std need one value per channel ({v.channels}) (§2.2)")
    if any(s <= 0 for s in n.std):
        raise ConfigError("victim.normalization.std", list(n.std), "every std must be > 0")
    if v.format not in FORMATS:
        raise ConfigError("victim.format", v.format, unknown_name_message("victim format", v.format, FORMATS.names()))
    fmt = FORMATS.get(v.format)
    if v.outputs not in OUTPUTS:
        raise ConfigError("victim.outputs", v.outputs, f"must be one of {', '.join(OUTPUTS)}")
    if v.layout not in LAYOUTS:
        raise ConfigError("victim.layout", v.layout, f"must be one of {', '.join(LAYOUTS)}")
    if v.layout not in fmt.layouts:
        raise ConfigError("victim.layout", v.layout, f"format {v.format} takes {', '.join(sorted(fmt.layouts))} "
                                                     "input only (a callable victim may take NHWC arrays)")
    if fmt.whole_victim and (v.outputs != "logits" or v.normalizes):
        key, value = ("victim.outputs", v.outputs) if v.outputs != "logits" else ("victim.normalizes", True)
        raise ConfigError(key, value, f"a {v.format} checkpoint holds the unnormalized network returning logits; "
                                      "victim.outputs and victim.normalizes describe the other formats")
    if not fmt.whole_victim and v.arch is not None:
        raise ConfigError("victim.arch", v.arch, f"only a mebench checkpoint has an architecture, not format {v.format}")
    if not v.throughput_floor >= 0:
        raise ConfigError("victim.throughput_floor", v.throughput_floor, "must be >= 0 images/s")
    for key, arch in (("substitute.arch", cfg.substitute.arch), ("victim.arch", v.arch)):
        if arch is not None and arch not in MODELS:
            raise ConfigError(key, arch, unknown_name_message("model", arch, MODELS.names()))


def _check_track_a(cfg: RunConfig) -> None:
    prof, t, o = PROFILES.get(cfg.dataset.name), cfg.substitute.trackA, cfg.substitute.optimizer
    if t.batch_size != prof.track_a_batch_size:
        raise ConfigError("substitute.trackA.batch_size", t.batch_size,
                          f"Track A batch size is fixed at {prof.track_a_batch_size} for {prof.name} "
                          "(128 unless the dataset profile overrides it) (§8, §15.2)")
    if t.steps_coeff_c != prof.steps_coeff_c:
        raise ConfigError("substitute.trackA.steps_coeff_c", t.steps_coeff_c,
                          f"Track A steps rule is S(B) = ceil({prof.steps_coeff_c} * B) for {prof.name} (§8, §15.2)")
    if not t.reset_each_checkpoint:
        raise ConfigError("substitute.trackA.reset_each_checkpoint", False,
                          "Track A must re-instantiate model, optimizer and LR scheduler at every checkpoint (§8, §15.2)")
    if o.name not in OPTIMIZER_NAMES:
        raise ConfigError("substitute.optimizer.name", o.name, f"must be one of {', '.join(OPTIMIZER_NAMES)}")
    if not o.lr > 0:
        raise ConfigError("substitute.optimizer.lr", o.lr, "must be > 0")
    if cfg.substitute.loss.soft != "kl":
        raise ConfigError("substitute.loss.soft", cfg.substitute.loss.soft, "Track A uses KL for soft_prob (§8)")
    if cfg.substitute.loss.hard != "ce":
        raise ConfigError("substitute.loss.hard", cfg.substitute.loss.hard, "Track A uses cross-entropy for hard_top1 (§8)")


def _check_cache(cfg: RunConfig) -> None:
    c = cfg.cache
    if c.policy != "temporary":
        raise ConfigError("cache.policy", c.policy, "only 'temporary' caching is allowed: queried images are not kept (§11.2)")
    if not c.delete_on_finish:
        raise ConfigError("cache.delete_on_finish", False, "the temporary query cache must be deleted when the run ends (§11.2)")


def defense_params(cfg: RunConfig) -> Any:
    """The defense's parsed ``Params`` object (raises ConfigError on unknown keys or bad types)."""
    from mebench.defenses import DEFENSES

    return cfg.typed("defense", ("defense",),
                     lambda: build_params(DEFENSES.get(cfg.defense.name).Params, cfg.defense.params, "defense.params"))


def _check_defense(cfg: RunConfig) -> None:
    from mebench.defenses import DEFENSES

    d = cfg.defense
    if d.name not in DEFENSES:
        raise ConfigError("defense.name", d.name, unknown_name_message("defense", d.name, DEFENSES.names()))
    cls = DEFENSES.get(d.name)
    if cfg.attack.output_mode not in cls.output_modes:
        why = cls.modes_reason.format(mode=cfg.attack.output_mode)
        raise ConfigError("defense.name", d.name, f"defense '{d.name}' {why}; it works with {sorted(cls.output_modes)}")
    if d.name == "temperature" and cfg.victim.temperature != 1.0:
        raise ConfigError("defense.name", d.name, "the victim already has a temperature (victim.temperature, "
                          "oracle_profile: tempered): set one of the two")
    if d.label is not None and not LABEL_RE.match(d.label):
        raise ConfigError("defense.label", d.label, "use letters, digits and '_' (it names the defense in reports)")
    cls.check_params(defense_params(cfg), cfg.attack.output_mode)
    cls.check_run(defense_params(cfg), cfg)


def _check_measure(cfg: RunConfig) -> None:
    """``measure.<probe>`` names registered probes; each probe's parameters parse and pass its ``check``."""
    from mebench.probes import PROBES
    from mebench.registry import unknown_name_message

    for name, raw in cfg.measure.items():
        if name not in PROBES:
            raise ConfigError(f"measure.{name}", raw, unknown_name_message("probe", name, PROBES.names()))
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError(f"measure.{name}", raw, "must be a mapping of the probe's parameters")
    from mebench.probes import ProbeScope

    scope = ProbeScope(cfg.dataset.name, cfg.dataset.data_mode, cfg.attack.output_mode)
    for cls in PROBES.values():
        cls.check(configured_probe_params(cfg, cls), scope)


def configured_probe_params(cfg: RunConfig, cls: Any) -> Any:
    """A probe's typed ``Params`` from ``measure.<name>`` (defaults filled in), built once per config."""
    return cfg.typed(f"probe:{cls.name}", ("measure",), lambda: cls.configure(cfg.measure_params(cls.name)))


#: The rules that need no registry and no torch, checked first (``load_config``).
STATIC_RULES = (_check_run, _check_budget, _check_output_modes, _check_temperature)
#: The rules that read the attack, defense and model registries (importing them imports torch).
REGISTRY_RULES = (_check_attack, _check_dataset, _check_victim, _check_track_a, _check_cache, _check_defense,
                  _check_measure)
