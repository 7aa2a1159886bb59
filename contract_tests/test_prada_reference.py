"""PRADA follows its authors' code by default (issue 42; docs/defenses/prada.md). The reference is
``GrowingDistanceAgent`` in SSGAalto/prada-protecting-against-dnn-model-stealing-attacks@aa54347,
``src/growing_set.py``.

One test per behaviour that differs from mebench's older rule, each on a hand-built stream where
that behaviour changes W or the flag, and an equality test against ``reference_rule`` below: a
plain, query-by-query re-implementation of that class written for this test (not mebench's code).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats

from mebench.data.datasets import load_split
from mebench.defenses.prada import LEGACY, Prada

DELTA = 0.9


def reference_rule(xs: np.ndarray, classes: np.ndarray, delta: float = DELTA) -> tuple[list[float], list[int]]:
    """W of every test and the flag after every query, as ``GrowingDistanceAgent.single_query`` has them."""
    grow, grow_d, thr, dists = {}, {}, {}, {}
    ws, flags, flag = [], [], 0
    for n, (x, c) in enumerate(zip(xs.reshape(len(xs), -1).astype(np.float64), classes.tolist())):
        if c not in grow:                                    # growing_set.py:48-52
            grow[c], thr[c], grow_d[c] = [x], 0.0, [0.0]
        else:
            m = float(np.sqrt(((np.stack(grow[c]) - x) ** 2).sum(axis=1)).min())   # :54-55
            dists.setdefault(c, []).append(m)                                       # :57-60
            if m > thr[c]:                                                          # :62-68
                grow[c].append(x)
                grow_d[c].append(m)
                thr[c] = max(float(np.mean(grow_d[c]) - np.std(grow_d[c])), thr[c])
        if n % 10 == 0:                                                             # :72
            pool = np.asarray([d for v in dists.values() if len(v) >= 10 for d in v])  # :73-76
            if pool.size:
                pool = pool[np.abs(pool - pool.mean()) < 3 * pool.std()]            # :43-44, 78
            if len(pool) > 100:                                                     # :79-82
                ws.append(float(stats.shapiro(pool).statistic))
                flag = int(ws[-1] < delta)
        flags.append(flag)
    return ws, flags


def _onehot(classes: np.ndarray, k: int = 10) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.as_tensor(classes, dtype=torch.long), k).float()


def _run(xs: np.ndarray, classes: np.ndarray, batch: int = 64, **params) -> Prada:
    det = Prada(Prada.Params(delta=DELTA, **params), torch.Generator())
    x = torch.as_tensor(xs, dtype=torch.float32)
    for i in range(0, len(x), batch):
        det.observe(x[i:i + batch], _onehot(classes[i:i + batch]))
    det.mark([len(x)])
    return det


def _min_w(det: Prada) -> float:
    return min(w for _, w in det.tests)


def _points(rng: np.random.Generator, n: int, scale: float = 1.0, dim: int = 8) -> np.ndarray:
    return (scale * rng.standard_normal((n, 1, 1, dim))).astype(np.float32)


def test_growing_distances_start_at_zero():
    # growing_set.py:51: D_Gc = [0], so after the first distance T_c = mean - std of [0, d] = 0
    line = np.array([0.0, 10.0, 14.0], dtype=np.float32).reshape(3, 1, 1, 1)
    ref, old = _run(line, np.zeros(3, int)), _run(line, np.zeros(3, int), growing_start="empty")
    assert ref.growing[0].shape[0] == 3 and old.growing[0].shape[0] == 2  # 14 joins only under [0]
    assert ref.threshold[0] == pytest.approx(np.mean([0, 10, 4]) - np.std([0, 10, 4])) and old.threshold[0] == 10.0
    xs = _points(np.random.default_rng(1), 300)
    ref, old = _run(xs, np.zeros(300, int)), _run(xs, np.zeros(300, int), growing_start="empty")
    assert _min_w(ref) == pytest.approx(min(reference_rule(xs, np.zeros(300, int))[0]), abs=1e-6)
    assert abs(_min_w(ref) - _min_w(old)) > 0.005          # 0.9754 against 0.9831


def test_only_classes_with_ten_distances_are_tested():
    # growing_set.py:73-76: class 1 holds 9 distances, larger than class 0's: left out of the pool
    rng = np.random.default_rng(2)
    xs = np.concatenate([_points(rng, 105), _points(rng, 10, scale=2.0)])
    classes = np.array([0] * 105 + [1] * 10)
    ref, old = _run(xs, classes), _run(xs, classes, min_class_distances=1)
    assert len(ref.class_distances[1]) == 9 and ref.pool().size == 103 and old.pool().size == 108
    assert _min_w(ref) == pytest.approx(min(reference_rule(xs, classes)[0]), abs=1e-6)
    assert _min_w(ref) - _min_w(old) > 0.03                 # 0.984 against 0.940


def test_values_beyond_three_sigma_are_dropped_before_the_test():
    # growing_set.py:43-44, 78: one query of this cloud lands far from the rest (its distance 6.65,
    # the others at most 4.3); the cut drops it and the next largest (4.27), W stays above delta;
    # kept, they flag the client
    xs, classes = _points(np.random.default_rng(3), 200), np.zeros(200, int)
    ref, old = _run(xs, classes), _run(xs, classes, outlier_sigma=None)
    assert max(ref.class_distances[0]) == pytest.approx(6.65, abs=0.01) and ref.pool().size == 197
    assert ref.tests[-1][1] > DELTA > old.tests[-1][1]       # the last test (query 191): 0.957 against 0.851
    assert ref.tests[-1][1] == pytest.approx(reference_rule(xs, classes)[0][-1], abs=1e-6)
    assert ref.flag_at[200] is False and old.flag_at[200] is True


def test_every_tenth_query_is_tested_and_the_flag_is_the_latest_tests():
    # growing_set.py:72, 82-86: tests before the 1st, 11th, 21st ... answer; each test sets the flag
    rng = np.random.default_rng(4)
    xs = np.concatenate([_points(rng, 130), _points(rng, 12, scale=2.2), _points(rng, 400)])
    classes = np.zeros(len(xs), int)
    ref = _run(xs, classes)
    every, first = _run(xs, classes, test_every=1), _run(xs, classes, flag="first")
    assert {q % 10 for q, _ in ref.tests} == {1} and len(every.tests) > 9 * len(ref.tests)
    ws, flags = reference_rule(xs, classes)
    assert [w for _, w in ref.tests] == pytest.approx(ws, abs=1e-6)
    assert _min_w(every) < _min_w(ref) - 1e-3                 # the lowest W falls between two tests
    # the burst flags the client, the later natural queries lower the flag again (reference),
    # while the older rule keeps the first flag
    assert ref.flagged_at is not None and flags[ref.flagged_at - 1] == 1 and flags[-1] == 0
    assert ref.flag_at[len(xs)] is False and ref.flag is False
    assert first.flagged_at == ref.flagged_at and first.flag_at[len(xs)] is True


def test_legacy_is_the_older_rule_in_every_option():
    assert {f.name: f.default for f in dataclasses.fields(Prada.Params) if f.name in LEGACY} == {
        "growing_start": "zero", "min_class_distances": 10, "outlier_sigma": 3.0, "test_every": 10, "flag": "latest"}
    assert LEGACY == {"growing_start": "empty", "min_class_distances": 1, "outlier_sigma": None, "test_every": 1,
                      "flag": "first"}


def _jbda_stream(seed_images: np.ndarray, n: int, step: float, seed: int) -> np.ndarray:
    """A JBDA-like stream: each round steps every image so far by ``step`` along a random sign."""
    g = np.random.default_rng(seed)
    rounds = [seed_images]
    while sum(len(r) for r in rounds) < n:
        done = np.concatenate(rounds)
        rounds.append(np.clip(done + step * np.sign(g.standard_normal(done.shape)), 0, 1).astype(np.float32))
    return np.concatenate(rounds)[:n]


def _labeller(seed: int):
    w = np.random.default_rng(seed).standard_normal((784, 10)).astype(np.float32)
    return lambda xs: (xs.reshape(len(xs), -1) - 0.5) @ w


@pytest.mark.parametrize("kind", ["benign", "jbda", "noise"])
@pytest.mark.slow
def test_default_min_w_equals_the_reference_rule(data_root, kind):
    images, labels = load_split("MNIST", data_root, train=False)[:2]
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(42))[:400]
    natural = images[order].float().div(255).numpy()
    if kind == "benign":      # a client sending real test images, answered with their true class
        xs, classes = natural, labels[order].numpy()
    elif kind == "jbda":
        xs = _jbda_stream(natural[:50], 300, 0.1, seed=0)
        classes = _labeller(0)(xs).argmax(1)
    else:                     # uniform noise, as a data-free generator starts
        xs = np.random.default_rng(5).random((300, 1, 28, 28)).astype(np.float32)
        classes = _labeller(1)(xs).argmax(1)
    ws, flags = reference_rule(xs, classes)
    det = _run(xs, classes, batch=97)
    assert len(ws) > 0 and len(det.tests) == len(ws)
    assert _min_w(det) == pytest.approx(min(ws), abs=1e-6)
    assert det.record()["score_at"][str(len(xs))] == pytest.approx(1 - min(ws), abs=1e-6)
    assert det.flag == bool(flags[-1]) and det.flagged_at == (flags.index(1) + 1 if 1 in flags else None)
