"""Contract §11, §16: run folder layout, metrics.csv schema, summary.json and atomic writes."""

from __future__ import annotations

import csv
import json
import math

import pytest

from mebench.run import artifacts, engine


def test_run_folder_layout_and_metrics_csv_columns(make_cfg, tmp_path):
    # contract 16.1, 16.2: runs/<run_name>/<timestamp>/seed_<s>/ with the exact long-format columns
    res = engine.run(make_cfg(run={"seeds": [0, 1]}), progress=False)
    assert res.directory.parent.name == "synth" and res.directory.parent.parent == tmp_path / "runs"
    for s in (0, 1):
        with open(res.directory / f"seed_{s}" / "metrics.csv") as f:
            reader = csv.DictReader(f)
            assert tuple(reader.fieldnames) == artifacts.METRICS_COLUMNS
            rows = list(reader)
        assert [(r["checkpoint_B"], r["track"]) for r in rows] == [("200", "A"), ("500", "A")]
        assert all(r["seed"] == str(s) and r["attack"] == "random" and r["substitute_arch"] == "tiny_mlp" for r in rows)
        assert all(0 <= float(r["agreement"]) <= 1 and float(r["kl_mean"]) >= 0 for r in rows)


def test_hard_runs_leave_kl_and_l1_empty(make_cfg):
    # contract 16.2: KL/L1 can be empty for hard-only runs
    res = engine.run(make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"}), progress=False)
    with open(res.directory / "seed_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["kl_mean"] == "" and r["l1_mean"] == "" for r in rows)


def test_summary_records_metadata_numbers_as_numbers(make_cfg):
    # contract 4, 11.1: victim metadata, versions, commit, device, timings, cache use
    res = engine.run(make_cfg(), progress=False)
    s = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    for key in ("victim_id", "input_size", "channels", "normalization", "output_modes_supported", "checkpoint_ref",
                "checkpoint_sha256"):
        assert key in s["victim"]
    assert len(s["victim"]["checkpoint_sha256"]) == 64
    assert s["status"] == "complete" and s["queries_used"] == 500
    assert isinstance(s["queries_per_second"], float) and s["queries_per_second"] > 0
    assert {"collect", "track_a", "total"} <= set(s["timings_s"])
    assert s["versions"]["torch"] and "commit" in s["git"] and s["machine"]["device"] == "cpu"
    # every package whose version can move a result is named (SciPy: PRADA and ModelGuard-W run on it)
    assert {"torch", "torchvision", "numpy", "scipy"} <= set(s["versions"])
    assert s["attack"]["name"] == "random" and s["attack"]["data_modes"] == ["seed", "surrogate"]
    assert s["attack_stats"] == {}  # Random's work is fixed by its parameters: nothing to count
    assert isinstance(s["machine"]["isa_overrides"], dict)
    assert all(isinstance(r["agreement"], float) for r in s["results"])


def test_multi_seed_aggregate_is_mean_and_sample_std(make_cfg):
    # contract 0, 10: mean ± std over seeds per checkpoint, track and metric
    res = engine.run(make_cfg(run={"seeds": [0, 1, 2]}), progress=False)
    rows = [r for s in res.seeds for r in s.rows if r["checkpoint_B"] == 500 and r["track"] == "A"]
    vals = [r["agreement"] for r in rows]
    agg = [a for a in res.aggregate if a["checkpoint_B"] == 500 and a["metric"] == "agreement"][0]
    mean = sum(vals) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / 2)
    assert agg["n_seeds"] == 3 and math.isclose(agg["mean"], mean) and math.isclose(agg["std"], std, abs_tol=1e-12)
    assert agg["seeds"] == "0;1;2" and agg["dataset"] == "SYNTH"
    # one schema for every aggregate.csv: run folders, grid reports and mebench report
    header = (res.directory / "aggregate.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == artifacts.AGGREGATE_COLUMNS


def test_atomic_write_never_leaves_a_partial_file(tmp_path, monkeypatch):
    # contract 11: a crash during a write leaves the previous file intact and no temp file
    target = tmp_path / "summary.json"
    artifacts.atomic_write_json(target, {"a": 1})
    import os

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        artifacts.atomic_write_json(target, {"a": 2, "b": list(range(1000))})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_non_finite_numbers_become_null_not_nan(tmp_path):
    # contract 11: JSON stays valid and numbers stay numbers
    artifacts.atomic_write_json(tmp_path / "x.json", {"x": float("nan"), "y": 1.5})
    assert json.loads((tmp_path / "x.json").read_text()) == {"x": None, "y": 1.5}


def test_each_seed_run_appends_one_metadata_line(make_cfg, tmp_path):
    # run metadata (design 002): one JSON line per seed-run in <output_dir>/run_metadata.jsonl
    from mebench.report.metadata import read_metadata

    cfg = make_cfg(run={"seeds": [0, 1]})
    engine.run(cfg, progress=False)
    lines = read_metadata(tmp_path / "runs" / "run_metadata.jsonl")
    assert [e["seed"] for e in lines] == [0, 1]
    assert all(e["config_hash"] == cfg.config_hash() and e["device"] == "cpu" and e["status"] == "complete"
               for e in lines)


def test_the_attack_producing_its_track_b_model_is_timed_apart_from_scoring_it(make_cfg, monkeypatch):
    # contract 11.1: timings_s names the attack's own work at a checkpoint (attack_model: JBDA trains its
    # substitute when asked) apart from Track B's scoring, so measured phases compare with the estimate's
    import types

    from mebench.attacks.jbda import Jbda as JBDA
    from mebench.probes import tracks

    clock = [0.0]
    monkeypatch.setattr(tracks, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    real = JBDA.track_b_model

    def slow_model(self, state):
        clock[0] += 100.0  # the attack's training, on the probe's clock
        return real(self, state)

    monkeypatch.setattr(JBDA, "track_b_model", slow_model)
    from mebench.testing import QUICK_JBDA

    cfg = make_cfg(**QUICK_JBDA)
    res = engine.run(cfg, progress=False)
    s = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    n_ckpt = len({r["checkpoint_B"] for r in s["results"] if r["track"] == "B"})
    assert s["timings_s"]["attack_model"] == 100.0 * n_ckpt and s["timings_s"]["track_b"] == 0.0
