"""The pytest benchmark harness (mebench.harness.plugin, mebench.harness.session, benchmarks/).

Each test runs pytest inside a pytester folder holding the real
``benchmarks/conftest.py`` and ``benchmarks/test_cells.py`` and a small
benchmark config over the synthetic SYNTH world (registered in every process,
xdist workers included, through the config's ``register`` key).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.harness.session import BenchOptions, device_for_worker
from mebench.report.paths import resolve_stored
from mebench.report.records import full

pytest_plugins = ["pytester"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SYNTH_CONFIG = """\
name: synth-mlp
register: ["mebench.testing:register_synthetic"]
seeds: [0, 1]
budgets: [100, 300]
smoke_max_budget: 100
run: {device: cpu}
victim: {victim_id: synth_mlp, checkpoint_ref: synth_victim.pt}
dataset: {name: SYNTH, data_root: .}
data_modes:
  seed: {seed_size: 50}
  surrogate: {surrogate_name: SYNTHSUR}
  data_free: {}
substitute:
  arch: tiny_mlp
  optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0}
attacks:
  - name: random
    data_modes: [seed, surrogate, data_free]   # data_free is forbidden for random (§6.1)
    params: {batch_size: 64}
  - name: dfme
    data_modes: [surrogate, data_free]         # surrogate is forbidden for dfme (§6.1)
"""
HOOKS = """\
def pytest_mebench_update_cell(config, cell, record):
    record["extra_cell_field"] = cell.label + "/" + str(cell.seed)


def pytest_mebench_update_json(config, report):
    report["extra_report_field"] = len(report["cells"])
"""
RANDOM_IDS = {f"synth-mlp-random-{d}-{o}-s{s}" for d in ("seed", "surrogate")
              for o in ("soft_prob", "hard_top1") for s in (0, 1)}
DFME_IDS = {f"synth-mlp-dfme-data_free-soft_prob-s{s}" for s in (0, 1)}


def make_grid_folder(pytester: pytest.Pytester, victim_path: Path, grid_yaml: str, name: str) -> None:
    """The benchmark harness (``benchmarks/``), the victim as ``synth_victim.pt`` and ``grid_yaml`` as
    ``configs/benchmarks/<name>`` in a pytester folder, with the project's pytest options."""
    (pytester.path / "benchmarks").mkdir()
    for file in ("conftest.py", "test_cells.py"):
        shutil.copy(BENCHMARKS / file, pytester.path / "benchmarks" / file)
    shutil.copy(victim_path, pytester.path / "synth_victim.pt")
    (pytester.path / "configs" / "benchmarks").mkdir(parents=True)
    (pytester.path / "configs" / "benchmarks" / name).write_text(grid_yaml)
    pytester.makeini("[pytest]\naddopts = --strict-markers -p no:cacheprovider\n")


