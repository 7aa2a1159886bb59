"""``--resume`` by plan, code identity and threads; folders that cannot collide (issues 35 and 43).

The grid tests run pytest in-process inside a pytester folder holding the real benchmark harness
and a one-cell SYNTH grid of ``plan_probe``, a test-only attack (Random with its own ``Params``)
registered for this module, so a test can change one of its defaults between two runs.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from mebench.run import artifacts
from mebench.support import identity
from mebench.attacks import ATTACKS
from mebench.attacks.random import RandomAttack
from mebench.cli import main
from mebench.support.naming import QUERY_CACHE_DIR, make_stamp_dir
from test_plugin import make_grid_folder

pytest_plugins = ["pytester"]

CELL = "rp-plan_probe-surrogate-soft_prob-s0"
GRID = """\
name: rp
register: ["mebench.testing:register_synthetic"]
seeds: [0]
budgets: [100, 200]
smoke_max_budget: 200
output_modes: [soft_prob]
run: {device: cpu}
victim: {victim_id: synth_mlp, checkpoint_ref: synth_victim.pt}
dataset: {name: SYNTH, data_root: .}
data_modes:
  surrogate: {surrogate_name: SYNTHSUR}
substitute:
  arch: tiny_mlp
  optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0}
attacks:
  - name: plan_probe
"""
ARGS = ("benchmarks", "--mebench-cells", "cells", "--mebench-threads", "1")


class ProbeAttack(RandomAttack):
    """Random selection under another name, with a default a test can change."""

    name = "plan_probe"

    @dataclass(frozen=True)
    class Params:
        batch_size: int = 64


@dataclass(frozen=True)
class ChangedParams:
    """``ProbeAttack.Params`` after "a release changed its default"."""

    batch_size: int = 32


@pytest.fixture(scope="module", autouse=True)
def probe_attack():
    ATTACKS.register(ProbeAttack.name)(ProbeAttack)
    yield ProbeAttack
    ATTACKS.unregister(ProbeAttack.name)


@pytest.fixture
def grid(pytester: pytest.Pytester, synth_victim_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder with the benchmark harness and the one-cell grid; single-threaded torch."""
    make_grid_folder(pytester, synth_victim_path, GRID, "rp.yaml")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    yield pytester
    torch.set_num_threads(threads)


def run_grid(grid: pytest.Pytester, *extra: str, json_name: str = "report.json") -> pytest.RunResult:
    return grid.runpytest(*ARGS, "--mebench-json", json_name, *extra)


def resume_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("mebench --resume:")]


def cell_summary(grid: pytest.Pytester) -> dict:
    return json.loads((grid.path / "cells" / CELL / "summary.json").read_text())


# issue 35: a changed default of a registered attack makes --resume run the cell again, with one line saying why.
@pytest.mark.slow
def test_changed_attack_default_reruns_the_cell(grid, monkeypatch):
    run_grid(grid).assert_outcomes(passed=1)
    run_grid(grid, "--resume").assert_outcomes(skipped=1)  # nothing changed: kept
    monkeypatch.setattr(ProbeAttack, "Params", ChangedParams)
    again = run_grid(grid, "--resume")
    again.assert_outcomes(passed=1)
    assert resume_lines(again) == [f"mebench --resume: {CELL}: runs again: its plan differs "
                                   "(attack.params.batch_size: 64 -> 32)"]
    assert cell_summary(grid)["plan"]["attack"]["params"] == {"batch_size": 32}
    record = json.loads((grid.path / "report.json").read_text())["cells"][0]
    assert record["rerun_reason"] == "its plan differs (attack.params.batch_size: 64 -> 32)"


