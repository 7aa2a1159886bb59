"""Detectors (PRADA) watch the query stream, never change an answer or the count (contract §1.1,
§1.2), and are scored at a low false-positive rate on benign streams."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.run import engine
from mebench.defenses.detection import benign_streams, feed, shapiro_wilk_w, tpr_at_fpr
from mebench.defenses.prada import Prada
from mebench.errors import ConfigError
from mebench.testing import _images
from mebench.config.validation import validate
from mebench.run.plan import resolve, site

# W from scipy.stats.shapiro (scipy 1.17.1) for numpy.random.default_rng(2019) draws, in this order.
SCIPY_W = [(3, "normal", 0.9755364966506179), (5, "normal", 0.8732826306862672),
           (6, "exponential", 0.8332764123929866), (11, "normal", 0.9650363537729876),
           (12, "exponential", 0.6982543160113192), (100, "normal", 0.9904740250803169),
           (500, "exponential", 0.8013276361388244), (6000, "normal", 0.9997176247951132)]


def test_shapiro_wilk_matches_the_reference_implementation():
    rng = np.random.default_rng(2019)
    for n, kind, w in SCIPY_W:
        x = getattr(rng, kind)(size=n)
        assert shapiro_wilk_w(x) == pytest.approx(w, abs=1e-6), (n, kind)


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=3, max_size=60),
       st.floats(0.1, 10.0), st.floats(-5.0, 5.0))
def test_shapiro_wilk_is_in_range_and_affine_invariant(values, scale, shift):
    w = shapiro_wilk_w(values)
    assert 0.0 < w <= 1.0 or (w == 1.0)
    if np.ptp(values) > 1e-6 * max(1.0, np.abs(values).max()):
        assert shapiro_wilk_w([scale * v + shift for v in values]) == pytest.approx(w, abs=1e-7)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=50), st.lists(st.floats(0, 1), min_size=1, max_size=300),
       st.sampled_from([0.001, 0.01, 0.1, 0.5]))
def test_tpr_at_fpr_never_exceeds_the_false_positive_budget(pos, neg, fpr):
    r = tpr_at_fpr(pos, neg, fpr)
    flagged_neg = sum(v > r["threshold"] for v in neg)
    assert flagged_neg <= math.floor(fpr * len(neg) + 1e-12) and r["fpr"] <= fpr + 1e-12
    assert r["tpr"] == pytest.approx(sum(v > r["threshold"] for v in pos) / len(pos))
    assert r["resolved"] == (len(neg) * fpr >= 1)
    looser = tpr_at_fpr(pos, neg, min(1.0, fpr * 10))
    assert looser["tpr"] >= r["tpr"]  # a larger false-positive budget never lowers the rate


def test_tpr_at_fpr_reads_the_strictest_threshold():
    neg = [0.1 * i for i in range(10)]  # 0.0 .. 0.9
    r = tpr_at_fpr([0.85, 0.95, 0.5], neg, 0.1)  # one negative (0.9) may be flagged: threshold 0.8
    assert r["threshold"] == pytest.approx(0.8) and r["tpr"] == pytest.approx(2 / 3) and r["fpr"] == pytest.approx(0.1)
    r = tpr_at_fpr([0.85, 0.95, 0.5], neg, 0.01)  # none may be: threshold 0.9, unresolved at 10 negatives
    assert r["threshold"] == pytest.approx(0.9) and r["tpr"] == pytest.approx(1 / 3) and not r["resolved"]


def _labels(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(x.flatten(1).mean(1).mul(4).long().clamp(0, 3), 4).float()


def test_prada_flags_a_synthetic_stream_and_not_a_natural_one():
    x = _images("SYNTH", False)[0].float().div(255)
    natural = Prada(Prada.Params(delta=0.9), torch.Generator())
    feed(natural, x, _labels, [300, 600])
    g = torch.Generator().manual_seed(0)
    rounds = [x[:10]]  # a JbDA-like stream: each round steps every image so far by 0.1 along a sign
    while sum(r.shape[0] for r in rounds) < 600:
        done = torch.cat(rounds)
        rounds.append((done + 0.1 * torch.sign(torch.randn(done.shape, generator=g))).clamp(0, 1))
    synthetic = Prada(Prada.Params(delta=0.9), torch.Generator())
    feed(synthetic, torch.cat(rounds)[:600], _labels, [300, 600])
    assert natural.flagged_at is None and synthetic.flagged_at is not None and synthetic.flagged_at > 100
    assert synthetic.record()["score_at"]["600"] > natural.record()["score_at"]["600"]
    # the score at B is 1 - the lowest W so far: flagged at delta exactly when it exceeds 1 - delta
    assert synthetic.record()["score_at"]["600"] > 1 - 0.9 > natural.record()["score_at"]["600"]


@given(st.lists(st.integers(1, 90), min_size=1, max_size=6))
@pytest.mark.slow
def test_prada_does_not_depend_on_how_the_stream_is_batched(sizes):
    x = _images("SYNTH", False)[0][:sum(sizes) + 120].float().div(255)
    one = Prada(Prada.Params(min_distances=20), torch.Generator())
    feed(one, x, _labels, [], batch_size=x.shape[0])
    parts = Prada(Prada.Params(min_distances=20), torch.Generator())
    i = 0
    for n in [*sizes, x.shape[0]]:
        parts.observe(x[i:i + n], _labels(x[i:i + n]))
        i += n
    assert one.distances == pytest.approx(parts.distances) and one.flagged_at == parts.flagged_at
    assert one.best_score == pytest.approx(parts.best_score)


def test_benign_streams_are_seeded_orders_of_the_whole_split():
    images = torch.arange(10).view(10, 1, 1, 1)
    first = [(s, k, v.flatten().tolist()) for s, k, v in benign_streams([("a", images)], 25, 2, seed=3)]
    again = [(s, k, v.flatten().tolist()) for s, k, v in benign_streams([("a", images)], 25, 2, seed=3)]
    assert first == again and first[0][2] != first[1][2]
    for _, _, v in first:  # no image repeats before the whole split was sent
        assert len(v) == 25 and sorted(v[:10]) == list(range(10)) and sorted(v[10:20]) == list(range(10))


@pytest.mark.slow
def test_prada_in_a_run_changes_nothing_and_records_the_streams(make_cfg, tmp_path):
    # contract 1.1, 1.2: a detector neither charges nor alters an answer; it only records
    plain = make_cfg(cache={"enabled": False})
    watched = make_cfg(cache={"enabled": False}, defense={"name": "prada", "params": {"min_distances": 20}},
                       measure={"detection": {"benign_streams": 2, "benign_dataset": "SYNTHSUR"}})
    validate(watched, check_files=False)
    prep = engine.prepare(resolve(plain), site(plain))
    a = engine.run_seed(resolve(plain, 0), site(plain), prep, tmp_path / "plain", progress=False)
    b = engine.run_seed(resolve(watched, 0), site(watched), prep, tmp_path / "watched", progress=False)
    strip = ("seconds",)
    rows = lambda r: [{k: v for k, v in row.items() if k not in strip} for row in r.rows]  # noqa: E731
    assert rows(a) == rows(b) and b.summary["queries_used"] == a.summary["queries_used"] == 500
    det = b.summary["defense"]["detection"]
    assert det["attack"]["queries_seen"] == 500 and set(det["attack"]["score_at"]) == {"200", "500"}
    assert sorted((s["source"], s["stream"]) for s in det["benign"]) == [
        ("SYNTH-test", 0), ("SYNTH-test", 1), ("SYNTHSUR-test", 0), ("SYNTHSUR-test", 1)]
    assert all(s["queries_seen"] == 500 for s in det["benign"])
    assert b.summary["defense"]["utility"]["mean_abs_perturbation"] == 0.0


@pytest.mark.parametrize("params, measure, key", [
    ({"delta": 0}, {}, "defense.params.delta"),
    ({"delta": 1.5}, {}, "defense.params.delta"),
    ({"min_distances": 2}, {}, "defense.params.min_distances"),
    ({"growing_start": "one"}, {}, "defense.params.growing_start"),
    ({"min_class_distances": 0}, {}, "defense.params.min_class_distances"),
    ({"outlier_sigma": 0.0}, {}, "defense.params.outlier_sigma"),
    ({"outlier_sigma": -3.0}, {}, "defense.params.outlier_sigma"),
    ({"test_every": 0}, {}, "defense.params.test_every"),
    ({"flag": "any"}, {}, "defense.params.flag"),
    ({}, {"detection": {"benign_streams": 0}}, "measure.detection.benign_streams"),
    ({}, {"detection": {"benign_dataset": "MNIST"}}, "measure.detection.benign_dataset"),
])
def test_bad_detector_settings_fail_before_any_work(make_cfg, params, measure, key):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(defense={"name": "prada", "params": params}, measure=measure), check_files=False)
    assert e.value.key == key
    if params:  # the message names the key, the value and the rule
        value = next(iter(params.values()))
        assert key in str(e.value) and str(value) in str(e.value) and "must" in str(e.value)


def test_prada_options_of_the_older_rule_validate(make_cfg):
    from mebench.defenses.prada import LEGACY

    validate(make_cfg(defense={"name": "prada", "params": dict(LEGACY)}), check_files=False)


@pytest.mark.slow
def test_report_scores_detection_at_low_fpr(make_cfg, tmp_path):
    from mebench.report.writer import write_report

    cfg = make_cfg(run={"seeds": [0, 1]}, defense={"name": "prada", "params": {"min_distances": 20}},
                   measure={"detection": {"benign_streams": 2, "benign_dataset": "SYNTHSUR"}})
    result = engine.run(cfg, progress=False, check_files=False)
    files = write_report(result.directory, tmp_path / "report", n_bootstrap=200)
    table = __import__("pandas").read_csv(files["detection_csv"])
    assert set(table["checkpoint_B"]) == {200, 500} and set(table["attack"]) == {"random"}
    row = table[table["checkpoint_B"] == 500].iloc[0]
    # 2 seeds x 1 attack stream; 2 seeds x 2 sources x 2 streams benign, each counted once
    assert row["n_attack_streams"] == 2 and row["n_benign_streams"] == 8
    assert not row["fpr_resolved_0.01"] and 0.0 <= row["tpr_at_0.01"] <= 1.0
    assert "TPR@0.1%" in files["detection_md"].read_text()
