"""Grid cells as Ray tasks: ``pytest benchmarks/ --ray auto`` (the ``[ray]`` extra: ``pip install -e ".[ray]"``).

pytest stays the interface: collection, ``-k``, markers, ``--budgets``, ``--resume`` and the JSON
report work as without Ray; only the run loop changes (``pytest_runtestloop``). Every selected cell
that is not skipped becomes one Ray task, which runs the cell exactly as a serial run does (a child
``python -m pytest <node id>``) and returns its files; tasks are not retried. What a worker needs,
priorities and failures are below. See docs/guide/ray.md.
"""
# pytest stays the interface. Collection, ``-k``, markers, ``--budgets``,
# ``--resume`` and the JSON report work as without Ray; only the run loop changes
# (``pytest_runtestloop``, the way pytest-xdist takes it over). Every selected
# cell that is not skipped becomes one Ray task; tests that are not grid cells and
# cells that ``--resume`` skips run in the controller as usual.
#
# A task runs its cell exactly as a serial run does: it starts
# ``python -m pytest <the cell's node id>`` with the controller's grid options
# (configs, budgets, seeds, ``-m``, ``--mebench-threads``) in the project folder
# on the worker, so the same fixtures, engine and contract checks produce the
# cell, and the same thread count gives the same ``metrics.csv``. The child writes
# into a scratch folder of the task (``MEBENCH_RAY_SCRATCH``, default the system's
# temporary folder); the task returns the cell's files (``result.json``,
# ``metrics.csv``, ``summary.json``, the final substitute...) through Ray and
# deletes the scratch folder. The controller writes them into its own cells
# folder (atomically), so ``--resume`` works whether or not workers share a file
# system, and reports the cell through pytest's normal hooks as soon as it ends.
#
# What a worker needs: mebench installed, the project folder (benchmarks/,
# configs/) at the controller's path or as its working directory, and the data
# root (its own ``MEBENCH_DATA_ROOT``, else the controller's path). Victim
# checkpoints under the project folder (up to :data:`SHIP_LIMIT` bytes) travel
# through Ray's object store and are written on a worker that lacks them.
#
# The cell's child runs at niceness ``--ray-nice`` (default 0, normal priority; Ray starts its
# workers at 15, which on a shared machine leaves cells little CPU); where the worker may not raise
# its priority (no ``CAP_SYS_NICE``) the child keeps the worker's and the controller says so once.
#
# A task runs with ``num_cpus`` = ``--mebench-threads`` (1 without it) and, under
# ``--gpus``, ``num_gpus=1``: Ray's ``CUDA_VISIBLE_DEVICES`` then hands the cell
# its GPU. Tasks are not retried: a worker that dies (node lost, process killed)
# fails its cell with a message saying so, the child pytest is interrupted
# (``PR_SET_PDEATHSIG``) and removes the cell's query cache and its scratch
# folder, and ``--resume`` reruns only the missing cells.

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import pytest

#: Victim files up to this size go through Ray's object store; larger ones must exist on workers.
SHIP_LIMIT = 256 * 2**20
#: Scratch folders of running tasks: ``<scratch>/mebench-ray-<task pid>-<random>``.
SCRATCH_PREFIX = "mebench-ray-"
SCRATCH_ENV = "MEBENCH_RAY_SCRATCH"
_TAIL_LINES = 60


# ------------------------------------------------------------------------ worker side
def scratch_root() -> Path:
    return Path(os.environ.get(SCRATCH_ENV) or tempfile.gettempdir())


