"""The detection rate at a false-positive budget, torch-free (moved from :mod:`mebench.defenses.detection`,
which re-exports it, so that ``mebench report`` reads detection results without importing torch)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

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


def bootstrap_tpr_at_fpr(positives: Sequence[float], negatives: Sequence[float], fpr: float,
                         n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """:func:`tpr_at_fpr` with 95 % percentile-bootstrap intervals for the TPR and the realised FPR.

    Positives and negatives are resampled apart (with replacement, each to its own size), and the
    threshold is set again on every resampled set of negatives: the interval covers the threshold's
    own uncertainty, which at 0.1 % rests on the few highest benign scores."""
    point = tpr_at_fpr(positives, negatives, fpr)
    pos, neg = np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)
    if point["tpr"] is None:
        return {**point, "tpr_ci95": None, "fpr_ci95": None, "n_boot": 0}
    pick_pos, pick_neg = _draws(np.random.default_rng(seed), (pos.size, neg.size), n_boot)
    cut = _cuts(neg[pick_neg], fpr)
    tprs = (pos[pick_pos] > cut[:, None]).mean(axis=1)
    fprs = (neg[pick_neg] > cut[:, None]).mean(axis=1)
    return {**point, "tpr_ci95": [float(v) for v in np.percentile(tprs, [2.5, 97.5])],
            "fpr_ci95": [float(v) for v in np.percentile(fprs, [2.5, 97.5])], "n_boot": n_boot}


def keyed_tpr_at_fpr(positives: Sequence[float], keys: Sequence[int], negatives: Sequence[Sequence[float]],
                     fpr: float, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """:func:`bootstrap_tpr_at_fpr` where each positive is judged against its own set of negatives:
    ``positives[i]`` against the threshold that ``negatives[keys[i]]`` set (a key scored per run, as a
    DAWN watermark set is). A positive is caught when its score is above its own threshold; ``tpr`` is
    the share caught, ``n_neg`` the fewest negatives behind any threshold (``resolved`` as there). The
    bootstrap resamples the positives and, once per replicate, each set of negatives. With one set it
    reads the same as :func:`bootstrap_tpr_at_fpr`."""
    pos = np.asarray(positives, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.int64)
    sets = [np.asarray(n, dtype=np.float64) for n in negatives]
    n_neg = min((s.size for s in sets), default=0)
    empty = {"fpr_target": fpr, "tpr": None, "fpr": None, "threshold": None, "n_pos": int(pos.size),
             "n_neg": int(n_neg), "resolved": False, "tpr_ci95": None, "n_boot": 0}
    if pos.size == 0 or n_neg == 0:
        return empty

    def rate(p: np.ndarray, k: np.ndarray, negs: list[np.ndarray]) -> tuple[float, float]:
        cuts = [tpr_at_fpr([0.0], n, fpr)["threshold"] for n in negs]
        caught = np.array([p[i] > cuts[k[i]] for i in range(p.size)])
        fprs = [float((n > c).mean()) for n, c in zip(negs, cuts)]
        return float(caught.mean()), float(np.mean(fprs))

    tpr, realised = rate(pos, keys, sets)
    pick, *picks = _draws(np.random.default_rng(seed), (pos.size, *(s.size for s in sets)), n_boot)
    cuts = np.stack([_cuts(s[q], fpr) for s, q in zip(sets, picks)], axis=1)  # [n_boot, sets]
    tprs = (pos[pick] > np.take_along_axis(cuts, keys[pick], axis=1)).mean(axis=1)
    return {**empty, "tpr": tpr, "fpr": realised, "threshold": None if len(sets) > 1 else
            tpr_at_fpr([0.0], sets[0], fpr)["threshold"], "resolved": n_neg * fpr >= 1.0,
            "tpr_ci95": [float(v) for v in np.percentile(tprs, [2.5, 97.5])], "n_boot": n_boot}


def _draws(rng: np.random.Generator, sizes: Sequence[int], n_boot: int) -> list[np.ndarray]:
    """``n_boot`` resamples with replacement of each of ``len(sizes)`` samples: one ``[n_boot, size]`` index
    array per sample, drawn in that order (one call each; a call per replicate and sample was nearly all of a
    verification report's time)."""
    return [rng.integers(0, n, (n_boot, n)) for n in sizes]


def _cuts(neg: np.ndarray, fpr: float) -> np.ndarray:
    """:func:`tpr_at_fpr`'s threshold for each row of resampled negatives ``[n_boot, n_neg]``."""
    allowed = int(math.floor(fpr * neg.shape[1] + 1e-12))
    if allowed >= neg.shape[1]:
        return np.full(neg.shape[0], -math.inf)
    return np.sort(neg, axis=1)[:, neg.shape[1] - 1 - allowed]  # the (allowed+1)-th largest


def roc_points(positives: Sequence[float], negatives: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve (FPR, TPR), one point per distinct score, flagging scores strictly above each
    threshold, from (0, 0) to (1, 1). Missing scores (``-inf``: no evidence) are never flagged
    before the last point."""
    pos, neg = np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)
    cuts = np.unique(np.concatenate([pos, neg]))[::-1]
    fpr = np.array([0.0, *[(neg > c).mean() for c in cuts], 1.0])
    tpr = np.array([0.0, *[(pos > c).mean() for c in cuts], 1.0])
    return fpr, tpr


def first_crossing(trace: Sequence[Sequence[float]], threshold: float, within: Optional[int] = None) -> Optional[int]:
    """The first query whose best score so far is above ``threshold`` (``None``: never, or not within
    ``within`` queries): the query count at detection at a threshold set afterwards."""
    for query, value in trace:
        if within is not None and query > within:
            return None
        if value > threshold:
            return int(query)
    return None


BENCH_FILE = "detection_bench.json"
"""The record a detection benchmark writes (one per victim, ``mebench.detection.bench``); the report reads it."""

FPRS = (0.01, 0.001)


def score_streams(benign: Sequence[dict], attack: Sequence[dict], budget: int, n_boot: int = 2000,
                  seed: int = 0) -> dict[str, Any]:
    """TPR at each FPR in ``FPRS`` with 95 % bootstrap intervals, the query count at detection at
    the threshold each FPR sets (median over the attack streams detected within ``budget``), and the
    shares flagged at the detector's own threshold."""
    neg = np.array([-math.inf if b["score"] is None else b["score"] for b in benign])
    pos = np.array([-math.inf if a["score"] is None else a["score"] for a in attack])
    out: dict[str, Any] = {"n_attack": len(attack), "n_benign": len(benign),
                           "flagged": float(np.mean([a["flagged_at"] is not None for a in attack])),
                           "benign_flagged": float(np.mean([b["flagged_at"] is not None for b in benign]))}
    for fpr in FPRS:
        r = bootstrap_tpr_at_fpr(pos, neg, fpr, n_boot, seed)
        at = [first_crossing(a["trace"], r["threshold"], budget) for a in attack]
        hit = [q for q in at if q is not None]
        out[f"{fpr:g}"] = {**r, "queries_at_detection": hit,
                           "median_queries": float(np.median(hit)) if hit else None}
    return out
