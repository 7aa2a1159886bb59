"""The detection benchmark: detectors on thousands of benign clients and on attack streams, no Track A.

A detector changes no answer, so what it sees of an attack is the attack's query stream alone:
:func:`collect_stream` runs the attack against the undefended oracle and keeps every query with its
answer; each detector then watches the benign clients, every attack stream and PRADA's evasion
(:func:`interleave`) from a fresh instance. See docs/defenses/detection_benchmark.md.
"""
# A detector changes no answer, so what it sees of an attack is the attack's query stream alone:
# :func:`collect_stream` runs the attack against the undefended oracle (the attack's own loop, with
# any training it does inside it; no substitute is scored) and keeps every query with its answer.
# Each detector then watches, from a fresh instance:
#
# - every benign client of :mod:`mebench.detection.benign` (test splits only; answers precomputed once
#   per split), recording its score over the whole stream and the query it was flagged at;
# - every attack stream, recording the trace of its score (:meth:`Detector.raise_score`) so that the
#   query count at detection can be read at a threshold set afterwards on the benign scores;
# - **PRADA's evasion** (:func:`interleave`): the attacker sends natural images between its own
#   queries, a share ``share`` of a budget B. Every interleaved image is charged: the attack runs at
#   budget B − round(share·B), and its queries, in their order, fill the slots the natural images
#   leave (positions drawn from the seed). The natural images come from the attacker's surrogate
#   pool (a training split; for a data-free attack, the surrogate dataset's training split, handed to
#   it for the purpose). The attack never uses the natural images' answers, so collecting its
#   queries alone and interleaving afterwards gives the stream the detector would have seen.
#
# :func:`mebench.detection.rates.score_streams` turns the records into TPR at FPR ≤ 1 % and ≤ 0.1 % with bootstrap intervals
# (:mod:`mebench.detection.rates`) and the query count at detection; ``mebench report`` draws the
# tables and the ROC curves (:mod:`mebench.report.detection_bench`).

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from mebench.detection.benign import BenignStream
from mebench.defenses.detection import Detector, feed
from mebench.oracle import AnswerPipeline, AnswerTransform, Oracle
from mebench.support.seeding import derive_seed

from mebench.detection.rates import BENCH_FILE, FPRS, score_streams  # noqa: F401  (torch-free: the report reads them)


class Recorder(AnswerTransform):
    """Keeps every answered batch of the oracle's stream (changes nothing)."""

    name, space = "recorder", "probs"

    def __init__(self) -> None:
        self.x: list[torch.Tensor] = []
        self.p: list[torch.Tensor] = []

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        self.x.append(x.detach().cpu())
        self.p.append(probs.detach().cpu())

    def stream(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat(self.x), torch.cat(self.p)


def collect_stream(answers: AnswerPipeline, attack: Any, output_mode: str, budget: int, shape: tuple,
                   make_state: Callable[[int], Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The attack's ``budget`` queries (pixels in [0, 1]) and the answers it got, in order."""
    from mebench.run.engine import collect

    rec = Recorder()
    oracle = Oracle(AnswerPipeline(answers.victim, [*answers.transforms, rec]), output_mode, budget, shape)
    collect(attack, oracle, make_state(budget), lambda b: None)
    x, p = rec.stream()
    if x.shape[0] != budget:
        raise RuntimeError(f"collected {x.shape[0]} queries at budget {budget}")
    return x, p


def evasion_budgets(budget: int, share: float) -> tuple[int, int]:
    """PRADA's evasion at budget ``budget``: (the attack's own queries, natural images interleaved).
    Both are charged: together they are the budget. The attack keeps at least one query."""
    natural = min(budget - 1, round(share * budget))
    return budget - natural, natural


def interleave(attack: tuple[torch.Tensor, torch.Tensor], natural: tuple[torch.Tensor, torch.Tensor],
               seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The evasion stream: ``natural`` images (and answers) at seeded positions among the attack's,
    whose order is kept; length = both together (the budget both were charged to)."""
    n_a, n_n = attack[0].shape[0], natural[0].shape[0]
    rng = np.random.default_rng(derive_seed(seed, "prada_evasion:slots"))
    is_natural = np.zeros(n_a + n_n, dtype=bool)
    is_natural[rng.choice(n_a + n_n, size=n_n, replace=False)] = True
    at_n, at_a = torch.from_numpy(np.nonzero(is_natural)[0]), torch.from_numpy(np.nonzero(~is_natural)[0])
    out = []
    for a, n in zip(attack, natural):
        t = a.new_empty((n_a + n_n, *a.shape[1:]))
        t[at_a], t[at_n] = a, n.to(a.dtype)
        out.append(t)
    return out[0], out[1]


def watch(detector: Detector, images: torch.Tensor, probs: torch.Tensor, batch_size: int = 256) -> Detector:
    """Show ``detector`` a whole answered stream, in batches, as the oracle would; returns it (the
    run's detection probe runs detectors the same way: ``mebench.defenses.detection.feed``)."""
    return feed(detector, images, probs, batch_size=batch_size)


def benign_record(detector: Detector, s: BenignStream, splits: Sequence[torch.Tensor],
                  probs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """One benign client's record: its kind, length, sources, score (whole stream) and flag."""
    watch(detector, s.images(splits), s.images(probs))
    return {"stream": s.index, "user": s.user, "length": len(s), "sources": sorted({int(v) for v in s.source}),
            "score": _finite(detector.best_score), "flagged_at": detector.flagged_at}


def attack_record(detector: Detector, images: torch.Tensor, probs: torch.Tensor, **about: Any) -> dict[str, Any]:
    """One attack stream's record: its score, flag and the trace of its score."""
    watch(detector, images, probs)
    return {**about, "queries": int(images.shape[0]), "score": _finite(detector.best_score),
            "flagged_at": detector.flagged_at, "trace": [[q, round(v, 9)] for q, v in detector.trace]}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _finite(v: float) -> Optional[float]:
    return float(v) if math.isfinite(v) else None