def _child_setup(nice: int) -> Any:
    """The child's ``preexec_fn``: its niceness, and ``_die_with_parent``."""
    def setup() -> None:  # pragma: no cover - runs in the forked child before exec
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:  # raising priority above the worker's needs CAP_SYS_NICE: keep the worker's
            pass
        _die_with_parent()
    return setup


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child before exec
    """Linux: the child gets SIGINT when the task's worker process dies (pytest then tears down)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a worker may run with SIGINT ignored


def _ship_victims(root: Path, victims: dict[str, Any]) -> None:
    """Write the victim files the worker lacks (object-store refs, fetched only then)."""
    missing = {rel: ref for rel, ref in victims.items() if not (root / rel).is_file()}
    if not missing:
        return
    import ray

    from mebench.run.artifacts import atomic_write_bytes

    for rel, ref in missing.items():
        atomic_write_bytes(root / rel, ray.get(ref))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch() -> list[str]:
    """Remove scratch folders whose task process is gone (a worker killed before its cleanup ran).

    Ray kills a dead worker's child processes, so the cell's child pytest cannot
    always clean up after itself; every task sweeps before it starts, and the
    controller sends this to every node when a task died.
    """
    removed = []
    for folder in scratch_root().glob(f"{SCRATCH_PREFIX}*"):
        pid = folder.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def run_cell(spec: dict[str, Any], victims: dict[str, Any]) -> dict[str, Any]:
    """The Ray task: run one cell in a child pytest and return its files and outcome."""
    root = Path(spec["root"]) if Path(spec["root"]).is_dir() else Path.cwd()
    _ship_victims(root, victims)
    sweep_scratch()
    base = scratch_root()
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
    try:
        cells, report = work / "cells", work / "report.json"
        env = dict(os.environ)
        if spec.get("data_root") and not env.get("MEBENCH_DATA_ROOT"):
            env["MEBENCH_DATA_ROOT"] = spec["data_root"]
        cmd = [sys.executable, "-m", "mebench.harness.ray_executor", str(work), str(os.getpid()),
               spec["nodeid"], *spec["args"], "--mebench-cells", str(cells), "--mebench-json", str(report),
               "--mebench-progress", "0", "-p", "no:cacheprovider", "-q"]
        started = time.time()
        nice = int(spec.get("nice", 0))
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, preexec_fn=_child_setup(nice))
        ran_at = _niceness(proc.pid)
        stdout, _ = proc.communicate()
        cell_dir = cells / spec["cell_id"]
        files = {p.name: p.read_bytes() for p in sorted(cell_dir.iterdir()) if p.is_file()} if cell_dir.is_dir() else {}
        try:
            records = json.loads(report.read_text()).get("cells", [])
        except (OSError, ValueError):
            records = []
        return {"returncode": proc.returncode, "output": "\n".join(stdout.splitlines()[-_TAIL_LINES:]),
                "nice": ran_at,
                "files": files, "record": next((r for r in records if r.get("id") == spec["cell_id"]), None),
                "where": f"{socket.gethostname()}:{os.getpid()}", "duration": time.time() - started}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _niceness(pid: int) -> Optional[int]:
    """The niceness ``pid`` runs at (None when it has already ended)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def _child_main(argv: list[str]) -> int:
    """``python -m mebench.harness.ray_executor WORKDIR PARENT_PID PYTEST_ARGS...`` (the task's child)."""
    work, parent, args = Path(argv[0]), int(argv[1]), argv[2:]
    try:
        return int(pytest.main(args))
    finally:
        if os.getppid() != parent:  # the task's worker died: nobody will collect these files
            shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------ controller side
