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

from mebench.run.artifacts import AGGREGATE_COLUMNS, write_metrics_csv
from mebench.report.cli import report_main
from mebench.report.writer import write_report


def _run(root: Path, name: str, label: str, seeds, budgets, agreement: float, *, sha: str = "aaaa1111",
         status: str = "complete", victim: str = "mnist_lenet5") -> None:
    for seed in seeds:
        folder = root / name / "20260101T000000Z" / f"seed_{seed}"
        folder.mkdir(parents=True)
        rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": agreement - 0.01 + 0.001 * seed,
                 # grows with the budget, within [0, 1] (a record outside its range is left out, issue 52)
                 "agreement": min(agreement + 0.01 * (b // 1000), 0.99) + 0.002 * seed, "kl_mean": 0.5, "l1_mean": 0.05,
                 "attack": label, "data_mode": "surrogate", "output_mode": "soft_prob", "victim_id": victim,
                 "substitute_arch": "lenet5"} for b in budgets]
        write_metrics_csv(folder / "metrics.csv", rows)
        summary = {"status": status, "attack": {"name": label, "label": label}, "dataset": {"name": "MNIST"},
                   "victim": {"victim_id": victim, "test_accuracy": 0.99, "checkpoint_sha256": sha * 8}}
        (folder / "summary.json").write_text(json.dumps(summary))


@pytest.mark.slow
def test_different_victim_checkpoints_are_reported_apart(tmp_path):
    _run(tmp_path, "old", "random", [0, 1], [1000, 10000], 0.5, sha="aaaa1111")
    _run(tmp_path, "new", "random", [0, 1], [1000, 10000], 0.6, sha="bbbb2222")
    with pytest.warns(UserWarning, match="victim_id 'mnist_lenet5' names 2 different checkpoints"):
        files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    agg = pd.read_csv(files["aggregate_csv"])
    assert set(agg["victim_id"]) == {"mnist_lenet5@aaaa1111", "mnist_lenet5@bbbb2222"}
    assert (agg["n_seeds"] == 2).all()  # never 4 seeds pooled over two victims
    assert tuple(agg.columns) == AGGREGATE_COLUMNS  # the one aggregate.csv schema


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_one_seed_gives_no_interval_and_no_claim(tmp_path):
    _run(tmp_path, "a", "random", [0], [1000, 10000], 0.5)
    _run(tmp_path, "b", "activethief", [0], [1000, 10000], 0.7)
    files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    md = files["comparisons_md"].read_text()
    assert "n<2" in md and "| yes |" not in md


@pytest.mark.slow
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
    assert "Generated by mebench" in md and "../two" in md and str(tmp_path) not in md  # issue 43: relative
    html = (out / "leaderboard.html").read_text()
    assert "Generated by mebench" in html and "../one" in html
    prov = json.loads((out / "leaderboard.json").read_text())["definitions"]["provenance"]
    assert prov["created_utc"].endswith("Z") and prov["inputs"] == ["../one", "../two"] and "commit" in prov


def _cell(cell_id: str, label: str, seed: int, status: str = "passed", budgets=(1000, 10000)) -> dict:
    rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": 0.5, "agreement": 0.6 + 0.01 * seed,
             "kl_mean": 0.5, "l1_mean": 0.05, "attack": label, "data_mode": "surrogate",
             "output_mode": "soft_prob", "victim_id": "mnist_lenet5", "substitute_arch": "lenet5"} for b in budgets]
    summary = {"status": "complete", "timestamp": "20260101T000000Z", "attack": {"name": label, "label": label},
               "dataset": {"name": "MNIST"}, "victim": {"test_accuracy": 0.99, "checkpoint_sha256": "c" * 64}}
    return {"id": cell_id, "status": status, "metrics_rows": rows, "summary": summary}


@pytest.mark.slow
def test_seed_folder_without_summary_is_an_unfinished_run_left_out(tmp_path, capsys):
    # the engine writes summary.json last: metrics.csv alone is a run that was killed or still runs
    _run(tmp_path, "done", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path, "killed", "activethief", [0], [1000, 10000], 0.9)
    (tmp_path / "killed" / "20260101T000000Z" / "seed_0" / "summary.json").unlink()
    out = tmp_path / "out"
    assert report_main([str(tmp_path), "--out", str(out), "--n-bootstrap", "50"]) == 0
    captured = capsys.readouterr()
    assert "no summary.json" in captured.err
    assert "left out 1 seed-run(s) that did not complete" in captured.out
    assert set(pd.read_csv(out / "leaderboard.csv")["label"]) == {"random"}
    excluded = pd.read_csv(out / "excluded.csv")
    assert list(excluded["run_name"]) == ["killed"] and list(excluded["status"]) == ["no summary.json"]


@pytest.mark.slow
def test_report_cells_that_did_not_pass_are_left_out_and_named(tmp_path):
    doc = {"cells": [_cell("random-s0", "random", 0), _cell("random-s1", "random", 1),
                     _cell("kc-s0", "activethief_kcenter", 0, status="failed"),
                     {"id": "kc-s1", "status": "error", "error": "CUDA out of memory", "metrics_rows": [],
                      "summary": {}},
                     {"id": "skip-s0", "status": "skipped", "metrics_rows": [], "summary": {}}]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning) as record:
        files = write_report(path, tmp_path / "out", n_bootstrap=50)
    messages = [str(w.message) for w in record]
    assert any("kc-s1" in m and "cell error: CUDA out of memory" in m for m in messages)
    assert any("left out kc-s0 seed 0" in m and "cell failed" in m for m in messages)
    assert not any("skip-s0" in m for m in messages)  # a skipped cell is not a failure
    assert set(pd.read_csv(files["leaderboard_csv"])["label"]) == {"random"}
    assert pd.read_csv(files["comparisons_csv"]).empty
    assert list(pd.read_csv(files["excluded_csv"])["status"]) == ["cell failed", "cell error"]