# issue 58: with --resume the estimate covers the cells that run, and the kept cells' measured time stands
# beside mebench's estimate for them (the estimate's own check, per label)
@pytest.mark.slow
def test_resume_estimates_the_cells_that_run_and_checks_the_kept_ones(grid):
    run_grid(grid).assert_outcomes(passed=1)
    took = cell_summary(grid)["timings_s"]["total"]
    kept = run_grid(grid, "--resume")
    kept.assert_outcomes(skipped=1)
    kept.stdout.fnmatch_lines(["mebench: 0 grid cells selected: 0 queries*",
                               "mebench: 1 of the 1 selected cells are complete and kept by --resume, the estimate "
                               "above is the 0 that run; measured against mebench's estimate: plan_probe * against ~* "
                               "(x*, 1 cell)"])
    line = next(x for x in kept.outlines if "measured against" in x)
    from mebench.harness.cost import human

    assert f"plan_probe {human(took)} against" in line
    fresh = run_grid(grid, "--resume", "--mebench-cells", "other")
    assert not any("complete and kept" in x for x in fresh.outlines)


# issue 35: a changed code identity (another mebench source) makes --resume run the cell again.
@pytest.mark.slow
def test_changed_code_identity_reruns_the_cell(grid, monkeypatch):
    run_grid(grid).assert_outcomes(passed=1)
    old = identity.code_identity()
    monkeypatch.setattr(identity, "code_identity", lambda: "9.9.9+src.000000000000")
    again = run_grid(grid, "--resume")
    again.assert_outcomes(passed=1)
    assert resume_lines(again) == [f"mebench --resume: {CELL}: runs again: code identity {old} -> 9.9.9+src.000000000000"]
    assert cell_summary(grid)["code_identity"] == "9.9.9+src.000000000000"
    run_grid(grid, "--resume").assert_outcomes(skipped=1)  # now current


# issue 43: --resume with another --mebench-threads does not reuse cells computed at another thread count.
@pytest.mark.slow
def test_changed_thread_count_reruns_the_cell(grid):
    run_grid(grid).assert_outcomes(passed=1)
    again = grid.runpytest("benchmarks", "--mebench-cells", "cells", "--mebench-threads", "2", "--resume")
    again.assert_outcomes(passed=1)
    assert resume_lines(again) == [f"mebench --resume: {CELL}: runs again: torch threads 1 -> 2"]
    assert cell_summary(grid)["machine"]["torch_threads"] == 2


# issue 35: --keep-stale keeps a whole cell whose plan differs, and marks it in summary.json and the JSON report.
@pytest.mark.slow
def test_keep_stale_keeps_and_marks_the_cell(grid, monkeypatch):
    run_grid(grid).assert_outcomes(passed=1)
    before = (grid.path / "cells" / CELL / "metrics.csv").read_bytes()
    monkeypatch.setattr(ProbeAttack, "Params", ChangedParams)
    kept = run_grid(grid, "--resume", "--keep-stale", json_name="kept.json")
    kept.assert_outcomes(skipped=1)
    reason = "its plan differs (attack.params.batch_size: 64 -> 32)"
    assert resume_lines(kept) == [f"mebench --resume: {CELL}: kept although stale (--keep-stale): {reason}"]
    assert cell_summary(grid)["resume"] == {"kept_stale": True, "reason": reason}
    report = json.loads((grid.path / "kept.json").read_text())
    assert report["kept_stale"] == [{"id": CELL, "reason": reason}] and report["counts"]["kept_stale"] == 1
    assert report["cells"][0]["resume"] == {"kept_stale": True, "reason": reason}
    assert (grid.path / "cells" / CELL / "metrics.csv").read_bytes() == before


# issue 43: a cell whose files are not whole is run again, whatever its hashes say, with the reason.
@pytest.mark.parametrize("damage,reason", [
    (lambda d: (d / "metrics.csv").write_text((d / "metrics.csv").read_text()[:-9]),
     "metrics.csv is truncated (its last line is cut)"),
    (lambda d: (d / "summary.json").write_text(""), "summary.json is empty"),
    (lambda d: (d / "summary.json").write_text('{"status": "compl'), "summary.json is not valid JSON (truncated?)"),
    (lambda d: (d / "metrics.csv").unlink(), "metrics.csv is missing"),
], ids=["truncated-csv", "empty-summary", "invalid-summary", "missing-csv"])
@pytest.mark.slow
def test_damaged_cell_is_run_again(grid, damage, reason):
    run_grid(grid).assert_outcomes(passed=1)
    damage(grid.path / "cells" / CELL)
    again = run_grid(grid, "--resume", "--keep-stale")  # --keep-stale never keeps a damaged cell
    again.assert_outcomes(passed=1)
    assert resume_lines(again) == [f"mebench --resume: {CELL}: runs again: {reason}"]


