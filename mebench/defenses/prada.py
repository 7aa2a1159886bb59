"""PRADA: Juuti, Szyller, Marchal, Asokan, "PRADA: Protecting against DNN Model Stealing
Attacks", IEEE EuroS&P 2019 (arXiv:1805.02628), section V-A and Algorithm 1.

By default the rule is the authors' code, ``GrowingDistanceAgent`` of
SSGAalto/prada-protecting-against-dnn-model-stealing-attacks@aa54347: per predicted class a growing
set of queries and their minimum distances, whose Shapiro–Wilk W flags the client when below
``delta``; ``LEGACY`` is the older mebench rule. The detector never changes an answer. The rule
step by step, with ``file:line``, is below; its options and measurements: docs/defenses/prada.md.
"""
# By default the rule is the authors' code: class ``GrowingDistanceAgent`` in
# SSGAalto/prada-protecting-against-dnn-model-stealing-attacks@aa54347, ``src/growing_set.py``
# (its server script, ``src/modes.py:28-31``, passes ``delta=`` to a constructor that takes
# ``shapiro_threshold``, so the class is the reference, not the script). For each query x with
# predicted class c (top-1 of the answer the client receives):
#
# - if class c has no growing set yet, G_c = [x], T_c = 0 and D_Gc = [0] (``growing_set.py:48-52``;
#   ``growing_start="zero"``); no distance is recorded;
# - otherwise d = min_{y in G_c} ||x - y||_2 joins class c's list of distances (``:54-60``); if
#   d > T_c, x joins G_c, d joins D_Gc and T_c = max(T_c, mean(D_Gc) - std(D_Gc)) (``:62-68``,
#   ``growing_set_ops.py:20-21``; population std);
# - before the 1st, 11th, 21st ... query's answer (``queries_processed % 10 == 0``, ``:72``;
#   ``test_every=10``) the distances of the classes holding at least 10 of them are pooled
#   (``:73-76``; ``min_class_distances=10``), values 3 σ or more from the pool's mean are dropped
#   (``:43-44, 78``; ``outlier_sigma=3``), and if more than 100 remain (``:79``;
#   ``min_distances=100``) W = Shapiro–Wilk(pool) (``scipy.stats.shapiro``, as at ``:80``);
# - the client's flag is the latest test's, W < delta (``:82-86``; ``flag="latest"``).
#
# The older mebench rule differs in the four named options (``LEGACY``: ``growing_start="empty"``,
# ``min_class_distances=1``, ``outlier_sigma=None``, ``test_every=1``, ``flag="first"``). Distances
# are on pixels in [0, 1] where the reference reads raw image files; W, T_c's rule and the 3 σ cut
# are all scale-invariant, so the scale changes nothing.
#
# The detector never changes an answer (``mebench.defenses.detection.Detector``). Its score for
# the low-FPR analysis at checkpoint B is 1 - min W over the tests run within the first B queries
# (the W values of the configured rule); ``flagged_at`` is the first query whose test raised the
# flag, and ``flag_at`` the flag the rule holds at each checkpoint (under ``flag="latest"`` a
# later test may lower it again).
#
# Implementation note: the rule is sequential (whether x joins G_c depends on the queries before
# it), so a batch is resolved query by query, but on precomputed distances, per class: the
# matrix-product form ranks the batch's pairs against G_c and among themselves, and the direct form
# (``cdist`` without a matrix product, so a repeated image is at distance 0 exactly, as in the
# reference) gives the distance of every pair that can be a minimum (:func:`_candidate_distances`).
# Lists grow in preallocated vectors, and the tests that fall inside a batch run after its distances
# (a test changes no distance). The decisions are the query-by-query implementation's bit for bit
# (every distance, T_c, G_c, W, flag; ``contract_tests/test_prada_fast.py``), and 1.35-1.60x faster on
# the detection benchmark's benign clients (docs/defenses/detection_benchmark.md).

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from mebench.defenses.base import DefenseCost, register_defense
from mebench.defenses.detection import Detector, shapiro_wilk_w
from mebench.errors import ConfigError

