"""Stateful k-nearest-neighbour detection: Chen, Carlini, Wagner, "Stateful Detection of Black-Box
Adversarial Attacks", ACM AsiaCCS SPAI workshop 2020 (arXiv:1907.05587), section 4.

The rule follows the authors' code, schoyc/blackbox-detection@5a3f801 ``detection.py``: a client is
flagged when the mean distance of a query to its K nearest earlier queries falls below a threshold
calibrated on the victim's training split. The rule with ``file:line`` and the deviation are below;
see docs/defenses/stateful_knn.md.
"""
# The rule follows the authors' code, schoyc/blackbox-detection@5a3f801 ``detection.py``, class
# ``Detector`` with the pixel encoder of ``L2Detector`` (``:123-125``, the flattened image). For each
# query x of a client:
#
# - while the client's history holds fewer than K queries, x joins it and nothing is scored
#   (``:47-50``);
# - otherwise d_K(x) = the mean of the K smallest L2 distances from x to the history (``:52-66``),
#   x joins the history (``:68-73``), and if d_K(x) < threshold the client is flagged and its history
#   is cleared (``:76-82``, ``clear_memory`` ``:84-86``).
#
# The threshold, when not given, is calibrated as ``calculate_thresholds`` does (``:96-121``): for
# calibration images drawn from the victim's training split (the defender's own data), the mean of
# their K smallest distances to the calibration set, the image itself included (``distance_mat[:, :K]``
# holds the 0 of the image to itself, ``:101-103, 113-114``), and the threshold is that mean's 0.1th
# percentile (``np.percentile(..., 0.1)``, ``:116``): about 1 in 1,000 training images would trip it.
# Deviation: the reference uses the whole training split both as the points and as their neighbours;
# mebench draws ``calibration_size`` images (seeded, the defender's seed) for both, which keeps the fit
# to seconds on a CPU; fewer neighbours make the distances and so the threshold larger (the flag is
# raised more readily, never less).
#
# Defaults: K = 50 and the pixel ("l2") encoder, as the reference's ``CIFAR10Detectors`` (``:140``);
# the similarity encoder of the paper (a network trained for it) is not used. The reference's
# ``chunk_size`` (``:11``) only chunks its memory, and changes no distance.
#
# The score for the low-FPR analysis is −d_K (a closer neighbourhood is more attack-like); a stream's
# score at B is the highest over its first B queries (``mebench.defenses.detection``).

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from mebench.defenses.base import DEFENDER_SEED, DefenseContext, register_defense
from mebench.defenses.detection import Detector
from mebench.errors import ConfigError
from mebench.support.seeding import generator


