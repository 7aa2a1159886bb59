"""PRADA's batched scoring takes the same decisions as the rule query by query (docs/defenses/prada.md,
docs/defenses/detection_benchmark.md; issue 38).

``mebench.defenses.prada.Prada`` ranks distances by the matrix-product form and runs the direct
form only on the candidate pairs, keeps its lists in preallocated vectors and runs the tests that
fall inside a batch after the batch's distances. ``Sequential`` (``mebench.defenses.prada.PradaSequential``) is mebench's
implementation before that change (commit 689e2ee): one direct ``cdist`` of every batch query against the whole
growing set, distances appended and tested query by query. On random streams (clusters, exact and
near-exact repeats, JbDA-like steps, random batch sizes, the reference and the legacy options) the
two must agree bit for bit: every test's query and W, every distance, T_c, G_c, the flag after
every query and the query at detection. The flags are also checked against ``reference_rule``, the
plain re-implementation of SSGAalto PRADA @aa54347 ``growing_set.py`` in test_prada_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from test_prada_reference import reference_rule  # contract_tests/ is on sys.path (rootdir import mode)
from mebench.defenses.prada import LEGACY, Prada, PradaSequential as Sequential


def _stream(seed: int, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Clusters, exact repeats, repeats 1e-9 apart (below the matrix-product form's rounding) and
    JbDA-like steps, in a random order, with 2-5 classes drawn per query (some class-consistent)."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((4, dim)) * g.uniform(0.5, 3.0)
    parts = [centres[g.integers(0, 4, n // 2)] + g.uniform(0.05, 1.0) * g.standard_normal((n // 2, dim))]
    base = parts[0]
    parts.append(base[g.integers(0, len(base), n // 8)])                                 # exact repeats
    parts.append(base[g.integers(0, len(base), n // 8)] + 1e-9 * g.standard_normal((n // 8, dim)))
    steps = base[g.integers(0, len(base), n - sum(len(p) for p in parts))]
    parts.append(steps + 0.1 * np.sign(g.standard_normal(steps.shape)))                 # JbDA-like
    xs = np.concatenate(parts)[g.permutation(n)].astype(np.float32)
    k = int(g.integers(2, 6))
    classes = np.where(g.random(n) < 0.5, (xs[:, 0] > 0).astype(int), g.integers(0, k, n))
    return xs.reshape(n, 1, 1, dim), classes


def _feed(det: Prada, xs: np.ndarray, classes: np.ndarray, seed: int) -> Prada:
    g, i, x = np.random.default_rng(seed + 100), 0, torch.as_tensor(xs)
    probs = torch.nn.functional.one_hot(torch.as_tensor(classes, dtype=torch.long), 10).float()
    while i < len(xs):
        n = int(g.choice([1, 7, 64, 256]))
        det.observe(x[i:i + n], probs[i:i + n])
        i += n
    det.mark(range(1, len(xs) + 1))
    return det


OPTIONS = [{}, LEGACY, {"min_distances": 20, "test_every": 3, "min_class_distances": 4}]


def _seeds(fast: int, total: int) -> list:
    """Seeds 0 .. fast - 1 in the fast tier, the rest slow (the same check on more streams)."""
    return [s if s < fast else pytest.param(s, marks=pytest.mark.slow) for s in range(total)]


@pytest.mark.parametrize("seed", _seeds(2, 6))
@pytest.mark.parametrize("options", OPTIONS, ids=["reference", "legacy", "small"])
def test_batched_prada_decides_as_the_query_by_query_rule(seed, options):
    xs, classes = _stream(seed, 400, dim=[16, 784][seed % 2])
    params = Prada.Params(**{"min_distances": 40, **options})
    fast = _feed(Prada(params, torch.Generator()), xs, classes, seed)
    seq = _feed(Sequential(params, torch.Generator()), xs, classes, seed)
    assert len(seq.tests) > 10 and seq.tests == fast.tests  # every test's query and W, bit for bit
    assert np.array_equal(fast.distances, np.asarray(seq.dist_seq))
    assert {c: v.tolist() for c, v in fast.class_distances.items()} == seq.class_seq
    assert list(fast.class_distances) == list(seq.class_seq)  # the pool's order (scipy's W reads it)
    assert fast.threshold == seq.threshold
    assert {c: g.tolist() for c, g in fast.growing.items()} == {c: g.tolist() for c, g in seq.growing_seq.items()}
    assert (fast.flagged_at, fast.flag, fast.flag_at, fast.scores_at, fast.trace) == (
        seq.flagged_at, seq.flag, seq.flag_at, seq.scores_at, seq.trace)


@pytest.mark.parametrize("seed", _seeds(1, 4))
def test_batched_prada_flags_as_the_reference_rule(seed):
    # the reference's flag after every query and the query at detection (its distances in numpy:
    # W agrees to rounding, the flags exactly)
    xs, classes = _stream(seed, 400, dim=16)
    fast = _feed(Prada(Prada.Params(), torch.Generator()), xs, classes, seed)
    ws, flags = reference_rule(xs, classes, delta=fast.params.delta)
    assert len(ws) == len(fast.tests) > 5 and [w for _, w in fast.tests] == pytest.approx(ws, abs=1e-9)
    assert [fast.flag_at[q] for q in range(1, len(xs) + 1)] == [bool(f) for f in flags]
    assert fast.flagged_at == (flags.index(1) + 1 if 1 in flags else None)


def test_a_repeat_just_off_its_original_is_told_apart_exactly():
    # the matrix-product form cannot tell 1e-9 from 0 at |x|² ~ 800; the direct form does, and a
    # distance of exactly 0 (a repeat) never joins G_c (d > T_c = 0 fails) while 1e-9 · √784 does
    x = torch.rand(1, 784, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    near = x + 1e-9
    det = Prada(Prada.Params(), torch.Generator())
    one = torch.nn.functional.one_hot(torch.zeros(3, dtype=torch.long), 10).float()
    det.observe(torch.cat([x, x, near]).view(3, 1, 28, 28), one)
    assert det.distances.tolist() == [0.0, pytest.approx(2.8e-8, rel=1e-3)]
    assert det.growing[0].shape[0] == 2 and det.threshold[0] == pytest.approx(0.0, abs=1e-15)


def test_a_repeat_is_at_distance_zero_beside_a_member_just_off_it():
    # G_c = {x, x + 1e-9}: the matrix-product form ranks the two at random (their squared distances
    # to x, 0 and 8e-16, are below its rounding at |x|² ~ 260); the direct form decides: 0 exactly
    g = torch.Generator().manual_seed(1)
    xs = torch.rand(10, 784, generator=g, dtype=torch.float64)
    det = Prada(Prada.Params(), torch.Generator())
    labels = torch.arange(10).repeat_interleave(2)
    pairs = torch.stack([xs, xs + 1e-9], dim=1).view(20, 1, 28, 28)
    det.observe(pairs, torch.nn.functional.one_hot(labels, 10).float())
    assert [int(g.shape[0]) for g in det.growing.values()] == [2] * 10
    det.observe(xs.view(10, 1, 28, 28), torch.nn.functional.one_hot(torch.arange(10), 10).float())
    assert det.distances[10:].tolist() == [0.0] * 10
