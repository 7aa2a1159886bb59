"""The third-party attack in ``examples/`` installs, registers through its entry point and runs.

The package is installed offline into a temporary folder (never into the test
environment) and used from subprocesses that have it on ``PYTHONPATH``: once
through ``mebench run`` and once through the pytest grid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mebench.models.registry import build_model
from mebench.victims.load import save_victim

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "examples" / "mebench_example_attack"
BENCHMARKS = REPO / "benchmarks"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example package installed (offline, no dependencies) into its own folder."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("src")
    shutil.copytree(PACKAGE, build / "pkg")  # pip may write build files next to the sources
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(build / "pkg")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return target


@pytest.fixture(scope="module")
def victim(tmp_path_factory) -> Path:
    """An (untrained) LeNet-5 MNIST victim: the plumbing is under test, not the accuracy."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("victim") / "mnist_lenet5_untrained.pt"
    save_victim(path, build_model("lenet5", 1, 10, (28, 28), (0.0,), (1.0,)).net, "lenet5", 10, 1, (28, 28))
    return path


def _env(site: Path, data_root: Path) -> dict[str, str]:
    env = dict(os.environ, MEBENCH_DATA_ROOT=str(data_root), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _run_config(victim: Path, out: Path) -> dict:
    return {"run": {"name": "example", "seeds": [0], "device": "cpu", "output_dir": str(out)},
            "victim": {"victim_id": "mnist_lenet5_untrained", "checkpoint_ref": str(victim), "output_mode": "soft_prob"},
            "dataset": {"name": "MNIST", "data_mode": "data_free"},
            "substitute": {"arch": "lenet5"},
            "attack": {"name": "example_noise", "output_mode": "soft_prob", "params": {"batch_size": 50}},
            "budget": {"max_budget": 128, "checkpoints": [64, 128]}}


# contract 14.2: a third-party attack registers through the entry-point group and runs with `mebench run`
def test_example_attack_runs_through_mebench_run(site, victim, data_root, tmp_path):
    cfg = tmp_path / "example.yaml"
    cfg.write_text(yaml.safe_dump(_run_config(victim, tmp_path / "runs")))
    listed = subprocess.run([sys.executable, "-c", "from mebench.cli import main; main(['list', 'attacks'])"],
                            env=_env(site, data_root), capture_output=True, text=True, timeout=120)
    assert "example_noise" in listed.stdout, listed.stderr
    done = subprocess.run([sys.executable, "-c", "import sys; from mebench.cli import main; sys.exit(main(sys.argv[1:]))",
                           "run", str(cfg), "--threads", "1", "--no-progress"],
                          env=_env(site, data_root), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (summary_path,) = (tmp_path / "runs").glob("example/*/seed_0/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "complete" and summary["queries_used"] == 128
    assert summary["attack"]["name"] == "example_noise"
    rows = (summary_path.parent / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3 and all(",example_noise,data_free," in r for r in rows[1:])


# contract 14.2, 16: the same attack as a cell of the pytest grid
def test_example_attack_runs_in_the_grid(site, victim, data_root, tmp_path):
    (tmp_path / "benchmarks").mkdir()
    for name in ("conftest.py", "test_cells.py"):
        shutil.copy(BENCHMARKS / name, tmp_path / "benchmarks" / name)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    raw = _run_config(victim, tmp_path / "runs")
    bench = {"name": "ex", "seeds": [0], "budgets": [64, 128], "run": {"device": "cpu"},
             "victim": {"victim_id": raw["victim"]["victim_id"], "checkpoint_ref": str(victim)},
             "dataset": {"name": "MNIST"}, "data_modes": {"data_free": {}}, "substitute": raw["substitute"],
             "output_modes": ["soft_prob"], "attacks": [{"name": "example_noise", "params": {"batch_size": 50}}]}
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(bench))
    done = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--mebench-config", "bench.yaml",
                           "-k", "example_noise", "--mebench-json", "report.json", "--mebench-threads", "1", "-q"],
                          cwd=tmp_path, env=_env(site, data_root), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (cell,) = json.loads((tmp_path / "report.json").read_text())["cells"]
    assert cell["id"] == "ex-example_noise-data_free-soft_prob-s0" and cell["status"] == "passed"
    assert cell["summary"]["queries_used"] == 128


def test_without_the_package_the_attack_is_unknown(victim, tmp_path):
    # issue: an attack that is not installed fails validation with the names that are
    from mebench.config import parse_config
    from mebench.errors import ConfigError
    from mebench.validation import validate

    with pytest.raises(ConfigError, match="unknown attack 'example_noise'.*valid: .*random"):
        validate(parse_config(_run_config(victim, tmp_path)), check_files=False)
