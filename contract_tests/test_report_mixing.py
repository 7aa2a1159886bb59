"""``mebench report`` never mixes what must not be mixed (contract §10, §16).

Runs against different victim checkpoints are reported apart, runs that did not
complete are left out and listed, AUCs over different budget spans are neither
ranked nor compared against each other, and one seed gives no interval. The
report reads several paths at once, writes a LaTeX table and states its provenance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mebench.artifacts import AGGREGATE_COLUMNS, write_metrics_csv
from mebench.report.cli import report_main
from mebench.report.writer import write_report


def _run(root: Path, name: str, label: str, seeds, budgets, agreement: float, *, sha: str = "aaaa1111",
         status: str = "complete", victim: str = "mnist_lenet5") -> None:
    for seed in seeds:
        folder = root / name / "20260101T000000Z" / f"seed_{seed}"
        folder.mkdir(parents=True)
        rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": agreement - 0.01 + 0.001 * seed,
                 "agreement": agreement + 0.01 * (b // 1000) + 0.002 * seed, "kl_mean": 0.5, "l1_mean": 0.05,
                 "attack": label, "data_mode": "surrogate", "output_mode": "soft_prob", "victim_id": victim,
                 "substitute_arch": "lenet5"} for b in budgets]
        write_metrics_csv(folder / "metrics.csv", rows)
        summary = {"status": status, "attack": {"name": label, "label": label}, "dataset": {"name": "MNIST"},
                   "victim": {"victim_id": victim, "test_accuracy": 0.99, "checkpoint_sha256": sha * 8}}
        (folder / "summary.json").write_text(json.dumps(summary))


def test_different_victim_checkpoints_are_reported_apart(tmp_path):
    _run(tmp_path, "old", "random", [0, 1], [1000, 10000], 0.5, sha="aaaa1111")
    _run(tmp_path, "new", "random", [0, 1], [1000, 10000], 0.6, sha="bbbb2222")
    with pytest.warns(UserWarning, match="victim_id 'mnist_lenet5' names 2 different checkpoints"):
        files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    agg = pd.read_csv(files["aggregate_csv"])
    assert set(agg["victim_id"]) == {"mnist_lenet5@aaaa1111", "mnist_lenet5@bbbb2222"}
    assert (agg["n_seeds"] == 2).all()  # never 4 seeds pooled over two victims
    assert tuple(agg.columns) == AGGREGATE_COLUMNS  # the one aggregate.csv schema


def test_runs_that_did_not_complete_are_left_out_and_listed(tmp_path):
    _run(tmp_path, "done", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path, "cut", "activethief", [0], [1000, 10000], 0.9, status="interrupted")
    with pytest.warns(UserWarning, match="left out cut seed 0.*'interrupted'"):
        files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    assert set(pd.read_csv(files["results_csv"])["label"]) == {"random"}
    assert set(pd.read_csv(files["leaderboard_csv"])["label"]) == {"random"}
    excluded = pd.read_csv(files["excluded_csv"])
    assert list(excluded["run_name"]) == ["cut"] and list(excluded["status"]) == ["interrupted"]
    md = files["leaderboard_md"].read_text()
    assert "Runs left out (not complete)" in md and "interrupted" in md


def test_ranks_and_comparisons_stay_within_one_budget_span(tmp_path):
    _run(tmp_path, "short", "random", [0, 1, 2], [1000, 10000], 0.5)
    _run(tmp_path, "long", "activethief", [0, 1, 2], [10000, 100000], 0.4)
    files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    board = pd.read_csv(files["leaderboard_csv"])
    assert sorted(board["rank"]) == [1, 1]  # different spans: each ranks first in its own span
    comps = pd.read_csv(files["comparisons_csv"])
    auc = comps[comps["metric"] == "agreement_auc"]
    assert auc.empty  # no AUC pair across spans
    assert set(comps["checkpoint_B"].dropna().astype(int)) == {10000}  # only the shared checkpoint


def test_one_seed_gives_no_interval_and_no_claim(tmp_path):
    _run(tmp_path, "a", "random", [0], [1000, 10000], 0.5)
    _run(tmp_path, "b", "activethief", [0], [1000, 10000], 0.7)
    files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    md = files["comparisons_md"].read_text()
    assert "n<2" in md and "| yes |" not in md


def test_several_paths_latex_and_provenance(tmp_path, capsys):
    _run(tmp_path / "one", "a", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path / "two", "b", "activethief_kcenter", [0, 1], [1000, 10000], 0.7)
    out = tmp_path / "out"
    assert report_main([str(tmp_path / "one"), str(tmp_path / "two"), "--out", str(out), "--n-bootstrap", "100"]) == 0
    board = pd.read_csv(out / "leaderboard.csv")
    assert set(board["label"]) == {"random", "activethief_kcenter"}
    tex = (out / "leaderboard.tex").read_text()
    assert "\\begin{tabular}" in tex and "\\toprule" in tex and "activethief\\_kcenter" in tex
    assert "$\\pm$" in tex and "activethief_kcenter" not in tex  # every '_' escaped
    md = (out / "leaderboard.md").read_text()
    assert "Generated by mebench" in md and str((tmp_path / "two").resolve()) in md
    prov = json.loads((out / "leaderboard.json").read_text())["definitions"]["provenance"]
    assert prov["created_utc"].endswith("Z") and len(prov["inputs"]) == 2 and "commit" in prov
