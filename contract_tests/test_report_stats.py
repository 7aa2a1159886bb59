"""Report statistics and run metadata: properties (contract §10 seeds, §11 artifacts).

Properties follow the statistics design borrowed for mebench reports: the
interval holds the mean difference, identical groups give an interval through
zero and d = 0, d has the sign of mean(b) - mean(a), decision fields agree with
the interval and thresholds, and run_metadata.jsonl keeps every entry, in
order, even under concurrent appends. Below 5 paired seeds the interval is the
paired Student t (the bootstrap's 95 % interval with 3 seeds excludes zero a
quarter of the time under the null; measured below).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mebench.report.metadata import (REQUIRED_KEYS, append_metadata, config_hash,
                                     read_metadata, run_metadata_entry)
from mebench.report.stats import (MIN_SEEDS_FOR_BOOTSTRAP, compare_groups, cohens_d,
                                  effect_size_category, paired_bootstrap_ci, paired_ci,
                                  paired_t_ci, seed_warning)

FAST = settings(max_examples=40, deadline=None)
values = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@st.composite
def paired_samples(draw: st.DrawFn, min_size: int = 5, max_size: int = 30):
    n = draw(st.integers(min_size, max_size))
    a = draw(st.lists(values, min_size=n, max_size=n))
    b = draw(st.lists(values, min_size=n, max_size=n))
    return np.array(a), np.array(b)


# contract 10 (seeds aggregated): the interval holds the mean paired difference
@FAST
@given(paired_samples())
def test_bootstrap_interval_holds_mean_difference(ab):
    a, b = ab
    ci = paired_bootstrap_ci(a, b, n_bootstrap=2000)
    assert ci.mean_diff == pytest.approx(float(np.mean(b - a)), abs=1e-9)
    assert ci.ci_lower <= ci.mean_diff <= ci.ci_upper
    assert ci.crosses_zero == (ci.ci_lower <= 0.0 <= ci.ci_upper)


# contract 10: identical groups -> interval through zero and d == 0
@FAST
@given(st.lists(values, min_size=2, max_size=30))
def test_identical_groups_cross_zero_and_have_zero_effect(a):
    res = compare_groups(a, list(a), n_bootstrap=500)
    assert res["ci_lower"] == 0.0 == res["ci_upper"]
    assert res["crosses_zero"] and not res["statistically_significant"]
    assert res["cohens_d"] == 0.0 and res["effect_size_category"] == "negligible"


# contract 10: fewer than 2 paired seeds -> no interval and no CI claim
@FAST
@given(values, values)
def test_single_seed_gives_no_interval_and_no_claim(a, b):
    res = compare_groups([a], [b], n_bootstrap=500)
    assert res["n_pairs"] == 1 and res["mean_diff"] == pytest.approx(b - a)
    assert math.isnan(res["ci_lower"]) and math.isnan(res["ci_upper"])
    assert res["crosses_zero"] is None and res["statistically_significant"] is None
    assert res["warning"].startswith("n<2")
    empty = compare_groups([], [])
    assert empty["statistically_significant"] is None and math.isnan(empty["mean_diff"])


# contract 10: d is positive exactly when the second group's mean is larger
@FAST
@given(paired_samples(min_size=2))
def test_cohens_d_has_the_sign_of_the_mean_difference(ab):
    a, b = ab
    diff = float(np.mean(b) - np.mean(a))
    assume(diff != 0.0)
    d = cohens_d(a, b)
    assert math.copysign(1.0, d) == math.copysign(1.0, diff)
    assert cohens_d(b, a) == -d


# contract 10: decision fields agree with the interval and the 0.2/0.5/0.8 bins
@FAST
@given(paired_samples(min_size=2, max_size=8))
def test_decision_fields_agree_with_interval_and_thresholds(ab):
    a, b = ab
    res = compare_groups(a, b, n_bootstrap=500)
    assert res["statistically_significant"] == (not res["crosses_zero"])
    d = res["cohens_d"]
    assert res["practically_significant"] == (abs(d) >= 0.2)
    assert res["effect_size_category"] == effect_size_category(d)
    assert bool(res["warning"]) == (len(a) < MIN_SEEDS_FOR_BOOTSTRAP)
    assert res["ci_method"] == ("t" if len(a) < MIN_SEEDS_FOR_BOOTSTRAP else "bootstrap")


def test_cohens_d_uses_pooled_sample_std():
    # contract 10: (mean_b - mean_a) / sqrt((s_a^2 + s_b^2) / 2), ddof=1
    assert cohens_d([1, 2, 3], [2, 3, 4]) == pytest.approx(1.0)
    assert cohens_d([0, 2], [1, 5]) == pytest.approx(2.0 / math.sqrt((2 + 8) / 2))
    assert cohens_d([1, 1], [2, 2]) == math.inf
    assert math.isnan(cohens_d([1], [2]))


@pytest.mark.parametrize("d,category", [
    (0.0, "negligible"), (0.199, "negligible"), (0.2, "small"), (-0.49, "small"),
    (0.5, "medium"), (0.79, "medium"), (0.8, "large"), (-3.0, "large"),
    (math.inf, "large"), (math.nan, "undefined"),
])
def test_effect_size_categories(d, category):
    # contract 10: Cohen's conventional bins
    assert effect_size_category(d) == category


def test_bootstrap_is_paired_and_reproducible():
    # contract 10: seeds pair the groups; a seed effect shared by both cancels
    rng = np.random.default_rng(3)
    seed_effect = rng.normal(0, 10, size=8)
    a = seed_effect
    b = seed_effect + 1.0 + rng.normal(0, 0.01, size=8)
    ci = paired_bootstrap_ci(a, b)
    assert ci.ci_lower > 0.9 and ci.ci_upper < 1.1 and not ci.crosses_zero
    assert paired_bootstrap_ci(a, b) == ci
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0, 2.0], [1.0])


def test_few_seeds_warning_threshold():
    # contract 10: default 3 seeds -> flagged as a t interval; 5 or more -> no warning
    assert "Student t" in seed_warning(3) and str(MIN_SEEDS_FOR_BOOTSTRAP) in seed_warning(3)
    assert seed_warning(MIN_SEEDS_FOR_BOOTSTRAP) == ""
    assert compare_groups([], [])["warning"] and compare_groups([], [])["n_pairs"] == 0


# contract 10: the report's interval holds the mean difference from 2 pairs on, and says how it was made
@FAST
@given(paired_samples(min_size=2, max_size=8))
def test_report_interval_holds_mean_difference_and_names_its_method(ab):
    a, b = ab
    ci = paired_ci(a, b, n_bootstrap=500)
    assert ci.ci_lower - 1e-9 <= ci.mean_diff <= ci.ci_upper + 1e-9
    assert ci.method == ("t" if len(a) < MIN_SEEDS_FOR_BOOTSTRAP else "bootstrap")
    assert ci.crosses_zero == (ci.ci_lower <= 0.0 <= ci.ci_upper)
    with pytest.raises(ValueError):
        paired_ci([1.0], [2.0])


def test_t_interval_matches_the_textbook_formula():
    # contract 10: differences 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302653 -> 2 ± 4.302653 / sqrt(3)
    ci = paired_t_ci([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert (ci.ci_lower, ci.ci_upper) == pytest.approx((2 - half, 2 + half), abs=1e-9)
    assert ci.crosses_zero and ci.method == "t" and ci.n == 3
    same = paired_t_ci([0.0, 1.0, 2.0], [0.5, 1.5, 2.5])  # every difference 0.5: zero width
    assert (same.ci_lower, same.ci_upper) == pytest.approx((0.5, 0.5)) and not same.crosses_zero


def test_three_seed_interval_keeps_its_level_under_the_null():
    # contract 10 (3 seeds): an attack that adds nothing. The t interval excludes zero ~5 % of the
    # time; the percentile bootstrap ~25 % (whenever the three differences share a sign)
    rng = np.random.default_rng(0)
    diffs = rng.normal(0.0, 0.03, size=(2000, 3))
    zeros = np.zeros(3)
    t_rate = np.mean([not paired_ci(zeros, d).crosses_zero for d in diffs])
    boot_rate = np.mean([not paired_bootstrap_ci(zeros, d, n_bootstrap=400).crosses_zero for d in diffs[:400]])
    assert 0.03 <= t_rate <= 0.07
    assert boot_rate > 0.15


metadata_entries = st.lists(
    st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=20), st.integers()),
                    max_size=4),
    min_size=1, max_size=10)


# contract 11: metadata append then read returns every entry, in order
@settings(max_examples=25, deadline=None)
@given(metadata_entries)
def test_metadata_append_then_read_round_trips(entries):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs" / "run_metadata.jsonl"
        written = [append_metadata(path, e) for e in entries]
        read = read_metadata(path)
    assert read == written
    for entry, got in zip(entries, read):
        assert {k: got[k] for k in entry} == entry
        assert set(REQUIRED_KEYS) <= set(got)


def test_metadata_entry_fields(tmp_path):
    # contract 11: type, seed, config hash, commit, timestamp, device, versions
    cfg = {"run": {"name": "x", "seeds": [0, 1]}, "budget": {"max_budget": 1000}}
    entry = {"type": "run", "seed": 1, "config_hash": config_hash(cfg), "device": "cpu"}
    got = append_metadata(tmp_path / "m.jsonl", entry)
    assert "timestamp" not in entry  # the caller's dict is not modified
    assert {k: got[k] for k in entry} == entry
    assert datetime.fromisoformat(got["timestamp"].replace("Z", "+00:00")).tzinfo is not None
    assert {"python", "numpy"} <= set(got["versions"]) and got["git_commit"]
    assert config_hash(dict(reversed(list(cfg.items())))) == config_hash(cfg)
    assert config_hash({**cfg, "budget": {"max_budget": 2000}}) != config_hash(cfg)
    assert append_metadata(tmp_path / "m.jsonl", {"x": math.nan})["x"] is None


def test_run_metadata_entry_from_summary(tmp_path):
    # contract 11: the engine's summary.json gives the metadata line of a seed-run
    summary = {"seed": 2, "config_hash": "h1", "run_name": "r", "status": "done",
               "attack": {"name": "activethief", "label": "activethief-dfal"},
               "git": {"commit": "abc123", "dirty": False}, "versions": {"torch": "2.x"},
               "machine": {"device": "cpu"}, "config": {"run": {"device": "cuda:0"}}}
    got = append_metadata(tmp_path / "m.jsonl", run_metadata_entry(summary, tmp_path / "s2"))
    assert (got["type"], got["seed"], got["config_hash"], got["device"]) == ("run", 2, "h1", "cpu")
    assert (got["git_commit"], got["versions"], got["attack_label"]) == (
        "abc123", {"torch": "2.x"}, "activethief-dfal")
    assert read_metadata(tmp_path / "m.jsonl") == [got]
    bare = append_metadata(tmp_path / "m.jsonl", run_metadata_entry({}))
    assert set(REQUIRED_KEYS) <= set(bare) and "python" in bare["versions"]


def _append_many(path: str, proc: int, n: int) -> None:
    pad = "x" * 6000  # longer than PIPE_BUF: atomicity must come from the lock
    for i in range(n):
        append_metadata(path, {"type": "test", "proc": proc, "i": i, "pad": pad,
                               "git_commit": "c"})


def test_concurrent_appends_lose_no_line(tmp_path):
    # contract 11: several processes appending at once keep every line intact
    path = str(tmp_path / "run_metadata.jsonl")
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA or autograd threads
    procs = [ctx.Process(target=_append_many, args=(path, p, 50)) for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    entries = read_metadata(path)
    assert len(entries) == 200
    assert {(e["proc"], e["i"]) for e in entries} == {(p, i) for p in range(4) for i in range(50)}
    for p in range(4):
        assert [e["i"] for e in entries if e["proc"] == p] == list(range(50))


def test_corrupted_line_is_skipped_with_its_line_number(tmp_path):
    # contract 11: a bad line is reported and skipped; later lines are still read
    path = tmp_path / "run_metadata.jsonl"
    append_metadata(path, {"n": 1})
    append_metadata(path, {"n": 2})
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"n": 3, "broken\n[1, 2]\n')
    append_metadata(path, {"n": 4})
    with pytest.warns(UserWarning) as record:
        entries = read_metadata(path)
    assert [e["n"] for e in entries] == [1, 2, 4]
    messages = [str(w.message) for w in record]
    assert any(":3: skipped corrupted" in m for m in messages)
    assert any(":4: skipped" in m and "not a JSON object" in m for m in messages)


def test_torn_last_line_does_not_swallow_the_next_entry(tmp_path):
    # contract 11: a writer killed mid-line must not corrupt the next append
    path = tmp_path / "run_metadata.jsonl"
    append_metadata(path, {"n": 1})
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"n": 2, "torn')
    append_metadata(path, {"n": 3})
    with pytest.warns(UserWarning, match=":2: skipped corrupted"):
        entries = read_metadata(path)
    assert [e["n"] for e in entries] == [1, 3]
    assert all(json.loads(line) for line in path.read_text().splitlines()[2:])
    assert read_metadata(tmp_path / "absent.jsonl") == []
