"""Seeds together in the grid (``--seeds-together``; docs/guide/grid.md).

With ``--seeds-together on`` (or ``auto``) the first cell of a condition to run in a process runs
every selected seed cell of that condition in lockstep (``mebench.run.together.run_together``); the
other cells then find their run done and only check and record it. Under ``-n`` a group never spans
two workers. A group fails together: when one seed raises, the others stop at their next hand-over;
the seed that raised reports its own error, the others ``Aborted`` naming it.
"""
# In the grid each seed is its own cell, so Track A of the seeds of one condition (same benchmark,
# victim, attack variant, data and output mode) would be trained one model at a time. With
# ``--seeds-together on`` (or ``auto`` where ``mebench.training.spec.SEEDS_TOGETHER_DEFAULT`` says
# the device gains) the first cell of a condition to run in a process runs every selected seed cell
# of that condition in lockstep (``mebench.run.together.run_together``: one stacked Track A per
# checkpoint, each seed's own queries, oracle, query store and folder); the other cells of the group
# then find their run done and only check and record it. Each seed keeps its own cell, record and
# rows. Under ``-n`` the plugin marks the cells of a condition with one ``xdist_group`` and switches
# pytest-xdist to ``--dist loadgroup``, so a group never spans two workers.

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from mebench.harness.cells import CellRecorder, PrefixAudit, cell_recorder, open_store
from mebench.harness.grid import Cell
from mebench.run.plan import site
from mebench.support.naming import QUERY_CACHE_DIR


@dataclass
class Member:
    """One seed cell of a group run: the objects its test would otherwise build, and its outcome."""

    cell: Cell
    run_config: Any
    oracle: Any
    store: PrefixAudit
    recorder: CellRecorder
    result: Any = None
    error: Optional[BaseException] = None


@dataclass
class Groups:
    """This process's finished group members, by cell id (taken once by their own test)."""

    done: dict[str, Member] = field(default_factory=dict)

    def member(self, cell: Cell) -> Optional[Member]:
        return self.done.get(cell.id)

    def take(self, cell: Cell) -> Optional[Member]:
        return self.done.pop(cell.id, None)


_KEY = pytest.StashKey[Groups]()


def groups(config: pytest.Config) -> Groups:
    if _KEY not in config.stash:
        config.stash[_KEY] = Groups()
    return config.stash[_KEY]


def _pending_members(request: pytest.FixtureRequest, cell: Cell, done: Groups) -> list[Cell]:
    """The other selected, unskipped, not yet run cells of ``cell``'s condition in this session."""
    from mebench.harness.session import cell_of

    want = cell.condition
    out = []
    for item in request.session.items:
        other = cell_of(item)
        if other is None or other.id == cell.id or other.condition != want:
            continue
        if item.get_closest_marker("skip") is None and done.member(other) is None:
            out.append(other)
    return out


def run_cell(request: pytest.FixtureRequest, cell: Cell, run_config: Any, victim: Any, oracle: Any,
             store: PrefixAudit, trainer: Any, recorder: CellRecorder) -> Any:
    """The cell's ``SeedResult``: from its group's run (run now if this is the group's first cell), or
    ``engine.run_seed`` alone when seeds are not grouped or the cell has no pending sibling. Every run
    is handed the cell's plan (``Cell.plan``, resolved once per cell), never resolved again."""
    from mebench.run import engine
    from mebench.harness.plugin import bench_session

    bench = bench_session(request.config)
    done = groups(request.config)
    mine = done.take(cell)
    if mine is not None:
        if mine.error is not None:
            raise mine.error
        return mine.result
    stackable = bench.options.seeds_together and getattr(trainer, "stackable", False)  # not a test's stand-in
    siblings = _pending_members(request, cell, done) if stackable else []
    if not siblings:
        return engine.run_seed(cell.plan, site(run_config), victim, recorder.artifacts_dir, progress=False,
                               oracle=oracle, store=store, trainer=trainer, say=recorder.say)
    members = [Member(cell, run_config, oracle, store, recorder)] + [_member(bench, c, victim) for c in siblings]
    by_seed = {m.cell.seed: m for m in members}

    def one(seed: int, group_trainer: Any) -> Any:
        m = by_seed[seed]
        try:
            m.result = engine.run_seed(m.cell.plan, site(m.run_config), victim, m.recorder.artifacts_dir,
                                       progress=False, oracle=m.oracle, store=m.store, trainer=group_trainer,
                                       say=m.recorder.say)
        except BaseException as e:
            m.error = e
            raise
        return m.result

    from mebench.run.together import Aborted, run_together

    try:
        run_together([m.cell.seed for m in members], trainer, one)
    except BaseException as first:  # noqa: BLE001  (each member reports its own part below)
        who = next((m.cell.id for m in members if m.error is first), "?")
        for m in members:
            if m.error is None or isinstance(m.error, Aborted):
                m.error = Aborted(f"{m.cell.id} stopped: {who}, a seed cell of its group, failed ({first!r})")
    finally:
        for m in members[1:]:
            m.store.cleanup()
            shutil.rmtree(m.recorder.artifacts_dir / QUERY_CACHE_DIR, ignore_errors=True)
    for m in members[1:]:
        done.done[m.cell.id] = m
    if members[0].error is not None:
        raise members[0].error
    return members[0].result


def _member(bench: Any, cell: Cell, victim: Any) -> Member:
    """A sibling cell's run config, oracle, audited query store and record, built as its fixtures build them."""
    from mebench.run import engine

    device = bench.device()
    run_config = bench.run_config(cell, device)
    recorder = cell_recorder(bench, cell, run_config, device)
    store = open_store(bench, cell.plan, run_config, victim, recorder.artifacts_dir / QUERY_CACHE_DIR)
    return Member(cell, run_config, engine.make_oracle(cell.plan, victim), store, recorder)
