"""The third-party plugins in ``examples/`` register through their entry points and keep the contract.

``examples/mebench_example`` holds one attack, one defense and one victim format, each one module
and one test, declared in its ``pyproject.toml``. Fast tests simulate the install (a temporary
``.dist-info`` with the package's entry points on ``sys.path``, what ``pip install`` writes) and
check that each registry finds its plugin; slow ones install the package offline into a temporary
folder (never into the test environment) and use it from subprocesses: the example's own tests,
``mebench run`` and a cell of the repository's own pytest grid (``benchmarks/test_cells.py``).
Without the package on the path, the attack's name is unknown.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import yaml

from mebench.models.registry import build_model
from mebench.victims.load import save_victim
from mebench.report.paths import resolve_stored
from mebench.report.records import full

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "examples" / "mebench_example"
#: The registries a plugin of the example joins, by entry-point group.
GROUPS = {"mebench.attacks": ("mebench.attacks", "ATTACKS"), "mebench.defenses": ("mebench.defenses", "DEFENSES"),
          "mebench.victim_formats": ("mebench.victims.registry", "FORMATS"),
          "mebench.probes": ("mebench.probes", "PROBES")}


def declared_entry_points() -> dict[str, dict[str, str]]:
    """``{group: {name: module}}`` from the example's ``pyproject.toml``."""
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    return {group: dict(eps) for group, eps in project["entry-points"].items()}


def fake_install(folder: Path) -> None:
    """What ``pip install`` leaves for ``importlib.metadata``: a ``.dist-info`` with the entry points."""
    dist = folder / "mebench_example-0.2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mebench-example\nVersion: 0.2.0\n")
    lines = [f"[{group}]\n" + "".join(f"{n} = {m}\n" for n, m in eps.items())
             for group, eps in declared_entry_points().items()]
    (dist / "entry_points.txt").write_text("\n".join(lines))


@pytest.fixture
def fake_installed(tmp_path, monkeypatch):
    """The example "installed" for this test only: every registry reloads its entry points, and
    afterwards forgets the example's plugins and modules (a later lookup sees the built-ins only)."""
    import importlib

    registries = [getattr(importlib.import_module(m), attr) for m, attr in GROUPS.values()]
    saved = [(r, dict(r._items), r._entry_points_loaded) for r in registries]
    fake_install(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(PACKAGE))
    for r in registries:
        r._entry_points_loaded = False
    yield {attr: r for (_, attr), r in zip(GROUPS.values(), registries)}
    for r, items, loaded in saved:
        r._items, r._entry_points_loaded = items, loaded
    for name in [m for m in sys.modules if m == "mebench_example" or m.startswith("mebench_example.")]:
        del sys.modules[name]


# issue 35: adding an attack, a defense or a victim format touches two files: its module and its test
def test_each_plugin_is_one_module_and_one_test():
    declared = declared_entry_points()
    assert set(GROUPS) <= set(declared)
    modules = {m for eps in declared.values() for m in eps.values()}
    assert all(m.startswith("mebench_example.") for m in modules)
    names = {m.split(".", 1)[1] for m in modules}
    assert {p.stem for p in (PACKAGE / "mebench_example").glob("*.py")} == names | {"__init__"}
    assert {p.stem for p in (PACKAGE / "tests").glob("test_*.py")} == {f"test_{n}" for n in names}


# contract 14.2 / §4: each registry finds the example's plugin through its entry point, under the
# name the pyproject declares, with the capabilities the registry-driven contract tests read
def test_entry_points_register_each_plugin(fake_installed):
    declared = declared_entry_points()
    for group, (_, attr) in GROUPS.items():
        registry = fake_installed[attr]
        for name, module in declared[group].items():
            assert name in registry.names(), f"{group}: {name} not registered by {module}"
            assert registry.get(name).__module__ == module
    assert fake_installed["ATTACKS"].get("example_noise").smoke_params
    assert fake_installed["FORMATS"].get("example_npz").reads_file


def test_the_plugins_are_gone_without_the_package():
    from mebench.attacks import ATTACKS
    from mebench.defenses import DEFENSES
    from mebench.victims.registry import FORMATS

    if _example_installed_here():
        pytest.skip("the example is installed in this environment")
    assert "example_noise" not in ATTACKS and "example_smoothing" not in DEFENSES and "example_npz" not in FORMATS


# each plugin's own test passes with the package "installed" (its entry points on the path)
@pytest.mark.slow
def test_the_examples_own_tests_pass(tmp_path):
    fake_install(tmp_path)
    env = _env(None, tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-m", "pytest", str(PACKAGE / "tests"), "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(PACKAGE)], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "7 passed" in done.stdout


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
def site(example_site: Path) -> Path:
    """The example package installed offline into its own folder (``conftest.example_site``)."""
    written = next(example_site.glob("mebench_example-*.dist-info")).joinpath("entry_points.txt").read_text()
    assert all(f"[{group}]" in written for group in GROUPS)
    return example_site


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
@pytest.mark.slow
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
@pytest.mark.slow
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
    cell = full(cell, resolve_stored(cell["artifacts_dir"], report))  # report.json points at the cell's files
    assert cell["id"] == "ex-example_noise-data_free-soft_prob-s0" and cell["status"] == "passed"
    assert cell["summary"]["queries_used"] == 128


# issue: an attack that is not installed fails validation, naming the attacks that are
@pytest.mark.slow
@pytest.mark.skipif(_example_installed_here(), reason="the example attack is installed in this environment")
def test_without_the_package_the_attack_is_unknown(victim, tmp_path):
    from mebench.config import parse_config
    from mebench.errors import ConfigError
    from mebench.config.validation import validate

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
