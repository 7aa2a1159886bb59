"""What one benchmark cell produces: the audited query store and the cell's record.

:class:`PrefixAudit` wraps the engine's query store so that a cell can prove
the D_B rule (§7) after the run; :class:`CellRecorder` turns the run into a
JSON record, writes it to ``<cells dir>/<cell id>/result.json`` (atomically)
and attaches it to the test report, which carries it to the xdist controller.
See docs/guide/grid.md.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import pytest

from mebench.harness.grid import Cell
from mebench.report.records import slim
from mebench.support.serial import jsonable

if TYPE_CHECKING:
    from mebench.config import RunConfig
    from mebench.run.engine import SeedResult
    from mebench.support.progress import Say

RECORD_KEY = "mebench_cell"
CELL_ID_KEY = "mebench_cell_id"
#: user property of a cell that ``--resume`` runs again: the one-line reason (copied into its record)
RERUN_KEY = "mebench_rerun_reason"

_MOD = (1 << 61) - 1


def fingerprint(t: Any, chunk: int = 1 << 16) -> int:
    """Exact, order-sensitive fingerprint of a tensor: bit patterns weighted by row and column.

    Integer arithmetic (wrapping int64, then modulo a prime) makes it independent of
    summation order, so two reads of the same rows always agree bit for bit.
    """
    return fingerprint_rows(lambda a, b: t[a:b], int(t.shape[0]), chunk)


def fingerprint_rows(read: Callable[[int, int], Any], n: int, chunk: int = 1 << 16) -> int:
    """:func:`fingerprint` of rows ``0 .. n`` read ``chunk`` rows at a time by ``read(start, stop)``,
    so a D_B left on disk (``mebench.data.rowfile``) is fingerprinted without loading it."""
    import torch

    total = 0
    for a in range(0, n, chunk):
        flat = read(a, min(n, a + chunk)).detach().reshape(min(n, a + chunk) - a, -1)
        if flat.dtype.is_floating_point:
            flat = flat.to(torch.float32).view(torch.int32)
        cols = torch.arange(1, flat.shape[1] + 1, dtype=torch.int64, device=flat.device)
        rows = (flat.to(torch.int64) * cols).sum(dim=1)
        weights = torch.arange(a + 1, a + 1 + rows.shape[0], dtype=torch.int64, device=rows.device)
        total = (total + int((rows * weights).sum())) % _MOD
    return total


class PrefixAudit:
    """The engine's query store plus a check that every D_B is a prefix of the query log (§7).

    Each ``prefix(n)`` read (Track A's D_B, an attack's labelled set) is
    fingerprinted. When the engine cleans the store up, the same prefixes are
    fingerprinted again from the final log before the cache is deleted: equal
    fingerprints mean D_B was exactly the first B queries and later queries did
    not change it. Findings go to ``problems``; nothing is raised inside the
    engine's ``finally``.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads: dict[int, tuple[int, int]] = {}
        self.final_size: Optional[int] = None
        self.problems: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["store"], name)

    def __len__(self) -> int:
        return len(self.store)

    def prefix(self, n: int, device: Any = "cpu") -> tuple[Any, Any]:
        x, y = self.store.prefix(n, device)
        self._record(n, x, y)
        return x, y

    def for_training(self, n: int, device: Any = "cpu") -> tuple[Any, Any]:
        """Track A's D_n: in memory, or left on disk (then fingerprinted a chunk at a time)."""
        x, y = self.store.for_training(n, device)
        self._record(n, x, y)
        return x, y

    def _record(self, n: int, x: Any, y: Any) -> None:
        if y is None:  # a RowsPrefix: D_n stays on disk
            got, seen = len(x), (fingerprint_rows(x.x.read, n), fingerprint_rows(x.y.read, n))
            got_y = got
        else:
            got, got_y, seen = int(x.shape[0]), int(y.shape[0]), (fingerprint(x), fingerprint(y))
        if got != n or got_y != n:
            self.problems.append(f"§7: D_{n} was read as {got} images and {got_y} outputs")
        if self.reads.setdefault(n, seen) != seen:
            self.problems.append(f"§7: two reads of D_{n} differ")

    def cleanup(self) -> None:
        if self.final_size is None:
            self.final_size = len(self.store)
            try:
                self._audit()
            except Exception as e:  # an unreadable log is a finding, not a crash in the engine's finally
                self.problems.append(f"§7: could not re-read the query log: {type(e).__name__}: {e}")
        self.store.cleanup()

    def _audit(self) -> None:
        if not self.reads:
            return
        for n, seen in sorted(self.reads.items()):
            # the final log, a chunk at a time (a 1M MNIST log is 3 GB)
            again = (fingerprint_rows(lambda a, b: self.store.rows_between(a, b)[0], n),
                     fingerprint_rows(lambda a, b: self.store.rows_between(a, b)[1], n))
            if again != seen:
                self.problems.append(f"§7: D_{n} as trained on is not the first {n} queries of the final log")


