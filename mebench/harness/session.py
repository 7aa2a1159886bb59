"""The benchmark session behind mebench's pytest plugin.

:class:`BenchSession` (one per pytest run, kept in ``config.stash``) holds the parsed options, the
grid (``mebench.harness.grid``), the per-process victim cache and, on the controller, the cell
records, which travel in the test reports' ``user_properties`` (the same merge with and without
``-n``). At session end the controller writes one JSON report and the seed aggregate.
See docs/guide/grid.md.
"""
# The grid comes from ``mebench.harness.grid`` (benchmark config -> cells); each cell is
# one test in ``benchmarks/test_cells.py`` that runs ``engine.run_seed`` once and
# records itself through ``mebench.harness.cells``.
#
# :class:`BenchSession` (one per pytest run, kept in ``config.stash``) holds the
# parsed options, the grid, the per-process victim cache and, on the controller,
# the cell records. A cell's record travels from wherever it ran (xdist worker
# or main process) to the controller inside the test report's
# ``user_properties``, so the merge is the same with and without ``-n``; it is
# also written to ``<cells dir>/<cell id>/result.json``, which ``--resume`` reads.
# At session end the controller writes one JSON report and the seed aggregate.

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pytest

from mebench.harness.cells import CELL_ID_KEY, RECORD_KEY, RERUN_KEY, read_json
from mebench.harness.folders import RunFolders
from mebench.harness.grid import Cell, GridError, GridSet, load_grids
from mebench.harness.jsonreport import JsonReport, results_table  # noqa: F401  (re-exported for the plugin's users)
from mebench.harness.bench_options import BenchOptions, device_for_worker, grid_threads  # noqa: F401  (likewise)

if TYPE_CHECKING:
    from mebench.harness.cost import Cost
    from mebench.config import RunConfig
    from mebench.run.resume import Verdict
    from mebench.run.engine import Prepared
    from mebench.support.progress import Say


def cell_of(item: pytest.Item) -> Optional[Cell]:
    """The grid cell a collected test runs, or ``None`` for any other test."""
    cell = getattr(item, "callspec", None) and item.callspec.params.get("cell")
    return cell if isinstance(cell, Cell) else None


def _total_seconds(record: Mapping[str, Any]) -> Optional[float]:
    """A kept cell's measured ``summary.timings_s.total`` (seconds), ``None`` when its record has none."""
    summary = record.get("summary")
    timings = summary.get("timings_s") if isinstance(summary, Mapping) else None
    total = timings.get("total") if isinstance(timings, Mapping) else None
    return float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else None