class RayLoop:
    """``pytest_runtestloop`` under ``--ray``: cells as Ray tasks, reported as each one ends."""

    def __init__(self, session: pytest.Session, bench: Any) -> None:
        self.session, self.bench, self.config = session, bench, session.config
        self.address: str = self.config.getoption("mebench_ray")
        self.root = Path(self.config.rootpath)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        self.say = (lambda line: tr.write_line(f"mebench --ray: {line}")) if tr is not None else (lambda line: None)
        nice = self.config.getoption("mebench_ray_nice", None)
        self.nice: int = 0 if nice is None else nice
        self.nice_warned = False

    def _check_nice(self, outcome: dict[str, Any]) -> None:
        """Say once when a cell ran at another niceness than asked (a worker may not raise its priority)."""
        ran_at = outcome.get("nice")
        if ran_at is None or ran_at == self.nice or self.nice_warned:
            return
        self.nice_warned = True
        self.say(f"warning: a cell ran at niceness {ran_at}, not {self.nice} (--ray-nice): the Ray worker may not "
                 f"raise its priority; start the nodes with RAY_worker_niceness={self.nice} ray start ...")

    def run(self) -> None:
        from mebench.harness.session import cell_of

        remote: list[pytest.Item] = []
        local: list[pytest.Item] = []
        for it in self.session.items:
            (remote if cell_of(it) is not None and it.get_closest_marker("skip") is None else local).append(it)
        for i, item in enumerate(local):
            nxt = local[i + 1] if i + 1 < len(local) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nxt)
            if self.session.shouldfail or self.session.shouldstop:
                return
        if remote:
            self._run_remote(remote)

    def _run_remote(self, items: list[pytest.Item]) -> None:
        import ray

        started_here = not ray.is_initialized()
        if started_here:
            try:
                if self.address == "local":
                    ray.init(include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=self.address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise pytest.UsageError(f"--ray {self.address}: no Ray cluster to join ({_first_line(e)}); start one "
                                        "with `ray start --head`, or pass --ray local") from None
        try:
            if self._submit_and_report(items):
                self._sweep_nodes()
        finally:
            if started_here:
                ray.shutdown()

    def _submit_and_report(self, items: list[pytest.Item]) -> int:
        """Submit every cell, report each as it ends; returns how many tasks died."""
        import ray

        from mebench.harness.session import cell_of

        resources = ray.cluster_resources()
        threads = self.bench.options.threads or 1
        gpus = 0
        if self.bench.options.gpus is not None:
            if resources.get("GPU", 0) >= 1:
                gpus = 1
            else:
                self.say("warning: the Ray cluster has no GPU; every cell runs on the CPU")
        victims = self._victim_refs(items)
        task = ray.remote(run_cell).options(num_cpus=threads, num_gpus=gpus, max_retries=0)
        self.say(f"{len(items)} cells as Ray tasks ({threads} CPU{'s' if threads > 1 else ''}"
                 f"{', 1 GPU' if gpus else ''} each) on a cluster with {resources.get('CPU', 0):g} CPUs, "
                 f"{resources.get('GPU', 0):g} GPUs")
        args = self._child_args(gpus > 0)
        data_root = os.environ.get("MEBENCH_DATA_ROOT", "")
        pending: dict[Any, tuple[pytest.Item, float]] = {}
        died = 0
        for item in items:
            cell = cell_of(item)
            spec = {"root": str(self.root), "nodeid": item.nodeid, "cell_id": cell.id, "args": args,
                    "data_root": data_root, "nice": self.nice}
            pending[task.remote(spec, victims)] = (item, time.time())
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            item, start = pending.pop(done[0])
            try:
                outcome = ray.get(done[0])
            except ray.exceptions.RayError as e:
                outcome = {"died": f"{type(e).__name__}: {_first_line(e)}"}
                died += 1
            self._report(item, outcome, start)
            self._check_nice(outcome)
            if self.session.shouldfail or self.session.shouldstop:
                for ref in pending:
                    ray.cancel(ref, force=True)
                break
        return died

    def _sweep_nodes(self) -> None:
        """After a task died: every live node removes the scratch folders of dead tasks."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        sweep = ray.remote(sweep_scratch)
        refs = [sweep.options(num_cpus=0, max_retries=0,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                for n in ray.nodes() if n.get("Alive")]
        try:
            removed = [f for found in ray.get(refs, timeout=120) for f in found]
        except ray.exceptions.RayError as e:
            self.say(f"warning: could not sweep the nodes' scratch folders ({_first_line(e)})")
            return
        self.say(f"removed {len(removed)} scratch folder(s) of dead tasks")

    def _child_args(self, gpu: bool) -> list[str]:
        """The controller's grid options, for the child pytest that runs one cell."""
        opt = self.config.option
        args = ["--mebench-config", ",".join(self._relative(p) or str(p) for p in self.bench.options.config_paths)]
        if opt.mebench_budgets:
            args += ["--budgets", ",".join(map(str, opt.mebench_budgets))]
        if opt.mebench_seeds:
            args += ["--seeds", ",".join(map(str, opt.mebench_seeds))]
        # always the controller's count: a task that chose by its node's load would never match on --resume
        args += ["--mebench-threads", str(self.bench.options.threads or 1)]
        if opt.markexpr:
            args += ["-m", opt.markexpr]
        if opt.mebench_allow_large:
            args.append("--mebench-allow-large")
        if getattr(opt, "mebench_transfer", False):
            args.append("--transfer")
        if gpu:
            args.append("--gpus")
        return args

    def _relative(self, path: Path) -> Optional[str]:
        """A path under the project folder, relative to it (workers may hold the project elsewhere);
        ``None`` for a path outside it."""
        try:
            return str(Path(path).resolve().relative_to(self.root.resolve()))
        except ValueError:
            return None

    def _victim_refs(self, items: list[pytest.Item]) -> dict[str, Any]:
        """Victim files under the project folder, put once into Ray's object store."""
        import ray

        from mebench.harness.session import cell_of

        checkpoints = {Path(str(ref)) for ref in (getattr(cell_of(it).cfg.victim, "checkpoint_ref", None) for it in items)
                       if ref}
        refs: dict[str, Any] = {}
        for path in checkpoints:
            if not path.is_file():  # e.g. a callable victim's "module:function"
                continue
            for p in (path, path.with_suffix(".json")):
                rel = self._relative(p)
                if rel is not None and rel not in refs and p.is_file() and p.stat().st_size <= SHIP_LIMIT:
                    refs[rel] = ray.put(p.read_bytes())
        return refs

    def _report(self, item: pytest.Item, outcome: dict[str, Any], start: float) -> None:
        """Write the cell's files here and send its setup/call/teardown reports through pytest's hooks."""
        from mebench.harness.cells import RECORD_KEY
        from mebench.harness.session import cell_of

        cell = cell_of(item)
        hook = item.ihook
        hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        record = outcome.get("record")
        if "died" in outcome:
            status, text = "failed", (f"mebench --ray: the Ray task of {cell.id} died before the cell finished "
                                      f"({outcome['died']}); its results are lost, rerun with --resume")
        else:
            record = self._store(cell, item, outcome)
            status = (record or {}).get("status")
            text = (f"mebench --ray: {cell.id} on {outcome['where']}: child pytest exit {outcome['returncode']}, "
                    f"cell status {status or 'missing'}\n{outcome['output']}")
            if status == "passed" and outcome["returncode"] != 0:
                status = "failed"
        if record is None or status not in ("passed", "failed", "error", "skipped"):
            status = "error"
            record = {"id": cell.id, "nodeid": item.nodeid, "status": status, "error": text.splitlines()[0],
                      "metrics_rows": [], "summary": {}}
        if status != "skipped":
            item.user_properties.append((RECORD_KEY, record))
        stop = time.time()
        for when in ("setup", "call", "teardown"):
            if when == "call" and status == "skipped":
                continue
            if when == "setup" and status == "skipped":
                rep_outcome, longrepr = "skipped", (str(item.path), item.location[1] or 0,
                                                    f"Skipped: {(record or {}).get('error') or 'skipped on the worker'}")
            elif when == "call" and status != "passed":
                rep_outcome, longrepr = "failed", text
            else:
                rep_outcome, longrepr = "passed", None
            report = pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, rep_outcome,
                                       longrepr, when, user_properties=list(item.user_properties),
                                       duration=stop - start if when == "call" else 0.0, start=start, stop=stop)
            hook.pytest_runtest_logreport(report=report)
        hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _store(self, cell: Any, item: pytest.Item, outcome: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The worker's files in ``<cells dir>/<cell id>/`` and its record, pointed at them."""
        from mebench.run.artifacts import atomic_write_bytes, atomic_write_json

        record = outcome.get("record")
        files = dict(outcome.get("files") or {})
        if record is None and "result.json" in files:
            record = json.loads(files["result.json"])
        directory = self.bench.cell_dir(cell)
        for stale in directory.iterdir():
            if stale.is_file():
                stale.unlink()
        for name, data in files.items():
            if name != "result.json" and not name.startswith("."):
                atomic_write_bytes(directory / name, data)
        if record is None:
            return None
        from mebench.report.records import full, slim

        record = {**full(record, directory), "nodeid": item.nodeid, "artifacts_dir": str(directory),
                  "artifacts": {n: str(directory / n) for n in sorted(files) if n != "result.json" and not n.startswith(".")},
                  "worker": f"ray:{outcome['where']}", "resumed": False}
        atomic_write_json(directory / "result.json", slim(record, directory))
        return record


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
