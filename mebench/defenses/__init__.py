"""Defenses: answer transforms between the victim and the attacker. Built-ins register on import."""

from __future__ import annotations

from typing import Any

import torch

from mebench.defenses import output as _output  # noqa: F401  (registers the built-in defenses)
from mebench.defenses import mad as _mad  # noqa: F401
from mebench.defenses import misinformation as _misinformation  # noqa: F401
from mebench.defenses import prada as _prada  # noqa: F401
from mebench.defenses import modelguard as _modelguard  # noqa: F401
from mebench.defenses import stateful_knn as _stateful_knn  # noqa: F401
from mebench.defenses import grad2 as _grad2  # noqa: F401
from mebench.defenses import dawn as _dawn  # noqa: F401
from mebench.defenses.base import DEFENDER_SEED, DEFENSES, Defense, DefenseContext, register_defense
from mebench.defenses.output import Temperature
from mebench.oracle import AnswerPipeline
from mebench.victims.wrapper import FrozenVictim

__all__ = ["DEFENDER_SEED", "DEFENSES", "Defense", "DefenseContext", "register_defense", "build_answers",
           "make_defense"]


def make_defense(name: str, params: Any, generator: torch.Generator, state: Any = None) -> Defense:
    """The defense ``name`` with its parsed ``Params`` (a dataclass instance) and, for a defense
    that fits models, its fitted ``state`` (``Defense.fit``)."""
    return DEFENSES.get(name)(params, generator, state)


def build_answers(victim: FrozenVictim, temperature: float = 1.0, defense: Defense | None = None) -> AnswerPipeline:
    """The oracle's pipeline: temperature first (when T != 1), then the defense (unless ``none``)."""
    steps: list[Defense] = []
    if temperature != 1.0:
        steps.append(Temperature(Temperature.Params(temperature), torch.Generator()))
    if defense is not None and defense.name != "none":
        steps.append(defense)
    return AnswerPipeline(victim, steps)
