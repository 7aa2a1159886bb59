"""The attack plugin interface (contract §14.2) and the attack registry.

The engine owns the loop, the oracle and the query store; an attack only decides *which* images
to send next (``propose``) and learns from the answers (``observe``). Capabilities are data:
``data_modes``, ``output_modes`` and the flags below are read by the config validator and by the
benchmark grid, never by ``isinstance``. See docs/extending/attack.md.
"""
# The loop the engine runs around an attack:
#
#     k = min(attack.next_batch_size(state), images left before the next checkpoint)
#     batch = attack.propose(k, state)        # exactly k images in [0, 1]
#     output = oracle.query(batch.x)          # counted: 1 image = 1 query
#     attack.observe(batch, output, state)
#     at every checkpoint B: model = attack.track_b_model(state)   # Track B (§8)

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional

import torch
from torch import nn

from mebench.errors import ConfigError, DivergenceError
from mebench.registry import Registry
from mebench.support.seeding import derive_seed
from mebench.training.loop import OptimizerSpec, train_epochs
from mebench.training.losses import loss_for
from mebench.types import OUTPUT_MODES, OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.data.pools import Pool
    from mebench.data.profiles import DatasetProfile
    from mebench.state import EngineState


@dataclass(frozen=True)
class AttackContext:
    """Everything an attack may use, handed over once at construction.

    - ``pool``: the attacker's image pool for ``seed``/``surrogate`` modes
      (``None`` for ``data_free``); images are uint8, read with ``pool.get``.
    - ``generator``: a CPU ``torch.Generator`` seeded from the run seed; use it
      (or ``torch`` global RNG, which the engine also seeds) for every random
      choice so a run is reproducible.
    - ``make_substitute``: builds a fresh substitute of the configured
      architecture on ``device``. It takes pixel-space ``[0, 1]`` input (the
      victim's normalization is inside the model) and returns logits.
    - ``params``: the attack's validated parameter object (its ``Params`` class).
    - ``data_mode`` and ``seed_size``: the run's data mode and ``dataset.seed_size``; in
      ``seed`` mode the pool's first ``seed_size`` images are the seed images themselves
      (the rest are their augmented copies).
    - ``divergence_restarts`` (``attack.divergence_restarts``): how often ``train_fresh`` trains a
      diverged model again; ``restarts`` is its record of each restart (the engine copies it
      into ``summary.json``).
    """

    profile: "DatasetProfile"
    output_mode: str
    num_classes: int
    input_shape: tuple[int, int, int]
    device: torch.device
    seed: int
    generator: torch.Generator
    pool: Optional["Pool"]
    params: Any
    checkpoints: tuple[int, ...]
    max_budget: int
    make_substitute: Callable[[], nn.Module]
    data_mode: str = "surrogate"
    seed_size: int = 100
    divergence_restarts: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class NoParams:
    """Parameter object of an attack that takes no parameters."""


@dataclass(frozen=True)
class TrainingCost:
    """What an attack's own training processes, for the grid's rough cost estimate only.

    ``substitute_examples``: examples passed forward and backward through the substitute
    architecture (epochs x set size, summed over every model the attack trains);
    ``gan_examples``: examples through one generator-and-discriminator step, in units of a
    width-32 DCGAN pair (scale by (width / 32)^2 for wider ones);
    ``forward_examples``: examples passed forward only (no gradient) through that model, e.g.
    the zeroth-order gradient probes of DFME and MAZE;
    ``generator_examples``: examples forward and backward through a DFME-style generator, in units
    of one of ``nz`` 256 and width 64 (scale by (width / 64)^2); a forward alone counts 1/3;
    ``model_arch``: the architecture the attack trains when it is not the substitute's (MAZE's clone).
    """

    substitute_examples: int = 0
    gan_examples: float = 0.0
    forward_examples: float = 0.0
    generator_examples: float = 0.0
    model_arch: Optional[str] = None


