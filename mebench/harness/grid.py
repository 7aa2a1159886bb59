"""Benchmark configs -> grid of cells (one test per cell).

:func:`load_grid` expands a *benchmark config* (``configs/benchmarks/*.yaml``) into :class:`Cell`
objects, one per victim × attack variant × data mode × output mode × seed, each holding a validated
``RunConfig`` (contract §15.2) for a single seed. What is not generated, and why, is data, never a
special case (contract §6.1, §3.2); each omission becomes a note that pytest prints after
collection. See docs/guide/grid.md.
"""
# A *benchmark config* (``configs/benchmarks/*.yaml``) declares one victim dataset,
# one or more victims (``victims``: e.g. one per architecture, so that cells where
# the substitute's architecture differs from the victim's are in the grid), one
# substitute, budgets, seeds, dataset settings per data mode and the attacks
# (optionally several labelled variants of one attack, e.g. ActiveThief
# strategies). :func:`load_grid` expands it into :class:`Cell` objects, one per
# victim × attack variant × data mode × output mode × seed, each holding a
# validated ``RunConfig`` (contract §15.2) for a single seed.
#
# What is *not* generated, and why, is data, never a special case: a data mode
# outside the attack's ``data_modes`` (contract §6.1), an output mode outside its
# ``output_modes``, or a data mode without settings. Checkpoints larger than the
# attacker's pool can supply without repeating an image are dropped per cell
# (§3.2: a surrogate set holds a fixed number of images). Each omission becomes
# a note that pytest prints after collection.

from __future__ import annotations

import dataclasses
import importlib
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import yaml

from mebench.errors import GridError, UntrainedVictims  # noqa: F401  (defined torch-free there; re-exported)
from mebench.support.naming import LABEL_RE, cell_condition

if TYPE_CHECKING:
    from mebench.config import RunConfig
    from mebench.run.plan import RunPlan

CONTRACT_BUDGETS = (1000, 10000, 100000, 1000000)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*(-[A-Za-z0-9_.]+)*$")


@dataclass(frozen=True)
class VariantSpec:
    """One configuration of an attack; ``label`` names it in ids and reports."""

    label: Optional[str] = None
    params: dict = field(default_factory=dict)
    #: ``{strategy: ..., ...}``: the run config's ``attack.adaptive`` (``mebench.attacks.adaptive``);
    #: the cell id shows the strategy after the label (``random.argmax``)
    adaptive: dict = field(default_factory=dict)


