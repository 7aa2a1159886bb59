"""The detection rate at a false-positive budget, torch-free (moved from :mod:`mebench.defenses.detection`,
which re-exports it, so that ``mebench report`` reads detection results without importing torch)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def tpr_at_fpr(positives: Sequence[float], negatives: Sequence[float], fpr: float) -> dict[str, Any]:
    """True-positive rate at the strictest threshold that flags at most ``fpr`` of the negatives.

    A stream is flagged when its score is strictly above the threshold; the threshold is the
    ``k``-th largest negative score with ``k = floor(fpr · n_neg) + 1`` (so at most
    ``floor(fpr · n_neg)`` negatives are above it). With fewer than ``1 / fpr`` negatives no
    false positive is allowed at all, and ``resolved`` is false: the rate is an upper bound's
    reading at the resolution ``1 / n_neg`` the benign streams allow.
    """
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.sort(np.asarray(negatives, dtype=np.float64))[::-1]
    if neg.size == 0 or pos.size == 0:
        return {"fpr_target": fpr, "tpr": None, "fpr": None, "threshold": None,
                "n_pos": int(pos.size), "n_neg": int(neg.size), "resolved": False}
    allowed = int(math.floor(fpr * neg.size + 1e-12))
    threshold = -math.inf if allowed >= neg.size else float(neg[allowed])
    return {"fpr_target": fpr, "tpr": float((pos > threshold).mean()), "fpr": float((neg > threshold).mean()),
            "threshold": threshold, "n_pos": int(pos.size), "n_neg": int(neg.size),
            "resolved": neg.size * fpr >= 1.0}
