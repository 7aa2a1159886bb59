"""A grid cell's record without copies: ``result.json`` and ``report.json`` point at the cell's own files.

A cell folder holds each result once: the metrics rows in ``metrics.csv`` and ``summary.json``'s
``results``, the run config in ``run_config.yaml`` and ``summary.json``'s ``config``. The cell's record
(``result.json``, each ``report.json`` cell) keeps its own fields and names ``summary.json`` with its
SHA-256 (``slim``); ``full`` reads the copies back from the folder, and a record written before this
layout (with its copies) is read as it is. Torch-free. See docs/guide/records.md.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Optional

#: What an older record copied from the cell's files; a slim record leaves them out.
COPIES = ("summary", "metrics_rows", "config")
#: The file the slim record points at, and the key holding its SHA-256.
SUMMARY_FILE, SUMMARY_DIGEST = "summary.json", "summary_sha256"


def file_digest(path: Path) -> Optional[str]:
    """SHA-256 (hex) of a file's bytes, ``None`` when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def slim(record: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """``record`` without the copies of the folder's files, pointing at ``summary.json`` (with its digest)."""
    out = {k: v for k, v in record.items() if k not in COPIES}
    out["summary_file"] = SUMMARY_FILE
    out[SUMMARY_DIGEST] = file_digest(Path(folder) / SUMMARY_FILE)
    return out


def is_slim(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` points at its folder's files instead of copying them."""
    return "summary_file" in record and not isinstance(record.get("summary"), Mapping)


def full(record: Mapping[str, Any], folder: Optional[Path]) -> dict[str, Any]:
    """``record`` with its summary, metrics rows and config read from ``folder`` (a slim record), or as
    it is (a record that still carries its copies). A missing or unreadable summary gives empty copies,
    so the record's own status and problems still speak for the cell."""
    if not is_slim(record):
        return dict(record)
    summary: dict[str, Any] = {}
    if folder is not None:
        try:
            value = json.loads((Path(folder) / str(record.get("summary_file") or SUMMARY_FILE)).read_text())
            summary = value if isinstance(value, dict) else {}
        except (OSError, ValueError):
            summary = {}
    return {**record, "summary": summary, "metrics_rows": list(summary.get("results") or []),
            "config": summary.get("config") or {}}


def matches_folder(record: Mapping[str, Any], folder: Path) -> bool:
    """Whether a record and the folder's ``summary.json`` come from one run (an interrupted rerun
    rewrites ``summary.json`` before ``result.json``): the digest for a slim record, else the copied
    summary's plan hash, code identity and completion time."""
    try:
        on_disk = json.loads((Path(folder) / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return True  # nothing to contradict the record; the folder check names a missing or damaged summary
    if not isinstance(on_disk, Mapping) or not on_disk:
        return True
    if is_slim(record):
        return record.get(SUMMARY_DIGEST) == file_digest(Path(folder) / SUMMARY_FILE)
    recorded = record.get("summary") or {}
    return all(on_disk.get(k) == recorded.get(k) for k in ("plan_hash", "code_identity", "completed_at"))