@dataclass(frozen=True)
class AttackSpec:
    """An attack in the grid. ``name: "*"`` stands for every registered attack not listed."""

    name: str
    data_modes: Optional[tuple[str, ...]] = None
    output_modes: Optional[tuple[str, ...]] = None
    params: dict = field(default_factory=dict)
    variants: tuple[VariantSpec, ...] = ()
    divergence_restarts: Optional[int] = None


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark config file (``configs/benchmarks/mnist.yaml`` shows every key).

    - ``name``: first part of every cell id (``<name>-<label>-<data mode>-<output mode>-s<seed>``);
    - ``victim``, ``dataset``, ``substitute``, ``cache``, ``run``: sections of a run config
      (§15.1), shared by every cell; relative paths are relative to the pytest rootdir;
    - ``data_modes``: dataset settings per data mode (``surrogate: {surrogate_name: ...}``);
      a data mode absent here is not in the grid;
    - ``attacks``: ``name``, optional ``data_modes`` / ``output_modes`` (default: what the
      attack declares), ``params``, ``variants`` (each ``{label, params, adaptive}``; ``adaptive`` is the run config's ``attack.adaptive``) and
      ``divergence_restarts`` (the run config's ``attack.divergence_restarts``; default 2);
    - ``seeds``, ``budgets`` (contract checkpoints by default), ``output_modes``;
    - ``smoke_max_budget``: cells whose largest budget is at most this are marked ``smoke``,
      the others ``full``;
    - ``register``: ``"package.module:function"`` callables run (in every process, xdist
      workers included) before the grid is built, to register datasets, models or attacks;
    - ``defenses``: the defense axis, each ``{name, params, label}`` (default: ``none`` only);
      a defended cell's id names the defense after the attack label.
    - ``measure``: the run config's ``measure`` section for every cell (e.g. ``transfer: {methods: [fgsm, pgd]}``);
      ``metrics`` is its deprecated spelling (``mebench.config.LEGACY_METRICS``).
    """

    name: str
    victim: dict
    dataset: dict
    substitute: dict
    attacks: tuple[AttackSpec, ...]
    data_modes: dict = field(default_factory=lambda: {"seed": {}, "data_free": {}})
    seeds: tuple[int, ...] = (0, 1, 2)
    budgets: tuple[int, ...] = CONTRACT_BUDGETS
    output_modes: tuple[str, ...] = ("soft_prob", "hard_top1")
    smoke_max_budget: int = 1000
    run: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)
    register: tuple[str, ...] = ()
    victims: tuple[dict, ...] = ()
    defenses: tuple[dict, ...] = ({"name": "none"},)
    measure: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    def victim_entries(self) -> list[tuple[Optional[str], dict]]:
        """``(key, victim section)`` per victim of the grid; key ``None`` for a single-victim grid."""
        if not self.victims:
            return [(None, dict(self.victim))]
        return [(str(v["key"]), {**self.victim, **{k: x for k, x in v.items() if k != "key"}})
                for v in self.victims]


@dataclass(frozen=True)
class Cell:
    """One test of the grid: one attack variant, data mode, output mode and seed."""

    id: str
    attack: str
    label: str
    data_mode: str
    output_mode: str
    seed: int
    cfg: "RunConfig"
    marker: str
    dropped_budgets: tuple[int, ...] = ()
    defense: str = "none"

    @property
    def condition(self) -> str:
        """The cell's id without its seed: the seed cells of one condition share it (``--seeds-together``)."""
        return cell_condition(self.id)

    @property
    def victim_key(self) -> str:
        """What the shared victim preparation depends on (victim, dataset, data mode, output mode)."""
        d = self.cfg.dataset
        return "|".join((self.cfg.victim.victim_id, d.name, d.data_mode, d.surrogate_name or "-", self.output_mode))

    @cached_property
    def plan(self) -> "RunPlan":
        """The cell's resolved plan (``mebench.run.plan``): what it runs, every default filled in."""
        from mebench.run.plan import resolve

        return resolve(self.cfg, self.seed)


@dataclass
class Grid:
    """The cells of a benchmark config and notes on what was left out and why."""

    spec: BenchmarkSpec
    path: Path
    cells: list[Cell]
    notes: list[str]
    default_device: str
    #: each defense entry's typed parameters (by position in ``defenses``), built once for the grid and
    #: handed to its cells' configs (``RunConfig.typed``)
    defense_params: dict = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"mebench grid '{self.spec.name}' from {self.path}: {len(self.cells)} cells"


@dataclass
class GridSet:
    """Several benchmark configs run as one grid (e.g. one per victim dataset), and a line for each
    config left out because none of its victims is trained."""

    grids: list[Grid]
    left_out: list[str] = dataclasses.field(default_factory=list)

    @property
    def cells(self) -> list[Cell]:
        return [c for g in self.grids for c in g.cells]

    @property
    def default_device(self) -> str:
        return self.grids[0].default_device

    def describe(self) -> list[str]:
        """A header line per config followed by its notes (printed after collection)."""
        return [*(f"mebench grid left out: {line}" for line in self.left_out),
                *(line for g in self.grids for line in [g.title, *(f"  {n}" for n in g.notes)])]


#: What ``--transfer`` adds to every cell's ``measure`` (``mebench run --transfer`` adds the same).
TRANSFER_MEASURE: dict[str, Any] = {"transfer": {"methods": ["fgsm", "pgd", "cw"]}}


def load_grids(paths: Sequence[Path], rootdir: Path, seeds: Optional[Sequence[int]] = None,
               budgets: Optional[Sequence[int]] = None, smoke_only: bool = False, transfer: bool = False,
               leave_out_untrained: bool = False) -> GridSet:
    """:func:`load_grid` for every config; cell ids must be distinct across them.

    ``leave_out_untrained`` (the default set of configs, none named): a config none of whose victims
    is trained is left out with one line naming the recipes to train, instead of failing the session;
    at least one config must remain. ``transfer`` measures transferability on every cell."""
    grids, left_out = [], []
    for p in paths:
        try:
            grids.append(load_grid(p, rootdir, seeds, budgets, smoke_only, transfer))
        except UntrainedVictims as e:
            if not leave_out_untrained:
                raise
            left_out.append(str(e))
    if not grids:
        raise GridError("no grid has a trained victim: " + "; ".join(left_out))
    grids = GridSet(grids, left_out)
    dup = _duplicate_ids(grids.cells)
    if dup:
        raise GridError(f"duplicate cell ids across {[str(p) for p in paths]}: {dup}: give each config its own name")
    return grids


def _duplicate_ids(cells: Sequence[Cell]) -> list[str]:
    """Cell ids that occur more than once, sorted (ids must name one cell each)."""
    return sorted(i for i, n in Counter(c.id for c in cells).items() if n > 1)


def load_grid(path: Path, rootdir: Path, seeds: Optional[Sequence[int]] = None,
              budgets: Optional[Sequence[int]] = None, smoke_only: bool = False, transfer: bool = False) -> Grid:
    """Parse, expand and validate a benchmark config; every cell's run config passes §15.2.

    ``smoke_only`` (``-m smoke`` without ``--budgets``) keeps the config's budgets up to
    ``smoke_max_budget``, so the smoke selection is never empty. ``transfer`` adds
    :data:`TRANSFER_MEASURE` to the config's ``measure`` (a config that sets its own methods keeps them).
    """
    from mebench.config import build_dataclass
    from mebench.errors import ConfigError

    if not path.is_file():
        raise GridError(f"benchmark config {path} not found (option --mebench-config)")
    try:
        raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, dict):
            raise GridError(f"{path}: a benchmark config is a mapping of keys (name, victim, attacks, ...)")
        spec = build_dataclass(BenchmarkSpec, raw, "")
        spec = dataclasses.replace(spec, victims=expand_zoos(spec.victims, rootdir))
        if transfer:
            spec = dataclasses.replace(spec, measure={**TRANSFER_MEASURE, **(spec.measure or {})})
        _check_spec(spec)
        for entry in spec.register:
            _call_registration(entry)
        grid = Grid(spec, path, [], [], str(spec.run.get("device", "cpu")))
        for attack in _expand_star(spec.attacks):
            _add_attack_cells(grid, attack, rootdir, tuple(seeds or spec.seeds), _budgets(spec, budgets, smoke_only))
    except (ConfigError, yaml.YAMLError) as e:
        raise GridError(f"{path}: {e}") from None
    from mebench.harness.grid_inputs import check_inputs

    try:
        _check_name_selects_nothing(grid)
    except ConfigError as e:
        raise GridError(f"{path}: {e}") from None
    check_inputs(grid)
    dup = _duplicate_ids(grid.cells)
    if dup:
        raise GridError(f"{path}: duplicate cell ids {dup}: give each attack variant its own label")
    return grid


def expand_zoos(victims: Sequence[Any], rootdir: Path) -> tuple[Any, ...]:
    """``{zoo: NAME}`` entries of a grid's ``victims`` become one victim per recipe of that zoo
    (``configs/victims/*.yaml`` under the rootdir with ``zoo: NAME``): key and victim_id are the
    recipe name, the checkpoint ``victims/<name>.pt``; other keys of the entry apply to each."""
    from mebench.errors import ConfigError
    from mebench.victims.recipes import RECIPES_DIR, zoo_recipes

    out: list[Any] = []
    for i, v in enumerate(victims):
        if not (isinstance(v, dict) and "zoo" in v):
            out.append(v)
            continue
        if "key" in v or "victim_id" in v or "checkpoint_ref" in v:
            raise ConfigError(f"victims[{i}]", v, "a zoo entry names its victims itself (no key, victim_id "
                                                  "or checkpoint_ref)")
        rest = {k: x for k, x in v.items() if k != "zoo"}
        for _, recipe in zoo_recipes(rootdir / RECIPES_DIR, str(v["zoo"])):
            out.append({"key": recipe.name, "victim_id": recipe.name, "checkpoint_ref": f"victims/{recipe.name}.pt",
                        "zoo": str(v["zoo"]), **rest})
    return tuple(out)


def _check_name_selects_nothing(grid: Grid) -> None:
    """A grid's name begins every cell id, and ``-k`` matches substrings of ids: a name holding an
    attack, defense, data mode, output mode or seed of its cells (``mnistprada``) would put every cell
    under ``-k prada``. Such a name is refused, in one line, before any cell runs."""
    from mebench.errors import ConfigError

    name = grid.spec.name.lower()
    seed = re.search(r"s\d", name)
    if seed:
        raise ConfigError("name", grid.spec.name, f"contains '{seed.group()}', which reads as a seed: "
                                                  f"-k {seed.group()} would select every cell of this grid")
    for c in grid.cells:
        for kind, token in (("attack", c.attack), ("attack label", c.label), ("defense", c.defense),
                            ("defense label", str(c.cfg.defense.label or "")), ("data mode", c.data_mode),
                            ("output mode", c.output_mode)):
            if token and token != "none" and token.lower() in name:
                raise ConfigError("name", grid.spec.name, f"contains '{token}', the {kind} of cell {c.id}: "
                                                          f"-k {token} would select every cell of this grid")


def _budgets(spec: BenchmarkSpec, budgets: Optional[Sequence[int]], smoke_only: bool) -> tuple[int, ...]:
    if budgets:
        return tuple(budgets)
    if smoke_only:
        return tuple(b for b in spec.budgets if b <= spec.smoke_max_budget) or (spec.smoke_max_budget,)
    return tuple(spec.budgets)


def _check_spec(spec: BenchmarkSpec) -> None:
    from mebench.errors import ConfigError
    from mebench.types import DATA_MODES, OUTPUT_MODES

    if not _NAME_RE.match(spec.name):
        raise ConfigError("name", spec.name, "use letters, digits, '_', '.' and single '-' (it starts every cell id)")
    for mode in spec.data_modes:
        if mode not in DATA_MODES:
            raise ConfigError(f"data_modes.{mode}", spec.data_modes[mode], f"data modes are {', '.join(DATA_MODES)} (§3)")
    for mode in spec.output_modes:
        if mode not in OUTPUT_MODES:
            raise ConfigError("output_modes", list(spec.output_modes), f"output modes are {', '.join(OUTPUT_MODES)} (§1.2)")
    if not spec.attacks:
        raise ConfigError("attacks", [], "list at least one attack")
    keys = []
    for i, v in enumerate(spec.victims):
        if not isinstance(v, dict) or not isinstance(v.get("key"), str) or not LABEL_RE.match(v["key"]):
            raise ConfigError(f"victims[{i}].key", v.get("key") if isinstance(v, dict) else v,
                              "each victim needs a key of letters, digits and '_' (it names the victim in cell ids)")
        keys.append(v["key"])
    if len(set(keys)) != len(keys):
        raise ConfigError("victims", keys, "victim keys must be distinct")
    labels = []
    for i, d in enumerate(spec.defenses):
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or set(d) - {"name", "params", "label"}:
            raise ConfigError(f"defenses[{i}]", d, "each defense is {name, params, label} (params and label optional)")
        label = str(d.get("label") or d["name"])
        if not LABEL_RE.match(label):
            raise ConfigError(f"defenses[{i}].label", label, "use letters, digits and '_' (it names the defense in ids)")
        labels.append(label)
    if len(set(labels)) != len(labels):
        raise ConfigError("defenses", labels, "defense labels must be distinct (give repeated defenses a label)")


def _call_registration(entry: str) -> None:
    """Run a ``"module:function"`` registration callable (datasets, models or attacks of a plugin)."""
    from mebench.errors import ConfigError

    module, _, func = entry.partition(":")
    try:
        target = getattr(importlib.import_module(module), func) if func else None
    except (ImportError, AttributeError) as e:
        raise ConfigError("register", entry, f"cannot load it ({e}); use 'package.module:function'") from None
    if target is None:
        raise ConfigError("register", entry, "name a callable: 'package.module:function'")
    target()


def _expand_star(attacks: Sequence[AttackSpec]) -> list[AttackSpec]:
    from mebench.attacks import ATTACKS

    listed = {a.name for a in attacks}
    out: list[AttackSpec] = []
    for a in attacks:
        if a.name == "*":
            out += [dataclasses.replace(a, name=n) for n in ATTACKS.names() if n not in listed]
        else:
            out.append(a)
    return out


def _add_attack_cells(grid: Grid, attack: AttackSpec, rootdir: Path, seeds: tuple[int, ...],
                      budgets: tuple[int, ...]) -> None:
    from mebench.attacks import ATTACKS
    from mebench.errors import ConfigError
    from mebench.registry import unknown_name_message

    if attack.name not in ATTACKS:
        raise ConfigError("attacks.name", attack.name, unknown_name_message("attack", attack.name, ATTACKS.names()))
    cls = ATTACKS.get(attack.name)
    modes = _data_modes(grid, attack, cls)
    outs = [m for m in (attack.output_modes or grid.spec.output_modes) if m in cls.output_modes]
    for m in sorted(set(attack.output_modes or grid.spec.output_modes) - set(cls.output_modes)):
        grid.notes.append(f"left out {attack.name} x {m}: the attack supports only {sorted(cls.output_modes)}"
                          + (f" ({cls.output_mode_reason})" if cls.output_mode_reason else "") + " (§6.1)")
    for variant in attack.variants or (VariantSpec(),):
        label = variant.label or attack.name
        if not LABEL_RE.match(label):
            raise ConfigError("attacks.variants.label", label, "use letters, digits and '_' only (no '-')")
        params = {**attack.params, **variant.params}
        for vkey, victim in grid.spec.victim_entries():
            for defense in grid.spec.defenses:
                for data_mode in modes:
                    for output_mode in outs:
                        if not _defense_suits(grid, defense, output_mode):
                            continue
                        for seed in seeds:
                            cell = _make_cell(grid, attack.name, label, params, data_mode, output_mode, seed,
                                              budgets, rootdir, vkey, victim, defense, attack.divergence_restarts,
                                              variant.adaptive)
                            if cell is not None:
                                grid.cells.append(cell)


def _defense_suits(grid: Grid, defense: dict, output_mode: str) -> bool:
    """Whether a defense makes sense with an output mode; if not, a note says it is left out."""
    from mebench.defenses import DEFENSES
    from mebench.errors import ConfigError
    from mebench.registry import unknown_name_message

    name = defense.get("name")
    if name not in DEFENSES:
        raise ConfigError("defenses.name", name, unknown_name_message("defense", str(name), DEFENSES.names()))
    cls = DEFENSES.get(name)
    from mebench.config import build_params

    try:  # through the config's schema, as the cell's own resolution does (types, ranges, limits)
        if id(defense) not in grid.defense_params:
            grid.defense_params[id(defense)] = build_params(cls.Params, defense.get("params") or {}, "defense.params")
        modes = cls.modes(grid.defense_params[id(defense)])
    except ConfigError:  # a bad key or value: the cell's validation names it
        modes = cls.output_modes
    if output_mode in modes:
        return True
    shown = defense.get("label") or name
    note = f"left out defense {shown} x {output_mode}: it works with {sorted(modes)}"
    if note not in grid.notes:
        grid.notes.append(note)
    return False


def _data_modes(grid: Grid, attack: AttackSpec, cls: Any) -> list[str]:
    wanted = list(attack.data_modes or sorted(cls.data_modes))
    kept = []
    for mode in wanted:
        if mode not in cls.data_modes:
            grid.notes.append(f"left out {attack.name} x {mode}: the attack allows only data modes "
                              f"{sorted(cls.data_modes)} (§6.1)")
        elif mode not in grid.spec.data_modes:
            grid.notes.append(f"left out {attack.name} x {mode}: no settings for it under data_modes")
        else:
            kept.append(mode)
    return kept


def _make_cell(grid: Grid, attack: str, label: str, params: dict, data_mode: str, output_mode: str,
               seed: int, budgets: tuple[int, ...], rootdir: Path, vkey: Optional[str],
               victim: dict, defense: Optional[dict] = None, restarts: Optional[int] = None,
               adaptive: Optional[dict] = None) -> Optional[Cell]:
    from mebench.config import parse_config
    from mebench.config.validation import validate

    prefix = grid.spec.name if vkey is None else f"{grid.spec.name}-{vkey}"
    defense = defense or {"name": "none"}
    dlabel = str(defense.get("label") or defense["name"])
    shown = "" if defense["name"] == "none" else f"-{dlabel}"
    strategy = (adaptive or {}).get("strategy")
    adapt = "" if strategy in (None, "naive") else f".{strategy}"
    cell_id = f"{prefix}-{label}{adapt}{shown}-{data_mode}-{output_mode}-s{seed}"
    raw = _run_config_dict(grid.spec, victim, cell_id, attack, label, params, data_mode, output_mode, seed, budgets)
    if adapt:
        raw["attack"]["adaptive"] = dict(adaptive or {})
    raw["defense"] = {"name": defense["name"], "params": dict(defense.get("params") or {})}
    if restarts is not None:
        raw["attack"]["divergence_restarts"] = restarts
    if defense.get("label"):
        raw["defense"]["label"] = str(defense["label"])
    ref = raw["victim"].get("checkpoint_ref")
    if raw["victim"].get("format") == "callable":
        ref = None  # "package.module:function", not a file
    if isinstance(ref, str) and ref and not Path(ref).is_absolute():
        raw["victim"]["checkpoint_ref"] = ref = str(rootdir / ref)  # benchmark paths are relative to the rootdir
    if isinstance(ref, str) and ref and not Path(ref).is_file():
        note = (f"left out victim {raw['victim'].get('victim_id')}: checkpoint {ref} not found "
                f"(train it with `mebench victim train {_recipe_for(raw['victim'].get('victim_id'), rootdir)}`)")
        if note not in grid.notes:
            grid.notes.append(note)
        return None
    cfg = parse_config(raw)
    if id(defense) in grid.defense_params:  # built when the grid checked the defense's output modes
        cfg.typed("defense", ("defense",), lambda: grid.defense_params[id(defense)])
    kept = _feasible_budgets(cfg, budgets)
    dropped = tuple(b for b in budgets if b not in kept)
    if not kept:
        grid.notes.append(f"left out {cell_id}: the {data_mode} pool is smaller than every budget {list(budgets)}")
        return None
    if dropped:
        cfg = cfg.replace(budget=dataclasses.replace(cfg.budget, max_budget=max(kept), checkpoints=kept))
        note = (f"{label} x {data_mode} stops at B={max(kept)}: its pool cannot supply "
                f"{min(dropped)} distinct images (§3.2)")
        if note not in grid.notes:
            grid.notes.append(note)
    validate(cfg, check_files=True)
    marker = "smoke" if cfg.budget.max_budget <= grid.spec.smoke_max_budget else "full"
    return Cell(cell_id, attack, label + adapt, data_mode, output_mode, seed, cfg, marker, dropped, defense["name"])


def _recipe_for(victim_id: Optional[str], rootdir: Path) -> str:
    """The recipe that trains ``victim_id`` (``configs/victims/<victim_id>.yaml`` where it exists)."""
    from mebench.victims.recipes import RECIPES_DIR

    recipe = rootdir / RECIPES_DIR / f"{victim_id}.yaml"
    return str(recipe.relative_to(rootdir)) if victim_id and recipe.is_file() else f"{RECIPES_DIR}/<recipe>.yaml"


def _run_config_dict(spec: BenchmarkSpec, victim: dict, cell_id: str, attack: str, label: str, params: dict,
                     data_mode: str, output_mode: str, seed: int, budgets: tuple[int, ...]) -> dict[str, Any]:
    """A run config (§15.1) for one cell: the shared sections plus the cell's choices."""
    return {"run": {**spec.run, "name": cell_id, "seeds": [seed]},
            "victim": dict(victim, output_mode=output_mode),
            "dataset": {**spec.dataset, **(spec.data_modes[data_mode] or {}), "data_mode": data_mode},
            "substitute": spec.substitute,
            "attack": {"name": attack, "output_mode": output_mode, "params": params,
                       **({"label": label} if label != attack else {})},
            "budget": {"max_budget": max(budgets), "checkpoints": list(budgets)}, "cache": spec.cache,
            "measure": spec.measure, **({"metrics": spec.metrics} if spec.metrics else {})}


def _feasible_budgets(cfg: "RunConfig", budgets: tuple[int, ...]) -> tuple[int, ...]:
    """Checkpoints whose budget the attacker's pool can supply without repeating an image."""
    from mebench.config.validation import pool_supplies

    return tuple(b for b in budgets if pool_supplies(cfg, b))
