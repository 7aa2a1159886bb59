"""How many torch CPU threads a command uses when ``--threads`` is not given.

The policy lives in ``default_threads`` alone; ``mebench run`` and ``mebench
victim train`` print the count they use, and ``summary.json`` / ``PATH.json``
record it under ``machine.torch_threads``. See docs/guide/grid.md.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Optional

#: Never more by default: the benchmark's small models gain little beyond it.
MAX_DEFAULT_THREADS = 8


def default_threads(cpus: Optional[int] = None, busy: Optional[float] = None,
                    environ: Optional[Mapping[str, str]] = None) -> int:
    """The thread count for torch on the CPU when the user did not choose one.

    1. ``OMP_NUM_THREADS`` set to a positive integer wins: the user already chose.
    2. Otherwise the CPUs this process may use (``usable_cpus``) minus the CPUs
       other work keeps busy (``busy_cpus``: the 1-minute load average), clamped
       to ``1 .. MAX_DEFAULT_THREADS``. An idle 4-core machine gets 4 threads; a
       2-core machine already running two benchmarks gets 1, not 2 threads that
       fight over cores (oversubscribed torch runs several times slower).

    The arguments replace what is read from the machine (for tests). CPU results
    are bit-identical only for the same thread count, so a rerun that must match
    an earlier one exactly passes ``--threads`` with the recorded count.
    """
    env = os.environ if environ is None else environ
    try:
        chosen = int(env.get("OMP_NUM_THREADS", ""))
    except ValueError:
        chosen = 0
    if chosen >= 1:
        return chosen
    cpus = usable_cpus() if cpus is None else cpus
    busy = busy_cpus() if busy is None else busy
    return max(1, min(cpus - int(round(busy)), MAX_DEFAULT_THREADS))


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota (containers)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(cpus, quota) if quota else cpus)


def busy_cpus() -> float:
    """CPUs kept busy by running work: the 1-minute load average (0 where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _cgroup_cpu_quota() -> Optional[int]:
    """CPUs allowed by a cgroup v2 ``cpu.max`` or v1 CFS quota, rounded up; ``None`` when unlimited."""
    try:
        v2 = Path("/sys/fs/cgroup/cpu.max")
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
        else:
            v1 = Path("/sys/fs/cgroup/cpu")
            quota, period = ((v1 / f"cpu.cfs_{k}_us").read_text().strip() for k in ("quota", "period"))
        if quota in ("max", "-1"):
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None
