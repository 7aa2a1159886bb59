"""The ownership-verification interface: can the owner show that a suspect model was derived from the victim?

A ``Verifier`` ``prepare``s once on the owner's side (the victim, the owner's ``OwnerData``, for DAWN
the run's defense; never an attacker's queries) and ``score``s a suspect through a counting
``Suspect`` (higher: more likely derived), declaring the images it sends (``suspect_queries``).
Verification never touches the oracle: the attack's budget is the attack's. Scores become decisions
against negative models (``mebench.verification.rates``). See docs/verification/index.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal, Optional

import torch
from torch import nn

from mebench.support.inference import eval_logits
from mebench.registry import Registry


@dataclass(frozen=True)
class OwnerData:
    """What the owner holds besides the victim: its private training split and public points (the
    test split, or any images the victim was not trained on), float pixels in [0, 1] with their
    ground-truth labels. ``from_uint8`` takes the splits as mebench's datasets read them."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    public_x: torch.Tensor
    public_y: torch.Tensor

    @classmethod
    def from_uint8(cls, train: tuple[torch.Tensor, torch.Tensor],
                   public: tuple[torch.Tensor, torch.Tensor]) -> "OwnerData":
        def pixels(x: torch.Tensor) -> torch.Tensor:
            return x.float().div(255.0) if x.dtype == torch.uint8 else x.float()

        return cls(pixels(train[0]), train[1].long(), pixels(public[0]), public[1].long())


class Suspect:
    """Black-box access to a suspect model (pixels in [0, 1] in, logits out), counting every image
    sent in ``queries``. The model's train/eval mode is restored after each call."""

    def __init__(self, model: nn.Module, batch_size: int = 2048) -> None:
        self.model = model
        self.batch_size = batch_size
        self.queries = 0

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The suspect's logits on ``x`` (on the CPU); charges ``len(x)`` queries."""
        self.queries += int(x.shape[0])
        return eval_logits(self.model, x, self.batch_size).cpu()

    def labels(self, x: torch.Tensor) -> torch.Tensor:
        """The suspect's top-1 labels on ``x``; charges ``len(x)`` queries."""
        return self.logits(x).argmax(dim=1)


class Verifier:
    """Base class: set ``name``, ``paper``, ``reference``, ``suspect_output``, ``Params``; implement
    ``prepare``, ``score`` and ``suspect_queries``.

    ``needs_defense`` names the defense a method reads its state from (DAWN's served watermarks);
    such a method scores only runs behind that defense. Everything else neither changes the victim
    nor its answers."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    #: The authors' code this implementation follows: ``owner/repo@commit``.
    reference: ClassVar[str] = ""
    #: What the suspect must answer: ``label`` (its top-1 label) or ``logits``.
    suspect_output: ClassVar[Literal["label", "logits"]] = "label"
    needs_defense: ClassVar[Optional[str]] = None

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, params: Any = None) -> None:
        self.params = self.Params() if params is None else params

    @classmethod
    def check_params(cls, params: Any) -> None:
        """Raise ``ConfigError`` (key ``measure.verification.<name>.<field>``) for a value outside its range."""

    def prepare(self, victim: Any, owner: OwnerData, generator: torch.Generator, defense: Any = None) -> Any:
        """The owner's key: what ``score`` needs, from the victim (``FrozenVictim``), the owner's data
        and, for a ``needs_defense`` method, the run's defense instance. Deterministic given
        ``generator``. Sends nothing to any suspect."""
        raise NotImplementedError

    def score(self, state: Any, suspect: Suspect) -> float:
        """Evidence that ``suspect`` derives from the victim (higher: more likely); sends exactly
        ``suspect_queries(state)`` images to the suspect. ``-inf``: no evidence could be gathered."""
        raise NotImplementedError

    def suspect_queries(self, state: Any) -> int:
        """How many images ``score`` sends to one suspect."""
        raise NotImplementedError

    @classmethod
    def planned_images(cls, params: Any, public: int) -> tuple[int, int]:
        """For a cost estimate, before any data is read: the images ``score`` sends to one suspect, and
        the images ``prepare`` sends through the victim, with ``public`` public points. Default: none."""
        return 0, 0

    def describe(self) -> dict:
        """What a record says about the method."""
        return {"name": self.name, "paper": self.paper, "reference": self.reference,
                "suspect_output": self.suspect_output, "params": asdict(self.params)}


VERIFIERS: Registry[type[Verifier]] = Registry("verifier", "mebench.verifiers")


def register_verifier(cls: type[Verifier]) -> type[Verifier]:
    """Class decorator: ``@register_verifier`` on a ``Verifier`` subclass with a unique ``name``."""
    return VERIFIERS.register(cls.name)(cls)


def params_key(name: str, field: str) -> str:
    """The config key of a verifier's parameter (``measure.verification.<name>.<field>``), for its ``ConfigError``."""
    return f"measure.verification.{name}.{field}"