# --------------------------------------------------------------------------- session
class BenchSession(RunFolders, JsonReport):
    """Everything the plugin's hooks hand off to; one per pytest run (``config.stash``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options = BenchOptions.from_config(config)
        self.worker_id: str = getattr(config, "workerinput", {}).get("workerid", "master")
        self.is_worker = hasattr(config, "workerinput")
        # names this run's query caches (the controller's, handed to every xdist worker)
        self.run_token: str = getattr(config, "workerinput", {}).get("mebench_run_token") or uuid.uuid4().hex
        self.gpu_warning: Optional[str] = None  # set by the controller at configure time
        self.started = time.time()
        self._grid: Optional[GridSet] = None
        self._grid_error: Optional[GridError] = None
        self._prepared: dict[tuple[str, str], "Prepared"] = {}
        JsonReport.__init__(self)
        self.messages: list[str] = []
        self._cells_dir: Optional[Path] = self.options.cells_dir

    def check_gpus(self) -> Optional[str]:
        """Controller only: reject GPU indices that do not exist; say once when CUDA is missing."""
        if self.options.gpus is None:
            return None
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return "--gpus: CUDA is not available on this machine; every benchmark cell runs on the CPU"
        bad = [g for g in self.options.gpus if g >= count]
        if bad:
            raise pytest.UsageError(f"--gpus {','.join(map(str, self.options.gpus))}: GPU {bad[0]} does not exist "
                                    f"({count} visible: 0..{count - 1})")
        return None

    # -- grid ---------------------------------------------------------------------------
    @property
    def grid(self) -> GridSet:
        """The benchmark grid, loaded on first use (so runs without benchmark tests never read it)."""
        if self._grid is None and self._grid_error is None:
            try:
                self._grid = load_grids(self.options.config_paths, Path(self.config.rootpath),
                                        self.options.seeds, self.options.budgets, smoke_only=self.smoke_only,
                                        transfer=self.options.transfer, leave_out_untrained=not self.options.named)
            except GridError as e:
                self._grid_error = e
        if self._grid_error is not None:
            raise self._grid_error
        assert self._grid is not None
        return self._grid

    @property
    def smoke_only(self) -> bool:
        """``-m smoke`` (and no ``-m`` mention of ``full``): the grid keeps its smoke budgets only."""
        expr = str(self.config.getoption("markexpr", "") or "")
        return "smoke" in expr and "full" not in expr and "not smoke" not in expr

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        """One test per cell; ``victim`` is a session-scoped fixture keyed by the cell's victim key."""
        try:
            cells, error = self.grid.cells, None
        except GridError as e:
            cells, error = [], str(e)
        if error is not None:
            pytest.fail(f"mebench grid: {error}", pytrace=False)
        params = [pytest.param(c, c.victim_key, id=c.id, marks=getattr(pytest.mark, c.marker)) for c in cells]
        metafunc.parametrize(["cell", "victim"], params, indirect=["victim"], scope="session")

    def tag_items(self, items: Sequence[pytest.Item]) -> None:
        """Label cell items for the report channel; with ``--resume`` skip the complete ones."""
        from mebench.run.resume import NO_RESULTS, verdict_words

        lines = []
        for item in items:
            cell = cell_of(item)
            if cell is None:
                continue
            item.user_properties.append((CELL_ID_KEY, cell.id))
            if not self.options.resume:
                continue
            verdict = self.resume_verdict(cell)
            if verdict.reason and verdict.reason != NO_RESULTS:
                lines.append(f"mebench --resume: {cell.id}: {verdict_words(verdict)}")
                if not verdict.keep:
                    item.user_properties.append((RERUN_KEY, verdict.reason))
            done = self.complete_record(cell, verdict) if verdict.keep else None
            if done is not None:
                item.user_properties.append((RECORD_KEY, done))
                item.add_marker(pytest.mark.skip(reason=f"--resume: complete results in {done['artifacts_dir']}"))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and not self.is_worker:  # one line per cell that runs again (or is kept stale)
            for line in lines:
                tr.write_line(line)

    def check_cost(self, items: Sequence[pytest.Item]) -> None:
        """Print the estimated wall time of the selected cells that will run (``mebench.harness.cost``,
        calibrated on this machine) and, with ``--resume``, what the kept cells took against their own
        estimate; a large selection needs --budgets or --mebench-allow-large."""

        pairs = [(item, cell) for item, cell in ((i, cell_of(i)) for i in items) if cell is not None]
        if not pairs:
            return
        cells = [cell for _, cell in pairs]
        kept = {cell.id: rec for item, cell in pairs for key, rec in item.user_properties if key == RECORD_KEY}
        cost, lines = self.cost_lines(cells, kept)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and not self.is_worker:  # under xdist the workers collect and enforce the guard
            for line in lines:
                tr.write_line(line)
        allowed = self.options.budgets is not None or self.config.getoption("mebench_allow_large")
        if cost.large and not allowed and not self.config.option.collectonly:
            raise pytest.UsageError(f"{cost.line()}: too large to start by accident; pass --budgets B1,B2 "
                                    "to shorten it or --mebench-allow-large to run it as selected")

    def cost_lines(self, cells: Sequence[Cell], kept: Mapping[str, Mapping[str, Any]]) -> tuple["Cost", list[str]]:
        """The estimate of the cells that will run (those not in ``kept``, cell id -> the record
        ``--resume`` keeps) and its line; when cells are kept, a second line: how many, and per label
        their measured ``timings_s.total`` against mebench's estimate for them (the estimate's own check)."""
        from mebench.harness.cost import human
        from mebench.support.naming import plural

        run = [c for c in cells if c.id not in kept]
        cost = self.estimate(run)
        done = [c for c in cells if c.id in kept]
        if not done:
            return cost, [cost.line()]
        parts = []
        for label in sorted({c.label for c in done}):
            timed = [(c, _total_seconds(kept[c.id])) for c in done if c.label == label]
            timed = [(c, t) for c, t in timed if t is not None]
            if timed:
                guessed = self.estimate([c for c, _ in timed]).cpu_seconds
                took = sum(t for _, t in timed)
                parts.append(f"{label} {human(took)} against ~{human(guessed)} (x{took / max(guessed, 1e-9):.1f}, "
                             f"{len(timed)} {plural(len(timed), 'cell')})")
        measured = f"; measured against mebench's estimate: {'; '.join(parts)}" if parts else ""
        return cost, [cost.line(), f"mebench: {len(done)} of the {len(cells)} selected cells are complete and kept by "
                                   f"--resume, the estimate above is the {len(run)} that run{measured}"]

    def estimate(self, cells: Sequence[Cell]) -> "Cost":
        """``mebench.harness.cost.estimate`` of ``cells`` on this run's xdist workers at its pinned thread count."""
        from mebench.harness.cost import estimate

        workers = getattr(self.config.option, "numprocesses", None)
        return estimate([c.plan for c in cells], threads=self.options.threads or None,
                        workers=workers if isinstance(workers, int) and workers > 0 else 1)

    def show_cost_of_ids(self, node_ids: Sequence[str]) -> None:
        """xdist controller: print the estimate of the cells named by one worker's collected node ids (once)."""
        if getattr(self, "_cost_shown", False) or self.is_worker:
            return
        self._cost_shown = True
        wanted = {i.rsplit("[", 1)[-1].rstrip("]") for i in node_ids if i.endswith("]")}
        try:
            cells = [c for c in self.grid.cells if c.id in wanted]
        except GridError:
            return  # the workers report the grid's error
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if cells and tr is not None:
            kept = {c.id: rec for c in cells for rec in [self.kept_record(c)] if rec is not None} \
                if self.options.resume else {}
            for line in self.cost_lines(cells, kept)[1]:
                tr.write_line(line)
            for line in self.resume_lines(cells) if self.options.resume else []:  # the workers print none
                tr.write_line(line)

    def resume_lines(self, cells: Sequence[Cell]) -> list[str]:
        """``--resume``'s line for each cell that runs again or is kept stale (a current cell says nothing)."""
        from mebench.run.resume import NO_RESULTS, verdict_words

        lines = []
        for cell in cells:
            verdict = self.resume_verdict(cell)
            if verdict.reason and verdict.reason != NO_RESULTS:
                lines.append(f"mebench --resume: {cell.id}: {verdict_words(verdict)}")
        return lines

    def complete_record(self, cell: Cell, verdict: Optional["Verdict"] = None) -> Optional[dict[str, Any]]:
        """The cell's stored record if ``--resume`` keeps it (``resume_verdict``), marked ``resumed``;
        a cell kept by ``--keep-stale`` carries ``resume: {kept_stale, reason}`` (also in its files)."""
        from mebench.run.resume import RESUME_KEY, mark_kept_stale

        verdict = self.resume_verdict(cell) if verdict is None else verdict
        if not verdict.keep:
            return None
        from mebench.report.records import full, slim

        directory = self.cells_dir / cell.id
        rec = full(read_json(directory / "result.json"), directory)  # the copies read from the cell's files
        if verdict.stale and verdict.reason and verdict.summary is not None:
            summary = mark_kept_stale(directory, verdict.summary, verdict.reason)
            rec = {**rec, "summary": summary, RESUME_KEY: summary[RESUME_KEY]}
            from mebench.run import artifacts

            artifacts.atomic_write_json(directory / "result.json", slim(rec, directory))
        return {**rec, "resumed": True}

    def kept_record(self, cell: Cell) -> Optional[dict[str, Any]]:
        """The stored record ``--resume`` would keep for ``cell``, read only: nothing is marked or written
        (the xdist controller's estimate reads it while the workers decide and mark)."""
        if not self.resume_verdict(cell).keep:
            return None
        from mebench.report.records import full

        directory = self.cells_dir / cell.id
        return full(read_json(directory / "result.json"), directory)

    def resume_verdict(self, cell: Cell) -> "Verdict":
        """Keep a stored cell only when its last run passed, its files are whole and its plan, code
        identity and thread count equal what would run now (``mebench.run.resume``); ``--keep-stale``
        also keeps whole cells that differ only in those."""
        from mebench.support.identity import code_identity
        from mebench.run.resume import NO_RESULTS, Verdict, check_folder, decide

        directory = self.cells_dir / cell.id
        if not directory.is_dir():
            return Verdict(False, NO_RESULTS)
        rec = read_json(directory / "result.json")
        if not rec:
            return Verdict(False, "result.json is missing or not valid JSON")
        if rec.get("status") != "passed":
            return Verdict(False, f"its last run ended {rec.get('status')!r}")
        from mebench.report.records import matches_folder

        if not matches_folder(rec, directory):
            # a rerun wrote summary.json and was stopped before result.json: the two are of different runs
            return Verdict(False, "result.json and summary.json come from different runs (an interrupted rerun)")
        return decide(check_folder(directory, cell.plan, code_identity(), self.expected_threads()),
                      self.options.keep_stale)

    def expected_threads(self) -> int:
        """The torch thread count cells of this run use (``pin_threads``)."""
        if self.options.threads:
            return self.options.threads
        import torch

        return torch.get_num_threads()

    # -- per-cell objects -----------------------------------------------------------------
    def device(self) -> str:
        """This process's device (``--gpus`` mapping, else the config's ``run.device``)."""
        default = self._grid.default_device if self._grid is not None else "cpu"
        if self.options.gpus is None:
            return default
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return device_for_worker(self.worker_id, self.options.gpus, count, default)

    def pin_threads(self) -> None:
        """The same torch thread count in every process that runs cells: ``--mebench-threads N``,
        else the policy of ``grid_threads`` (``mebench run``'s, shared among the xdist workers).

        CPU results depend on the thread count (it changes the order of float reductions), so it
        is recorded with every cell (``machine.torch_threads``) and ``--resume`` compares it.
        """
        if self.options.threads:
            import torch

            torch.set_num_threads(self.options.threads)

    def run_config(self, cell: Cell, device: str) -> "RunConfig":
        """The cell's run config on this process's device."""
        return cell.cfg.replace(run=dataclasses.replace(cell.cfg.run, device=device))

    def prepared(self, victim_key: str, device: str) -> "Prepared":
        """engine.prepare for a victim key, once per process and device."""
        from mebench.run import engine
        from mebench.run.plan import site

        if (victim_key, device) not in self._prepared:
            cell = next(c for c in self.grid.cells if c.victim_key == victim_key)
            self._prepared[(victim_key, device)] = engine.prepare(cell.plan, site(self.run_config(cell, device)),
                                                                  command="grid")
        return self._prepared[(victim_key, device)]

    def progress_say(self, cell: Cell) -> Optional["Say"]:
        """Progress lines of one cell, written to the terminal past pytest's capture.

        Under xdist a worker's stderr is the terminal too, so ``-n 4`` shows the
        lines of every running cell, tagged with the worker id.
        ``--mebench-progress 0`` turns them off.
        """
        if self.options.progress_s <= 0:
            return None
        import sys

        capman = self.config.pluginmanager.getplugin("capturemanager")
        tag = f"mebench [{self.worker_id}] {cell.id}" if self.is_worker else f"mebench {cell.id}"
        first = [not self.is_worker]  # in-process the first line follows pytest's "file.py " prefix

        def say(line: str) -> None:
            text = ("\n" if first[0] else "") + f"{tag}: {line}\n"
            first[0] = False
            if capman is None:
                sys.stderr.write(text)
            else:
                with capman.global_and_fixture_disabled():
                    sys.stderr.write(text)
                    sys.stderr.flush()

        say.interval = self.options.progress_s  # type: ignore[attr-defined]
        return say

    def worker_input(self) -> dict[str, str]:
        """What the controller hands each xdist worker: the run's cells folder and its token."""
        return {"mebench_cells_dir": str(self.cells_dir), "mebench_run_token": self.run_token,
                "mebench_threads": str(self.options.threads)}

    def collection_lines(self) -> list[str]:
        """After collection (without xdist): where the grid came from and what it left out."""
        if self._grid is None:
            return []
        return self._grid.describe()
