"""Damaged or partial seed folders are named, never read (issues 40 item 5 and 43; contract §11, §16).

Each case garbles one file of one seed folder (or leaves it out) next to two whole seeds; the
report must leave that seed out of every table and list it in ``excluded.csv`` and the
leaderboard with a one-line reason. The damaged seed carries an agreement (0.999) no whole
seed has, so any of its numbers reaching a table would show.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from mebench.run.artifacts import write_metrics_csv
from mebench.report.writer import write_report

DAMAGED = 0.999


def write_seed(folder: Path, seed: int, agreement: float, *, grid_cell: bool = False) -> Path:
    """A whole seed folder, as the engine (and, for a grid cell, the harness) writes it."""
    folder.mkdir(parents=True)
    (folder / "run_config.yaml").write_text("attack: {name: random}\ndataset: {name: MNIST}\n")
    rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": 0.9812345, "agreement": agreement,
             "kl_mean": 0.5, "l1_mean": 0.05, "attack": "random", "data_mode": "surrogate",
             "output_mode": "soft_prob", "victim_id": "mnist_lenet5", "substitute_arch": "lenet5"}
            for b in (1000, 10000)]
    write_metrics_csv(folder / "metrics.csv", rows)
    summary = {"status": "complete", "seed": seed, "attack": {"name": "random", "label": "random"},
               "dataset": {"name": "MNIST"}, "victim": {"victim_id": "mnist_lenet5", "test_accuracy": 0.99}}
    (folder / "summary.json").write_text(json.dumps(summary))
    if grid_cell:
        (folder / "result.json").write_text(json.dumps({"id": folder.name, "status": "passed"}))
    return folder


def _cut_mid_number(f: Path) -> None:
    text = (f / "metrics.csv").read_text()
    (f / "metrics.csv").write_text(text[: text.rindex("0.9812345") + 4])  # "0.98": no final newline


def _missing_columns(f: Path) -> None:
    lines = (f / "metrics.csv").read_text().splitlines()
    (f / "metrics.csv").write_text("\n".join([*lines[:-1], lines[-1].rsplit(",", 3)[0]]) + "\n")


def _not_a_number(f: Path) -> None:
    (f / "metrics.csv").write_text((f / "metrics.csv").read_text().replace("0.9812345", "0.98x", 1))


def _header_only_interrupted(f: Path) -> None:
    (f / "metrics.csv").write_text((f / "metrics.csv").read_text().splitlines()[0] + "\n")
    summary = json.loads((f / "summary.json").read_text())
    (f / "summary.json").write_text(json.dumps({**summary, "status": "interrupted",
                                                "error": "KeyboardInterrupt: "}))


def _killed_before_first_checkpoint(f: Path) -> None:  # SIGKILL: no metrics.csv, no summary, a cache left
    (f / "metrics.csv").unlink()
    (f / "summary.json").unlink()
    (f / ".query_cache").mkdir()


def _impossible_agreement(f: Path) -> None:  # a whole row, but no measurement (issue 52)
    lines = (f / "metrics.csv").read_text().splitlines()
    fields = lines[1].split(",")
    fields[4] = "1.7"  # agreement
    (f / "metrics.csv").write_text("\n".join([lines[0], ",".join(fields), *lines[2:]]) + "\n")


def _bad_header(f: Path) -> None:
    text = (f / "metrics.csv").read_text()
    (f / "metrics.csv").write_text(text.replace("agreement,", "agr,", 1))


# (case, damage, status in excluded.csv, words of the reason, folder is a grid cell)
CASES: list[tuple[str, Callable[[Path], None], str, str, bool]] = [
    ("value cut mid-number", _cut_mid_number, "damaged metrics.csv", "last line cut (no final newline: truncated)",
     False),
    ("row missing columns", _missing_columns, "damaged metrics.csv", "line 3: 9 of 12 fields (truncated)", False),
    ("value not a number", _not_a_number, "damaged metrics.csv", "line 2: acc_gt '0.98x' is not a number", False),
    ("agreement outside its range", _impossible_agreement, "damaged metrics.csv",
     "line 2: agreement 1.7 is outside its range [0, 1]", False),
    ("header without columns", _bad_header, "damaged metrics.csv", "header lacks column(s) agreement", False),
    ("empty metrics.csv", lambda f: (f / "metrics.csv").write_text(""), "damaged metrics.csv",
     "metrics.csv: empty file", False),
    ("invalid summary.json", lambda f: (f / "summary.json").write_text('{"status": "comp'), "damaged summary.json",
     "summary.json: invalid JSON", False),
    ("empty summary.json", lambda f: (f / "summary.json").write_text(""), "damaged summary.json",
     "summary.json: empty file", False),
    ("summary.json not an object", lambda f: (f / "summary.json").write_text("[1, 2]"), "damaged summary.json",
     "summary.json: not a JSON object", False),
    ("no summary.json", lambda f: (f / "summary.json").unlink(), "no summary.json",
     "no summary.json: the run never finished", False),
    ("interrupted before any row", _header_only_interrupted, "interrupted", "status 'interrupted': KeyboardInterrupt",
     False),
    ("killed before first checkpoint", _killed_before_first_checkpoint, "no result rows",
     "no metrics.csv: no result rows (killed or interrupted before its first checkpoint) (its .query_cache is "
     "still on disk)", False),
    ("grid cell without result.json", lambda f: (f / "result.json").unlink(), "no result.json",
     "no result.json: the cell never finished", True),
    ("grid cell with truncated result.json", lambda f: (f / "result.json").write_text('{"stat'),
     "damaged result.json", "result.json: invalid JSON", True),
    ("grid cell that failed its checks",
     lambda f: (f / "result.json").write_text(json.dumps({"status": "failed", "problems": ["§7: D_1000 differs"]})),
     "cell failed", "cell failed: §7: D_1000 differs", True),
]


@pytest.mark.parametrize("case, damage, status, reason, grid_cell", CASES, ids=[c[0] for c in CASES])
@pytest.mark.slow
def test_each_damaged_file_is_excluded_by_name_with_its_reason(tmp_path, case, damage, status, reason, grid_cell):
    # issue 40 item 5 / issue 43: never read as complete, never silently gone
    parent = tmp_path / "runs" / ("pytest/20260101T000000Z/cells" if grid_cell else "mnist_random/20260101T000000Z")
    names = ["random-s0", "random-s1", "random-s2"] if grid_cell else ["seed_0", "seed_1", "seed_2"]
    for seed, name in enumerate(names[:2]):
        write_seed(parent / name, seed, 0.5 + 0.01 * seed, grid_cell=grid_cell)
    bad = write_seed(parent / names[2], 2, DAMAGED, grid_cell=grid_cell)
    damage(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = write_report(tmp_path / "runs", tmp_path / "out", n_bootstrap=50)
    excluded = pd.read_csv(files["excluded_csv"], keep_default_na=False)
    assert len(excluded) == 1, excluded
    row = excluded.iloc[0]
    assert row["source"].endswith(f"/{names[2]}") and row["status"] == status
    assert reason in row["reason"] and "\n" not in row["reason"]
    results = pd.read_csv(files["results_csv"])
    assert sorted(results["seed"].unique()) == [0, 1] and DAMAGED not in set(results["agreement"])
    assert set(pd.read_csv(files["aggregate_csv"])["n_seeds"]) == {2}
    assert reason.replace("|", "\\|") in files["leaderboard_md"].read_text()
    assert any(names[2] in str(w.message) and reason in str(w.message) for w in caught)


@pytest.mark.slow
def test_an_empty_seed_folder_is_named_too(tmp_path):
    # a run killed right after creating its folder left nothing but the folder
    write_seed(tmp_path / "r" / "t" / "seed_0", 0, 0.5)
    (tmp_path / "r" / "t" / "seed_1").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = write_report(tmp_path, tmp_path / "out", n_bootstrap=50)
    excluded = pd.read_csv(files["excluded_csv"], keep_default_na=False)
    assert excluded["source"].str.endswith("/seed_1").tolist() == [True]
    assert excluded["reason"].iloc[0].startswith("no metrics.csv: no result rows")


# issue 52: a JSON report's cell whose row holds an impossible metric is left out with its reason.
def test_a_json_report_row_outside_its_range_is_left_out():
    from mebench.report.load import pytest_json_records

    row = {"seed": 0, "checkpoint_B": 1000, "track": "A", "acc_gt": 0.9, "agreement": 1.7, "kl_mean": 0.1,
           "l1_mean": 0.01}
    good = {**row, "agreement": 0.9}
    doc = {"cells": [{"id": "bad", "status": "passed", "metrics_rows": [good, row], "summary": {}},
                     {"id": "good", "status": "passed", "metrics_rows": [good], "summary": {}}]}
    bad, fine = pytest_json_records(doc)
    assert bad.problem == "metrics row B=1000: agreement 1.7 is outside its range [0, 1]" and bad.status == "damaged"
    assert fine.problem == ""
