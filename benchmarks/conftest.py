"""Fixtures of the benchmark grid, one per contract object, and the grid expansion.

``pytest benchmarks/`` runs one test per cell of the benchmark config
(``--mebench-config``, default every ``configs/benchmarks/*.yaml``). The fixtures
hand the engine the objects it would otherwise build itself
(``engine.run_seed(..., oracle=, store=, trainer=)``):

- ``device``: this process's device (``--gpus``: xdist worker gwN -> GPU N mod count);
- ``victim``: ``engine.prepare`` (frozen victim, test split, pool source), built
  once per process for each victim key (victim, dataset, data mode, output mode);
- ``oracle``: a fresh oracle with the cell's full budget;
- ``query_cache``: the query store in ``<cells dir>/<cell id>/.query_cache``,
  deleted after the cell whatever happens, audited for the D_B prefix rule;
- ``track_a_trainer``: the Track A trainer every attack shares.

The performance suite in ``benchmarks/perf`` is collected only when named
(``pytest benchmarks/perf``), so ``pytest benchmarks/`` is exactly the grid.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator, Optional

import pytest
import torch

from mebench import engine
from mebench.cells import CellRecorder, PrefixAudit
from mebench.config import RunConfig
from mebench.grid import Cell
from mebench.oracle import Oracle
from mebench.plugin import bench_session
from mebench.training.track_a import TrackATrainer

PERF_DIR = Path(__file__).parent / "perf"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        bench_session(metafunc.config).parametrize(metafunc)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Optional[bool]:
    if collection_path != PERF_DIR:
        return None
    named = [Path(config.invocation_params.dir, a.split("::")[0]).resolve() for a in config.args]
    return None if any(p == PERF_DIR or PERF_DIR in p.parents for p in named) else True


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    bench = bench_session(pytestconfig)
    bench.pin_threads()
    return torch.device(bench.device())


@pytest.fixture(scope="session")
def victim(request: pytest.FixtureRequest, device: torch.device) -> engine.Prepared:
    """Parametrized (indirectly, per cell) with the cell's victim key; cached per process."""
    return bench_session(request.config).prepared(request.param, str(device))


@pytest.fixture
def run_config(pytestconfig: pytest.Config, cell: Cell, device: torch.device) -> RunConfig:
    return bench_session(pytestconfig).run_config(cell, str(device))


@pytest.fixture
def oracle(run_config: RunConfig, victim: engine.Prepared) -> Oracle:
    return engine.make_oracle(run_config, victim)


@pytest.fixture
def track_a_trainer(run_config: RunConfig, victim: engine.Prepared) -> TrackATrainer:
    return engine.make_track_a_trainer(run_config, victim)


@pytest.fixture
def cell_record(request: pytest.FixtureRequest, cell: Cell, run_config: RunConfig,
                device: torch.device) -> CellRecorder:
    return CellRecorder(bench_session(request.config), cell, request.node, run_config, str(device))


@pytest.fixture
def query_cache(run_config: RunConfig, victim: engine.Prepared, cell_record: CellRecorder) -> Iterator[PrefixAudit]:
    """The cell's temporary query store (§11.2): removed after the cell, also when it fails."""
    directory = cell_record.artifacts_dir / ".query_cache"
    shutil.rmtree(directory, ignore_errors=True)
    store = PrefixAudit(engine.make_store(run_config, victim, directory))
    try:
        yield store
    finally:
        store.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
    assert not directory.exists(), f"§11.2: temporary query cache {directory} survived the cell"
