"""Report outputs that cannot mislead or break (issue 43; contract §16).

``defenses.md`` keeps victim builds apart and no empty figure is written; every path a report
(or a grid's ``report.json``) stores is relative to the file storing it, so moving ``runs/``
breaks nothing; and the report imports no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from mebench.run.artifacts import write_metrics_csv
from mebench.report.defenses import defense_matrix
from mebench.report.load import load_results
from mebench.report.paths import portable_grid_report, resolve_stored
from mebench.report.plots import scatter_points
from mebench.report.writer import write_report

REPO = Path(__file__).resolve().parents[1]


def write_seed(folder: Path, seed: int, agreement: float, *, sha: str = "a", defense: str = "none",
               mode: str = "soft_prob", budgets=(1000, 10000), utility: float | None = 0.97) -> None:
    folder.mkdir(parents=True)
    rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": agreement, "agreement": agreement,
             "kl_mean": 0.5 if mode == "soft_prob" else None, "l1_mean": 0.05 if mode == "soft_prob" else None,
             "attack": "random", "data_mode": "surrogate", "output_mode": mode, "victim_id": "mnist_lenet5",
             "substitute_arch": "lenet5"} for b in budgets]
    write_metrics_csv(folder / "metrics.csv", rows)
    summary = {"status": "complete", "seed": seed, "attack": {"name": "random", "output_mode": mode},
               "dataset": {"name": "MNIST"},
               "victim": {"victim_id": "mnist_lenet5", "test_accuracy": 0.99, "checkpoint_sha256": sha * 64},
               "defense": {"name": defense, **({"utility": {"test_accuracy": utility, "mean_abs_perturbation": 0.02}}
                                               if defense != "none" and utility is not None else {})},
               "training_health": [{"track": "A", "checkpoint_B": 1000, "pred_top_share": 0.95,
                                    "victim_top_share": 0.1, "flags": ["Track A B=1,000 collapsed: test"]}]}
    (folder / "summary.json").write_text(json.dumps(summary))


def _report(root: Path, out: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return write_report(root, out, n_bootstrap=50)


@pytest.mark.slow
def test_defenses_md_has_the_victim_column_and_never_mixes_builds(tmp_path):
    # issue 43: a .pt and an .onnx build of one victim_id (different sha256) are two rows, never differenced
    for seed in (0, 1):
        write_seed(tmp_path / "pt_none" / "t" / f"seed_{seed}", seed, 0.6, sha="a")
        write_seed(tmp_path / "pt_round" / "t" / f"seed_{seed}", seed, 0.5, sha="a", defense="rounding")
        write_seed(tmp_path / "onnx_round" / "t" / f"seed_{seed}", seed, 0.2, sha="b", defense="rounding")
    files = _report(tmp_path, tmp_path / "out")
    md = files["defenses_md"].read_text()
    assert "| victim | attack | none | rounding" in md
    assert "| mnist_lenet5@aaaaaaaa | random (surrogate) | 0.6000 ± 0.0000 / 0.6000 ± 0.0000 |" in md
    onnx = next(line for line in md.splitlines() if line.startswith("| mnist_lenet5@bbbbbbbb"))
    assert onnx.split(" | ")[2] == "– / –" and "[" not in onnx  # no undefended run of this build: no drop
    matrix = pd.read_csv(files["defenses_csv"])
    drops = matrix[(matrix["defense"] == "rounding") & (matrix["checkpoint_B"] == 1000)].set_index("base_victim")["drop_mean"]
    assert drops["mnist_lenet5@aaaaaaaa"] == pytest.approx(-0.1) and pd.isna(drops["mnist_lenet5@bbbbbbbb"])


@pytest.mark.slow
def test_no_empty_defense_plot_is_written(tmp_path):
    # issue 43: no plot at a budget no defended run reached; no hard-label plot without a defended hard-label run
    for seed in (0, 1):
        write_seed(tmp_path / "none" / "t" / f"seed_{seed}", seed, 0.6, budgets=(1000, 10000, 100000))
        write_seed(tmp_path / "round" / "t" / f"seed_{seed}", seed, 0.5, defense="rounding", budgets=(1000,))
        write_seed(tmp_path / "hard" / "t" / f"seed_{seed}", seed, 0.4, mode="hard_top1")
        write_seed(tmp_path / "hard_noutil" / "t" / f"seed_{seed}", seed, 0.3, mode="hard_top1",
                   defense="rounding", utility=None)
    files = _report(tmp_path, tmp_path / "out")
    points = scatter_points(defense_matrix(load_results(tmp_path), n_bootstrap=50))
    assert list(points) == [("MNIST", "soft_prob")]
    assert set(points[("MNIST", "soft_prob")]["checkpoint_B"]) == {1000}  # the budget the defended run reached
    assert sorted(points[("MNIST", "soft_prob")]["x"]) == [pytest.approx(0.97), pytest.approx(0.99)]
    written = sorted(p.name for p in (tmp_path / "out").glob("defenses*"))
    assert written == ["defenses.csv", "defenses.md", "defenses_mnist_soft_prob.png", "defenses_mnist_soft_prob.svg"]
    assert files["defenses_mnist_soft_prob_png"].stat().st_size > 0


@pytest.mark.slow
def test_report_paths_are_relative_and_survive_moving_runs(tmp_path):
    # issue 43: nothing in a report points to an absolute path
    runs = tmp_path / "runs"
    for seed in (0, 1):
        write_seed(runs / "r" / "t" / f"seed_{seed}", seed, 0.6)
    (runs / "r" / "t" / "seed_2").mkdir()  # excluded: its source is written too
    _report(runs, runs / "report")
    moved = tmp_path / "elsewhere" / "runs"
    shutil.move(str(runs), str(moved))
    out = moved / "report"
    prov = json.loads((out / "leaderboard.json").read_text())["definitions"]["provenance"]
    assert prov["inputs"] == [".."] and (out / prov["inputs"][0] / "r").is_dir()
    for name in ("excluded.csv", "results.csv"):
        sources = pd.read_csv(out / name)["source"]
        assert len(sources) and all(not os.path.isabs(s) and (out / s).is_dir() for s in sources)
    for page in out.glob("*.md"):
        assert str(tmp_path) not in page.read_text(), page.name


def test_grid_report_json_paths_are_made_relative_to_it(tmp_path):
    # issue 43: the grid's report.json (written by mebench.harness.session) stores paths relative to itself
    run = tmp_path / "runs" / "pytest" / "20260101T000000Z"
    cell = run / "cells" / "random-s0"
    cell.mkdir(parents=True)
    (cell / "metrics.csv").write_text("x\n")
    doc = {"files": {"report": str(run / "report.json"), "cells_dir": str(run / "cells")},
           "cells": [{"id": "random-s0", "artifacts_dir": str(cell), "artifacts": {"metrics.csv": str(cell / "metrics.csv")},
                      "metrics_rows": []}]}
    portable = portable_grid_report(doc, run / "report.json")
    assert portable["files"] == {"report": "report.json", "cells_dir": "cells"}
    assert portable["cells"][0]["artifacts_dir"] == "cells/random-s0"
    assert portable["cells"][0]["artifacts"] == {"metrics.csv": "cells/random-s0/metrics.csv"}
    (run / "report.json").write_text(json.dumps(portable))
    moved = tmp_path / "copy"
    shutil.copytree(tmp_path / "runs", moved)
    held = moved / "pytest" / "20260101T000000Z" / "report.json"
    stored = json.loads(held.read_text())["cells"][0]["artifacts"]["metrics.csv"]
    assert resolve_stored(stored, held).read_text() == "x\n"


@pytest.mark.slow
def test_the_report_imports_no_torch(tmp_path):
    # issue 43: `mebench report` is torch-free (0.73 GB RSS for one run with torch)
    for seed in (0, 1):
        write_seed(tmp_path / "runs" / "a" / "t" / f"seed_{seed}", seed, 0.6)
        write_seed(tmp_path / "runs" / "b" / "t" / f"seed_{seed}", seed, 0.5, defense="rounding")
    code = (
        "import importlib, pkgutil, sys, warnings\n"
        "import mebench.report\n"
        "for m in pkgutil.iter_modules(mebench.report.__path__):\n"
        "    importlib.import_module('mebench.report.' + m.name)\n"
        "from mebench.report.cli import report_main\n"
        "warnings.simplefilter('ignore')\n"
        f"rc = report_main([{str(tmp_path / 'runs')!r}, '--n-bootstrap', '20'])\n"
        "assert rc == 0, rc\n"
        "print('torch' in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:3])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False []"
    assert (tmp_path / "runs" / "report" / "defenses.md").is_file()
