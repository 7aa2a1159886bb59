"""The benchmark grid: one test per attack variant × victim × data mode × output mode × seed.

Each test runs ``engine.run_seed`` once with the harness's fixtures
(``mebench.harness``; with ``--seeds-together`` the seed cells of one condition run as one group,
``mebench.harness.seedgroups``), records the result (``<cells dir>/<cell id>/result.json``
and the JSON report), then checks the contract on what the run produced; a checkpoint whose
training collapsed or diverged (``mebench.training.health``) raises a ``TrainingHealthWarning``. Ids read
``<benchmark>-<victim key>-<attack label>-<data mode>-<output mode>-s<seed>``, so
``-k dfme``, ``-k "random and hard_top1"`` or ``-k s0`` select what they say.
"""

from __future__ import annotations

import warnings

from mebench.run import engine
from mebench.harness import seedgroups
from mebench.harness.cells import CellRecorder, PrefixAudit
from mebench.config import RunConfig
from mebench.harness.grid import Cell
from mebench.harness.fixtures import contract_problems
from mebench.oracle import Oracle
from mebench.training.health import TrainingHealthWarning
from mebench.training.track_a import TrackATrainer


def test_cell(request, cell: Cell, run_config: RunConfig, victim: engine.Prepared, oracle: Oracle,
              query_cache: PrefixAudit, track_a_trainer: TrackATrainer, cell_record: CellRecorder) -> None:
    with cell_record.running():  # engine.run_seed, or this cell's part of its seed group's run (--seeds-together)
        result = seedgroups.run_cell(request, cell, run_config, victim, oracle, query_cache, track_a_trainer,
                                     cell_record)
    problems = contract_problems(run_config, cell, result, oracle, query_cache)
    cell_record.finish(result, problems)
    for flag in result.summary.get("health_flags", []):  # the metrics stand; the reader is told
        warnings.warn(TrainingHealthWarning(f"{cell.id}: {flag}"))
    assert not problems, "contract violations:\n  " + "\n  ".join(problems)
