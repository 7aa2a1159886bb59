"""The benchmark grid: ``pytest benchmarks/`` runs one test per cell (``test_cells.py``).

The fixtures, the cell generation and the per-cell contract checks live in
``mebench.harness``; importing them here makes them available to this folder
only. The performance suite in ``benchmarks/perf`` is collected only when
named (``pytest benchmarks/perf``), so ``pytest benchmarks/`` is exactly the grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from mebench.harness.fixtures import *  # noqa: F401,F403  (fixtures and pytest_generate_tests)

PERF_DIR = Path(__file__).parent / "perf"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Optional[bool]:
    if collection_path != PERF_DIR:
        return None
    named = [Path(config.invocation_params.dir, a.split("::")[0]).resolve() for a in config.args]
    return None if any(p == PERF_DIR or PERF_DIR in p.parents for p in named) else True
