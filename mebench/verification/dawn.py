"""DAWN's verification: the suspect's agreement with the wrong labels the ``dawn`` defense served
(Szyller et al., ACM MM 2021; noisy_verification.py:116-133 of the authors' code scores a model by
its accuracy on the watermark set). The owner's key is the defense's record of the run
(``Dawn.watermarks``), read at ``prepare``. Page: docs/verification/dawn.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from mebench.defenses.dawn import Dawn
from mebench.errors import ConfigError
from mebench.verification.base import OwnerData, Suspect, Verifier, params_key, register_verifier


@dataclass(frozen=True)
class WatermarkSet:
    """The owner's key: the watermarked images the defense served and the wrong labels it gave them."""

    images: torch.Tensor
    labels: torch.Tensor


@register_verifier
class DawnVerifier(Verifier):
    """Agreement of the suspect's labels with DAWN's wrong labels on the watermarked queries."""

    name, paper, suspect_output, needs_defense = "dawn", Dawn.paper, "label", "dawn"
    reference = "ssg-research/dawn-dynamic-adversarial-watermarking-of-neural-networks@ea6d8876"

    @dataclass(frozen=True)
    class Params:
        min_watermarks: int = 1   # fewer served watermarks than this: no evidence (score -inf)

    @classmethod
    def check_params(cls, params: Any) -> None:
        if params.min_watermarks < 1:
            raise ConfigError(params_key(cls.name, "min_watermarks"), params.min_watermarks, "must be at least 1")

    def prepare(self, victim: Any, owner: Optional[OwnerData], generator: torch.Generator,
                defense: Any = None, upto: Optional[int] = None) -> WatermarkSet:
        """The watermarks ``defense`` (the run's ``dawn`` instance) served, all of them or those among
        the first ``upto`` answers; reads neither the victim nor the owner's data."""
        if not isinstance(defense, Dawn):
            raise ValueError(f"verifier 'dawn' reads the run's 'dawn' defense, got {type(defense).__name__}")
        return WatermarkSet(*defense.watermarks(upto))

    def suspect_queries(self, state: WatermarkSet) -> int:
        return 0 if len(state.labels) < self.params.min_watermarks else len(state.labels)

    def score(self, state: WatermarkSet, suspect: Suspect) -> float:
        if len(state.labels) < self.params.min_watermarks:
            return -math.inf
        return float((suspect.labels(state.images) == state.labels).float().mean())
