"""Detectors: defenses that watch the stream of queries and never change an answer.

A detector is a :class:`~mebench.defenses.base.Defense` whose ``apply`` returns the answers
unchanged; the oracle shows it every answered batch (``observe``), and it records after which query
it would have flagged the client. Each is scored on queries until detection and on detection at a
low false-positive rate (:func:`tpr_at_fpr`) against benign streams (:func:`benign_streams`).
See docs/defenses/detection_benchmark.md.
"""
# A detector is a :class:`~mebench.defenses.base.Defense` whose ``apply`` returns the
# answers unchanged; the oracle shows it every answered batch (``observe``), and it
# records after which query it would have flagged the client. Two things are scored
# for every detector:
#
# - **queries until detection** of each attack's stream (``flagged_at``: the first query after
#   which the client was flagged; ``None`` when it never was within the budget), and where a
#   detector's flag can be lowered again (PRADA's reference rule), the flag it holds at each
#   checkpoint (``flag_at``);
# - **detection at a low false-positive rate**: each stream, attack or benign, gets a
#   score at every checkpoint B (the detector's own evidence over its first B queries,
#   higher = more attack-like), and :func:`tpr_at_fpr` reads the true-positive rate
#   at the strictest threshold that flags at most a share ``fpr`` of the benign
#   streams (the rule of low-FPR membership-inference scoring: the threshold is set
#   on the negatives alone, and the score is the share of positives above it).
#
# Benign streams (:func:`benign_streams`) are seeded random orders of whole test
# splits: the victim's own and, where the run names one, a second dataset's.
#
# :func:`shapiro_wilk_w` is ``scipy.stats.shapiro``'s W (algorithm AS R94, Royston 1995), the
# function PRADA's reference code calls; mebench's own Royston implementation, which agreed with it
# to 1e-6, was dropped for the maintained library.

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from mebench.defenses.base import Defense
from mebench.detection.rates import first_crossing, tpr_at_fpr  # noqa: F401  (torch-free for the report)
from mebench.support.seeding import generator


def shapiro_wilk_w(values: Sequence[float] | np.ndarray) -> float:
    """The Shapiro–Wilk W of ``values`` (at least 3), from ``scipy.stats.shapiro``; 1.0 when all
    values are equal (no evidence). scipy's warnings (n > 5000: the p-value, which is not used;
    range zero) are silenced: W itself is exact."""
    from scipy import stats  # imported on first use: mebench's import stays light

    x = np.asarray(values, dtype=np.float64)
    if x.size < 3:
        raise ValueError(f"the Shapiro–Wilk test needs at least 3 values, got {x.size}")
    if np.ptp(x) <= 0.0:
        return 1.0
    # ``stats.shapiro`` is scipy's function under its axis/nan-policy decorator, which costs ~6x the
    # test itself on a few hundred values; on a 1-D finite vector the decorated and the plain
    # function return the same W (PRADA runs this every 10 queries of every client)
    shapiro = getattr(stats.shapiro, "__wrapped__", stats.shapiro)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return min(float(shapiro(x).statistic), 1.0)


class Detector(Defense):
    """A defense that answers unchanged and scores the query stream (see the module docstring).

    Subclasses implement ``observe(x, probs)`` (called by the oracle with each answered batch,
    in order) and ``score()`` (current evidence, higher = more attack-like; ``-inf`` before
    there is any), and set ``flagged_at`` to the 1-based index of the query after which the
    client would have been flagged.
    """

    detector = True

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.queries_seen = 0
        self.flagged_at: Optional[int] = None
        self.best_score = -math.inf
        self.scores_at: dict[int, float] = {}
        self.trace: list[tuple[int, float]] = []  # (query, best score so far) at each rise of the best score

    def raise_score(self, score: float) -> None:
        """Record evidence seen at the current query: the best score, and its trace (so the query at
        which any threshold was first crossed can be read afterwards, :func:`first_crossing`)."""
        if score > self.best_score:
            self.best_score = score
            self.trace.append((self.queries_seen, score))

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        raise NotImplementedError

    def mark(self, checkpoints: Sequence[int]) -> None:
        """Record the best score so far for every checkpoint the stream has just reached."""
        for b in checkpoints:
            if b <= self.queries_seen and b not in self.scores_at:
                self.scores_at[b] = self.best_score

    def record(self) -> dict[str, Any]:
        return {"queries_seen": self.queries_seen, "flagged_at": self.flagged_at,
                "score_at": {str(b): _finite(s) for b, s in sorted(self.scores_at.items())}}


def _finite(s: float) -> Optional[float]:
    return s if math.isfinite(s) else None


def feed(detector: Detector, images: torch.Tensor,
         answer: Callable[[torch.Tensor], torch.Tensor] | torch.Tensor, checkpoints: Sequence[int] = (),
         device: torch.device | str = "cpu", batch_size: int = 256) -> Detector:
    """Show a whole stream to ``detector`` as an oracle would: batches of ``images`` (uint8 or
    float in [0, 1]) with their answers (``answer``: a function of a batch, or the stream's answers
    already computed, row for row), marking each checkpoint when the stream reaches it. The one way
    a detector is run over a stream: the run's detection probe and the detection benchmark
    (``mebench.detection.bench``) both call it. Returns the detector."""
    for i in range(0, images.shape[0], batch_size):
        xb = images[i:i + batch_size].to(device)
        xb = xb.float().div_(255.0) if xb.dtype == torch.uint8 else xb
        detector.observe(xb, answer[i:i + batch_size] if isinstance(answer, torch.Tensor) else answer(xb))
        detector.mark(checkpoints)
    return detector


def benign_streams(sources: Sequence[tuple[str, torch.Tensor]], length: int, streams: int,
                   seed: int) -> Iterator[tuple[str, int, torch.Tensor]]:
    """``streams`` seeded random orders of each source's images (uint8 or float in [0, 1]),
    ``length`` images each; a split shorter than ``length`` is traversed in fresh random orders
    until the stream is long enough (no image repeats before the whole split has been sent)."""
    for name, images in sources:
        for k in range(streams):
            g = generator(seed, f"benign:{name}:{k}")
            n = images.shape[0]
            order = torch.cat([torch.randperm(n, generator=g) for _ in range(-(-length // n))])[:length]
            yield name, k, images[order]
