"""The defense plugin interface: an answer transform with a name, a paper and typed parameters.

A defense sits in the oracle's answer pipeline (``mebench.oracle``), after the
victim and before the attacker sees the answer; the oracle has charged the
budget before any transform runs, so a defense never changes the query count.
Configured as ``defense: {name, params}``; ``params`` builds the defense's
``Params`` dataclass (unknown keys and wrong types are config errors naming the
key), and ``check_params`` refuses values and output modes that make no sense.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from mebench.oracle import AnswerTransform
from mebench.registry import Registry
from mebench.types import OUTPUT_MODES


class Defense(AnswerTransform):
    """Base class: set ``name``, ``paper``, ``space``, ``Params``; implement ``apply``."""

    paper: ClassVar[str] = ""
    #: Output modes the defense makes sense with (a probability perturbation is lost on a top-1 label).
    output_modes: ClassVar[frozenset[str]] = frozenset(OUTPUT_MODES)

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, params: Any, generator: torch.Generator) -> None:
        self.params = params
        self.generator = generator

    @classmethod
    def check_params(cls, params: Any, output_mode: str) -> None:
        """Raise ``ConfigError`` for a value outside its range (called before any work)."""

    def describe(self) -> dict:
        return {**super().describe(), "paper": self.paper, "params": asdict(self.params)}


DEFENSES: Registry[type[Defense]] = Registry("defense", "mebench.defenses")


def register_defense(cls: type[Defense]) -> type[Defense]:
    """Class decorator: ``@register_defense`` on a ``Defense`` subclass with a unique ``name``."""
    return DEFENSES.register(cls.name)(cls)
