"""The benchmark grid's fixtures, its cell generation and its per-cell contract checks.

A benchmarks folder uses them with one import in its ``conftest.py``
(``from mebench.harness.fixtures import *``), so the fixtures exist only where the grid runs, not
in every project that has mebench installed. Each fixture hands the engine one object it would
otherwise build itself; :func:`contract_problems` lists every contract violation visible in a
finished cell. See docs/guide/grid.md.
"""
# A benchmarks folder uses them with one import in its ``conftest.py``
# (``from mebench.harness.fixtures import *``), so the fixtures exist only where the grid
# runs, not in every project that has mebench installed. Each fixture hands the
# engine one object it would otherwise build itself
# (``engine.run_seed(..., oracle=, store=, trainer=)``):
#
# - ``device``: this process's device (``--gpus``: xdist worker gwN -> GPU N mod count);
# - ``victim``: ``engine.prepare`` (frozen victim, answer pipeline, test split, pool
#   source), built once per process for each victim key;
# - ``oracle``: a fresh oracle with the cell's full budget;
# - ``query_cache``: the query store in ``<cells dir>/<cell id>/.query_cache``,
#   deleted after the cell whatever happens (by the controller at the end of the run should the
#   worker be killed outright), audited for the D_B prefix rule;
# - ``track_a_trainer``: the Track A trainer every attack shares;
# - ``cell_record``: the cell's record (``result.json``, the report channel, progress lines).
#
# Its ``pytest_configure`` makes SIGTERM end the run as Ctrl-C does, in the xdist controller (which
# loads the benchmarks folder's ``conftest.py`` at start-up) and in every worker: each running cell
# then removes its query cache, and the controller tears its workers down instead of leaving them
# running. The default action is put back at ``pytest_unconfigure`` (the handler is installed only
# over the default one).
#
# :func:`contract_problems` lists every contract violation visible in a finished cell.

from __future__ import annotations

import math
import shutil
from typing import Any, Iterator, Optional

import pytest
import torch

from mebench.run import engine
from mebench.harness import seedgroups
from mebench.harness.cells import CellRecorder, PrefixAudit, cell_recorder, open_store
from mebench.config import RunConfig
from mebench.errors import interrupt_on_sigterm
from mebench.harness.grid import Cell
from mebench.metrics import METRICS
from mebench.support.naming import QUERY_CACHE_DIR
from mebench.oracle import Oracle
from mebench.harness.plugin import bench_session
from mebench.training.track_a import TrackATrainer

__all__ = ["pytest_configure", "pytest_unconfigure", "pytest_generate_tests", "device", "victim", "run_config",
           "oracle", "track_a_trainer", "cell_record", "query_cache"]


_SIGTERM_KEY = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SIGTERM_KEY] = interrupt_on_sigterm()


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_SIGTERM_KEY, False):
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per grid cell for every test function that asks for ``cell``."""
    if "cell" in metafunc.fixturenames:
        bench_session(metafunc.config).parametrize(metafunc)


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> Iterator[torch.device]:
    bench = bench_session(pytestconfig)
    before = torch.get_num_threads()
    bench.pin_threads()
    yield torch.device(bench.device())
    torch.set_num_threads(before)  # a grid run inside a larger process (pytester) leaves its count as it was


@pytest.fixture(scope="session")
def victim(request: pytest.FixtureRequest, device: torch.device) -> engine.Prepared:
    """Parametrized (indirectly, per cell) with the cell's victim key; cached per process."""
    return bench_session(request.config).prepared(request.param, str(device))


@pytest.fixture
def run_config(pytestconfig: pytest.Config, cell: Cell, device: torch.device) -> RunConfig:
    return bench_session(pytestconfig).run_config(cell, str(device))


@pytest.fixture
def oracle(request: pytest.FixtureRequest, cell: Cell, run_config: RunConfig, victim: engine.Prepared) -> Oracle:
    member = seedgroups.groups(request.config).member(cell)  # run already, with its seed group
    return member.oracle if member is not None else engine.make_oracle(cell.plan, victim)


@pytest.fixture
def track_a_trainer(cell: Cell, victim: engine.Prepared) -> TrackATrainer:
    return engine.make_track_a_trainer(cell.plan, victim)


@pytest.fixture
def cell_record(request: pytest.FixtureRequest, cell: Cell, run_config: RunConfig,
                device: torch.device) -> CellRecorder:
    bench = bench_session(request.config)
    member = seedgroups.groups(request.config).member(cell)
    if member is not None:  # run already, with its seed group: its record goes out with this test's report
        member.recorder.item = request.node
        return member.recorder
    return cell_recorder(bench, cell, run_config, str(device), item=request.node)