class Attack(ABC):
    """Base class of every attack plugin.

    Subclasses set the class attributes and implement ``propose``. Parameters
    come from ``attack.params`` in the config and are parsed into ``Params`` (a
    frozen dataclass) with unknown keys rejected; ``check_params`` adds value
    rules. Both run during config validation, before any work starts.
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    data_modes: ClassVar[frozenset[str]] = frozenset()
    output_modes: ClassVar[frozenset[str]] = frozenset(OUTPUT_MODES)
    #: Why output modes are restricted (shown in the validation error and metadata).
    output_mode_reason: ClassVar[str] = ""
    #: Queries depend on the attacker's model state: Track A carries the §9 disclaimer.
    state_dependent_queries: ClassVar[bool] = False
    #: The attack trains its own substitute, so Track B can be reported.
    has_track_b: ClassVar[bool] = False
    #: Data modes for which this attack is a *null control*: a method-free baseline that
    #: every attack of that data mode is reported against (gain over control, paired by seed).
    null_control_for: ClassVar[frozenset[str]] = frozenset()
    Params: ClassVar[type] = NoParams
    #: ``attack.params`` that make one run take seconds on tiny data (1x8x8 images, 4 classes, a
    #: budget of a few hundred, one-epoch trainings): the registry-driven contract tests
    #: (``contract_tests/test_attack_registry.py``) run every registered attack with them, so a new
    #: attack is tested the day it is registered. ``None`` (not declared) fails those tests.
    smoke_params: ClassVar[Optional[Mapping[str, Any]]] = None

    def __init__(self, ctx: AttackContext) -> None:
        # validation refuses the mode first; this keeps an attack built by hand (a test, a
        # notebook) from ever seeing an output it does not allow, e.g. probabilities for DFMS-HL
        if ctx.output_mode not in self.output_modes:
            raise ConfigError("attack.output_mode", ctx.output_mode,
                              self.output_mode_reason or f"{self.name} allows {sorted(self.output_modes)}")
        self.ctx = ctx
        self.params = ctx.params

    # -- capabilities read before any work -------------------------------------------
    @classmethod
    def dataset_defaults(cls, dataset: str) -> Mapping[str, Any]:
        """Parameter defaults that depend on the victim's data set (``dataset.name``), for attacks
        whose authors ran each data set with its own command; keys the config sets win, and the
        parsed ``Params`` hold the resolved values, so records show what ran. Default: none."""
        return {}

    @classmethod
    def check_params(cls, params: Any, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        """Raise ``ConfigError`` when parameter values break a rule of the attack."""

    @classmethod
    def check_modes(cls, params: Any, data_mode: str, output_mode: str) -> None:
        """Raise ``ConfigError`` when parameter values do not fit the run's data or output mode."""

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        """Images the pool must hold for the largest budget (0: no pool needed)."""
        return max_budget

    @classmethod
    def training_cost(cls, params: Any, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Training outside the query loop (Track B models, round models, GAN pretraining).

        Only sizes ``mebench.harness.cost``'s estimate; the per-query cost already covers work done
        per query (DFME's and MAZE's loops, selection). Default: none.
        """
        return TrainingCost()

    @classmethod
    def queries_depend_on_state(cls, params: Any) -> bool:
        """Whether this configuration's queries depend on the attacker's state (§9 disclaimer).

        The class flag by default; an attack whose variants differ overrides it (Knockoff's random
        strategy picks its pool images up front, its adaptive bandit follows the answers).
        """
        return cls.state_dependent_queries

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Capabilities as recorded in run metadata (§6.1)."""
        return {
            "name": cls.name,
            "paper": cls.paper,
            "data_modes": sorted(cls.data_modes),
            "output_modes": sorted(cls.output_modes),
            "output_mode_restriction": cls.output_mode_reason or None,
            "state_dependent_queries": cls.state_dependent_queries,
            "has_track_b": cls.has_track_b,
            "null_control_for": sorted(cls.null_control_for),
        }

    # -- the loop ---------------------------------------------------------------------
    def next_batch_size(self, state: "EngineState") -> int:
        """How many images the attack would like to propose next (engine clips it)."""
        return 1024

    @abstractmethod
    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        """Return exactly ``k`` images in ``[0, 1]`` (contract §14.2)."""

    def keep(self, batch: QueryBatch, output: OracleOutput) -> OracleOutput:
        """What the attacker keeps of the oracle's answer (stored for Track A, then observed): the
        answer itself; an adaptive strategy (``mebench.attacks.adaptive``) keeps e.g. its top-1."""
        return output

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        """Learn from the oracle's answer to ``batch`` (optional)."""

    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The attack's own substitute at the current checkpoint, or ``None``.

        Called once at every checkpoint, after the checkpoint's last ``observe``.
        Must not query the oracle or look at the test split.
        """
        return None

    def run_stats(self) -> dict[str, int]:
        """Counts of the attack's own work that its parameters do not fix (e.g. a selecting attack's
        rounds), written to ``summary.json`` as ``attack_stats`` so a cost estimate can be checked
        against what ran. Default: none."""
        return {}


def fresh_substitute(ctx: AttackContext, tag: str) -> nn.Module:
    """A new substitute on ``ctx.device``, initialised from ``(run seed, tag)``, leaving the global
    RNG stream as it was."""
    dev = ctx.device
    with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
        torch.manual_seed(derive_seed(ctx.seed, tag))
        return ctx.make_substitute().to(dev)


def train_fresh(ctx: AttackContext, x: torch.Tensor, y: torch.Tensor, tag: str, *, epochs: int, lr: float,
                momentum: float, weight_decay: float, batch_size: int, lr_step: Optional[int] = None,
                lr_gamma: float = 0.1, loss_fn: Optional[Callable] = None, cosine: bool = False,
                transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, min_batch: int = 1) -> nn.Module:
    """A fresh substitute trained on ``(x, y)`` the way most attacks' reference code does it: SGD
    epochs over random permutations, a step learning-rate decay (or ``cosine`` annealing), the
    output mode's loss (KL for probabilities, whose gradient is the soft cross-entropy's;
    cross-entropy for labels). Initialisation and batch order are seeded from
    ``(run seed, tag)``; ``loss_fn`` replaces the output mode's loss (e.g. KL to soft
    pseudo-labels in a hard-label attack); ``transform`` and ``min_batch`` as in ``train_epochs``.

    A training whose loss becomes NaN or infinite is started again, at the same hyperparameters,
    from the initialisation and batch order of ``(run seed, tag + "-restart<k>")``, at most
    ``ctx.divergence_restarts`` times; each restart is appended to ``ctx.restarts``. The last
    ``DivergenceError`` is raised when every attempt diverged. A training that never diverges is
    the same with or without restarts."""
    opt = OptimizerSpec(name="sgd", lr=lr, momentum=momentum, weight_decay=weight_decay)
    x, y = x.to(ctx.device), y.to(ctx.device)
    attempt = 0
    while True:
        name = tag if attempt == 0 else f"{tag}-restart{attempt}"
        try:
            return train_epochs(fresh_substitute(ctx, name), x, y, loss_fn=loss_fn or loss_for(ctx.output_mode),
                                epochs=epochs, batch_size=batch_size, optimizer=opt,
                                generator=torch.Generator().manual_seed(derive_seed(ctx.seed, name + "-order")),
                                lr_step=lr_step, lr_gamma=lr_gamma, cosine=cosine, transform=transform,
                                min_batch=min_batch)
        except DivergenceError as e:
            if attempt >= ctx.divergence_restarts:
                if attempt == 0:
                    raise
                raise DivergenceError(f"{tag}: {e}, on the first training and on each of its {attempt} "
                                      "restart(s) (attack.divergence_restarts)") from e
            attempt += 1
            ctx.restarts.append({"model": tag, "examples": int(x.shape[0]), "restart": attempt,
                                 "of": ctx.divergence_restarts, "error": str(e)})


ATTACKS: Registry[type[Attack]] = Registry("attack", "mebench.attacks")


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Class decorator: register an attack under ``cls.name`` (duplicates raise)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} must set a non-empty 'name'")
    return ATTACKS.register(cls.name)(cls)


def params_fields(params_cls: type) -> list[str]:
    """Names of an attack's parameters (for validation messages and docs)."""
    return [f.name for f in dataclasses.fields(params_cls)]