@pytest.fixture
def bench(pytester: pytest.Pytester, synth_victim_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder with the benchmark harness and the SYNTH grid; single-threaded torch."""
    make_grid_folder(pytester, synth_victim_path, SYNTH_CONFIG, "mnist.yaml")  # the default path
    pytester.makeconftest(HOOKS)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # xdist workers inherit it
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield pytester
    torch.set_num_threads(threads)


def collected_ids(result: pytest.RunResult) -> set[str]:
    return {line.split("[", 1)[1].rstrip("]") for line in result.outlines if "test_cells.py::test_cell[" in line}


def cells_by_id(path: Path) -> dict[str, dict]:
    """The report's cells by id, each ``artifacts_dir`` resolved from report.json's folder (it is stored
    relative) and its summary, rows and config read back from that folder (report.json points at them)."""
    cells = {c["id"]: c for c in json.loads(path.read_text())["cells"]}
    for cid, c in cells.items():
        if c.get("artifacts_dir"):
            assert not Path(c["artifacts_dir"]).is_absolute()  # issue 43: report.json survives moving runs/
            c["artifacts_dir"] = str(resolve_stored(c["artifacts_dir"], path))
            assert "metrics_rows" not in c and "summary_sha256" in c  # issue 55: no copies in report.json
            cells[cid] = full(c, Path(c["artifacts_dir"]))
    return cells


# contract 6.1: forbidden attack x data mode / output mode cells are never generated; ids are readable
@pytest.mark.slow
def test_grid_ids_and_forbidden_cells(bench: pytest.Pytester) -> None:
    result = bench.runpytest("benchmarks", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    assert collected_ids(result) == RANDOM_IDS | DFME_IDS
    result.stdout.fnmatch_lines(["*left out random x data_free*(§6.1)*", "*left out dfme x surrogate*(§6.1)*",
                                 "*left out dfme x hard_top1*soft_prob*"])


# contract 1.1, 10: -k selects by id parts, --budgets/--seeds shorten the grid, markers follow the budgets
@pytest.mark.slow
def test_selection_and_shortening(bench: pytest.Pytester) -> None:
    def ids(*args: str) -> set[str]:
        result = bench.runpytest("benchmarks", "--collect-only", "-q", *args)
        assert result.ret in (0, 5), result.stdout.str()  # 5: nothing selected
        return collected_ids(result)

    assert ids("-k", "dfme") == DFME_IDS
    assert ids("-k", "random and hard_top1") == {i for i in RANDOM_IDS if "hard_top1" in i}
    assert ids("-k", "s0") == {i for i in RANDOM_IDS | DFME_IDS if i.endswith("-s0")}
    assert ids("--seeds", "1", "-k", "dfme") == {"synth-mlp-dfme-data_free-soft_prob-s1"}
    assert ids("-m", "full") == RANDOM_IDS | DFME_IDS  # the config's largest budget, 300 > smoke_max_budget
    # -m smoke without --budgets keeps the budgets up to smoke_max_budget (100), so it is never empty
    assert ids("-m", "smoke") == ids("--budgets", "100", "-m", "smoke") == RANDOM_IDS | DFME_IDS
    smoke = bench.runpytest("benchmarks", "--collect-only", "-q", "-m", "smoke", "-k", "dfme")
    smoke.stdout.fnmatch_lines(["*2 grid cells selected: 200 queries*largest budget 100*"])


# contract 1.1: bad option values fail at start-up, before collection
@pytest.mark.parametrize("option, value", [("--budgets", "abc"), ("--budgets", "300,100"), ("--budgets", "0"),
                                           ("--seeds", "x"), ("--gpus", "x")])
def test_bad_option_values_fail_at_startup(bench: pytest.Pytester, option: str, value: str) -> None:
    result = bench.runpytest("benchmarks", option, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {option}:*{value}*"])


# contract 15.2: an invalid benchmark config fails collection with the key and the rule
def test_invalid_benchmark_config_names_the_key(bench: pytest.Pytester) -> None:
    bad = SYNTH_CONFIG.replace("params: {batch_size: 64}", "params: {batch_sise: 64}")
    (bench.path / "bad.yaml").write_text(bad)
    result = bench.runpytest("benchmarks", "--collect-only", "-q", "--mebench-config", "bad.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*mebench grid:*attack.params.batch_sise*did you mean 'batch_size'*"])


@pytest.mark.slow
def test_gpu_options_parse(bench: pytest.Pytester) -> None:
    # contract 14.3 (engine on a device): --gpus LIST restricts the set, --gpus alone means every GPU
    assert BenchOptions.from_config(bench.parseconfig("--gpus", "0,2")).gpus == (0, 2)
    assert BenchOptions.from_config(bench.parseconfig("--gpus")).gpus == ()
    assert BenchOptions.from_config(bench.parseconfig()).gpus is None


@given(workers=st.integers(1, 24), gpus=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True))
@pytest.mark.slow
def test_workers_spread_evenly_over_the_allowed_gpus(workers: int, gpus: list[int]) -> None:
    # contract 14.3 (engine on a device): gwN -> GPU N mod count, only allowed GPUs, balanced load
    devices = [device_for_worker(f"gw{n}", gpus, 8, "cpu") for n in range(workers)]
    assert devices[0] == f"cuda:{gpus[0]}" and set(devices) <= {f"cuda:{g}" for g in gpus}
    counts = [devices.count(f"cuda:{g}") for g in gpus]
    assert max(counts) - min(counts) <= 1


def test_device_mapping_edge_cases() -> None:
    # contract 14.3: no --gpus keeps the config's device; no CUDA means CPU; the main process takes the first GPU
    assert device_for_worker("gw3", None, 4, "cpu") == "cpu"
    assert device_for_worker("gw3", (), 0, "cpu") == "cpu"
    assert device_for_worker("gw5", (), 4, "cpu") == "cuda:1"
    assert device_for_worker("master", (2, 3), 4, "cpu") == "cuda:2"


# contract 16: one JSON report per session; with -n 2 it holds the same cells and metrics as without
@pytest.mark.slow
def test_report_is_the_same_with_and_without_xdist(bench: pytest.Pytester) -> None:
    # both sides on the same device (issue 51): without a GPU, --gpus falls back to the CPU on both; with
    # one, neither side asks for it (rows computed on CUDA and on the CPU differ by design)
    gpus = () if torch.cuda.is_available() else ("--gpus",)
    args = ("benchmarks", "-k", "random and s0", "-p", "no:benchmark", *gpus)
    serial = bench.runpytest(*args, "--mebench-json", "serial.json")
    assert serial.ret == 0, serial.stdout.str()
    parallel = bench.runpytest_subprocess(*args, "-n", "2", "--mebench-json", "xdist.json")
    assert parallel.ret == 0, parallel.stdout.str()
    # the estimate is printed with the workers that will run the cells (issue 40; the xdist controller collects nothing)
    serial.stdout.fnmatch_lines(["*4 grid cells selected*estimate ~* wall on 1 worker x *"])
    parallel.stdout.fnmatch_lines(["*4 grid cells selected*estimate ~* wall on 2 workers x *"])
    one, two = cells_by_id(bench.path / "serial.json"), cells_by_id(bench.path / "xdist.json")
    assert set(one) == set(two) == {i for i in RANDOM_IDS if i.endswith("-s0")}
    for cid, cell in one.items():
        assert cell["status"] == two[cid]["status"] == "passed"
        assert cell["metrics_rows"] == two[cid]["metrics_rows"]
        assert [(r["checkpoint_B"], r["track"]) for r in cell["metrics_rows"]] == [(100, "A"), (300, "A")]
        assert all(isinstance(r["acc_gt"], float) for r in cell["metrics_rows"])  # numbers stay numbers
        assert cell["summary"]["queries_used"] == 300 and cell["extra_cell_field"] == "random/0"
        assert (Path(cell["artifacts_dir"]) / "summary.json").is_file()
        assert not (Path(cell["artifacts_dir"]) / ".query_cache").exists()  # contract 11.2
    assert {c["worker"] for c in two.values()} <= {"gw0", "gw1"}
    assert {c["device"] for c in one.values()} == {c["device"] for c in two.values()} == {"cpu"}
    report = json.loads((bench.path / "xdist.json").read_text())
    assert report["extra_report_field"] == 4 and report["git"] and report["machine"]["cpu_count"]
    assert {(a["attack"], a["checkpoint_B"]) for a in report["aggregate"]} == {("random", 100), ("random", 300)}
    assert (bench.path / "xdist_aggregate.csv").read_text().startswith("dataset,attack,data_mode,output_mode")
    assert {a["dataset"] for a in report["aggregate"]} == {"SYNTH"}
    if not torch.cuda.is_available():  # the controller, not each worker, says it once
        assert parallel.stdout.str().count("CUDA is not available") == 1


# contract 16: --resume keeps complete cells and reruns the others; --mebench-report renders the report
@pytest.mark.slow
def test_resume_skips_complete_cells(bench: pytest.Pytester) -> None:
    first = bench.runpytest("benchmarks", "-k", "random and surrogate and s0", "--mebench-json", "first.json",
                            "--mebench-report", "rendered")
    assert first.ret == 0, first.stdout.str()
    first.stdout.fnmatch_lines(["*report files (*) in *rendered*"])  # --mebench-report: mebench.report.write_report
    assert (bench.path / "rendered" / "leaderboard.md").is_file()
    stale = Path(cells_by_id(bench.path / "first.json")["synth-mlp-random-surrogate-hard_top1-s0"]["artifacts_dir"],
                 "result.json")
    record = json.loads(stale.read_text())
    stale.write_text(json.dumps({**record, "status": "failed"}))
    again = bench.runpytest("benchmarks", "-k", "random and surrogate and s0", "--resume", "--mebench-json", "again.json")
    again.assert_outcomes(passed=1, skipped=1)
    before, after = cells_by_id(bench.path / "first.json"), cells_by_id(bench.path / "again.json")
    assert after["synth-mlp-random-surrogate-soft_prob-s0"]["resumed"] is True
    assert after["synth-mlp-random-surrogate-hard_top1-s0"]["resumed"] is False
    assert {k: c["metrics_rows"] for k, c in before.items()} == {k: c["metrics_rows"] for k, c in after.items()}
    shorter = bench.runpytest("benchmarks", "-k", "random and surrogate and s0", "--resume", "--budgets", "100")
    shorter.assert_outcomes(passed=2)  # other budgets: a different cell, nothing to resume
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "status": "failed"}))
    # issue 52: under xdist the controller prints the per-cell verdicts (the workers print nothing)
    parallel = bench.runpytest_subprocess("benchmarks", "-k", "random and surrogate and s0", "--resume", "-n", "2",
                                          "-p", "no:benchmark")
    parallel.stdout.fnmatch_lines(["*mebench --resume: synth-mlp-random-surrogate-hard_top1-s0: runs again*"])


# contract 16: every grid run has its own folder; --resume continues the latest one
@pytest.mark.slow
def test_each_run_gets_its_own_folder_and_resume_continues_the_latest(bench: pytest.Pytester) -> None:
    args = ("benchmarks", "-k", "random and surrogate and soft_prob and s0")
    first = bench.runpytest(*args)
    assert first.ret == 0, first.stdout.str()
    second = bench.runpytest(*args)
    assert second.ret == 0, second.stdout.str()
    runs = sorted(p.parent for p in (bench.path / "runs" / "pytest").glob("*/cells"))
    assert len(runs) == 2 and all((r / "report.json").is_file() for r in runs)
    resumed = bench.runpytest(*args, "--resume")
    resumed.assert_outcomes(skipped=1)
    assert sorted(p.parent for p in (bench.path / "runs" / "pytest").glob("*/cells")) == runs  # no new folder
    later = [p for p in runs[-1].glob("report*.json") if p.name != "report.json"]
    assert len(later) == 1  # the resumed run's report sits beside the first one, which is kept
    cell = cells_by_id(later[0])["synth-mlp-random-surrogate-soft_prob-s0"]
    assert cell["resumed"] is True and Path(cell["artifacts_dir"]).parent == runs[-1] / "cells"


# issue: live progress per cell, also from xdist workers, a few lines per phase
@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "no:benchmark"]])
@pytest.mark.slow
def test_cells_report_progress_lines(bench: pytest.Pytester, workers: list[str]) -> None:
    result = bench.runpytest_subprocess("benchmarks", "-k", "random and surrogate and s0", *workers,
                                        "--mebench-progress", "0.001")
    assert result.ret == 0, result.stdout.str()
    lines = [ln for ln in result.stderr.lines + result.stdout.lines if ln.startswith("mebench")]
    for cell in ("synth-mlp-random-surrogate-soft_prob-s0", "synth-mlp-random-surrogate-hard_top1-s0"):
        mine = [ln for ln in lines if cell in ln]
        assert any("queries: done, 300 images" in ln for ln in mine), lines
        assert any("Track A B=300: done, 60 steps" in ln and "agreement" in ln for ln in mine), lines
        if workers:
            assert all("[gw" in ln for ln in mine)
    quiet = bench.runpytest_subprocess("benchmarks", "-k", "random and surrogate and s0", "--mebench-progress", "0")
    assert quiet.ret == 0 and not [ln for ln in quiet.stderr.lines if "queries:" in ln]


BROKEN = """\
import pytest
from mebench.run import engine
from test_cells import test_cell  # the same test, with a broken Track A trainer


class BrokenTrainer:
    def __init__(self, real, hard):
        self.real, self.hard = real, hard
        full = real.steps
        real.steps = lambda budget: full(budget) - 1  # trains one step short of S(B)

    def steps(self, budget):
        return self.real.steps(budget)

    def train(self, x, y, on_step=None, losses=None):
        if self.hard:
            raise RuntimeError("injected failure")
        return self.real.train(x, y, on_step, losses)


@pytest.fixture
def track_a_trainer(cell, run_config, victim):
    return BrokenTrainer(engine.make_track_a_trainer(cell.plan, victim), run_config.attack.output_mode == "hard_top1")
"""


COLLAPSING = """\
import pytest
from mebench.run import engine
from mebench.testing import CollapsingTrainer
from mebench.run.plan import resolve
from test_cells import test_cell  # the same test, with a Track A substitute that answers one class


@pytest.fixture
def track_a_trainer(cell, run_config, victim):
    return CollapsingTrainer(engine.make_track_a_trainer(cell.plan, victim))
"""


# training health: a collapsed Track A passes the contract (the protocol ran) but the cell warns and records it
def test_a_collapsed_cell_warns_and_records_the_flag(bench: pytest.Pytester) -> None:
    (bench.path / "benchmarks" / "test_collapsing.py").write_text(COLLAPSING)
    result = bench.runpytest("benchmarks/test_collapsing.py", "-k", "random and surrogate and soft_prob and s0",
                             "--mebench-json", "collapsing.json")
    result.assert_outcomes(passed=1)
    # one health warning per checkpoint (B=100, B=300); counted by category, since how pytest itself was
    # started (`pytest` or `python -m pytest`) can add its own warnings to the summary
    health = [line for line in result.stdout.lines if re.search(r"TrainingHealthWarning: \S+: Track A B=\d+ collapsed", line)]
    assert len(health) == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*TrainingHealthWarning: synth-mlp-random-surrogate-soft_prob-s0: Track A B=100 collapsed*"])
    cell = cells_by_id(bench.path / "collapsing.json")["synth-mlp-random-surrogate-soft_prob-s0"]
    assert cell["status"] == "passed"
    assert [f.split(":")[0] for f in cell["summary"]["health_flags"]] == ["Track A B=100 collapsed", "Track A B=300 collapsed"]


# contract 8, 11.2: a contract violation fails the cell, an exception errors it; the cache goes either way
def test_broken_cells_are_reported_and_cleaned_up(bench: pytest.Pytester) -> None:
    (bench.path / "benchmarks" / "test_broken.py").write_text(BROKEN)
    result = bench.runpytest("benchmarks/test_broken.py", "-k", "random and surrogate and s0",
                             "--mebench-json", "broken.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*§8: Track A at B=100 ran 19 steps, S(B) = 20*", "*RuntimeError: injected failure*"])
    cells = cells_by_id(bench.path / "broken.json")
    assert cells["synth-mlp-random-surrogate-soft_prob-s0"]["status"] == "failed"
    assert cells["synth-mlp-random-surrogate-hard_top1-s0"]["status"] == "error"
    errored = Path(cells["synth-mlp-random-surrogate-hard_top1-s0"]["artifacts_dir"], "summary.json")
    summary = json.loads(errored.read_text())
    assert summary["status"] == "failed" and summary["track_a_steps"] == {}  # the training that broke never ran
    for cell in cells.values():
        assert not (Path(cell["artifacts_dir"]) / ".query_cache").exists()


class _MutableStore:
    """A query store whose log can be changed behind the engine's back."""

    def __init__(self, n: int) -> None:
        self.x, self.y = torch.rand(n, 1, 4, 4), torch.randint(0, 4, (n,))
        self.directory = None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def prefix(self, n: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[:n].clone(), self.y[:n].clone()

    def rows_between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[start:stop].clone(), self.y[start:stop].clone()

    def cleanup(self) -> None:
        pass


# contract 7: the D_B audit accepts an append-only log and catches a changed prefix
def test_prefix_audit_detects_a_changed_d_b() -> None:
    from mebench.harness.cells import PrefixAudit, fingerprint
    from mebench.data.cache import QueryStore

    real = PrefixAudit(QueryStore(6, (1, 2, 2), "hard_top1", 3))
    real.append(torch.rand(4, 1, 2, 2), torch.tensor([0, 1, 2, 0]))
    real.prefix(3)
    real.append(torch.rand(2, 1, 2, 2), torch.tensor([1, 1]))
    real.prefix(6)
    real.cleanup()
    assert real.problems == [] and real.final_size == 6 and set(real.reads) == {3, 6}
    fake = _MutableStore(8)
    audit = PrefixAudit(fake)
    audit.prefix(5)
    fake.x[2] = fake.x[2].flip(-1)  # same values, different order inside one image
    audit.cleanup()
    assert audit.problems == ["§7: D_5 as trained on is not the first 5 queries of the final log"]
    x = torch.rand(6, 3)
    assert fingerprint(x) != fingerprint(x[[1, 0, 2, 3, 4, 5]])  # row order matters


def test_collection_prints_the_selected_cells_cost(bench: pytest.Pytester) -> None:
    # a grid states its size before it runs: cells, queries and Track A steps (S(B) = ceil(0.2 B), §8)
    result = bench.runpytest("benchmarks", "--collect-only", "-q", "-k", "random and s0")
    n = len(collected_ids(result))
    line = next(x for x in result.outlines if "grid cells selected" in x)
    assert n == 4 and f"{n} grid cells selected" in line
    assert f"{n * 300:,} queries" in line and f"{n * (20 + 60):,} Track A steps" in line


def test_cost_estimate_counts_each_attacks_own_training(make_cfg) -> None:
    # the grid's size warning must see an attack's own training (Track B models, round models, GAN
    # pretraining), or a preset that trains for days looks like its Track A alone
    from mebench.harness.cost import LENET5_REF_STEP_S, SECONDS_PER_GAN_EXAMPLE, estimate

    step = 0.128  # a measured SGD step of 128 images (injected): 1 ms an example
    times = lambda arch, shape, k: {"train_step_s": step, "forward_image_s": 1e-4}  # noqa: E731
    cfg = {"budget": {"max_budget": 5000, "checkpoints": [1000, 5000]}}
    per_example = step / 128

    def extra(attack: dict) -> float:
        return estimate([make_cfg(**cfg, attack=attack)], threads=1, times=times).phases["attack"]

    assert extra({"name": "random"}) == 0.0  # Track A and the queries only
    knock = {"name": "knockoff", "params": {"epochs": 100}}
    assert extra(knock) == pytest.approx(100 * 6000 * per_example)  # a fresh model at each checkpoint
    assert extra({**knock, "params": {"epochs": 10}}) == pytest.approx(10 * 6000 * per_example)
    # JBDA: 20-epoch round models on 100, 200, ..., 3200 answers, then 100 epochs on D_B per checkpoint
    jbda = {"name": "jbda", "params": {"round_epochs": 20, "final_epochs": 100}}
    assert extra(jbda) == pytest.approx((20 * 6300 + 100 * 6000) * per_example)
    gan = {"name": "dfms", "output_mode": "soft_prob",
           "params": {"gan_epochs": 2, "divgan_epochs": 1, "gan_pool_size": 1000, "clone_epochs": 5}}
    clones = 2 * 5 * 32  # two clones on initial sets of ceil(0.00625 * 5000) = 32 images
    # three passes over the GAN's 1,000 pool images, then one GAN image a query of the attack loop (the
    # 5,000 - 2 x 32 queries after the initial sets), width 64 = 4 units; scaled by the measured step
    gan_s = (3 * 1000 + 5000 - 64) * 4 * SECONDS_PER_GAN_EXAMPLE * step / LENET5_REF_STEP_S
    assert extra(gan) == pytest.approx(clones * per_example + gan_s)
    # the loop grows with the budget, the pretraining does not
    longer = estimate([make_cfg(budget={"max_budget": 10000, "checkpoints": [1000, 10000]}, attack=gan)],
                      threads=1, times=times).phases["attack"]
    loop_s = (10000 - 5000 - 2 * (63 - 32)) * 4 * SECONDS_PER_GAN_EXAMPLE * step / LENET5_REF_STEP_S
    assert longer - extra(gan) == pytest.approx(loop_s + 2 * 5 * (63 - 32) * per_example)


def test_large_run_guard_uses_the_calibrated_estimate(bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 40: a small budget on a slow machine (or a slow architecture) is still refused when the
    # calibrated estimate is above the bound, and the printed line states the measured wall time
    import mebench.harness.calibration

    slow = {"train_step_s": 120.0, "forward_image_s": 0.5, "measured_at": "2026-01-01T00:00"}
    monkeypatch.setattr(mebench.harness.calibration, "step_times", lambda *a, **k: {**slow, "path": "/c/calibration/x.json"})
    cell = ["-k", "random and seed and soft_prob and s0"]
    refused = bench.runpytest("benchmarks", "-q", *cell)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    line = next(x for x in refused.errlines if "--mebench-allow-large" in x)
    assert "1 grid cell selected" in line and "calibrated 2026-01-01T00:00, cached in /c/calibration" in line
    assert "track_a" in line and "wall on 1 worker" in line  # 80 steps x 120 s: ~2.7 h, above 2 CPU-hours
    fast = {**slow, "train_step_s": 0.001, "forward_image_s": 1e-6}
    monkeypatch.setattr(mebench.harness.calibration, "step_times", lambda *a, **k: fast)
    assert bench.runpytest("benchmarks", "-q", "--collect-only", *cell).ret == pytest.ExitCode.OK
    assert bench.runpytest("benchmarks", "-q", *cell).ret == pytest.ExitCode.OK


@pytest.mark.slow
def test_large_selection_needs_an_explicit_flag(bench: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # no accidental multi-day grid: above the bound a run needs --budgets or --mebench-allow-large
    import mebench.harness.cost

    monkeypatch.setattr(mebench.harness.cost, "LARGE_MAX_BUDGET", 200)  # the SYNTH grid (B = 300) becomes "large"
    cell = ["-k", "random and seed and soft_prob and s0"]
    refused = bench.runpytest("benchmarks", "-q", *cell)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert any("--mebench-allow-large" in x and "1 grid cell selected" in x for x in refused.errlines)
    assert bench.runpytest("benchmarks", "-q", "--mebench-allow-large", *cell).ret == pytest.ExitCode.OK
    assert bench.runpytest("benchmarks", "-q", "--budgets", "100", *cell).ret == pytest.ExitCode.OK


def test_gpus_without_cuda_is_said_before_any_cell_runs(bench: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # contract 14.3: a cell asked onto a GPU that is not there says so at the start, once
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = bench.runpytest("benchmarks", "--gpus", "--collect-only", "-q", "-k", "random and s0")
    lines = [x for x in result.outlines if "CUDA is not available" in x]
    first_cell = next(i for i, x in enumerate(result.outlines) if "test_cell[" in x)
    assert len(lines) == 1 and result.outlines.index(lines[0]) < first_cell


# contract 1.2, 6.1: the grid's defense axis; a defended cell's id names the defense
@pytest.mark.slow
def test_grid_defense_axis(bench: pytest.Pytester) -> None:
    config = bench.path / "configs" / "benchmarks" / "mnist.yaml"
    config.write_text(SYNTH_CONFIG + "defenses:\n  - {name: none}\n  - {name: rounding, params: {decimals: 1}}\n")
    result = bench.runpytest("benchmarks", "--collect-only", "-q", "-k", "random and s0")
    assert result.ret == 0, result.stdout.str()
    ids = collected_ids(result)
    plain = {i for i in RANDOM_IDS if i.endswith("-s0")}
    rounded = {i.replace("-random-", "-random-rounding-") for i in plain if "soft_prob" in i}
    assert ids == plain | rounded  # rounding needs probabilities: no hard_top1 cell
    result.stdout.fnmatch_lines(["*left out defense rounding x hard_top1*"])
    run = bench.runpytest("benchmarks", "-k", "random and rounding and surrogate and s0", "--mebench-json", "d.json")
    assert run.ret == 0, run.stdout.str()
    (cell,) = cells_by_id(bench.path / "d.json").values()
    assert cell["defense"] == "rounding" and cell["summary"]["defense"]["name"] == "rounding"
    assert cell["summary"]["queries_used"] == 300


# the plugin is loaded by every pytest session in the environment: it must stay light
def test_loading_the_plugin_imports_neither_torch_nor_hypothesis_settings() -> None:
    import subprocess
    import sys

    code = ("import sys, mebench.harness.plugin; "
            "print(sorted(m for m in ('torch', 'pandas', 'mebench.run.engine', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _children(pid: int) -> set[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        out |= {int(c) for c in text.split()}
    return out


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))  # a zombie is gone


# contract 11.2, 17.5: a terminated grid run (SIGTERM to the xdist controller as `kill` sends it, or to
# every process of the run as a scheduler's time limit does) ends as after Ctrl-C: the controller
# reports the interruption, its workers stop, and no temporary query cache is left
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
@pytest.mark.parametrize("group", [False, True], ids=["controller", "process-group"])
@pytest.mark.slow
def test_sigterm_stops_workers_and_removes_caches(bench: pytest.Pytester, group: bool) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-k", "dfme", "-n", "2", "-p", "no:benchmark",
           "--budgets", "1000000", "--mebench-allow-large", "--mebench-cells", "cells"]  # 2 long cells
    proc = subprocess.Popen(cmd, cwd=bench.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            workers |= _children(proc.pid)
            if len(list((bench.path / "cells").glob("*/.query_cache"))) == 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) >= 2, "both cells should be running"
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = time.monotonic() + 60
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)], out.decode(errors="replace")[-3000:]
    text = out.decode(errors="replace")
    assert proc.returncode == 2 and "KeyboardInterrupt" in text, text[-3000:]  # pytest's "interrupted"
    assert not list((bench.path / "cells").rglob(".query_cache")), out.decode(errors="replace")[-3000:]


# contract 11.2: an xdist worker killed outright (SIGKILL; xdist's own teardown does this to a worker
# that does not exit in time on a loaded machine) cannot clean up; its controller removes the cache
# at the end of the run, and only caches of its own run (a second run may share the cells folder)
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)")
@pytest.mark.slow
def test_a_killed_worker_s_query_cache_is_removed_by_its_controller(bench: pytest.Pytester) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    other = bench.path / "cells" / "synth-mlp-dfme-data_free-soft_prob-s1" / ".query_cache"
    other.mkdir(parents=True)
    (other / "owner").write_text("another run's token")
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-k", "dfme and s0", "-n", "1", "-p", "no:benchmark",
           "--budgets", "1000000", "--mebench-allow-large", "--mebench-cells", "cells",
           "--overwrite"]  # one long cell; the folder already holds another run's cell
    proc = subprocess.Popen(cmd, cwd=bench.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    cache = bench.path / "cells" / "synth-mlp-dfme-data_free-soft_prob-s0" / ".query_cache"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not (cache / "owner").exists():
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert proc.poll() is None and (cache / "owner").exists() and len(workers) == 1, "the cell should be running"
        os.kill(workers.pop(), signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode != 0 and "crashed" in text, text[-3000:]
    assert not cache.exists(), text[-3000:]
    assert (other / "owner").read_text() == "another run's token"


# contract 11.2: a run killed outright (SIGKILL) cannot clean up; --resume removes what it left
@pytest.mark.slow
def test_resume_removes_query_caches_a_killed_run_left(bench: pytest.Pytester) -> None:
    args = ("benchmarks", "-k", "random and surrogate and soft_prob and s0", "--mebench-cells", "cells")
    stale = bench.path / "cells" / "synth-mlp-random-surrogate-hard_top1-s0" / ".query_cache"
    stale.mkdir(parents=True)
    (stale / "x.npy").write_bytes(b"left by a killed run")
    result = bench.runpytest(*args, "--resume")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--resume: removed 1 temporary query cache an interrupted run left in*"])
    assert not stale.exists()
    fresh = stale.parent / ".query_cache"  # a cell this run does not select
    fresh.mkdir()
    bench.runpytest(*args, "--overwrite").assert_outcomes(passed=1)  # without --resume an unmarked cache stays
    assert fresh.exists()
    # issue 58: under xdist the controller's estimate leaves out the kept cell and checks it, reading its
    # record without marking anything (the workers decide and mark)
    kept = bench.path / "cells" / "synth-mlp-random-surrogate-soft_prob-s0" / "result.json"
    record = kept.read_bytes()
    parallel = bench.runpytest_subprocess(*args, "--resume", "-n", "2", "-p", "no:benchmark")
    parallel.stdout.fnmatch_lines(["mebench: 0 grid cells selected*wall on 2 workers*",
                                   "mebench: 1 of the 1 selected cells are complete and kept by --resume*(x*, 1 cell)"])
    assert kept.read_bytes() == record


KILL_ONE = """
import os, signal


def pytest_runtest_call(item):
    if item.nodeid.endswith("synth-mlp-random-seed-soft_prob-s0]") and os.environ.get("PYTEST_XDIST_WORKER"):
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-cell, as an OOM kill would do
"""


# issue 52: a cell whose xdist worker died is in report.json and the summary as an error, with xdist's cause.
@pytest.mark.slow
def test_a_cell_whose_worker_died_is_recorded_as_an_error(bench: pytest.Pytester) -> None:
    bench.makeconftest(HOOKS + KILL_ONE)
    result = bench.runpytest_subprocess("benchmarks", "-k", "random and seed and s0", "-n", "2",
                                        "-p", "no:benchmark", "--mebench-json", "r.json")
    text = result.stdout.str()
    assert result.ret != 0 and "crashed" in text
    cells = {c["id"]: c for c in json.loads((bench.path / "r.json").read_text())["cells"]}
    dead = cells["synth-mlp-random-seed-soft_prob-s0"]
    assert dead["status"] == "error" and "crashed" in dead["error"]
    assert cells["synth-mlp-random-seed-hard_top1-s0"]["status"] == "passed"
    assert "error: synth-mlp-random-seed-soft_prob-s0: " in text.split("mebench results")[-1]  # the summary says so


# issue 54: the terminal summary has a row for every budget checkpoint, not only the largest.
def test_the_summary_table_shows_every_budget():
    from mebench.harness.session import results_table

    agg = [{"attack": "random", "data_mode": "seed", "output_mode": "soft_prob", "track": "A", "checkpoint_B": b,
            "metric": m, "mean": 0.5, "std": 0.1, "n_seeds": 3} for b in (1000, 10000)
           for m in ("acc_gt", "agreement", "kl_mean", "l1_mean")]
    rows = results_table(agg)[1:]
    assert [r.split()[4] for r in rows] == ["1000", "10000"]
