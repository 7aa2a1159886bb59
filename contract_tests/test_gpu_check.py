"""The GPU check (``benchmarks/gpu/check.sh``; docs/guide/performance.md "On a GPU"): the script is
valid bash, needs only what travels to a lent GPU machine (MNIST, no internet, no dependencies
installed), and its record becomes the performance page's GPU table with each goal judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "gpu" / "check.sh"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
sys.path.insert(0, str(ROOT / "studies" / "perf"))

import record  # noqa: E402
import summarize  # noqa: E402


def test_script_is_valid_bash_and_names_files_that_exist():
    subprocess.run(["bash", "-n", str(CHECK)], check=True)
    text = CHECK.read_text()
    assert "--no-deps --no-build-isolation" in text and "MEBENCH_OFFLINE=1" in text
    for path in ("configs/victims/mnist_lenet5.yaml", "contract_tests/test_cuda_paths.py",
                 "benchmarks/perf/test_gpu_step_perf.py", "configs/benchmarks/gpu/mnist.yaml",
                 "configs/scale/mnist_lenet5_random_seed_1m.yaml", "benchmarks/gpu/record.py"):
        assert path in text and (ROOT / path).is_file(), path
    assert "/gpu-data/" in (ROOT / ".gitignore").read_text().splitlines()


# the GPU grid needs MNIST alone (FashionMNIST does not travel): 6 seed-mode cells at 1k/10k.
def test_gpu_grid_is_mnist_only(tmp_path, monkeypatch):
    from mebench.harness.grid import load_grid
    from mebench.models.registry import MODELS
    from mebench.victims.load import save_victim

    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(tmp_path))
    (tmp_path / "victims").mkdir()  # an MNIST-shaped victim (untrained: only its shape is checked)
    save_victim(tmp_path / "victims" / "mnist_lenet5.pt", MODELS.get("lenet5")(1, 10, (28, 28)), "lenet5", 10, 1, (28, 28))
    grid = load_grid(ROOT / "configs" / "benchmarks" / "gpu" / "mnist.yaml", tmp_path, budgets=[1000, 10000])
    assert len(grid.cells) == 6
    assert {c.data_mode for c in grid.cells} == {"seed"} and {c.output_mode for c in grid.cells} == {"soft_prob", "hard_top1"}
    assert {c.cfg.dataset.name for c in grid.cells} == {"MNIST"}
    assert all(c.cfg.dataset.surrogate_name in (None, "") or c.data_mode != "surrogate" for c in grid.cells)


def _check_folder(tmp_path: Path, track_a_ms: float, grid_s: float, total_s: float) -> Path:
    """A folder as check.sh leaves it (its logs' formats: pytest, pytest-benchmark, mebench run)."""
    out = tmp_path / "check"
    (out / "runs" / "r" / "seed_0").mkdir(parents=True)
    (out / "grid" / "gpucheck-random-seed-soft_prob-s0").mkdir(parents=True)
    (out / "stages.jsonl").write_text("".join(json.dumps({"stage": s, "rc": 0, "wall_ms": 1000, "limit_s": 100}) + "\n"
                                              for s in ("victim", "cuda_tests", "perf", "grid", "random_1m")))
    (out / "cuda_tests.log").write_text("....\n========== 28 passed, 2 warnings in 41.20s ==========\n")
    (out / "grid.log").write_text(f"......\n=========== 6 passed in {grid_s:.2f}s ===========\n")

    def bench(case, ms, seeds=1, steps=2000):
        return {"extra_info": {"kind": "gpu_step", "case": case, "ms_per_seed_step": ms, "seeds": seeds,
                               "steps": steps, "seconds": ms * steps * seeds / 1e3}}

    rows = [bench("bare_eager", 2.0), bench("bare_graphed", 0.35), bench("mebench", track_a_ms),
            bench("together_3", 0.2, 3), bench("oracle", 0.4, steps=200), bench("bare_forward", 0.38, steps=200),
            {"extra_info": {"kind": "gpu_env", "device_name": "NVIDIA H200", "torch": "2.11.0", "cuda": "12.8"}}]
    (out / "gpu_step.json").write_text(json.dumps({"benchmarks": rows}))
    summary = {"status": "complete", "code_identity": "x", "timings_s": {"total": total_s},
               "track_a_step": {"1000": {"step": "graphed", "why": None}}, "machine": {"gpu": "NVIDIA H200"},
               "plan": {"victim": {"checkpoint_sha256": "ab" * 32}},
               "results": [{"track": "A", "checkpoint_B": 1000, "agreement": 0.5, "acc_gt": 0.5}]}
    (out / "runs" / "r" / "seed_0" / "summary.json").write_text(json.dumps(summary))
    (out / "grid" / "gpucheck-random-seed-soft_prob-s0" / "summary.json").write_text(json.dumps(summary))
    return out


def test_record_and_table(tmp_path):
    out = _check_folder(tmp_path, track_a_ms=0.4, grid_s=12.5, total_s=150.0)
    assert record.main([str(out), "--into", str(tmp_path / "perf" / "gpu")]) == 0
    rec = json.loads((tmp_path / "perf" / "gpu" / "nvidia-h200" / "record.json").read_text())
    assert rec["device_name"] == "NVIDIA H200" and rec["grid"]["pytest_s"] == 12.5
    assert rec["grid"]["counts"] == {"passed": 6} and rec["cuda_tests"]["counts"] == {"passed": 28, "warnings": 2}
    assert rec["random_1m"]["track_a_step"]["1000"]["step"] == "graphed" and len(rec["stages"]) == 5
    table = summarize.gpu_table(summarize.gpu_records(tmp_path / "perf"))
    assert "| goal: one LeNet-5 graphed, Track A |  | 0.400 | ms / step |  | met (<= 0.5) |" in table
    assert "goal: oracle / bare forward |  | 1.05 | x |  | met (<= 1.1)" in table
    assert "met (<= 15)" in table and "| 2.50 | min wall |  | met (<= 3)" in table
    assert "| NVIDIA H200 (torch 2.11.0) | mebench | 1 | 0.400 | ms / seed-step | 5.00x |  |" in table


def test_a_missed_goal_says_so(tmp_path):
    out = _check_folder(tmp_path, track_a_ms=0.9, grid_s=27.6, total_s=400.0)
    record.main([str(out), "--into", str(tmp_path / "perf" / "gpu")])
    table = summarize.gpu_table(summarize.gpu_records(tmp_path / "perf"))
    assert table.count("not met") == 3


def test_no_record_says_how_to_make_one(tmp_path):
    assert "benchmarks/gpu/check.sh" in summarize.gpu_table(summarize.gpu_records(tmp_path))


@pytest.mark.parametrize("log,expected", [("", {}), ("= 3 failed, 2 passed in 1.5s =", {"counts": {"failed": 3, "passed": 2}, "pytest_s": 1.5})])
def test_pytest_summary(tmp_path, log, expected):
    (tmp_path / "x.log").write_text(log)
    assert record.pytest_summary(tmp_path / "x.log") == expected
