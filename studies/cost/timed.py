"""Time one command and record it beside the cost estimate for what it runs (issue 40).

    python studies/cost/timed.py NAME [--workers N] -- mebench run CONFIG [--seeds ..] [--budgets ..] [--threads N]
    python studies/cost/timed.py NAME -- pytest benchmarks/ --mebench-config GRID -k ... --budgets ...
    python studies/cost/timed.py NAME --time-log LOG --load-log LOAD -- mebench run ...   # already ran

The last form records a command that already ran under ``/usr/bin/time -v`` (its log gives the wall
time) while ``LOAD`` collected ``<unix time> <1-min load>`` lines (``while :; do echo "$(date +%s)
$(cut -d' ' -f1 /proc/loadavg)"; sleep 20; done``); its estimate is computed afterwards from the
cached calibration at the mean load logged while it ran.

Before the command starts, the estimate (``mebench.cost``, calibrated on this machine) is computed
for exactly the cells it will run: a ``mebench run`` config with its overrides, or the cells a
pytest grid selects (collected in-process with the same arguments and thread policy). The command
then runs while ``/proc/loadavg`` is sampled every 5 s; ``logs/NAME.json`` records the command,
the estimate (seconds, phases, line), the measured wall time and the load (before, mean, after).
``summarize.py`` turns the records into the table of docs/guide/grid.md.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from mebench.support.runinfo import cpu_model, isa_overrides

HERE = Path(__file__).resolve().parents[2] / "results" / "cost"  # the set's records (this script lives in studies/)


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_estimate(args: list[str], load: "float | None" = None) -> "object":
    """The estimate of a ``mebench run CONFIG`` command line (its --seeds/--budgets/--threads)."""
    from mebench.config import apply_overrides
    from mebench.harness.cost import estimate
    from mebench.support.threads import default_threads
    from mebench.config.validation import load_config

    opts = dict(zip(args[3::2], args[4::2])) if len(args) > 3 else {}
    ints = lambda s: [int(x) for x in s.split(",")] if s else None  # noqa: E731
    cfg = apply_overrides(load_config(args[2]), seeds=ints(opts.get("--seeds")), budgets=ints(opts.get("--budgets")))
    threads = int(opts.get("--threads") or default_threads())
    return estimate([cfg] * len(cfg.run.seeds), threads=threads, load=load)


def grid_estimate(args: list[str]) -> "object":
    """The estimate the grid prints, for the cells ``pytest ARGS`` selects (collected here)."""
    import pytest

    from mebench.harness.cost import estimate
    from mebench.harness.plugin import bench_session
    from mebench.harness.session import cell_of

    seen: dict = {}

    class Grab:
        def pytest_collection_finish(self, session: "pytest.Session") -> None:
            seen["items"], seen["threads"] = list(session.items), bench_session(session.config).options.threads

    pytest.main([*args[1:], "--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Grab()])
    plans = [c.plan for c in map(cell_of, seen["items"]) if c is not None]
    return estimate(plans, threads=seen["threads"])


def elapsed(time_log: Path) -> float:
    """The wall time ``/usr/bin/time -v`` printed ("Elapsed (wall clock) time ...: [h:]mm:ss")."""
    line = next(x for x in time_log.read_text().splitlines() if "Elapsed (wall clock)" in x)
    parts = [float(p) for p in line.rsplit(" ", 1)[1].split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def exit_status(time_log: Path) -> int:
    """The command's exit status as ``/usr/bin/time -v`` printed it ("Exit status: N")."""
    line = next(x for x in time_log.read_text().splitlines() if x.strip().startswith("Exit status:"))
    return int(line.rsplit(":", 1)[1])


def logged_load(load_log: Path, start: float, end: float) -> list[float]:
    rows = [x.split() for x in load_log.read_text().splitlines() if len(x.split()) == 2]
    return [float(v) for t, v in rows if start <= float(t) <= end]


def main() -> None:
    name, rest = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    head = dict(zip(sys.argv[2:sys.argv.index("--"):2], sys.argv[3:sys.argv.index("--"):2]))
    if "--time-log" in head:  # a command that already ran: its estimate at the mean load it ran under
        log = Path(head["--time-log"])
        wall, end = elapsed(log), log.stat().st_mtime
        samples = logged_load(Path(head["--load-log"]), end - wall, end) or [float("nan")]
        cost = run_estimate(rest, load=sum(samples) / len(samples))
        write(name, rest, exit_status(log), datetime.fromtimestamp(end - wall, timezone.utc).isoformat(timespec="seconds"),
              cost, wall, samples, samples[-1])
        return
    cost = run_estimate(rest) if rest[:2] == ["mebench", "run"] else grid_estimate(rest)
    samples, done = [load()], threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            samples.append(load())

    threading.Thread(target=sample, daemon=True).start()
    started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.perf_counter()
    rc = subprocess.call(rest)
    wall = time.perf_counter() - t0
    done.set()
    write(name, rest, rc, started, cost, wall, samples, load())


def write(name: str, rest: list[str], rc: int, started: str, cost: "object", wall: float, samples: list[float],
          after: float) -> None:
    record = {"name": name, "command": " ".join(rest), "returncode": rc, "started": started,
              "estimate_s": round(cost.wall_seconds, 1), "estimate_phases": {k: round(v, 1) for k, v in cost.phases.items()},
              "estimate_line": cost.line(), "workers": cost.workers, "threads": cost.threads, "cells": cost.cells,
              "wall_s": round(wall, 1), "load_before": samples[0], "load_mean": round(sum(samples) / len(samples), 2),
              "load_after": after, "machine_cpus": cost.cpus, "cpu_model": cpu_model(),
              "isa_overrides": isa_overrides()}
    (HERE / "logs").mkdir(exist_ok=True)
    (HERE / "logs" / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
