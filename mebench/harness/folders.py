"""The grid run's folders: its cells folder (created exclusively on first use), each cell's folder, and the
temporary query caches (§11.2) dead or interrupted runs left (``RunFolders``, a part of ``BenchSession``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mebench.harness.grid import Cell
from mebench.support.naming import QUERY_CACHE_DIR, cache_owner_alive, cache_owner_token, make_stamp_dir, sweep_dead_caches


class RunFolders:
    """Where a grid run writes, and the caches it sweeps (mixed into ``BenchSession``, whose ``options``,
    ``is_worker``, ``run_token``, ``messages`` and ``_cells_dir`` it uses)."""

    options: Any
    is_worker: bool
    run_token: str
    messages: list
    _cells_dir: Any

    @property
    def cells_dir(self) -> Path:
        """The run's cells folder; a new ``runs/pytest/<stamp>/cells`` is created exclusively on first use."""
        if self._cells_dir is None:
            assert self.options.runs_dir is not None
            self._cells_dir = make_stamp_dir(self.options.runs_dir) / "cells"
            self._cells_dir.mkdir()
        return self._cells_dir

    # -- start-up -----------------------------------------------------------------------
    def sweep_stale_caches(self) -> list[Path]:
        """Controller: remove the temporary query caches (§11.2) that dead runs left.

        A cell removes its ``.query_cache`` even when it fails or is interrupted; only a
        process killed outright (SIGKILL, power loss) leaves one behind. Every cache names the
        process that made it (``naming.mark_cache_owner``); those of processes gone from this
        machine are removed under ``runs/pytest/`` and the ``--mebench-cells`` folder. With
        ``--resume`` every cache in the resumed cells folder goes except one whose owner is a
        running process of this machine (a second run resuming the same folder never deletes a
        live run's cache); older marks name no process and go.
        """
        if self.is_worker:
            return []
        stale: list[Path] = []
        here: list[Path] = []
        if self._cells_dir is not None and self._cells_dir.is_dir():
            here += sweep_dead_caches(self._cells_dir, f"*/{QUERY_CACHE_DIR}")
            if self.options.resume:
                left = sorted(p for p in self._cells_dir.glob(f"*/{QUERY_CACHE_DIR}")
                              if p.is_dir() and not cache_owner_alive(p))
                for path in left:
                    shutil.rmtree(path, ignore_errors=True)
                here += left
        if self.options.runs_dir is not None and self.options.runs_dir.is_dir():  # the other folders of runs/pytest
            stale += sweep_dead_caches(self.options.runs_dir, f"*/cells/*/{QUERY_CACHE_DIR}")
        prefix = "--resume: " if self.options.resume else ""
        for found, where in ((here, self._cells_dir), (sorted(set(stale) - set(here)), self.options.runs_dir)):
            if found:
                self.messages.append(f"{prefix}removed {len(found)} temporary query cache{'s' if len(found) > 1 else ''}"
                                     f" an interrupted run left in {where}")
        return sorted(set(stale) | set(here))

    def remove_own_caches(self) -> list[Path]:
        """Controller, at the end of the run: remove the query caches (§11.2) this run's cells left.

        A cell's ``finally`` removes its cache, but a worker that an interrupted xdist run tears
        down is killed outright when it does not exit in time (a loaded machine), and its cache
        would survive. Only caches marked with this run's token are removed, so a second run
        sharing the cells folder keeps its live ones. A run folder this run reserved and never
        used (an xdist run without grid cells) is removed too.
        """
        if self.is_worker or self._cells_dir is None or not self._cells_dir.is_dir():
            return []
        mine = []
        for path in self._cells_dir.glob(f"*/{QUERY_CACHE_DIR}"):
            if cache_owner_token(path) == self.run_token:
                shutil.rmtree(path, ignore_errors=True)
                mine.append(path)
        if self.options.cells_dir is None and not self.options.resume:
            _remove_if_empty(self._cells_dir)
        return sorted(mine)

    def cell_dir(self, cell: Cell) -> Path:
        """``<cells dir>/<cell id>``: the seed artifacts, ``result.json`` and the temporary query cache."""
        path = self.cells_dir / cell.id
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- controller: merge ----------------------------------------------------------------

def _remove_if_empty(cells_dir: Path) -> None:
    """Remove a reserved ``<stamp>/cells`` folder and its run folder when nothing was written there."""
    try:
        cells_dir.rmdir()
        cells_dir.parent.rmdir()
    except OSError:
        pass


