"""Where mebench keeps what it may reuse across runs on one machine (torch-free).

Work that does not depend on the run seed and costs minutes is kept on disk, one file per *key*
(everything the result depends on, code identity included), in ``$MEBENCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/mebench``, else ``~/.cache/mebench``. Deleting it is always safe: every entry is
recomputed on demand. Processes on one node take turns through ``entry_lock`` (details below).
See docs/guide/configs.md.
"""
# Some work does not depend on the run seed and costs minutes: the independent reference models of
# transferability, and the cost estimate's measured step times. They are kept on disk, one file per
# *key*: a JSON-able description of everything the result depends on (spec, device, threads, data
# fingerprint, and the code identity, so that a code change never reuses an old entry). The key's
# digest names the file, and the key itself is stored beside it so an entry can be audited.
#
# The folder is ``$MEBENCH_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/mebench``, else
# ``~/.cache/mebench``. Deleting it is always safe: every entry is recomputed on demand.
#
# Processes on one node that need the same missing entry (Ray tasks, ``-n`` workers, two runs) take
# turns through ``entry_lock``: an exclusive ``fcntl.flock`` on ``<entry>.lock`` beside the entry, so
# one computes it and the others wait, then read what it wrote. The lock is advisory and per node (a
# shared network folder may not honour it; then two nodes may both compute, never corrupt: every
# entry is written atomically).
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

ENV = "MEBENCH_CACHE_DIR"


def cache_root() -> Path:
    """The machine-wide cache folder (not created here)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mebench"


def key_digest(key: Any) -> str:
    """sha256 of the key's canonical JSON (sorted keys, no whitespace); 16 hex digits name a file."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_path(kind: str, key: Any, suffix: str) -> Path:
    """``<cache_root>/<kind>/<digest><suffix>``; the caller writes it atomically."""
    return cache_root() / kind / f"{key_digest(key)}{suffix}"


@contextlib.contextmanager
def entry_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of the entry ``path`` (``<path>.lock``, created beside it) while the
    block runs; a second process asking for it waits until the first leaves the block. The lock
    file is left in place (removing it would let a third process lock a different file)."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# An *index* entry records which cached files one run plan reads (the transferability references,
# the verification probe's negatives and their scores), keyed by what the plan states, so a cost
# estimate can tell without loading any data that a run will not train them. It is JSON:
# ``{"key": key, "entries": [path, ...]}``.
def write_index(kind: str, key: Any, entries: list[str] | list[Path]) -> Path:
    """Record (atomically) that the plan ``key`` reads the cached files ``entries``; returns the path."""
    from mebench.run import artifacts  # deferred: this module stays import-light for the estimate

    path = entry_path(kind, key, ".json")
    text = json.dumps({"key": key, "entries": [str(e) for e in entries]}, sort_keys=True, indent=1, default=str)
    artifacts.atomic_write_text(path, text)
    return path


def index_complete(kind: str, key: Any) -> bool:
    """Whether the plan ``key``'s index exists and every file it lists is still in the cache."""
    try:
        entries = json.loads(entry_path(kind, key, ".json").read_text())["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(entries) and all(Path(e).is_file() for e in entries)
