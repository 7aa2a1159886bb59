"""Verification scores into decisions: the true-positive rate at a false-positive rate of at most 1 %
and 0.1 %, against a population of negative models (the one rule of ``mebench.detection.rates``).

A positive is a model derived from the victim (an extraction's substitute), a negative one that is
not (trained on ground truth alone; ``mebench.verification.negatives``). The threshold is set on the
negatives' scores, so a rate is only resolved with enough of them: at least ``1 / fpr``
(``negatives_needed``: 100 for 1 %, 1,000 for 0.1 %); with fewer, no false positive is allowed at
all and the rate is reported with ``resolved: false``. See docs/verification/index.md.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from mebench.detection.rates import bootstrap_tpr_at_fpr, tpr_at_fpr

__all__ = ["FPRS", "decide", "negatives_needed", "tpr_at_fpr"]

#: The false-positive rates a verification is read at.
FPRS = (0.01, 0.001)


def negatives_needed(fpr: float) -> int:
    """The fewest negative models that resolve ``fpr`` (one false positive allowed): ``ceil(1 / fpr)``."""
    return math.ceil(1.0 / fpr - 1e-9)


def decide(positives: Sequence[float], negatives: Sequence[float], n_boot: int = 2000,
           seed: int = 0) -> dict[str, Any]:
    """TPR at each FPR in ``FPRS`` with 95 % bootstrap intervals (``bootstrap_tpr_at_fpr``), each with
    the number of negatives it needs; keyed by the FPR (``"0.01"``, ``"0.001"``)."""
    return {f"{fpr:g}": {**bootstrap_tpr_at_fpr(positives, negatives, fpr, n_boot, seed),
                         "negatives_needed": negatives_needed(fpr)} for fpr in FPRS}
