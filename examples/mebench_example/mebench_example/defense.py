"""``example_smoothing``: a complete, minimal mebench defense in a module of its own.

It answers ``(1 - alpha) p + alpha / K`` for the victim's probabilities ``p`` over ``K`` classes:
every answer keeps its top-1 label and moves towards the uniform distribution by ``alpha``, so a
soft-label attacker learns less from each answer.

How it is found: ``pyproject.toml`` declares this module in the entry-point group
``mebench.defenses``; on the first lookup of a defense name mebench imports it, and
``@register_defense`` adds the class under its ``name``. In a config::

    defense: {name: example_smoothing, params: {alpha: 0.5}}

Where it sits (``mebench/oracle.py``): the oracle charges the budget, runs the victim, then the
answer transforms (``space = "probs"``: ``apply`` receives probabilities), then the output mode.
A defense never changes the query count; every row it returns must be a probability vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mebench.defenses.base import Defense, register_defense
from mebench.errors import ConfigError

__all__ = ["ExampleSmoothing"]


@register_defense
class ExampleSmoothing(Defense):
    """Label smoothing of the answers: the top-1 label is kept, the confidence is not."""

    name = "example_smoothing"
    paper = "example (mebench examples/)"
    space = "probs"
    #: Under ``hard_top1`` the answer is the label alone, which smoothing keeps: the cell would
    #: repeat ``none``, so only ``soft_prob`` is allowed (validation refuses the other with this reason).
    output_modes = frozenset({"soft_prob"})
    modes_reason = "keeps the top-1 label, which is all a {mode} answer carries (the cell would repeat 'none')"

    @dataclass(frozen=True)
    class Params:
        """Built from ``defense.params``; unknown keys and wrong types are config errors naming the key."""

        #: Weight of the uniform distribution in each answer, in [0, 1).
        alpha: float = 0.5

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        """Value rules, checked at config validation, before any work starts."""
        if not 0.0 <= params.alpha < 1.0:
            raise ConfigError("defense.params.alpha", params.alpha, "must be in [0, 1) (1 would answer nothing)")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The defended answers of a batch: rows of ``scores`` are probability vectors."""
        return (1.0 - self.params.alpha) * scores + self.params.alpha / scores.shape[1]