@register_defense
class StatefulKnn(Detector):
    name, space = "stateful_knn", "probs"
    paper = "Chen, Carlini, Wagner, AsiaCCS SPAI 2020 (stateful k-NN detector; answers unchanged)"
    fits = True

    @dataclass(frozen=True)
    class Params:
        k: int = 50                          # neighbours (detection.py:140, the l2 detector)
        threshold: Optional[float] = None    # None: calibrated on the training split (:96-121)
        percentile: float = 0.1              # the calibration percentile, in percent (:116)
        calibration_size: int = 10000        # training images the threshold is calibrated on

    @classmethod
    def check_params(cls, params: Any, output_mode: str) -> None:
        p, key = params, "defense.params."
        if p.k < 1:
            raise ConfigError(key + "k", p.k, "must be at least 1 (neighbours averaged)")
        if p.threshold is not None and not (math.isfinite(p.threshold) and p.threshold > 0):
            raise ConfigError(key + "threshold", p.threshold, "must be a positive distance, or null (calibrate)")
        if not 0.0 < p.percentile < 100.0:
            raise ConfigError(key + "percentile", p.percentile, "must be in (0, 100) (a percentile, in percent)")
        if p.calibration_size <= p.k:
            raise ConfigError(key + "calibration_size", p.calibration_size,
                              f"must exceed k = {p.k} (each calibration image needs k neighbours)")

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> dict[str, Any]:
        """The threshold: given, or calibrated on ``calibration_size`` training images (seeded)."""
        if params.threshold is not None:
            return {"threshold": float(params.threshold), "calibrated_on": 0}
        images = ctx.train_split()[0]
        n = min(params.calibration_size, images.shape[0])
        pick = torch.randperm(images.shape[0], generator=generator(DEFENDER_SEED, "stateful_knn"))[:n]
        flat = _pixels(images[pick])
        return {"threshold": calibrate(flat, params.k, params.percentile), "calibrated_on": int(n)}

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.threshold = float(state["threshold"])
        self.history = torch.empty(0, 0, dtype=torch.float64)
        self.detections: list[int] = []
        self.min_distance = math.inf

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        """The rule query by query, computed a block at a time: every query of the batch up to the next
        flag is scored at once (a flag clears the history, so the block restarts after it)."""
        q = _pixels(x)
        hist = self.history if self.history.numel() else q[:0]
        to_hist, within = _distances(q, hist), _distances(q, q)
        keep_hist, start, i = True, 0, 0  # after a flag, history = the batch's queries from ``start``
        while i < q.shape[0]:
            d = self._scores(to_hist[i:] if keep_hist else to_hist[i:, :0], within[i:, start:], i - start)
            hits = np.nonzero(d < self.threshold)[0]
            stop = int(hits[0]) + 1 if hits.size else d.size  # rows i .. i + stop - 1 are resolved
            for r in range(stop):
                self.queries_seen += 1
                if math.isfinite(d[r]):
                    self.min_distance = min(self.min_distance, float(d[r]))
                    self.raise_score(-float(d[r]))
            if hits.size:
                self.detections.append(self.queries_seen)
                self.flagged_at = self.flagged_at or self.queries_seen
                keep_hist, start = False, i + stop
            i += stop
        self.history = torch.cat([hist, q[start:]]) if keep_hist else q[start:]

    def _scores(self, to_hist: torch.Tensor, within: torch.Tensor, offset: int) -> np.ndarray:
        """d_K of each row (inf while fewer than K earlier queries are held): row r sees the history
        and the batch's queries before it (``within`` columns < ``offset + r``)."""
        n, k = within.shape[0], self.params.k
        earlier = torch.arange(within.shape[1])[None, :] < (offset + torch.arange(n))[:, None]
        d = torch.cat([to_hist, within.masked_fill(~earlier, math.inf)], dim=1)
        held = to_hist.shape[1] + offset + torch.arange(n)
        if d.shape[1] < k:
            return np.full(n, math.inf)
        mean = d.topk(k, dim=1, largest=False).values.mean(dim=1)
        return torch.where(held >= k, mean, torch.full_like(mean, math.inf)).numpy()

    def record(self) -> dict[str, Any]:
        return {**super().record(), "threshold": self.threshold, "detections": len(self.detections),
                "min_distance": _finite(self.min_distance)}

    def describe(self) -> dict:
        return {**super().describe(), "fitted": dict(self.state)}


def calibrate(flat: torch.Tensor, k: int, percentile: float, chunk: int = 1000) -> float:
    """The reference's threshold on ``flat`` (rows = images): the ``percentile``-th percentile of each
    row's mean distance to its k nearest rows, itself (distance 0) included."""
    means = []
    for i in range(0, flat.shape[0], chunk):
        d = torch.cdist(flat[i:i + chunk].float(), flat.float())  # matrix-product form: fast, exact enough here
        rows = torch.arange(d.shape[0])
        d[rows, rows + i] = 0.0  # each image's distance to itself, exactly (the form leaves ~1e-3)
        means.append(d.topk(k, dim=1, largest=False).values.clamp_min(0).mean(dim=1))
    return float(np.percentile(torch.cat(means).numpy(), percentile))


def _pixels(x: torch.Tensor) -> torch.Tensor:
    """Flattened pixels in [0, 1], float64 (uint8 images are scaled)."""
    x = x.reshape(x.shape[0], -1).cpu()
    return x.to(torch.float64).div_(255.0) if x.dtype == torch.uint8 else x.to(torch.float64)


def _distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between rows, in float64 through a matrix product (fast; a repeated image
    is at distance ~1e-7 rather than 0, far below any threshold calibrated on distinct images)."""
    if b.shape[0] == 0:
        return torch.empty(a.shape[0], 0, dtype=torch.float64)
    return torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist")


def _finite(v: float) -> Optional[float]:
    return v if math.isfinite(v) else None