@pytest.fixture
def query_cache(request: pytest.FixtureRequest, cell: Cell, run_config: RunConfig, victim: engine.Prepared,
                cell_record: CellRecorder) -> Iterator[PrefixAudit]:
    """The cell's temporary query store (§11.2): removed after the cell, also when it fails."""
    directory = cell_record.artifacts_dir / QUERY_CACHE_DIR
    member = seedgroups.groups(request.config).member(cell)
    if member is not None:  # run already, with its seed group (its store was audited and removed then)
        yield member.store
        assert not directory.exists(), f"§11.2: temporary query cache {directory} survived the cell"
        return
    store = open_store(bench_session(request.config), cell.plan, run_config, victim, directory)
    try:
        yield store
    finally:
        store.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
    assert not directory.exists(), f"§11.2: temporary query cache {directory} survived the cell"


# ------------------------------------------------------------------ contract checks on a finished cell
def contract_problems(cfg: RunConfig, cell: Cell, result: engine.SeedResult, oracle: Oracle,
                      store: PrefixAudit) -> list[str]:
    """Every contract violation visible in one finished cell (empty list: the cell is sound)."""
    return [*budget_problems(cfg, result, oracle, store), *store.problems,
            *snapshot_problems(cfg, store), *track_a_problems(cfg, result),
            *[p for row in result.rows for p in row_problems(cfg, cell, row)],
            *([] if result.summary["cache"].get("deleted") else ["§11.2: the temporary query cache was not deleted"])]


def budget_problems(cfg: RunConfig, result: engine.SeedResult, oracle: Oracle, store: PrefixAudit) -> list[str]:
    """§1.1: the budget is spent exactly, one query per image, and every image is in the log."""
    want = cfg.budget.max_budget
    seen = {"oracle": oracle.queries_used, "summary": result.summary.get("queries_used"), "query log": store.final_size}
    return [f"§1.1: {what} counts {n} queries, the budget is {want}" for what, n in seen.items() if n != want]


def snapshot_problems(cfg: RunConfig, store: PrefixAudit) -> list[str]:
    """§7: Track A read D_B at every checkpoint (its content is audited by PrefixAudit)."""
    missing = sorted(set(cfg.budget.checkpoints) - set(store.reads))
    return [f"§7: D_B was never read at B={b}" for b in missing]


def track_a_problems(cfg: RunConfig, result: engine.SeedResult) -> list[str]:
    """§8: one Track A row per checkpoint, trained for S(B) = ceil(c * B) steps."""
    c = cfg.substitute.trackA.steps_coeff_c
    rows = [r["checkpoint_B"] for r in result.rows if r["track"] == "A"]
    out = [f"§8: {rows.count(b)} Track A rows at B={b}" for b in cfg.budget.checkpoints if rows.count(b) != 1]
    steps = result.summary.get("track_a_steps", {})
    out += [f"§8: Track A at B={b} ran {steps.get(str(b))} steps, S(B) = {math.ceil(c * b)}"
            for b in cfg.budget.checkpoints if steps.get(str(b)) != math.ceil(c * b)]
    return out


def row_problems(cfg: RunConfig, cell: Cell, row: dict[str, Any]) -> list[str]:
    """§1.3 / §16.2: each metric in its range (``mebench.metrics.METRICS``), and the row's identity columns."""
    where = f"B={row['checkpoint_B']} track {row['track']}"
    out = []
    for m in METRICS:
        value = row.get(m.name)
        if cfg.attack.output_mode in m.output_modes:
            if not _in_range(value, *m.bounds):
                out.append(f"§1.3: {where}: {m.name} = {value!r} is not in [{m.bounds[0]}, {m.bounds[1]}]")
        elif value is not None:
            out.append(f"§1.3: {where}: {cfg.attack.output_mode} rows carry no {m.name}")
    ident = {"seed": cell.seed, "attack": cell.label, "data_mode": cell.data_mode, "output_mode": cell.output_mode,
             "victim_id": cfg.victim.victim_id, "substitute_arch": cfg.substitute.arch}
    out += [f"§16.2: {where}: {k} = {row[k]!r}, expected {v!r}" for k, v in ident.items() if row[k] != v]
    if row["checkpoint_B"] not in cfg.budget.checkpoints:
        out.append(f"§16.2: row at B={row['checkpoint_B']}, not a checkpoint")
    return out


def _in_range(value: Optional[float], lo: float, hi: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