GROWING_STARTS = ("zero", "empty")
FLAG_RULES = ("latest", "first")
LEGACY = {"growing_start": "empty", "min_class_distances": 1, "outlier_sigma": None, "test_every": 1,
          "flag": "first"}
"""The rule mebench ran before it followed the reference (``defense.params`` of a named variant)."""


@register_defense
class Prada(Detector):
    name, space = "prada", "probs"
    paper = "Juuti, Szyller, Marchal, Asokan, EuroS&P 2019 (detector; answers unchanged)"

    @dataclass(frozen=True)
    class Params:
        delta: float = 0.9                    # the authors' server script (src/main.py:19)
        min_distances: int = 100              # a test needs more than this many values (growing_set.py:79)
        growing_start: str = "zero"           # D_Gc starts as [0] (:51); "empty": T_c jumps to the first distance
        min_class_distances: int = 10         # classes tested once they hold this many distances (:75)
        outlier_sigma: Optional[float] = 3.0  # drop values this many σ from the mean (:78); None: keep all
        test_every: int = 10                  # test before every n-th query's answer (:72)
        flag: str = "latest"                  # "latest": the latest test's flag (:82); "first": sticky

    @classmethod
    def cost(cls, params: Any, train_size: int) -> DefenseCost:
        """Its minimum distances to the growing sets took about 8 MNIST LeNet-5 forwards an image at budgets
        up to 10k on one thread (results/cost: the prada cell's ``detection_benign`` and ``collect``
        timings); they grow with the sets."""
        return DefenseCost(answer_forwards=8.0)

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        p, key = params, "defense.params."
        if not 0.0 < p.delta <= 1.0:
            raise ConfigError(key + "delta", p.delta, "must be in (0, 1] (a Shapiro–Wilk W threshold)")
        if p.min_distances < 3:
            raise ConfigError(key + "min_distances", p.min_distances,
                              "must be at least 3 (the Shapiro–Wilk test needs 3 values)")
        if p.growing_start not in GROWING_STARTS:
            raise ConfigError(key + "growing_start", p.growing_start,
                              f"must be one of {', '.join(GROWING_STARTS)} (D_Gc starts as [0] or empty)")
        if p.min_class_distances < 1:
            raise ConfigError(key + "min_class_distances", p.min_class_distances, "must be at least 1")
        if p.outlier_sigma is not None and not (math.isfinite(p.outlier_sigma) and p.outlier_sigma > 0):
            raise ConfigError(key + "outlier_sigma", p.outlier_sigma,
                              "must be a positive number of standard deviations, or null (keep every value)")
        if p.test_every < 1:
            raise ConfigError(key + "test_every", p.test_every, "must be at least 1 (test every n-th query)")
        if p.flag not in FLAG_RULES:
            raise ConfigError(key + "flag", p.flag,
                              f"must be one of {', '.join(FLAG_RULES)} (the latest test's flag, or the first)")

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self._growing: dict[int, torch.Tensor] = {}  # storage; G_c = the first _growing_n[c] rows
        self._growing_n: dict[int, int] = {}
        self._dim = 0
        self.threshold: dict[int, float] = {}
        self._growing_d: dict[int, _Values] = {}
        self._class_d: dict[int, _Values] = {}   # in the order classes got their first distance
        self._all_d = _Values()                  # every class's minimum distances, in arrival order
        self.tests: list[tuple[int, float]] = []  # (query after which it ran, W)
        self.flag = False
        self.flag_at: dict[int, bool] = {}

    @property
    def class_distances(self) -> dict[int, np.ndarray]:
        """Each class's minimum distances, in arrival order."""
        return {c: v.view for c, v in self._class_d.items()}

    @property
    def distances(self) -> np.ndarray:
        return self._all_d.view

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        """The batch's minimum distances (one class at a time), then the tests that fall inside it,
        each on the distances of the queries up to it (a test changes no distance)."""
        flat = x.reshape(x.shape[0], -1).to(torch.float64).cpu()
        self._dim = flat.shape[1]
        classes = probs.argmax(dim=1).cpu().numpy()
        d = np.full(x.shape[0], np.nan)  # the batch's minimum distances in arrival order (nan: none)
        for c in np.unique(classes).tolist():
            idx = np.nonzero(classes == c)[0]
            d[idx] = self._class_distances(c, flat[torch.from_numpy(idx)])
        has = ~np.isnan(d)
        self._all_d.extend(d[has])
        counts = self._append_class_distances(classes, d, has)
        first = self.queries_seen
        step = self.params.test_every
        for i in range((-first) % step, x.shape[0], step):  # queries first + i + 1 with (q - 1) % step == 0
            self.queries_seen = first + i + 1
            self._test(self._pool({c: int(n[i]) for c, n in counts.items()}))
        self.queries_seen = first + x.shape[0]

    def _append_class_distances(self, classes: np.ndarray, d: np.ndarray, has: np.ndarray) -> dict[int, np.ndarray]:
        """Append the batch's distances to their classes' lists (a new class joins the dict at its first
        distance's arrival, as query-by-query appends would); returns each class's count after every query."""
        at = np.nonzero(has)[0]
        new = [c for c in dict.fromkeys(classes[at].tolist()) if c not in self._class_d]
        for c in new:
            self._class_d[c] = _Values()
        counts = {}
        for c, values in self._class_d.items():
            mine = has & (classes == c)
            counts[c] = values.n + np.cumsum(mine)
            values.extend(d[mine])
        return counts

    def pool(self) -> np.ndarray:
        """The values the next test would see: tested classes' distances, outliers dropped."""
        return self._pool({c: v.n for c, v in self._class_d.items()})

    def _pool(self, counts: dict[int, int]) -> np.ndarray:
        """The pool of a test after the first ``counts[c]`` distances of each class (classes in the
        order they got their first distance: the order of the values, which the 3 σ cut's mean and
        scipy's Shapiro–Wilk, subtracting the middle value of its input, see)."""
        lists = [v.view[:counts[c]] for c, v in self._class_d.items() if counts[c] >= self.params.min_class_distances]
        values = np.concatenate(lists) if lists else np.empty(0)
        if self.params.outlier_sigma is not None and values.size:
            values = values[np.abs(values - values.mean()) < self.params.outlier_sigma * values.std()]
        return values

    def _test(self, values: np.ndarray) -> None:
        if values.size <= self.params.min_distances:
            return
        w = shapiro_wilk_w(values)
        self.tests.append((self.queries_seen, w))
        self.raise_score(1.0 - w)
        raised = w < self.params.delta
        self.flag = raised or (self.flag and self.params.flag == "first")
        if self.flag and self.flagged_at is None:
            self.flagged_at = self.queries_seen

    def mark(self, checkpoints: Sequence[int]) -> None:
        """Score and flag at each checkpoint reached, from the tests run within its first B queries
        (exact even when a batch runs past B)."""
        for b in checkpoints:
            if b <= self.queries_seen and b not in self.scores_at:
                ws = [w for q, w in self.tests if q <= b]
                self.scores_at[b] = 1.0 - min(ws) if ws else -math.inf
                raised = [w < self.params.delta for w in ws]
                self.flag_at[b] = any(raised) if self.params.flag == "first" else bool(raised and raised[-1])

    def _class_distances(self, c: int, q: torch.Tensor) -> np.ndarray:
        """Minimum distances of class-c queries ``q`` (in order) and the updates of G_c, T_c.

        ``nearest[i]`` holds query i's distance to G_c as it stands when i arrives (the batch's
        earlier queries that joined included), kept up to date by one vector minimum per query
        that joins."""
        n_old, n = self._growing_n.get(c, 0), q.shape[0]
        rows = self._growing_rows(c, n_old + n)
        rows[n_old:n_old + n] = q
        nearest, within = _candidate_distances(rows[:n_old + n], n_old)
        joined = np.zeros(q.shape[0], dtype=bool)
        out = np.empty(q.shape[0])
        dg = self._growing_d.setdefault(c, _Values([0.0] if self.params.growing_start == "zero" else []))
        t = self.threshold.get(c, 0.0)
        for i in range(q.shape[0]):
            d = float(nearest[i])
            if not math.isfinite(d):  # G_c is empty: x starts it, no distance
                out[i] = np.nan
            else:
                out[i] = d
                if not d > t:
                    continue
                dg.extend((d,))
                t = max(t, dg.mean_minus_std())
            joined[i] = True
            np.minimum(nearest[i + 1:], within[i + 1:, i], out=nearest[i + 1:])
        self.threshold[c] = t
        k = int(joined.sum())
        rows[n_old:n_old + k] = q[torch.from_numpy(joined)]  # no copy of G_c
        self._growing_n[c] = n_old + k
        return out

    def _growing_rows(self, c: int, size: int) -> torch.Tensor:
        """Class c's growing-set storage, at least ``size`` rows (G_c in its first rows; amortised growth)."""
        rows = self._growing.get(c)
        if rows is None or rows.shape[0] < size:
            grown = torch.empty(max(64, 2 * size), self._dim, dtype=torch.float64)
            if rows is not None:
                grown[:self._growing_n[c]] = rows[:self._growing_n[c]]
            self._growing[c] = rows = grown
        return rows

    @property
    def growing(self) -> dict[int, torch.Tensor]:
        """G_c of every class that has one (flattened images, float64)."""
        return {c: rows[:self._growing_n[c]] for c, rows in self._growing.items() if self._growing_n.get(c)}

    def record(self) -> dict[str, Any]:
        ws = [w for _, w in self.tests]
        return {**super().record(), "distances": self._all_d.n, "tests": len(ws),
                "min_w": min(ws) if ws else None, "flag_final": self.flag,
                "flag_at": {str(b): f for b, f in sorted(self.flag_at.items())},
                "growing_set_sizes": {str(c): int(g.shape[0]) for c, g in sorted(self.growing.items())}}


