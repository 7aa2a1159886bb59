"""The benchmark session behind mebench's pytest plugin.

The grid comes from ``mebench.harness.grid`` (benchmark config -> cells); each cell is
one test in ``benchmarks/test_cells.py`` that runs ``engine.run_seed`` once and
records itself through ``mebench.harness.cells``.

:class:`BenchSession` (one per pytest run, kept in ``config.stash``) holds the
parsed options, the grid, the per-process victim cache and, on the controller,
the cell records. A cell's record travels from wherever it ran (xdist worker
or main process) to the controller inside the test report's
``user_properties``, so the merge is the same with and without ``-n``; it is
also written to ``<cells dir>/<cell id>/result.json``, which ``--resume`` reads.
At session end the controller writes one JSON report and the seed aggregate.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import pytest
import yaml

from mebench.harness.cells import CELL_ID_KEY, RECORD_KEY, RERUN_KEY, read_json
from mebench.harness.grid import Cell, GridError, GridSet, load_grids
from mebench.naming import QUERY_CACHE_DIR, cache_owner_alive, cache_owner_token, latest_stamp_dir, make_stamp_dir, sweep_dead_caches, unused_stamp_dir

if TYPE_CHECKING:
    from mebench.harness.cost import Cost
    from mebench.config import RunConfig
    from mebench.resume import Verdict
    from mebench.engine import Prepared
    from mebench.progress import Say


# ------------------------------------------------------------------ devices
def device_for_worker(worker_id: str, gpus: Optional[Sequence[int]], cuda_count: int, default: str) -> str:
    """The device cells of one process run on.

    ``gpus`` is ``None`` without ``--gpus`` (cells use the config's
    ``run.device``), empty for ``--gpus`` alone (every visible GPU), else the
    allowed indices. xdist worker ``gwN`` takes ``gpus[N % len(gpus)]``; the
    main process (``"master"``) takes the first. Without CUDA every cell runs on
    the CPU.
    """
    if gpus is None:
        return default
    if cuda_count <= 0:
        return "cpu"
    pool = list(gpus) or list(range(cuda_count))
    n = int(worker_id[2:]) if re.fullmatch(r"gw\d+", worker_id) else 0
    return f"cuda:{pool[n % len(pool)]}"


@dataclass(frozen=True)
class BenchOptions:
    """The harness's command-line options, parsed.

    Every grid run gets its own folder ``runs/pytest/<UTC stamp>/`` holding
    ``cells/<cell id>/`` and ``report.json``, created exclusively when first needed
    (``cells_dir`` ``None`` until then; ``BenchSession.cells_dir``), so two runs never share
    one. ``--resume`` without ``--mebench-cells`` continues the latest such folder. A
    ``--mebench-cells`` folder that already holds cells needs ``--resume`` (keep what is
    current) or ``--overwrite`` (run the selected cells again). xdist workers receive the
    controller's folders (``pytest_configure_node``), so every process writes to the same run.
    """

    config_paths: tuple[Path, ...]
    json_path: Optional[Path]
    cells_dir: Optional[Path]
    report_dir: Optional[Path]
    gpus: Optional[tuple[int, ...]]
    budgets: Optional[tuple[int, ...]]
    seeds: Optional[tuple[int, ...]]
    resume: bool
    threads: Optional[int] = None
    progress_s: float = 30.0
    resumed_from: Optional[Path] = None
    overwrite: bool = False
    keep_stale: bool = False
    runs_dir: Optional[Path] = None
    transfer: bool = False
    named: bool = True  # the configs were named with --mebench-config (not the default set)
    seeds_together: bool = False  # --seeds-together, resolved for the device (mebench.harness.seedgroups)

    @classmethod
    def from_config(cls, config: pytest.Config) -> "BenchOptions":
        """Paths given on the command line are relative to the invocation folder, defaults to the rootdir."""
        opt, here, root = config.option, Path(config.invocation_params.dir), Path(config.rootpath)

        def path(value: Optional[str]) -> Optional[Path]:
            return None if value is None else here / Path(value).expanduser()

        gpus = opt.mebench_gpus
        if opt.mebench_config:
            configs = tuple(here / Path(c.strip()).expanduser() for c in opt.mebench_config.split(",") if c.strip())
        else:
            configs = tuple(sorted((root / DEFAULT_CONFIG_DIR).glob("*.yaml"))) or (root / DEFAULT_CONFIG_DIR / "mnist.yaml",)
        resume = bool(opt.mebench_resume)
        overwrite, keep_stale = bool(getattr(opt, "mebench_overwrite", False)), bool(getattr(opt, "mebench_keep_stale", False))
        worker = getattr(config, "workerinput", {})
        resumed_from = None
        if "mebench_cells_dir" in worker:  # an xdist worker: the controller chose the folders
            cells_dir, json_path = Path(worker["mebench_cells_dir"]), None
        else:
            _check_resume_flags(resume, overwrite, keep_stale)
            cells_dir, json_path = path(opt.mebench_cells), path(opt.mebench_json)
            if cells_dir is None:
                resumed_from = cells_dir = latest_cells_dir(root / RUNS_DIR) if resume else None
            elif not (resume or overwrite):
                _check_unused(cells_dir)
        if "mebench_threads" in worker:
            threads = int(worker["mebench_threads"])  # the controller resolved the policy once for all workers
        else:
            threads = opt.mebench_threads or _resumed_threads(resume, cells_dir) \
                or (1 if getattr(opt, "mebench_ray", None) else grid_threads(getattr(opt, "numprocesses", None)))
        return cls(config_paths=configs, json_path=json_path, cells_dir=cells_dir,
                   report_dir=path(opt.mebench_report), gpus=None if gpus is None else tuple(gpus),
                   budgets=opt.mebench_budgets, seeds=opt.mebench_seeds, resume=resume,
                   transfer=bool(getattr(opt, "mebench_transfer", False)), named=bool(opt.mebench_config),
                   threads=threads, progress_s=float(opt.mebench_progress),
                   resumed_from=resumed_from, overwrite=overwrite, keep_stale=keep_stale, runs_dir=root / RUNS_DIR,
                   seeds_together=_seeds_together(getattr(opt, "mebench_seeds_together", "auto"), gpus))


def _seeds_together(choice: str, gpus: Any) -> bool:
    """``--seeds-together``: on, off, or (auto) the measured default of the device type the cells use."""
    if choice != "auto":
        return choice == "on"
    from mebench.training.spec import seeds_together_default

    return seeds_together_default("cuda" if gpus is not None else "cpu")


def _resumed_threads(resume: bool, cells_dir: Optional[Path]) -> Optional[int]:
    """``--resume`` without ``--mebench-threads``: the count the resumed cells ran with (so a change of
    the machine's load does not make them stale), if they record one."""
    if not resume or cells_dir is None or not cells_dir.is_dir():
        return None
    from mebench.resume import recorded_threads

    return recorded_threads(sorted(cells_dir.glob("*/summary.json")))


def grid_threads(workers: object = None, default: Optional[int] = None) -> int:
    """The grid's torch thread count without ``--mebench-threads``: ``mebench run``'s policy
    (``mebench.threads.default_threads``) shared among the xdist workers that run cells at once.

    One policy for every way of running cells: a serial grid uses exactly the count ``mebench run``
    would; ``-n N`` gives each worker ``default // N`` (at least 1), so N cells never fight over the
    cores the policy found free. The controller resolves it once and hands it to its workers.
    """
    from mebench.threads import default_threads

    count = default_threads() if default is None else default
    n = workers if isinstance(workers, int) and workers > 0 else 1
    return max(1, count // n)


def _check_resume_flags(resume: bool, overwrite: bool, keep_stale: bool) -> None:
    """``--keep-stale`` refines ``--resume``; ``--overwrite`` contradicts it."""
    if keep_stale and not resume:
        raise pytest.UsageError("--keep-stale keeps stale cells of a resumed run: use it with --resume")
    if overwrite and resume:
        raise pytest.UsageError("--overwrite runs the selected cells again and --resume keeps the complete ones: "
                                "pass one of the two")


def _check_unused(cells_dir: Path) -> None:
    """A cells folder that already holds cells is continued (--resume) or replaced (--overwrite), never silently."""
    held = [p for p in cells_dir.iterdir()] if cells_dir.is_dir() else []
    if held:
        raise pytest.UsageError(f"--mebench-cells {cells_dir} already holds {len(held)} cell folder(s) of an earlier "
                                "run: pass --resume to keep its current cells or --overwrite to run them again")


def latest_cells_dir(runs: Path) -> Optional[Path]:
    """``<runs>/<stamp>/cells`` of the latest grid run (by time, then clash suffix), if any."""
    return latest_stamp_dir(runs, "*/cells")


def cell_of(item: pytest.Item) -> Optional[Cell]:
    """The grid cell a collected test runs, or ``None`` for any other test."""
    cell = getattr(item, "callspec", None) and item.callspec.params.get("cell")
    return cell if isinstance(cell, Cell) else None


#: The default grid: every benchmark config in this folder under the rootdir (one per victim dataset).
DEFAULT_CONFIG_DIR = "configs/benchmarks"
#: One folder per grid run under the rootdir: ``<RUNS_DIR>/<UTC stamp>/{cells/, report.json}``.
RUNS_DIR = "runs/pytest"


# --------------------------------------------------------------------------- session
class BenchSession:
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
        self.records: dict[str, dict[str, Any]] = {}
        self.report: Optional[dict[str, Any]] = None
        self.report_path: Optional[Path] = None
        self.messages: list[str] = []
        self._cells_dir: Optional[Path] = self.options.cells_dir

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
        from mebench.resume import NO_RESULTS, verdict_words

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
        """Print the selected cells' estimated wall time (``mebench.harness.cost``, calibrated on this
        machine); a large selection needs --budgets or --mebench-allow-large."""

        cells = [c for c in map(cell_of, items) if c is not None]
        if not cells:
            return
        cost = self.estimate(cells)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and not self.is_worker:  # under xdist the workers collect and enforce the guard
            tr.write_line(cost.line())
        allowed = self.options.budgets is not None or self.config.getoption("mebench_allow_large")
        if cost.large and not allowed and not self.config.option.collectonly:
            raise pytest.UsageError(f"{cost.line()}: too large to start by accident; pass --budgets B1,B2 "
                                    "to shorten it or --mebench-allow-large to run it as selected")

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
            tr.write_line(self.estimate(cells).line())
            for line in self.resume_lines(cells) if self.options.resume else []:  # the workers print none
                tr.write_line(line)

    def resume_lines(self, cells: Sequence[Cell]) -> list[str]:
        """``--resume``'s line for each cell that runs again or is kept stale (a current cell says nothing)."""
        from mebench.resume import NO_RESULTS, verdict_words

        lines = []
        for cell in cells:
            verdict = self.resume_verdict(cell)
            if verdict.reason and verdict.reason != NO_RESULTS:
                lines.append(f"mebench --resume: {cell.id}: {verdict_words(verdict)}")
        return lines

    def complete_record(self, cell: Cell, verdict: Optional["Verdict"] = None) -> Optional[dict[str, Any]]:
        """The cell's stored record if ``--resume`` keeps it (``resume_verdict``), marked ``resumed``;
        a cell kept by ``--keep-stale`` carries ``resume: {kept_stale, reason}`` (also in its files)."""
        from mebench.resume import RESUME_KEY, mark_kept_stale

        verdict = self.resume_verdict(cell) if verdict is None else verdict
        if not verdict.keep:
            return None
        directory = self.cells_dir / cell.id
        rec = read_json(directory / "result.json")
        if verdict.stale and verdict.reason and verdict.summary is not None:
            summary = mark_kept_stale(directory, verdict.summary, verdict.reason)
            rec = {**rec, "summary": summary, RESUME_KEY: summary[RESUME_KEY]}
            from mebench import artifacts

            artifacts.atomic_write_json(directory / "result.json", rec)
        return {**rec, "resumed": True}

    def resume_verdict(self, cell: Cell) -> "Verdict":
        """Keep a stored cell only when its last run passed, its files are whole and its plan, code
        identity and thread count equal what would run now (``mebench.resume``); ``--keep-stale``
        also keeps whole cells that differ only in those."""
        from mebench.identity import code_identity
        from mebench.resume import NO_RESULTS, Verdict, check_folder, decide

        directory = self.cells_dir / cell.id
        if not directory.is_dir():
            return Verdict(False, NO_RESULTS)
        rec = read_json(directory / "result.json")
        if not rec:
            return Verdict(False, "result.json is missing or not valid JSON")
        if rec.get("status") != "passed":
            return Verdict(False, f"its last run ended {rec.get('status')!r}")
        on_disk, recorded = read_json(directory / "summary.json"), rec.get("summary") or {}
        if on_disk and any(on_disk.get(k) != recorded.get(k) for k in ("plan_hash", "code_identity", "completed_at")):
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
        from mebench import engine

        if (victim_key, device) not in self._prepared:
            cell = next(c for c in self.grid.cells if c.victim_key == victim_key)
            self._prepared[(victim_key, device)] = engine.prepare(self.run_config(cell, device), command="grid")
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

    def cell_dir(self, cell: Cell) -> Path:
        """``<cells dir>/<cell id>``: the seed artifacts, ``result.json`` and the temporary query cache."""
        path = self.cells_dir / cell.id
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- controller: merge ----------------------------------------------------------------
    def add_report(self, report: pytest.TestReport) -> None:
        """Collect cell records from test reports (local or sent by xdist workers)."""
        props = dict((p[0], p[1]) for p in report.user_properties)
        cell_id = props.get(CELL_ID_KEY)
        record = props.get(RECORD_KEY)
        if cell_id is None and _crashed(report):  # pytest-xdist's report of a worker that died mid-cell
            nodeid = re.sub(r"@[^\]]*$", "", report.nodeid)  # --dist loadgroup appends "@<group>"
            cell_id = nodeid.rsplit("[", 1)[-1].rstrip("]") if nodeid.endswith("]") else None
        if cell_id is None:
            return
        if _crashed(report):
            self.records[cell_id] = {"id": cell_id, "nodeid": report.nodeid, "status": "error",
                                     "error": _last_line(report), "metrics_rows": [], "summary": {}}
        elif record is not None and (report.when == "call" or record.get("resumed")):
            self.records[cell_id] = record
        elif report.when == "setup" and not report.passed:
            status = "skipped" if report.skipped else "error"
            self.records[cell_id] = {"id": cell_id, "nodeid": report.nodeid, "status": status,
                                     "error": _last_line(report), "metrics_rows": [], "summary": {}}
        elif report.when == "teardown" and report.failed and cell_id in self.records:
            self.records[cell_id] = {**self.records[cell_id], "status": "error",
                                     "error": f"teardown: {_last_line(report)}"}

    # -- controller: report ---------------------------------------------------------------
    def finish(self) -> None:
        """Write the JSON report, the seed aggregate and (``--mebench-report``) the rendered report."""
        if self.is_worker or not self.records:
            return
        from mebench import artifacts

        report = self.build_report()
        path = self.json_path()
        aggregate_csv = path.with_name(f"{path.stem}_aggregate.csv")
        report["files"] = {"report": str(path), "aggregate_csv": str(aggregate_csv),
                           "cells_dir": str(self.cells_dir)}
        self.config.hook.pytest_mebench_update_json(config=self.config, report=report)
        from mebench.report.paths import portable_grid_report  # paths relative to report.json: runs/ can move

        artifacts.atomic_write_json(path, portable_grid_report(report, path))
        artifacts.write_aggregate_csv(aggregate_csv, report["aggregate"])
        self.report, self.report_path = report, path
        if self.options.report_dir is not None:
            self.messages.append(_render_report(path, self.options.report_dir))

    def json_path(self) -> Path:
        """``--mebench-json``, else ``report.json`` beside the cells folder (``report-<stamp>.json`` when a
        resumed run's folder has one); with ``--mebench-cells``, in a new run folder of its own."""
        if self.options.json_path is not None:
            return self.options.json_path
        if self.options.cells_dir is not None and self.options.resumed_from is None:
            assert self.options.runs_dir is not None
            return make_stamp_dir(self.options.runs_dir) / "report.json"
        run_dir = self.cells_dir.parent
        path = run_dir / "report.json"
        return path if not path.exists() else run_dir / f"report-{unused_stamp_dir(run_dir).name}.json"

    def build_report(self) -> dict[str, Any]:
        """The report document: cells sorted by id, their seed aggregate, machine and commit."""
        from mebench import artifacts, runinfo

        cells = [self.records[k] for k in sorted(self.records)]
        rows = [{**r, "dataset": ((c.get("config") or {}).get("dataset") or {}).get("name", "")}
                for c in cells if c.get("status") == "passed" for r in c.get("metrics_rows", [])]
        devices = sorted({c["device"] for c in cells if c.get("device")})
        statuses = [c.get("status") for c in cells]
        return {
            "mebench_report_version": 1,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "benchmark_configs": [str(p) for p in self.options.config_paths],
            "benchmarks": [_read_yaml(p) for p in self.options.config_paths],
            "options": {"budgets": self.options.budgets, "seeds": self.options.seeds, "gpus": self.options.gpus,
                        "resume": self.options.resume, "keep_stale": self.options.keep_stale,
                        "overwrite": self.options.overwrite, "threads": self.options.threads,
                        "workers": _worker_count(self.config),
                        "args": list(self.config.invocation_params.args)},
            "machine": {**runinfo.machine_info(devices[0] if devices else "cpu"), "cell_devices": devices},
            "versions": runinfo.library_versions(), "git": runinfo.git_commit(),
            "timings": {"session_s": time.time() - self.started,
                        "cells_s": sum((c.get("timings") or {}).get("cell_s", 0.0) for c in cells if not c.get("resumed"))},
            "counts": {**{s: statuses.count(s) for s in sorted(set(statuses))},
                       "resumed": sum(bool(c.get("resumed")) for c in cells),
                       "kept_stale": sum(bool((c.get("resume") or {}).get("kept_stale")) for c in cells)},
            "kept_stale": [{"id": c["id"], "reason": c["resume"].get("reason")} for c in cells
                           if (c.get("resume") or {}).get("kept_stale")],
            "cells": cells,
            "aggregate": artifacts.aggregate_rows(rows),
        }

    def summary_lines(self) -> list[str]:
        """A compact table: mean ± std over seeds of each cell group at every checkpoint."""
        if self.report is None:
            return list(self.messages)
        counts = ", ".join(f"{n} {s}" for s, n in self.report["counts"].items())
        lines = [f"{len(self.report['cells'])} cells ({counts}); report: {self.report_path}"]
        lines += results_table(self.report["aggregate"])
        lines += [f"{c['status']}: {c['id']}: {c.get('error') or '; '.join(c.get('problems') or [])}"
                  for c in self.report["cells"] if c.get("status") not in ("passed", "skipped")]
        return lines + self.messages

    def collection_lines(self) -> list[str]:
        """After collection (without xdist): where the grid came from and what it left out."""
        if self._grid is None:
            return []
        return self._grid.describe()


def results_table(aggregate: Sequence[dict[str, Any]]) -> list[str]:
    """Rows of the terminal summary, one per condition, track and budget checkpoint; a column per metric
    (``mebench.metrics.METRICS``: mean ± std for the higher-is-better ones, the mean for the others)."""
    from mebench.metrics import METRICS

    groups: dict[tuple, dict[str, Any]] = {}
    for r in aggregate:
        key = (r["attack"], r["data_mode"], r["output_mode"], r["track"], r["checkpoint_B"])
        groups.setdefault(key, {"B": r["checkpoint_B"]})[r["metric"]] = r
    widths = {m.name: 15 if m.higher_is_better else 8 for m in METRICS}
    head = f"{'attack':<24} {'data_mode':<10} {'output':<10} {'trk':<3} {'B':>8} " + " ".join(
        f"{m.name:>{widths[m.name]}}" for m in METRICS) + f" {'n':>2}"
    lines = [head] if groups else []
    for (attack, dm, om, track, _), g in sorted(groups.items()):
        n = max((m["n_seeds"] for k, m in g.items() if k != "B"), default=0)
        cells = " ".join(f"{_pm(g.get(m.name), std=m.higher_is_better):>{widths[m.name]}}" for m in METRICS)
        lines.append(f"{attack:<24} {dm:<10} {om:<10} {track:<3} {g['B']:>8} {cells} {n:>2}")
    return lines


def _pm(m: Optional[dict[str, Any]], std: bool = True) -> str:
    if m is None or m.get("mean") is None or not math.isfinite(m["mean"]):
        return "-"
    if not std:
        return f"{m['mean']:.4f}"
    return f"{m['mean']:.4f}" + (f" ± {m['std']:.4f}" if m.get("std") is not None else "")


def _render_report(json_path: Path, out_dir: Path) -> str:
    """``--mebench-report``: mebench.report.write_report on the JSON report, when it is available."""
    try:
        from mebench.report import write_report
    except ImportError as e:
        return f"--mebench-report: mebench.report.write_report is not available ({e}); the JSON report is {json_path}"
    try:
        files = write_report(json_path, out_dir)
    except Exception as e:  # a report that cannot be drawn must not hide the benchmark results
        return f"--mebench-report: could not write the report to {out_dir}: {type(e).__name__}: {e}"
    return f"report files ({len(files)}) in {out_dir}"


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _worker_count(config: pytest.Config) -> int:
    n = getattr(config.option, "numprocesses", None)
    return int(n) if isinstance(n, int) else 0


def _remove_if_empty(cells_dir: Path) -> None:
    """Remove a reserved ``<stamp>/cells`` folder and its run folder when nothing was written there."""
    try:
        cells_dir.rmdir()
        cells_dir.parent.rmdir()
    except OSError:
        pass


def _last_line(report: pytest.TestReport) -> str:
    text = report.longreprtext.strip().splitlines()
    return text[-1] if text else report.outcome


def _crashed(report: pytest.TestReport) -> bool:
    """A report pytest-xdist made for an item whose worker died (``when`` is "???"; the longrepr says
    "worker 'gwN' crashed while running ...")."""
    return report.failed and report.when not in ("setup", "call", "teardown") and "crashed" in str(report.longrepr)