# issue 43: running into a cells folder that holds cells needs --resume or --overwrite: one line, nothing created.
@pytest.mark.slow
def test_non_empty_cells_folder_needs_resume_or_overwrite(grid):
    run_grid(grid).assert_outcomes(passed=1)
    before = sorted(p.relative_to(grid.path) for p in grid.path.rglob("*"))
    refused = grid.runpytest(*ARGS, "--mebench-json", "second.json")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in refused.errlines + refused.outlines if "ERROR" in line]
    assert errors == [f"ERROR: --mebench-cells {grid.path / 'cells'} already holds 1 cell folder(s) of an earlier "
                      "run: pass --resume to keep its current cells or --overwrite to run them again"]
    assert sorted(p.relative_to(grid.path) for p in grid.path.rglob("*")) == before
    run_grid(grid, "--overwrite", json_name="third.json").assert_outcomes(passed=1)
    bad = grid.runpytest(*ARGS, "--keep-stale")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "use it with --resume" in bad.stderr.str() + bad.stdout.str()


# issue 43: grid folders are reserved exclusively; a run without grid cells leaves none behind.
@pytest.mark.slow
def test_each_grid_run_gets_its_own_folder(grid):
    for _ in range(2):
        grid.runpytest("benchmarks").assert_outcomes(passed=1)
    runs = sorted((grid.path / "runs" / "pytest").iterdir())
    assert len(runs) == 2 and all((r / "report.json").is_file() and (r / "cells" / CELL).is_dir() for r in runs)
    grid.runpytest("benchmarks", "-k", "nothing_matches")
    assert sorted((grid.path / "runs" / "pytest").iterdir()) == runs


# issue 43: the grid removes the query caches that dead runs left under runs/pytest, never a live one's.
def test_grid_sweeps_caches_of_dead_runs(grid):
    host, runs = socket.gethostname(), grid.path / "runs" / "pytest"
    dead, live = (runs / stamp / "cells" / CELL / QUERY_CACHE_DIR for stamp in ("20000101T000000Z", "20000101T000001Z"))
    for cache, pid in ((dead, _dead_pid()), (live, os.getpid())):
        cache.mkdir(parents=True)
        (cache / "owner").write_text(f"token {pid} {host}")
    result = grid.runpytest("benchmarks")
    result.assert_outcomes(passed=1)
    assert not dead.exists() and live.exists()
    result.stdout.fnmatch_lines([f"*removed 1 temporary query cache an interrupted run left in {runs}*"])


# issue 40: --resume sweeps the caches dead runs left in the other folders of runs/pytest too (not only
# in the folder it resumes), and still never a live run's.
def test_resume_sweeps_dead_caches_in_other_folders(grid):
    host, runs = socket.gethostname(), grid.path / "runs" / "pytest"
    grid.runpytest("benchmarks").assert_outcomes(passed=1)
    (resumed,) = list(runs.iterdir())
    own = resumed / "cells" / CELL / QUERY_CACHE_DIR
    dead, live = (runs / stamp / "cells" / CELL / QUERY_CACHE_DIR for stamp in ("20000101T000000Z", "20000101T000001Z"))
    for cache, pid in ((own, _dead_pid()), (dead, _dead_pid()), (live, os.getpid())):
        cache.mkdir(parents=True)
        (cache / "owner").write_text(f"token {pid} {host}")
    result = grid.runpytest("benchmarks", "--resume")
    assert not own.exists() and not dead.exists() and live.exists()
    result.stdout.fnmatch_lines([f"*--resume: removed 1 temporary query cache an interrupted run left in {resumed / 'cells'}*",
                                 f"*--resume: removed 1 temporary query cache an interrupted run left in {runs}*"],
                                consecutive=False)


def _reserve(parent: str, start, out) -> None:
    start.wait()
    out.put(str(make_stamp_dir(Path(parent))))


