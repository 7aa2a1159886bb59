"""Adaptive attackers: what an attacker who knows the defense makes of its answers (issue 38).

An adaptive strategy wraps any attack (``attack.adaptive: {strategy: <name>, ...}``): the attack
still chooses the images, the strategy decides how each is asked and what is kept of the answers
(``argmax``, ``multi_query``, ``smoothing``, ``recover``). Every image the victim answers is charged
(contract §1.1), so D_B is the first B charged records. See docs/defenses/adaptive.md.
"""
# - ``argmax``: keep the top-1 of each defended answer as a one-hot vector (ModelGuard,
#   Yoruko-Tang/ModelGuard@0eb60fc defenses/adversary/train.py:114-123, ``--argmaxed``);
# - ``multi_query``: ask every image ``k`` times and keep the mean answer;
# - ``smoothing``: ask the image and ``k - 1`` augmented copies and keep the mean answer;
# - ``recover`` (``mebench.attacks.recover``): the defense-aware denoising attacker of ModelGuard's ``Table_Recover``
#   (defenses/adversary/wb_recover.py:54-437): a table of (posterior, defended posterior) pairs
#   built from Dirichlet samples through the attacker's own copy of the defense; each defended
#   answer is replaced by the mean posterior of the table entries nearest to it.
#
# Every image the victim answers is charged (contract §1.1): ``k`` answers of one image cost ``k``
# queries. The store keeps one record per charged query (the image the victim saw and the answer
# the attacker kept for it, e.g. its group's mean), so D_B is the first B charged records and
# Track A's S(B) = ceil(0.2 B) holds exactly (docs/defenses/adaptive.md).

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional

import torch

from mebench.data.augment import random_affine_jitter
from mebench.errors import ConfigError
from mebench.registry import Registry
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

#: ``attack.adaptive`` absent or empty: the naive attacker, who keeps every answer as it comes.
NAIVE = "naive"


