"""The detection benchmark: benign traffic (seeded, test splits only, never an attacker's query),
the stateful k-NN detector against its reference rule, PRADA's evasion charged to the budget, and
TPR at a low FPR with bootstrap intervals (contract §1.1, §3, §10)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.detection.benign import TrafficParams, overlap, stream, traffic
from mebench.defenses.stateful_knn import StatefulKnn, calibrate
from mebench.detection.bench import attack_record, evasion_budgets, interleave, watch
from mebench.detection.rates import bootstrap_tpr_at_fpr, first_crossing, roc_points, score_streams
from mebench.errors import ConfigError
from mebench.testing import _images

SIZES = (60, 40, 30)  # the victim's test split, then two other datasets' (a data root holding more)


def test_benign_traffic_is_reproducible_from_the_seed():
    # contract §10: stream k is a function of (seed, k) alone, whatever the number drawn around it
    p = TrafficParams(streams=50, min_length=20, max_length=90)
    a, b = list(traffic(SIZES, p, seed=5)), list(traffic(SIZES, TrafficParams(50 + 7, 20, 90), seed=5))
    assert all(np.array_equal(x.source, y.source) and np.array_equal(x.image, y.image) for x, y in zip(a, b))
    other = list(traffic(SIZES, p, seed=6))
    assert sum(np.array_equal(x.image[:20], y.image[:20]) for x, y in zip(a, other)) == 0
    assert {s.user for s in a} == {"in", "ood", "mixed"} and all(20 <= len(s) <= 90 for s in a)
    assert all((s.source == 0).all() for s in a if s.user == "in")
    assert all((s.source > 0).all() and len(set(s.source)) == 1 for s in a if s.user == "ood")
    assert all(set(s.source) >= {0} and len(set(s.source)) == 2 for s in a if s.user == "mixed" and len(s) > 40)
    assert {int(s.source.max()) for s in a if s.user == "ood"} == {1, 2}  # every other dataset is used


def test_a_benign_client_sends_each_image_once_before_repeating():
    s = stream(3, (25,), TrafficParams(min_length=60, max_length=60, in_share=1.0), seed=0)
    img = s.image
    assert sorted(img[:25]) == list(range(25)) and sorted(img[25:50]) == list(range(25))


def test_benign_streams_never_include_the_attackers_queries():
    # contract §3: benign clients send test splits; an attacker's pool is a training split (or made
    # images), so no benign image equals a query; the check itself sees a planted query
    splits = [_images("SYNTH", False)[0], _images("SYNTHSUR", False)[0]]
    pool = _images("SYNTHSUR", True)[0]
    queries = torch.cat([pool[:300].float() / 255, torch.rand(50, *pool.shape[1:])])  # a pool attack and a synthetic one
    streams = list(traffic([s.shape[0] for s in splits], TrafficParams(200, 20, 120), seed=0))
    benign = torch.cat([s.images(splits) for s in streams])
    assert overlap(benign, queries) == 0
    planted = torch.cat([benign[:10], pool[:3]])
    assert overlap(planted, queries) == 3


@pytest.mark.parametrize("params, key", [
    (dict(streams=0), "streams"), (dict(min_length=0), "min_length"), (dict(min_length=9, max_length=5), "min_length"),
    (dict(in_share=0.8, ood_share=0.3), "ood_share"), (dict(in_share=1.5), "in_share")])
def test_bad_traffic_settings_fail_before_any_work(params, key):
    with pytest.raises(ConfigError, match=key):
        next(traffic(SIZES, TrafficParams(**params), seed=0))


@given(st.integers(1, 5000), st.floats(0.0, 0.99))
def test_evasion_charges_every_interleaved_image(budget, share):
    # contract §1.1: natural images interleaved to evade PRADA are queries like any other
    own, natural = evasion_budgets(budget, share)
    assert own + natural == budget and own >= 1 and natural >= 0


def test_interleaving_keeps_the_attacks_order_and_every_image():
    a = (torch.arange(6.0).view(6, 1), torch.zeros(6, 2))
    n = (100 + torch.arange(4.0).view(4, 1), torch.ones(4, 2))
    x, p = interleave(a, n, seed=1)
    own = x[x < 100]
    assert x.shape[0] == 10 and own.tolist() == list(range(6)) and sorted(x[x >= 100].tolist()) == [100, 101, 102, 103]
    assert torch.equal(p[:, 0] == 1, x[:, 0] >= 100)
    assert torch.equal(interleave(a, n, seed=1)[0], x) and not torch.equal(interleave(a, n, seed=2)[0], x)


def _reference_knn(flat: np.ndarray, k: int, threshold: float) -> tuple[list[float], list[int]]:
    """schoyc/blackbox-detection@5a3f801 detection.py:45-86, query by query (written for the test)."""
    memory, dists_out, hits = [], [], []
    for t, q in enumerate(flat, start=1):
        if len(memory) < k:
            memory.append(q)
            continue
        d = np.linalg.norm(np.stack(memory) - q, axis=-1)
        kd = float(np.mean(np.partition(d, k - 1)[:k]))
        dists_out.append(kd)
        memory.append(q)
        if kd < threshold:
            hits.append(t)
            memory = []
    return dists_out, hits


def _knn(k: int, threshold: float) -> StatefulKnn:
    p = StatefulKnn.Params(k=k, threshold=threshold)
    return StatefulKnn(p, torch.Generator(), StatefulKnn.fit(p, None))


@pytest.mark.parametrize("batch", [1, 7, 64, 500])
def test_stateful_knn_follows_the_reference_rule_at_any_batching(batch):
    x = _images("SYNTH", False)[0][:150].float().div(255)
    near = x[40] + 0.01 * torch.randn((30, *x.shape[1:]), generator=torch.Generator().manual_seed(0))
    x = torch.cat([x, near, x[:100], near])  # near-repeats: flagged, memory cleared, then more
    ref_d, ref_hits = _reference_knn(x.reshape(x.shape[0], -1).double().numpy(), 5, 0.3)
    det = watch(_knn(5, 0.3), x, torch.zeros(x.shape[0], 3), batch_size=batch)
    assert ref_hits and det.detections == ref_hits and det.flagged_at == ref_hits[0]
    assert det.best_score == pytest.approx(-min(ref_d), abs=1e-6)


def test_stateful_knn_threshold_is_the_references_calibration():
    flat = torch.rand(300, 16, generator=torch.Generator().manual_seed(0)).double()
    d = torch.cdist(flat, flat).numpy()
    means = np.sort(d, axis=1)[:, :10].mean(axis=1)  # detection.py:101-103, 113-114: self included
    assert calibrate(flat, 10, 0.1) == pytest.approx(float(np.percentile(means, 0.1)), rel=1e-4)


@pytest.mark.parametrize("params, key", [(dict(k=0), "k"), (dict(threshold=-1.0), "threshold"),
                                         (dict(percentile=0.0), "percentile"), (dict(calibration_size=10), "calibration_size")])
def test_bad_knn_settings_fail_before_any_work(params, key):
    with pytest.raises(ConfigError, match=key):
        StatefulKnn.check_params(StatefulKnn.Params(**params), "soft_prob")


def test_tpr_at_low_fpr_with_bootstrap_intervals():
    rng = np.random.default_rng(0)
    neg = rng.normal(0, 1, 2000)
    pos = np.array([5.0, 6.0, 7.0, 0.0])
    r = bootstrap_tpr_at_fpr(pos, neg, 0.001, n_boot=300)
    assert r["resolved"] and r["tpr"] == 0.75 and r["fpr"] <= 0.001
    assert r["tpr_ci95"][0] <= 0.75 <= r["tpr_ci95"][1] and r["tpr_ci95"][1] - r["tpr_ci95"][0] > 0.2
    assert not bootstrap_tpr_at_fpr(pos, neg[:500], 0.001)["resolved"]
    fpr, tpr = roc_points(pos, neg)
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1 and (np.diff(fpr) >= 0).all() and (np.diff(tpr) >= 0).all()


def test_query_count_at_detection_reads_the_trace():
    trace = [[10, 0.1], [40, 0.5], [90, 0.9]]
    assert first_crossing(trace, 0.4) == 40 and first_crossing(trace, 0.95) is None
    assert first_crossing(trace, 0.6, within=80) is None and first_crossing(trace, -math.inf) == 10
    benign = [{"score": v, "flagged_at": None} for v in np.linspace(0, 0.3, 1000)]
    attack = [{"score": 0.9, "flagged_at": 90, "trace": trace}, {"score": 0.2, "flagged_at": None, "trace": [[5, 0.2]]}]
    s = score_streams(benign, attack, budget=100, n_boot=50)
    assert s["0.01"]["tpr"] == 0.5 and s["0.01"]["queries_at_detection"] == [40] and s["flagged"] == 0.5


def _bench(tmp_path):
    rng = np.random.default_rng(1)
    benign = [{"stream": i, "user": "in", "length": 100, "sources": [0], "score": float(v), "flagged_at": None}
              for i, v in enumerate(rng.normal(0, 1, 1200))]
    attack = [attack_record(_knn(3, 1e-9), torch.rand(40, 1, 4, 4), torch.zeros(40, 3), attack="random",
                            data_mode="surrogate", seed=s, evasion_share=e) for s in range(3) for e in (0.0, 0.5)]
    det = {"name": "stateful_knn", "fitted": {}, "benign": benign, "attack": attack,
           "wall_s": {"fit": 0.0, "benign": 1.0, "attack": 0.1, "per_1k_queries": 0.01}}
    rec = {"kind": "mebench-detection-bench", "dataset": "SYNTH", "victim": {"victim_id": "v"}, "budget": 40,
           "traffic": {"min_length": 100, "max_length": 100}, "sources": [["SYNTH", 10]], "detectors": {"knn": det}}
    (tmp_path / "SYNTH").mkdir(parents=True)
    (tmp_path / "SYNTH" / "detection_bench.json").write_text(json.dumps(rec))
    return tmp_path


@pytest.mark.slow
def test_report_reads_a_detection_benchmark_alone(tmp_path):
    from mebench.report.writer import write_report

    files = write_report([_bench(tmp_path / "set")], tmp_path / "out")
    assert {"roc_synth_png", "roc_synth_svg", "detection_bench_md", "detection_bench_csv"} <= set(files)
    md = files["detection_bench_md"].read_text()
    assert "random + evasion 50% natural" in md and "3 / 1,200" in md and "TPR@0.1% [95% CI]" in md


def test_knn_page_cites_every_default():
    import dataclasses
    from pathlib import Path

    from mebench.docs import cited_defaults

    cited = cited_defaults(Path(__file__).resolve().parents[1] / "docs" / "defenses" / "stateful_knn.md")
    defaults = {f.name: f.default for f in dataclasses.fields(StatefulKnn.Params)}
    assert {k: v for k, (v, _, _) in cited.items()} == defaults
    assert all(mark == "*" or ".py:" in ref for ref, mark in ((r, m) for _, r, m in cited.values()))


@pytest.mark.slow
def test_stateful_knn_in_a_run_changes_nothing_and_is_reported(make_cfg, tmp_path):
    # contract §1.1: a detector neither charges nor alters an answer; the run's detection probe and
    # the report's detection table take it like PRADA
    from mebench.run import engine
    from mebench.report.writer import write_report

    cfg = make_cfg(run={"seeds": [0]}, cache={"enabled": False},
                   defense={"name": "stateful_knn", "params": {"k": 5, "calibration_size": 100}},
                   measure={"detection": {"benign_streams": 1, "benign_dataset": "SYNTHSUR"}})
    result = engine.run(cfg, progress=False, check_files=False)
    summary = result.seeds[0].summary
    det = summary["defense"]["detection"]
    assert summary["queries_used"] == 500 and det["attack"]["queries_seen"] == 500
    assert det["attack"]["threshold"] > 0 and len(det["benign"]) == 2
    assert summary["defense"]["utility"]["mean_abs_perturbation"] == 0.0
    files = write_report(result.directory, tmp_path / "report", n_bootstrap=50)
    md = files["detection_md"].read_text()
    assert "stateful_knn" in md and "delta" not in md.split("stateful_knn")[1].split("\n")[0]