# issue 43: two runs started together get two folders (threads and processes racing on one stamp).
def test_runs_started_together_get_distinct_folders(tmp_path):
    barrier, made = threading.Barrier(8), []

    def reserve() -> None:
        barrier.wait()
        made.append(artifacts.new_run_dir(tmp_path, "same"))

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 8 and all(p.is_dir() and not any(p.iterdir()) for p in made)
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA or autograd threads
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_reserve, args=(str(tmp_path / "procs"), start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    folders = {out.get(timeout=5) for _ in procs}
    assert len(folders) == 4 and all(p.exitcode == 0 for p in procs)


# ------------------------------------------------------------------------------------ mebench run --resume
@pytest.fixture
def run_config(tmp_path: Path, synth_cfg_dict: dict) -> Path:
    cfg = {**synth_cfg_dict, "run": {**synth_cfg_dict["run"], "seeds": [0, 1]},
           "budget": {"max_budget": 200, "checkpoints": [100, 200]}}
    path = tmp_path / "synth.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_cli(config: Path, *extra: str) -> int:
    threads = torch.get_num_threads()
    try:
        return main(["run", str(config), "--threads", "1", "--no-progress", *extra])
    finally:
        torch.set_num_threads(threads)


# issue 43: `mebench run --resume` keeps a finished seed and runs an interrupted one again (same numbers).
def test_mebench_run_resume_keeps_finished_and_reruns_interrupted_seeds(run_config, tmp_path, capsys):
    assert run_cli(run_config) == 0
    (run_dir,) = (tmp_path / "runs" / "synth").iterdir()
    seed0, seed1 = run_dir / "seed_0", run_dir / "seed_1"
    kept_bytes, full = (seed0 / "summary.json").read_bytes(), (seed1 / "metrics.csv").read_bytes()
    aggregate = (run_dir / "aggregate.csv").read_bytes()
    summary = json.loads((seed1 / "summary.json").read_text())
    (seed1 / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    (seed1 / "metrics.csv").write_bytes(full.splitlines(keepends=True)[0] + full.splitlines(keepends=True)[1])
    capsys.readouterr()
    assert run_cli(run_config, "--resume") == 0
    out = capsys.readouterr().out
    assert "--resume: seed 0: kept (whole, same plan, code identity and threads)" in out
    assert "--resume: seed 1: runs again: summary.json says status 'interrupted' (interrupted or failed)" in out
    assert list((tmp_path / "runs" / "synth").iterdir()) == [run_dir]  # no new folder
    assert (seed0 / "summary.json").read_bytes() == kept_bytes
    assert (seed1 / "metrics.csv").read_bytes() == full and (run_dir / "aggregate.csv").read_bytes() == aggregate


# issue 52: a seed whose kept checkpoint was truncated after the run is run again by --resume (its sha256
# is in summary.json), and comes back whole with the same numbers.
def test_resume_reruns_a_seed_whose_kept_checkpoint_is_truncated(run_config, tmp_path, capsys):
    assert run_cli(run_config) == 0
    (run_dir,) = (tmp_path / "runs" / "synth").iterdir()
    ckpt = run_dir / "seed_1" / "final_substitute.ckpt"
    whole, metrics = ckpt.read_bytes(), (run_dir / "seed_1" / "metrics.csv").read_bytes()
    assert json.loads((run_dir / "seed_1" / "summary.json").read_text())["kept_files"] == {
        "final_substitute.ckpt": hashlib.sha256(whole).hexdigest()}
    ckpt.write_bytes(whole[: len(whole) // 2])
    capsys.readouterr()
    assert run_cli(run_config, "--resume") == 0
    out = capsys.readouterr().out
    assert "--resume: seed 0: kept" in out
    assert "--resume: seed 1: runs again: final_substitute.ckpt differs from the sha256 summary.json recorded" in out
    assert ckpt.read_bytes() == whole and (run_dir / "seed_1" / "metrics.csv").read_bytes() == metrics


# issue 35 / 43: `mebench run --resume` reruns a seed of other code; --keep-stale keeps it, marked.
def test_mebench_run_resume_by_code_identity_and_keep_stale(run_config, tmp_path, capsys, monkeypatch):
    assert run_cli(run_config, "--seeds", "0") == 0
    (run_dir,) = (tmp_path / "runs" / "synth").iterdir()
    monkeypatch.setattr(identity, "code_identity", lambda: "9.9.9+src.000000000000")
    capsys.readouterr()
    assert run_cli(run_config, "--seeds", "0", "--resume", "--keep-stale") == 0
    assert "seed 0: kept although stale (--keep-stale): code identity" in capsys.readouterr().out
    summary = json.loads((run_dir / "seed_0" / "summary.json").read_text())
    assert summary["resume"]["kept_stale"] is True and "9.9.9+src.000000000000" in summary["resume"]["reason"]
    assert run_cli(run_config, "--seeds", "0", "--resume-from", str(run_dir)) == 0
    assert "seed 0: runs again: code identity" in capsys.readouterr().out
    summary = json.loads((run_dir / "seed_0" / "summary.json").read_text())
    assert summary["code_identity"] == "9.9.9+src.000000000000" and "resume" not in summary


# issue 43: --keep-stale without --resume is one config error line, before any work.
def test_keep_stale_needs_resume(run_config, tmp_path, capsys):
    assert run_cli(run_config, "--keep-stale") == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "mebench: config error: config key '--keep-stale' = True: keeps stale seeds of a resumed run: use it with --resume"]
    assert not (tmp_path / "runs").exists()


# issue 43: `mebench run` removes the query caches that dead runs left under its output folder, no live one.
def test_mebench_run_sweeps_caches_of_dead_runs(run_config, tmp_path):
    host, dead_pid = socket.gethostname(), _dead_pid()
    dead = tmp_path / "runs" / "synth" / "20000101T000000Z" / "seed_0" / QUERY_CACHE_DIR
    live = tmp_path / "runs" / "synth" / "20000101T000001Z" / "seed_0" / QUERY_CACHE_DIR
    for cache, pid in ((dead, dead_pid), (live, os.getpid())):
        cache.mkdir(parents=True)
        (cache / "owner").write_text(f"run {pid} {host}")
    assert run_cli(run_config, "--seeds", "0") == 0
    assert not dead.exists() and live.exists()


def _dead_pid() -> int:
    """A pid that no process has (a child that has exited and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# issue 52: a second `--resume` of a folder another run is working in stops at once, in one line naming it.
def test_a_second_resume_of_a_busy_folder_is_one_line(run_config, tmp_path, capsys):
    from mebench.run import artifacts

    assert run_cli(run_config) == 0
    (run_dir,) = (tmp_path / "runs" / "synth").iterdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from mebench.run.artifacts import run_folder_lock\n"
        f"with run_folder_lock(Path({str(run_dir)!r})):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert run_cli(run_config, "--resume") == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("mebench: error: RunFolderBusy:") and f"pid {holder.pid}" in err and "\n" not in err
    finally:
        holder.kill()
        holder.wait()
    assert run_cli(run_config, "--resume") == 0  # the lock went with its process
    assert not (run_dir / artifacts.RUN_LOCK).exists()


# issue 52: a seed whose results cannot be written (a full disk) does not stay "running" in summary.json.
@pytest.mark.parametrize("also_summary", [False, True])
def test_a_full_disk_leaves_a_failed_seed_not_a_running_one(make_cfg, monkeypatch, also_summary):
    import errno

    from mebench.run import artifacts, engine

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engine, "write_outputs", full)
    if also_summary:  # not even the whole summary fits: the in-place one-line record does
        real = artifacts.atomic_write_json
        monkeypatch.setattr(artifacts, "atomic_write_json",
                            lambda path, obj: full() if obj.get("status") == "failed" else real(path, obj))
    cfg = make_cfg(budget={"max_budget": 100, "checkpoints": [100]})
    with pytest.raises(OSError):
        engine.run(cfg, progress=False)
    (summary,) = Path(cfg.run.output_dir).glob("*/*/seed_0/summary.json")
    doc = json.loads(summary.read_text())
    assert doc["status"] == "failed" and "No space left on device" in doc["error"]
