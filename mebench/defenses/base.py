"""The defense plugin interface: an answer transform with a name, a paper and typed parameters.

A defense sits in the oracle's answer pipeline (``mebench.oracle``), after the
victim and before the attacker sees the answer; the oracle has charged the
budget before any transform runs, so a defense never changes the query count.
Configured as ``defense: {name, params}``; ``params`` builds the defense's
``Params`` dataclass (unknown keys and wrong types are config errors naming the
key), and ``check_params`` refuses values and output modes that make no sense.
See docs/extending/defense.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar, Optional

import torch

from mebench.oracle import AnswerTransform
from mebench.registry import Registry
from mebench.types import OUTPUT_MODES


@dataclass(frozen=True)
class DefenseContext:
    """What a defender holds to fit its own models (``Defense.fit``): the victim, its training split
    (uint8 images, labels; read on first call), and a factory for a fresh model of the victim's
    architecture (or another registered one), normalization included; ``load_split(name, train)``
    reads another registered dataset's split (uint8 images, labels) where the engine provides it."""

    victim: Any  # mebench.victims.wrapper.FrozenVictim
    num_classes: int
    input_shape: tuple[int, int, int]
    device: torch.device
    train_split: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    make_model: Callable[..., torch.nn.Module]
    temperature: float = 1.0
    load_split: Optional[Callable[[str, bool], tuple[torch.Tensor, torch.Tensor]]] = None
    victim_checkpoint: Optional[str] = None  # the victim's checkpoint path (victim.checkpoint_ref), for files beside it


@dataclass(frozen=True)
class DefenseCost:
    """What a defense costs beyond the victim's own answer, for ``mebench.harness.cost``'s estimate.

    ``answer_forwards``: extra work per answered image, in victim forwards (a second model's
    forward, a detector's distances, a Jacobian-vector product); ``fit_steps``: SGD steps at batch
    128 of the defender's own model fit, once per process and parameters."""

    answer_forwards: float = 0.0
    fit_steps: int = 0


def fit_steps(epochs: float, images: int, batch_size: int, factor: int = 1) -> int:
    """``epochs`` over ``images`` at ``batch_size`` (``factor`` times the images, e.g. outlier exposure's),
    counted in batch-128 steps."""
    steps = round(epochs * images / batch_size)
    return round(steps * batch_size / 128 * factor)


class Defense(AnswerTransform):
    """Base class: set ``name``, ``paper``, ``space``, ``Params``; implement ``apply``.

    A defense with models of its own sets ``fits = True`` and implements the classmethod
    ``fit(params, ctx)``; the engine calls it once per victim and parameters, from the fixed
    ``DEFENDER_SEED``, and hands the result to every instance as ``state``.
    """

    paper: ClassVar[str] = ""
    #: Output modes the defense makes sense with (a probability perturbation is lost on a top-1 label).
    output_modes: ClassVar[frozenset[str]] = frozenset(OUTPUT_MODES)
    #: Why the other output modes are refused (the config error's rule).
    modes_reason: ClassVar[str] = "changes probabilities, which a {mode} answer does not carry"
    fits: ClassVar[bool] = False
    detector: ClassVar[bool] = False
    #: JSON-able attributes of the fitted model that a cached fit keeps with its weights (``fit_key``).
    fit_attrs: ClassVar[tuple[str, ...]] = ()

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        if self.fits and state is None:
            raise ValueError(f"defense '{self.name}' needs its fitted state (Defense.fit) to answer")
        self.params = params
        self.generator = generator
        self.state = state

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> Any:
        """The defender's own models for ``params`` (only when ``fits``); deterministic given ``ctx``."""
        raise NotImplementedError

    @classmethod
    def fit_key(cls, params: Any) -> Optional[dict[str, Any]]:
        """The parameters ``fit`` depends on, as JSON, when the fit is worth keeping on disk across
        runs and tasks (``mebench.support.fitcache``; it must return a model of ``ctx.make_model()``'s shape);
        None (the default): fitted anew in each process. The victim, data, device, threads and code
        identity join the key there."""
        return None

    @classmethod
    def cost(cls, params: Any, train_size: int) -> DefenseCost:
        """Its cost beyond the victim's answer (``train_size``: the victim's train split), as an attack
        declares ``training_cost``; default none."""
        return DefenseCost()

    @classmethod
    def modes(cls, params: Any) -> frozenset[str]:
        """The output modes the defense makes sense with under ``params`` (default ``output_modes``)."""
        return cls.output_modes

    @classmethod
    def check_params(cls, params: Any, output_mode: str) -> None:
        """Raise ``ConfigError`` for a value outside its range (called before any work)."""

    @classmethod
    def check_run(cls, params: Any, cfg: Any) -> None:
        """Raise ``ConfigError`` for parameters at odds with the rest of the run's config ``cfg``
        (e.g. a fit on the attacker's own pool); called before any work, after ``check_params``."""

    def describe(self) -> dict:
        return {**super().describe(), "paper": self.paper, "params": asdict(self.params)}


DEFENDER_SEED = 20191
"""The seed of every model a defense fits: fixed, so every run seed and attack meets the same defense."""

DEFENSES: Registry[type[Defense]] = Registry("defense", "mebench.defenses")


def register_defense(cls: type[Defense]) -> type[Defense]:
    """Class decorator: ``@register_defense`` on a ``Defense`` subclass with a unique ``name``."""
    return DEFENSES.register(cls.name)(cls)