@pytest.mark.slow
def test_a_seed_run_read_twice_is_kept_once(tmp_path):
    _run(tmp_path / "runs", "a", "random", [0, 1], [1000, 10000], 0.5)
    folder, seed_folder = tmp_path / "runs", tmp_path / "runs" / "a" / "20260101T000000Z" / "seed_0"
    with pytest.warns(UserWarning) as record:
        files = write_report([folder, seed_folder, folder], tmp_path / "out", n_bootstrap=50)
    twice = sorted(str(w.message).split(":")[0][-6:] for w in record if "read twice" in str(w.message))
    assert twice == ["seed_0", "seed_0", "seed_1"]  # seed_0 given three times, seed_1 twice
    assert set(pd.read_csv(files["aggregate_csv"])["n_seeds"]) == {2}  # not 3 or 4 seeds
    # one cell id in two JSON reports: one copy kept, the dropped one named
    for name in ("one.json", "two.json"):
        (tmp_path / name).write_text(json.dumps({"cells": [_cell("random-s0", "random", 0)]}))
    with pytest.warns(UserWarning, match="one.json::random-s0 \\(seed 0, completed .*\\) replaced by .*two.json"):
        files = write_report([tmp_path / "one.json", tmp_path / "two.json"], tmp_path / "out2", n_bootstrap=50)
    assert set(pd.read_csv(files["aggregate_csv"])["n_seeds"]) == {1}


@pytest.mark.slow
def test_n_bootstrap_reaches_comparisons_and_gains_and_every_option_has_help(tmp_path):
    from mebench.report.cli import add_report_arguments
    import argparse

    _run(tmp_path, "a", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path, "b", "activethief", [0, 1], [1000, 10000], 0.7)
    out = tmp_path / "out"
    assert report_main([str(tmp_path), "--out", str(out), "--n-bootstrap", "123"]) == 0
    for name in ("comparisons.json", "gains.json"):
        assert json.loads((out / name).read_text())["definitions"]["n_bootstrap"] == 123
    parser = add_report_arguments(argparse.ArgumentParser())
    assert all(action.help for action in parser._actions)


@pytest.mark.slow
def test_latex_table_has_mode_track_span_columns_and_values_at_the_span_end(tmp_path):
    _run(tmp_path, "short", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path, "long", "activethief_kcenter", [0, 1], [1000, 10000, 100000], 0.4)
    files = write_report(tmp_path, tmp_path / "out", n_bootstrap=50)
    tex = files["leaderboard_tex"].read_text()
    header = next(line for line in tex.splitlines() if line.startswith("Rank & "))
    assert "Output mode & Track" in header and "Span" in header and "Acc @" in header
    rows = [line for line in tex.splitlines() if line.endswith("\\\\") and not line.startswith("Rank")]
    short = next(r for r in rows if "random" in r)
    long = next(r for r in rows if "activethief\\_kcenter" in r)
    assert "soft\\_prob & A" in short and "1k--10k" in short and "1k--100k" in long
    assert short.startswith("1 &") and long.startswith("1 &")  # each ranks first within its span
    assert short.split(" & ")[-1].strip(" \\") != "--" and long.split(" & ")[-1].strip(" \\") != "--"
    assert tex.count("\\midrule") == 2  # header rule + one rule between the two span blocks


@pytest.mark.slow
def test_defended_runs_are_another_victim(tmp_path):
    # a defense changes what the attacker sees: its runs are never pooled with undefended ones
    _run(tmp_path, "plain", "random", [0, 1], [1000, 10000], 0.5)
    _run(tmp_path, "defended", "random", [0, 1], [1000, 10000], 0.3)
    for summary in (tmp_path / "defended").rglob("summary.json"):
        doc = json.loads(summary.read_text())
        summary.write_text(json.dumps({**doc, "defense": {"name": "rounding", "params": {"decimals": 1},
                                                          "utility": {"test_accuracy": 0.97,
                                                                      "mean_abs_perturbation": 0.02}}}))
    files = write_report(tmp_path, tmp_path / "out", n_bootstrap=200)
    agg = pd.read_csv(files["aggregate_csv"])
    assert set(agg["victim_id"]) == {"mnist_lenet5", "mnist_lenet5+rounding"} and (agg["n_seeds"] == 2).all()
    # the attack x defense matrix sets them side by side, with the defense's utility cost
    matrix = pd.read_csv(files["defenses_csv"])
    assert set(matrix["defense"]) == {"none", "rounding"} and set(matrix["base_victim"]) == {"mnist_lenet5"}
    low = matrix[(matrix["defense"] == "rounding") & (matrix["checkpoint_B"] == 1000)]
    assert low["agreement_mean"].iloc[0] == pytest.approx(0.3 + 0.01 + 0.001)
    # the change against no defense, paired by seed: 0.3 - 0.5 for both seeds, so the interval is the point
    assert low["drop_mean"].iloc[0] == pytest.approx(-0.2) and low["drop_n"].iloc[0] == 2
    assert low["drop_ci_low"].iloc[0] == pytest.approx(-0.2) and low["drop_ci_high"].iloc[0] == pytest.approx(-0.2)
    assert "rounding (acc 0.970, |Δp| 0.020)" in files["defenses_md"].read_text().replace("\\|", "|")
    assert files["defenses_mnist_soft_prob_png"].is_file()  # the utility-vs-protection scatter