def params_from_mapping(params_cls: type, raw: Mapping[str, Any], prefix: str) -> Any:
    """Build ``params_cls`` from config values; unknown keys and bad types raise ConfigError."""
    from mebench.config import build_params

    return build_params(params_cls, raw, prefix)


def check_param_ranges(params: Any, *, ints: Mapping[str, int] = {}, positive: tuple[str, ...] = (),
                       nonnegative: tuple[str, ...] = (), unit: tuple[str, ...] = ()) -> None:
    """The usual ``check_params`` rules, one ``ConfigError`` naming ``attack.params.<key>`` per break:
    ``ints`` maps a key to the least integer it may hold; ``positive`` keys must be > 0,
    ``nonnegative`` keys >= 0 and ``unit`` keys in [0, 1)."""
    from mebench.errors import ConfigError

    for key, least in ints.items():
        value = getattr(params, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            rule = "must be a positive integer" if least == 1 else f"must be an integer >= {least}"
            raise ConfigError(f"attack.params.{key}", value, rule)
    for keys, ok, rule in ((positive, lambda v: v > 0, "must be > 0"), (nonnegative, lambda v: v >= 0, "must be >= 0"),
                           (unit, lambda v: 0 <= v < 1, "must be in [0, 1)")):
        for key in keys:
            if not ok(getattr(params, key)):
                raise ConfigError(f"attack.params.{key}", getattr(params, key), rule)
