"""``runs/run_metadata.jsonl``: one JSON line per run, safe under concurrent appends.

Why JSONL and not one JSON document: appending a line never rewrites what other runs wrote, so
parallel runs cannot lose each other's entries (no read-modify-write). :func:`append_metadata`
writes each line in one locked ``O_APPEND`` write; :func:`read_metadata` skips a corrupted line with
a warning. The protocols and the entry's fields are below. See docs/guide/runs.md.
"""
# Write protocol (:func:`append_metadata`): the line is serialised first, then the
# file is opened with ``O_APPEND``, an exclusive ``fcntl.flock`` is taken and the
# whole line goes out in one ``write()`` (looping only if the kernel writes
# short). If a crashed writer left a last line without its newline, a newline is
# written first so the new entry stays intact. Read protocol
# (:func:`read_metadata`): every line is parsed on its own; a corrupted line is
# skipped with a warning that names its line number.
#
# Every entry carries ``type, seed, config_hash, git_commit, timestamp, device,
# versions``; the caller gives what only it knows (``type``, ``seed``,
# ``config_hash`` — see :func:`mebench.support.serial.config_hash` — and ``device``) and the rest is
# filled in unless already present.

from __future__ import annotations

import fcntl
import json
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from mebench.support.runinfo import git_commit, library_versions
from mebench.support.serial import config_hash, jsonable  # noqa: F401  (config_hash: part of this module's API)

METADATA_FILE = "run_metadata.jsonl"
"""File name inside the runs folder: ``runs/run_metadata.jsonl``."""

REQUIRED_KEYS: tuple[str, ...] = (
    "type", "seed", "config_hash", "git_commit", "timestamp", "device", "versions",
)


def _complete(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    out.setdefault("timestamp", datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"))
    if "git_commit" not in out:
        out["git_commit"] = git_commit()["commit"] or "unknown"
    if "versions" not in out:
        out["versions"] = library_versions()
    for key in ("type", "seed", "config_hash", "device"):
        out.setdefault(key, None)
    return out


def run_metadata_entry(summary: Mapping[str, Any], run_dir: str | Path | None = None,
                       run_type: str = "run") -> dict[str, Any]:
    """The metadata line of one seed-run, taken from its ``summary.json`` content.

    Lets the engine write ``append_metadata(runs / METADATA_FILE,
    run_metadata_entry(summary, seed_dir))`` after each seed-run. Missing
    sections simply give ``None`` fields (filled from this process where possible).
    """
    def section(key: str) -> Mapping[str, Any]:
        value = summary.get(key)
        return value if isinstance(value, Mapping) else {}

    config_run = section("config").get("run") or {}
    entry: dict[str, Any] = {
        "type": run_type, "seed": summary.get("seed"), "config_hash": summary.get("config_hash"),
        "device": section("machine").get("device") or config_run.get("device"),
        "run_name": summary.get("run_name"), "run_dir": str(run_dir) if run_dir else None,
        "attack_label": section("attack").get("label") or section("attack").get("name"),
        "status": summary.get("status"),
    }
    if section("git").get("commit"):
        entry["git_commit"] = section("git")["commit"]
    if section("versions"):
        entry["versions"] = dict(section("versions"))
    return entry


def append_metadata(path: str | Path, entry: Mapping[str, Any]) -> dict[str, Any]:
    """Append ``entry`` (completed with timestamp, commit, versions) as one line.

    Returns the dict that was written. ``entry`` itself is not modified. Creates
    the file and its folder if needed.
    """
    full = jsonable(_complete(entry))
    line = (json.dumps(full, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if _ends_without_newline(fd):
                line = b"\n" + line
            _write_all(fd, line)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return full


def _ends_without_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_metadata(path: str | Path) -> list[dict[str, Any]]:
    """All entries in file order; a missing file is an empty list.

    A line that is not a JSON object (a torn write, a hand edit) is skipped with a
    ``UserWarning`` naming ``path:line``; the lines after it are still read.
    """
    p = Path(path)
    if not p.exists():
        return []
    entries = []
    for lineno, raw in enumerate(p.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            warnings.warn(f"{p}:{lineno}: skipped corrupted metadata line ({err})", stacklevel=2)
            continue
        if not isinstance(value, dict):
            warnings.warn(f"{p}:{lineno}: skipped metadata line that is not a JSON object",
                          stacklevel=2)
            continue
        entries.append(value)
    return entries
