"""The grid's command-line options, parsed once per process (``BenchOptions``), and the thread and
device policies they imply."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from mebench.support.naming import latest_stamp_dir


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
    from mebench.run.resume import recorded_threads

    return recorded_threads(sorted(cells_dir.glob("*/summary.json")))


def grid_threads(workers: object = None, default: Optional[int] = None) -> int:
    """The grid's torch thread count without ``--mebench-threads``: ``mebench run``'s policy
    (``mebench.support.threads.default_threads``) shared among the xdist workers that run cells at once.

    One policy for every way of running cells: a serial grid uses exactly the count ``mebench run``
    would; ``-n N`` gives each worker ``default // N`` (at least 1), so N cells never fight over the
    cores the policy found free. The controller resolves it once and hands it to its workers.
    """
    from mebench.support.threads import default_threads

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


#: The default grid: every benchmark config in this folder under the rootdir (one per victim dataset).
DEFAULT_CONFIG_DIR = "configs/benchmarks"
#: One folder per grid run under the rootdir: ``<RUNS_DIR>/<UTC stamp>/{cells/, report.json}``.
RUNS_DIR = "runs/pytest"


