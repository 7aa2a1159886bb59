"""Naming rules shared by configs, the grid and run folders (no heavy imports: the pytest plugin uses them)."""

from __future__ import annotations

import os
import re
import shutil
import socket
from datetime import datetime, timezone
from pathlib import Path

#: The temporary query store's folder inside a seed or cell folder (§11.2: removed when the run ends).
QUERY_CACHE_DIR = ".query_cache"
QUERY_CACHE_OWNER = "owner"  # inside the cache: "<token> <pid> <host>" of the run (and process) that made it

#: Attack labels, victim keys and defense labels: letters, digits and '_' ('-' separates cell id parts).
LABEL_RE = re.compile(r"^[A-Za-z0-9_]+$")
#: A grid cell id ends in ``-s<seed>``; without it, the id names the cell's condition.
CELL_SEED_RE = re.compile(r"-s\d+$")


def cell_condition(cell_id: str) -> str:
    """A cell id without its seed: the seed cells of one condition share it."""
    return CELL_SEED_RE.sub("", cell_id)


def plural(n: int, word: str) -> str:
    """``word`` for one, ``word + "s"`` otherwise (the lines mebench prints: "1 cell", "3 cells")."""
    return word if n == 1 else word + "s"


def unused_stamp_dir(parent: Path) -> Path:
    """``<parent>/<UTC timestamp>`` that does not exist yet (``-1``, ``-2`` ... when taken); not created."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, i = parent / stamp, 1
    while path.exists():
        path = parent / f"{stamp}-{i}"
        i += 1
    return path


def stamp_order(path: Path) -> tuple[str, int]:
    """Sort key of a stamped folder (``<stamp>`` or ``<stamp>-<n>``): time, then the clash suffix as a
    number, so ``-10`` comes after ``-9`` (a plain string sort puts it before ``-2``)."""
    stamp, _, suffix = path.name.partition("-")
    return stamp, int(suffix) if suffix.isdigit() else 0


def latest_stamp_dir(parent: Path, pattern: str = "*T*Z*") -> "Path | None":
    """The latest folder under ``parent`` matching ``pattern`` by :func:`stamp_order` (of the stamp
    part of its path below ``parent``), if any."""
    found = [p for p in parent.glob(pattern) if p.is_dir()]
    return max(found, key=lambda p: stamp_order(Path(p.relative_to(parent).parts[0]))) if found else None


def make_stamp_dir(parent: Path) -> Path:
    """Create and return ``<parent>/<UTC timestamp>`` exclusively (``-1``, ``-2`` ... on a clash).

    ``mkdir(exist_ok=False)`` is atomic, so two runs started in the same second (threads or
    processes) never get one folder: the loser of the race takes the next suffix.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    parent.mkdir(parents=True, exist_ok=True)
    for i in range(10_000):
        path = parent / (stamp if i == 0 else f"{stamp}-{i}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent}: no free folder name for stamp {stamp}")


def mark_cache_owner(cache_dir: Path, token: str) -> None:
    """Write ``<token> <pid> <host>`` into a query cache, so a later run can tell a dead run's cache."""
    (cache_dir / QUERY_CACHE_OWNER).write_text(f"{token} {os.getpid()} {socket.gethostname()}")


def _owner_fields(cache_dir: Path) -> list[str]:
    """The owner mark of a query cache, ``[token, pid, host]`` (older marks: ``[token]``; ``[]`` unreadable)."""
    try:
        return (cache_dir / QUERY_CACHE_OWNER).read_text().split()
    except OSError:
        return []


def cache_owner_token(cache_dir: Path) -> str | None:
    """The token of the run that made a query cache (``None`` when unmarked or unreadable)."""
    fields = _owner_fields(cache_dir)
    return fields[0] if fields else None


def _owner_state(cache_dir: Path) -> str:
    """``"dead"``, ``"alive"`` or ``"unknown"``: the cache's owner process, judged on this host only."""
    fields = _owner_fields(cache_dir)
    if len(fields) != 3 or fields[2] != socket.gethostname() or not fields[1].isdigit():
        return "unknown"
    try:
        os.kill(int(fields[1]), 0)
    except ProcessLookupError:
        return "dead"
    except OSError:  # exists but belongs to another user
        return "alive"
    return "alive"


def cache_owner_dead(cache_dir: Path) -> bool:
    """Whether the process that made a query cache is gone: same host, and its pid no longer exists.

    Unknown owners (an older mark without a pid, another host, an unreadable file) count as alive:
    a live run's cache is never removed on a guess.
    """
    return _owner_state(cache_dir) == "dead"


def cache_owner_alive(cache_dir: Path) -> bool:
    """Whether the cache's owner is a running process of this host (``--resume`` leaves such a cache
    alone: a second run resuming the same folder must not delete a live run's cache)."""
    return _owner_state(cache_dir) == "alive"


def sweep_dead_caches(root: Path, pattern: str) -> list[Path]:
    """Remove the query caches under ``root`` matching ``pattern`` (a glob ending in the cache folder)
    whose owner process is dead (``cache_owner_dead``); returns them, sorted."""
    dead = sorted(p for p in root.glob(pattern) if p.is_dir() and cache_owner_dead(p))
    for path in dead:
        shutil.rmtree(path, ignore_errors=True)
    return dead
