"""Hooks of the mebench benchmark harness (``pytest_mebench_*``).

Implement them in a ``conftest.py`` or a plugin to add fields to what the
harness records. Both hooks receive plain JSON-compatible containers (dicts,
lists, strings, numbers, ``None``): keep them that way, the records travel
between xdist workers and the controller and end up in ``report.json``. See docs/guide/grid.md.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec()
def pytest_mebench_update_cell(config: pytest.Config, cell: Any, record: dict[str, Any]) -> None:
    """Change one cell's record right after the cell ran, where it ran (xdist worker or main process).

    ``cell`` is the :class:`mebench.harness.grid.Cell` (id, attack, label, data mode,
    output mode, seed, run config, defense); ``record`` is what goes to
    ``<cells dir>/<cell id>/result.json`` and into the report's ``cells`` list.

    Example (``conftest.py``)::

        def pytest_mebench_update_cell(config, cell, record):
            import torch

            record["cuda_max_memory_mb"] = (torch.cuda.max_memory_allocated() / 2**20
                                            if torch.cuda.is_available() else None)
    """


@pytest.hookspec()
def pytest_mebench_update_json(config: pytest.Config, report: dict[str, Any]) -> None:
    """Change the JSON report on the controller just before it is written.

    ``report`` holds ``cells`` (one record per cell), ``aggregate`` (mean ± std
    over seeds), ``machine``, ``versions``, ``git``, ``options`` and ``timings``.

    Example (``conftest.py``)::

        def pytest_mebench_update_json(config, report):
            report["project"] = "extraction-study-2025"
            report["n_passed"] = sum(c["status"] == "passed" for c in report["cells"])
    """