class CellRecorder:
    """A cell's record: written to ``result.json`` where the cell ran and sent to the controller.

    It needs only the cell, its run config and device, the cell's folder, the
    process's worker id, the test item (whose report carries the record to the
    controller), the ``pytest_mebench_update_cell`` hook caller with its
    ``config``, and a progress ``say`` (or ``None``).
    """

    def __init__(self, cell: Cell, run_config: "RunConfig", device: str, artifacts_dir: Path, *, worker: str,
                 item: Optional[pytest.Item] = None, update_hook: Optional[Callable[..., Any]] = None,
                 config: Optional[pytest.Config] = None, say: Optional["Say"] = None) -> None:
        self.cell, self.run_config, self.device = cell, run_config, device
        self.artifacts_dir, self.worker, self.item = artifacts_dir, worker, item
        self.update_hook, self.config, self.say = update_hook, config, say
        self.started = time.perf_counter()
        for stale in self.artifacts_dir.iterdir():  # a rerun never mixes with an older run's files
            if stale.is_file():
                stale.unlink()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Record the cell as ``error`` (and re-raise) when the run itself raises."""
        self.started = time.perf_counter()
        try:
            yield
        except BaseException as e:
            self.write(None, "error", error=f"{type(e).__name__}: {e}")
            raise

    def finish(self, result: "SeedResult", problems: Sequence[str]) -> dict[str, Any]:
        """Record the finished run: ``passed`` when no contract check failed, else ``failed``."""
        return self.write(result, "failed" if problems else "passed", problems=list(problems))

    def write(self, result: Optional["SeedResult"], status: str, problems: Sequence[str] = (),
              error: Optional[str] = None) -> dict[str, Any]:
        import torch

        from mebench.run import artifacts
        from mebench.support.identity import code_identity
        from mebench.run.plan import identity_hash

        summary = result.summary if result is not None else read_json(self.artifacts_dir / "summary.json")
        c = self.cell
        plan_hash, code, threads = c.plan.hash, code_identity(), torch.get_num_threads()
        props = dict(self.item.user_properties) if self.item is not None else {}
        record = {
            "id": c.id, "nodeid": self.item.nodeid if self.item is not None else None, "status": status, "problems": list(problems), "error": error,
            "attack": c.attack, "label": c.label, "defense": c.defense, "data_mode": c.data_mode,
            "output_mode": c.output_mode,
            "seed": c.seed, "cell_hash": identity_hash(plan_hash, code, threads), "plan_hash": plan_hash,
            "code_identity": code, "threads": threads, "rerun_reason": props.get(RERUN_KEY), "budgets": list(self.run_config.budget.checkpoints),
            "budgets_dropped": list(c.dropped_budgets), "config": self.run_config.to_dict(),
            "metrics_rows": list(result.rows) if result is not None else list(summary.get("results", [])),
            "summary": summary, "artifacts_dir": str(self.artifacts_dir),
            "artifacts": {p.name: str(p) for p in sorted(self.artifacts_dir.iterdir())
                          if p.is_file() and not p.name.startswith(".") and p.name != "result.json"},
            "timings": {"cell_s": time.perf_counter() - self.started, **dict(summary.get("timings_s") or {})},
            "device": self.device, "worker": self.worker, "resumed": False,
        }
        if self.update_hook is not None:
            self.update_hook(config=self.config, cell=c, record=record)
        record = jsonable(record, finite=False)  # NaN stays a float here; the JSON writers drop it
        # the file points at summary.json, metrics.csv and run_config.yaml instead of copying them; the
        # record the controller gets keeps the copies for the session's report and summary table
        artifacts.atomic_write_json(self.artifacts_dir / "result.json", slim(record, self.artifacts_dir))
        if self.item is not None:
            self.item.user_properties.append((RECORD_KEY, record))
        return record


def cell_recorder(bench: Any, cell: Cell, run_config: "RunConfig", device: str,
                  item: Optional[pytest.Item] = None) -> "CellRecorder":
    """The record of ``cell`` in its folder of the run ``bench`` (a ``BenchSession``); ``item`` is the
    test whose report carries it (set later for a cell run with its seed group)."""
    return CellRecorder(cell, run_config, device, bench.cell_dir(cell), worker=bench.worker_id, item=item,
                        update_hook=bench.config.hook.pytest_mebench_update_cell, config=bench.config,
                        say=bench.progress_say(cell))


def open_store(bench: Any, plan: Any, run_config: "RunConfig", victim: Any, directory: Path) -> PrefixAudit:
    """A cell's temporary query store (§11.2) in ``directory`` (a leftover one removed first), audited for
    the D_B prefix rule and marked with the run's token, so the controller can remove it should the
    worker be killed before the cell's own cleanup."""
    from mebench.run import engine
    from mebench.run.plan import site
    from mebench.support.naming import mark_cache_owner

    shutil.rmtree(directory, ignore_errors=True)
    store = PrefixAudit(engine.make_store(plan, site(run_config), victim, directory))
    if directory.is_dir():
        mark_cache_owner(directory, bench.run_token)
    return store


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
