"""PRADA: Juuti, Szyller, Marchal, Asokan, "PRADA: Protecting against DNN Model Stealing
Attacks", IEEE EuroS&P 2019 (arXiv:1805.02628), section V-A and Algorithm 1.

A stateful detector over one client's stream of queries. For each query x with predicted
class c (the top-1 class of the answer the client receives):

- if the growing set G_c is empty, x joins G_c and no distance is recorded;
- otherwise d = min_{y in G_c} ||x - y||_2 (on the raw input, pixels in [0, 1]) joins the
  set D of the stream's minimum distances; if d > T_c, x joins G_c, d joins D_Gc and
  T_c = max(T_c, mean(D_Gc) - std(D_Gc)) (T_c starts at 0);
- once D holds more than ``min_distances`` values (100 in the paper), the Shapiro–Wilk
  statistic W(D) is computed; W < delta flags the client (the distances of a natural
  stream are close to normal, those of synthetic or selected queries are not).

The detector never changes an answer (``mebench.defenses.detection.Detector``). Its score,
for the low-FPR analysis, is 1 - min W over the queries seen so far, so the stream flagged at
threshold delta is exactly the stream whose score exceeds 1 - delta.

Implementation note: the rule is sequential by definition (whether a query joins G_c depends
on the queries before it), so a batch is resolved query by query, but on precomputed
distances: one ``cdist`` of the batch against G_c and one within the batch's class-c queries.
W is recomputed after each query from a sorted copy of D kept up to date by insertion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mebench.defenses.base import register_defense
from mebench.defenses.detection import Detector, shapiro_wilk_w
from mebench.errors import ConfigError


@register_defense
class Prada(Detector):
    name, space = "prada", "probs"
    paper = "Juuti, Szyller, Marchal, Asokan, EuroS&P 2019 (detector; answers unchanged)"

    @dataclass(frozen=True)
    class Params:
        delta: float = 0.9
        min_distances: int = 100

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not 0.0 < params.delta <= 1.0:
            raise ConfigError("defense.params.delta", params.delta, "must be in (0, 1] (a Shapiro–Wilk W threshold)")
        if params.min_distances < 3:
            raise ConfigError("defense.params.min_distances", params.min_distances,
                              "must be at least 3 (the Shapiro–Wilk test needs 3 values)")

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.growing: dict[int, torch.Tensor] = {}
        self.growing_d: dict[int, list[float]] = {}
        self.threshold: dict[int, float] = {}
        self.distances: list[float] = []   # D in arrival order
        self._sorted = np.empty(0)         # D sorted (for W)

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        flat = x.reshape(x.shape[0], -1).to(torch.float64).cpu()
        classes = probs.argmax(dim=1).cpu()
        d = np.full(x.shape[0], np.nan)  # the batch's minimum distances in arrival order (nan: none)
        for c in classes.unique().tolist():
            idx = (classes == c).nonzero().flatten()
            d[idx.numpy()] = self._class_distances(int(c), flat[idx])
        for value in d:
            self.queries_seen += 1
            if math.isnan(value):
                continue
            self.distances.append(float(value))
            self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, value), value)
            if len(self.distances) > self.params.min_distances:
                w = shapiro_wilk_w(self._sorted, presorted=True)
                self.best_score = max(self.best_score, 1.0 - w)
                if self.flagged_at is None and w < self.params.delta:
                    self.flagged_at = self.queries_seen

    def _class_distances(self, c: int, q: torch.Tensor) -> np.ndarray:
        """Minimum distances of class-c queries ``q`` (in order) and the updates of G_c, T_c."""
        old = self.growing.get(c, q[:0])
        to_old = _distances(q, old).min(dim=1).values.numpy() if old.shape[0] else np.full(q.shape[0], np.inf)
        within = _distances(q, q).numpy()
        joined: list[int] = []
        out = np.empty(q.shape[0])
        dg = self.growing_d.setdefault(c, [])
        t = self.threshold.get(c, 0.0)
        for i in range(q.shape[0]):
            d = min(to_old[i], within[i, joined].min()) if joined else to_old[i]
            if not math.isfinite(d):  # G_c is empty: x starts it, no distance
                out[i] = np.nan
                joined.append(i)
                continue
            out[i] = d
            if d > t:
                joined.append(i)
                dg.append(float(d))
                t = max(t, float(np.mean(dg) - np.std(dg)))
        self.threshold[c] = t
        if joined:
            self.growing[c] = torch.cat([old, q[joined]])
        return out

    def record(self) -> dict[str, Any]:
        return {**super().record(), "distances": len(self.distances),
                "growing_set_sizes": {str(c): int(g.shape[0]) for c, g in sorted(self.growing.items())}}


def _distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of ``a`` and ``b`` (float64, one matrix product)."""
    sq = (a * a).sum(1, keepdim=True) - 2.0 * a @ b.T + (b * b).sum(1)
    return sq.clamp_min_(0.0).sqrt_()