def _candidate_distances(rows: torch.Tensor, n_old: int, tolerance: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """What the rule reads of a batch of one class, ``q = rows[n_old:]``, against its growing set
    ``g = rows[:n_old]``, exactly as the direct form has it (``_distances``, bit for bit), with the
    direct form run on few pairs only:

    - ``nearest[i]``: row i's distance to its nearest row of ``g`` (inf when ``g`` is empty);
    - ``within[i, j]`` for j < i: the distance between batch rows i and j where it can be row i's
      minimum over ``g`` and any earlier rows, inf where it cannot (it exceeds ``nearest[i]``).

    The matrix-product form ranks the pairs (fast, but off by rounding: at most ~1e-13 · (|x|² +
    |y|²) on a squared distance of 784 values); a pair within ``2 · tolerance · (|x|² + max |y|²)``
    (10⁴ times that bound) of the smallest ranked value over ``g`` is a candidate, and the direct
    form gives every candidate's distance. A pair left out is farther than ``nearest[i]`` in exact
    arithmetic too, so no minimum the rule takes changes."""
    q = rows[n_old:]
    n = q.shape[0]
    if not n_old:  # every earlier row is a candidate: the direct form on the whole batch
        return np.full(n, np.inf), _distances(q, q).numpy()
    sq = (rows * rows).sum(dim=1)
    ranked = (sq[n_old:, None] + sq[None, :] - 2.0 * (q @ rows.T)).numpy()
    slack = 2.0 * tolerance * (sq[n_old:] + sq.max()).numpy()
    bound = ranked[:, :n_old].min(axis=1) + slack
    candidate = ranked <= bound[:, None]
    candidate[:, n_old:] &= np.tri(n, k=-1, dtype=bool)  # within the batch: earlier rows only
    i, j = np.nonzero(candidate)
    exact = np.full(ranked.shape, np.inf)  # the candidate pairs, one pair per cdist batch entry
    exact[i, j] = _distances(q[torch.from_numpy(i)][:, None], rows[torch.from_numpy(j)][:, None]).flatten().numpy()
    return exact[:, :n_old].min(axis=1), exact[:, n_old:]


def _distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of ``a`` and ``b`` (float64, computed directly)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")


class _Values:
    """A growing float64 vector (amortised appends; ``view`` is the values so far, contiguous)."""

    def __init__(self, values: Sequence[float] = ()) -> None:
        self.data = np.array(values, dtype=np.float64).reshape(-1)
        self.n = self.data.size

    @property
    def view(self) -> np.ndarray:
        return self.data[:self.n]

    def extend(self, values: Any) -> None:
        values = np.asarray(values, dtype=np.float64)
        if self.n + values.size > self.data.size:
            grown = np.empty(max(16, 2 * (self.n + values.size)))
            grown[:self.n] = self.view
            self.data = grown
        self.data[self.n:self.n + values.size] = values
        self.n += values.size

    def mean_minus_std(self) -> float:
        """``np.mean(v) - np.std(v)`` (population std), bit for bit: the same pairwise sums numpy's
        ``mean`` and ``var`` take, without their per-call overhead (this runs once per growing-set join)."""
        v, n = self.view, self.n
        mean = np.add.reduce(v) / n
        dev = v - mean
        return float(mean - np.sqrt(np.add.reduce(dev * dev) / n))


class PradaSequential(Prada):
    """The rule as mebench ran it before the batched scoring (commit 689e2ee): one direct ``cdist`` of every
    batch query against the whole growing set, distances appended and tested query by query. Not a defense of
    the registry: the reference the batched scoring is tested against bit for bit
    (``contract_tests/test_prada_fast.py``) and timed against (``studies/detect/prada_speed.py``)."""

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.growing_seq: dict[int, torch.Tensor] = {}
        self.growing_d: dict[int, list[float]] = {}
        self.class_seq: dict[int, list[float]] = {}
        self.dist_seq: list[float] = []

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        flat = x.reshape(x.shape[0], -1).to(torch.float64).cpu()
        classes = probs.argmax(dim=1).cpu()
        d = np.full(x.shape[0], np.nan)
        for c in classes.unique().tolist():
            idx = (classes == c).nonzero().flatten()
            d[idx.numpy()] = self._seq_distances(int(c), flat[idx])
        for c, value in zip(classes.tolist(), d.tolist()):
            self.queries_seen += 1
            if not math.isnan(value):
                self.class_seq.setdefault(c, []).append(value)
                self.dist_seq.append(value)
            if (self.queries_seen - 1) % self.params.test_every == 0:
                self._seq_test()

    def _seq_test(self) -> None:
        lists = [v for v in self.class_seq.values() if len(v) >= self.params.min_class_distances]
        values = np.concatenate([np.asarray(v) for v in lists]) if lists else np.empty(0)
        if self.params.outlier_sigma is not None and values.size:
            values = values[np.abs(values - values.mean()) < self.params.outlier_sigma * values.std()]
        if values.size <= self.params.min_distances:
            return
        w = shapiro_wilk_w(values)
        self.tests.append((self.queries_seen, w))
        self.raise_score(1.0 - w)
        self.flag = w < self.params.delta or (self.flag and self.params.flag == "first")
        if self.flag and self.flagged_at is None:
            self.flagged_at = self.queries_seen

    def _seq_distances(self, c: int, q: torch.Tensor) -> np.ndarray:
        old = self.growing_seq.get(c, q[:0])
        to_old = _distances(q, old).min(dim=1).values.numpy() if old.shape[0] else np.full(q.shape[0], np.inf)
        within = _distances(q, q).numpy()
        joined: list[int] = []
        out = np.empty(q.shape[0])
        dg = self.growing_d.setdefault(c, [0.0] if self.params.growing_start == "zero" else [])
        t = self.threshold.get(c, 0.0)
        for i in range(q.shape[0]):
            d = min(to_old[i], within[i, joined].min()) if joined else to_old[i]
            if not math.isfinite(d):
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
            self.growing_seq[c] = torch.cat([old, q[joined]])
        return out
