"""The third-party attack in ``examples/`` installs, registers through its entry point and runs.

The package is installed offline into a temporary folder (never into the test
environment) and used from subprocesses that have that folder on ``PYTHONPATH``:
once through ``mebench run`` and once as a cell of the repository's own pytest
grid (``benchmarks/test_cells.py``). Without the folder on the path, the name is
an unknown attack.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import yaml

from mebench.models.registry import build_model
from mebench.victims.load import save_victim

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "examples" / "mebench_example_attack"


def _example_installed_here() -> bool:
    """True when the example is installed in this environment itself (then it is never 'unknown')."""
    return any(ep.name == "example_noise" for ep in entry_points(group="mebench.attacks"))


def _mebench_cmd() -> list[str]:
    """The ``mebench`` console script of this interpreter (what a user runs); the same ``main`` otherwise."""
    script = Path(sys.executable).with_name("mebench")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from mebench.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example package installed (offline, no dependencies, no build isolation) into its own folder."""
    target = tmp_path_factory.mktemp("site")
    src = tmp_path_factory.mktemp("src") / "mebench_example_attack"
    # setuptools writes build/ and *.egg-info next to the sources: build from a copy, keep examples/ clean
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--target", str(target), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (dist,) = target.glob("mebench_example_attack-*.dist-info")
    assert "[mebench.attacks]" in (dist / "entry_points.txt").read_text()
    return target


@pytest.fixture(scope="module")
def victim(tmp_path_factory) -> Path:
    """An (untrained) LeNet-5 MNIST victim: the plumbing is under test, not the accuracy."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("victim") / "mnist_lenet5_untrained.pt"
    save_victim(path, build_model("lenet5", 1, 10, (28, 28), (0.0,), (1.0,)).net, "lenet5", 10, 1, (28, 28))
    return path


def _env(data_root: Path | None, site: Path | None = None) -> dict[str, str]:
    """This environment, one torch thread, and ``site`` (when given) in front of ``PYTHONPATH``."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if data_root is not None:
        env["MEBENCH_DATA_ROOT"] = str(data_root)
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _run_config(victim: Path, out: Path) -> dict:
    return {"run": {"name": "example", "seeds": [0], "device": "cpu", "output_dir": str(out)},
            "victim": {"victim_id": "mnist_lenet5_untrained", "checkpoint_ref": str(victim), "output_mode": "soft_prob"},
            "dataset": {"name": "MNIST", "data_mode": "data_free"},
            "substitute": {"arch": "lenet5"},
            "attack": {"name": "example_noise", "output_mode": "soft_prob", "params": {"batch_size": 50}},
            "budget": {"max_budget": 128, "checkpoints": [64, 128]}}


# contract 14.2: a third-party attack registers through the entry-point group and runs with `mebench run`
def test_example_attack_runs_through_mebench_run(data_root, site, victim, tmp_path):
    env = _env(data_root, site)
    listed = subprocess.run([*_mebench_cmd(), "list", "attacks"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "example_noise" in listed.stdout, listed.stdout + listed.stderr

    cfg = tmp_path / "example.yaml"
    cfg.write_text(yaml.safe_dump(_run_config(victim, tmp_path / "runs")))
    done = subprocess.run([*_mebench_cmd(), "run", str(cfg), "--threads", "1", "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    (summary_path,) = (tmp_path / "runs").glob("example/*/seed_0/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "complete"
    assert summary["queries_used"] == summary["budget"] == 128  # batches of 50, clipped at 64 and 128
    assert summary["attack"]["name"] == "example_noise" and summary["attack"]["data_modes"] == ["data_free"]
    with open(summary_path.parent / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["checkpoint_B"]) for r in rows] == [64, 128]
    assert {(r["attack"], r["data_mode"], r["output_mode"], r["track"]) for r in rows} == \
        {("example_noise", "data_free", "soft_prob", "A")}


# contract 14.2, 16: the same attack as a cell of the repository's pytest grid, budgets from --budgets
def test_example_attack_runs_in_the_grid(data_root, site, victim, tmp_path):
    bench = {"name": "ex", "seeds": [0], "budgets": [1000, 10000],  # replaced by --budgets below
             "run": {"device": "cpu"},
             "victim": {"victim_id": "mnist_lenet5_untrained", "checkpoint_ref": str(victim)},
             "dataset": {"name": "MNIST"}, "data_modes": {"data_free": {}}, "substitute": {"arch": "lenet5"},
             "output_modes": ["soft_prob"], "attacks": [{"name": "example_noise", "params": {"batch_size": 50}}]}
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(bench))
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_cells.py", "--rootdir", str(REPO),
                           "--mebench-config", str(tmp_path / "bench.yaml"), "-k", "example_noise",
                           "--budgets", "64,128", "--mebench-threads", "1", "-p", "no:cacheprovider",
                           "--mebench-cells", str(tmp_path / "cells"), "--mebench-json", str(report), "-q"],
                          cwd=REPO, env=_env(data_root, site), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-3000:]
    (cell,) = json.loads(report.read_text())["cells"]
    assert cell["id"] == "ex-example_noise-data_free-soft_prob-s0" and cell["status"] == "passed"
    assert cell["summary"]["queries_used"] == 128


# issue: an attack that is not installed fails validation, naming the attacks that are
@pytest.mark.skipif(_example_installed_here(), reason="the example attack is installed in this environment")
def test_without_the_package_the_attack_is_unknown(victim, tmp_path):
    from mebench.config import parse_config
    from mebench.errors import ConfigError
    from mebench.validation import validate

    raw = _run_config(victim, tmp_path / "runs")
    with pytest.raises(ConfigError, match="unknown attack 'example_noise'.*valid: .*random"):
        validate(parse_config(raw), check_files=False)

    cfg = tmp_path / "example.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    done = subprocess.run([*_mebench_cmd(), "run", str(cfg), "--threads", "1", "--no-progress"],
                          env=_env(None), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr  # a config error, before any work
    assert "unknown attack 'example_noise'" in done.stderr and "valid: " in done.stderr
    assert "random" in done.stderr.split("valid: ", 1)[1]
    assert not (tmp_path / "runs").exists()