class Strategy:
    """One adaptive strategy: how many answers per image (``repeats``), which images to send
    (``expand``) and what to keep of the answers (``keep``). ``Params`` is a frozen dataclass."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Params: ClassVar[type]
    #: output modes the strategy means something in (a top-1 label has nothing to average or denoise)
    output_modes: ClassVar[frozenset[str]] = frozenset({"soft_prob"})

    def __init__(self, params: Any, generator: torch.Generator) -> None:
        self.params = params
        self.generator = generator

    @classmethod
    def check(cls, params: Any) -> None:
        """Raise ``ConfigError`` naming ``attack.adaptive.<key>`` when a value breaks a rule."""

    @property
    def repeats(self) -> int:
        """Answers asked per image the attack proposes."""
        return 1

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        """The ``len(x) * repeats`` images sent for ``x``, grouped: image i's copies are consecutive."""
        return x

    #: the strategy needs its own copy of the defense (``prepare``): a defense-aware attacker
    needs_defense: ClassVar[bool] = False

    def prepare(self, defend: Any, images: torch.Tensor, num_classes: int) -> None:
        """Before the first query, for a ``needs_defense`` strategy: ``defend(posteriors, images)`` is
        the attacker's copy of the defense, ``images`` some of its own pool images; default: nothing."""

    def keep(self, y: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """What is kept for each charged answer ``y[i]`` (``groups[i]``: its image's index)."""
        return y


ADAPTIVE: Registry[type[Strategy]] = Registry("adaptive strategy", "mebench.adaptive")


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: register an adaptive strategy under ``cls.name`` (duplicates raise)."""
    return ADAPTIVE.register(cls.name)(cls)


def group_mean(y: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Each row replaced by the mean of its group's rows (one ``index_add``, no Python loop)."""
    n = int(groups.max()) + 1
    sums = torch.zeros(n, y.shape[1], dtype=y.dtype).index_add_(0, groups, y)
    counts = torch.bincount(groups, minlength=n).to(y.dtype).unsqueeze(1)
    return (sums / counts)[groups]


@dataclass(frozen=True)
class NoParams:
    """A strategy without parameters."""


@dataclass(frozen=True)
class RepeatParams:
    """``k``: answers per image (each one query)."""

    k: int = 4


@register_strategy
class Argmax(Strategy):
    """Train on the top-1 of the defended answer as a one-hot vector (ModelGuard@0eb60fc
    defenses/adversary/train.py:114-123; Orekondy et al. ICLR 2020 sec. 5, the argmax attacker)."""

    name, paper, Params = "argmax", "Orekondy et al., ICLR 2020 (argmax attacker); ModelGuard --argmaxed", NoParams

    def keep(self, y: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(y.argmax(dim=1), y.shape[1]).to(y.dtype)


class _Averaging(Strategy):
    Params = RepeatParams

    @classmethod
    def check(cls, params: Any) -> None:
        if not isinstance(params.k, int) or isinstance(params.k, bool) or params.k < 2:
            raise ConfigError("attack.adaptive.k", params.k, f"{cls.name} asks each image k >= 2 times (an integer)")

    @property
    def repeats(self) -> int:
        return int(self.params.k)

    def keep(self, y: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        return group_mean(y, groups)


@register_strategy
class MultiQuery(_Averaging):
    """Ask each image ``k`` times and average: defeats answer noise drawn afresh per query
    (Gaussian noise; randomised defenses). Each answer is one query."""

    name, paper = "multi_query", "repeated queries averaged (ModelGuard, USENIX Security 2024, sec. 3)"

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(self.repeats, dim=0)


@register_strategy
class Smoothing(_Averaging):
    """Ask the image and ``k - 1`` augmented copies (``mebench.data.augment.random_affine_jitter``)
    and average: a perturbation tuned to one input does not survive small changes of it."""

    name, paper = "smoothing", "answers on augmented copies averaged (input smoothing)"

    def expand(self, x: torch.Tensor) -> torch.Tensor:
        copies = x.repeat_interleave(self.repeats, dim=0)
        jitter = torch.arange(copies.shape[0]) % self.repeats != 0  # copy 0 of each image is the image
        if bool(jitter.any()):
            copies[jitter] = random_affine_jitter(copies[jitter].cpu(), self.generator).to(copies)
        return copies


def parse_adaptive(raw: Mapping[str, Any], output_mode: str) -> Optional[tuple[type[Strategy], Any]]:
    """The strategy class and its ``Params`` for ``attack.adaptive`` (``None`` when naive); one
    ``ConfigError`` naming key, value and rule for any mistake."""
    from mebench.config import build_params
    from mebench.registry import unknown_name_message

    if not raw:
        return None
    if not isinstance(raw, Mapping) or "strategy" not in raw:
        raise ConfigError("attack.adaptive", raw, f"a mapping {{strategy: <one of {ADAPTIVE.names()}>, ...}}")
    name = raw["strategy"]
    if name == NAIVE:
        if len(raw) > 1:
            raise ConfigError("attack.adaptive", dict(raw), "the naive attacker takes no parameters")
        return None
    if name not in ADAPTIVE:
        raise ConfigError("attack.adaptive.strategy", name, unknown_name_message("adaptive strategy", str(name), ADAPTIVE.names()))
    cls = ADAPTIVE.get(name)
    params = build_params(cls.Params, {k: v for k, v in raw.items() if k != "strategy"}, "attack.adaptive")
    if output_mode not in cls.output_modes:
        raise ConfigError("attack.adaptive.strategy", name,
                          f"needs attack.output_mode in {sorted(cls.output_modes)} (a top-1 label has nothing "
                          f"to keep but itself), got {output_mode}")
    cls.check(params)
    return cls, params


def strategy_name(raw: Mapping[str, Any]) -> str:
    """``naive`` or the configured strategy's name (what labels and reports show)."""
    return str(raw.get("strategy") or NAIVE) if raw else NAIVE


class AdaptiveAttack:
    """An attack behind a strategy: the engine sees this, the attack sees whole images and kept answers.

    ``propose(k)`` asks the attack for ``ceil(k / repeats)`` images and returns their ``k`` expanded
    copies (the last image gets fewer when ``repeats`` does not divide ``k``: every query is still
    one image the victim answers); ``keep`` turns the answers into the kept ones; ``observe``
    shows the attack one kept answer per image. Everything else is the attack's.
    """

    #: capability flags read from the class (e.g. ``type(attack).has_track_b``): the wrapped attack's
    has_track_b: ClassVar[bool] = False

    def __new__(cls, inner: Any, strategy: Strategy) -> "AdaptiveAttack":
        flags = {k: getattr(type(inner), k) for k in ("has_track_b", "state_dependent_queries", "paper", "data_modes")
                 if hasattr(type(inner), k)}
        return super().__new__(type(f"Adaptive{type(inner).__name__}", (cls,), flags))

    def __init__(self, inner: Any, strategy: Strategy) -> None:
        self.inner = inner
        self.strategy = strategy
        self.name = inner.name

    def __getattr__(self, item: str) -> Any:  # ctx, params and the rest are the wrapped attack's
        if item == "inner":  # not set yet (a copy in progress): no recursion
            raise AttributeError(item)
        return getattr(self.inner, item)

    def next_batch_size(self, state: "EngineState") -> int:
        """The attack's wish rounded up to whole groups, so only a checkpoint cuts an image's group short."""
        r = self.strategy.repeats
        return -(-int(self.inner.next_batch_size(state)) // r) * r

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        r = self.strategy.repeats
        inner = self.inner.propose(-(-k // r), state)
        x = self.strategy.expand(inner.x)[:k]
        groups = torch.arange(len(inner)).repeat_interleave(r)[:k]
        return QueryBatch(x, {"inner": inner, "groups": groups})

    def keep(self, batch: QueryBatch, output: OracleOutput) -> OracleOutput:
        return OracleOutput(output.kind, self.strategy.keep(output.y.detach().cpu(), batch.meta["groups"]).to(output.y))

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        groups = batch.meta["groups"]
        first = torch.ones_like(groups, dtype=torch.bool)
        first[1:] = groups[1:] != groups[:-1]
        self.inner.observe(batch.meta["inner"], OracleOutput(output.kind, output.y[first.to(output.y.device)]), state)

    def track_b_model(self, state: "EngineState") -> Any:
        return self.inner.track_b_model(state)


def describe(raw: Mapping[str, Any], output_mode: str) -> dict[str, Any]:
    """What ``summary.json`` and the plan record: the strategy and its parameters, defaults filled in."""
    parsed = parse_adaptive(raw, output_mode)
    if parsed is None:
        return {"strategy": NAIVE}
    cls, params = parsed
    return {"strategy": cls.name, **dataclasses.asdict(params)}
