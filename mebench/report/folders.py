"""Seed folders read whole or not at all (contract §11, §16; issues 40 and 43).

A seed folder or grid cell folder is found by any file a run writes into it, by a leftover query
cache or by its name, so a run killed before its first checkpoint is found too. Every folder becomes
one :class:`~mebench.report.load.RunRecord`; one that cannot be read whole gets a ``problem`` and no
rows, and is listed in ``excluded.csv`` with that reason (how damage is told is below).
See docs/guide/reports.md.
"""
# A seed folder (``runs/<run>/<stamp>/seed_<s>/``) or a grid cell folder
# (``runs/pytest/<stamp>/cells/<cell id>/``) is found by any file a run writes into it
# (``run_config.yaml`` comes first, ``metrics.csv`` at every checkpoint, ``summary.json``
# last; a cell's ``result.json`` after that), by a leftover query cache, or by the name
# ``seed_<n>``. So a run killed before its first checkpoint is found too, and named.
#
# Every folder becomes one :class:`~mebench.report.load.RunRecord`. A folder that cannot be
# read whole gets a ``problem`` (one line) and no rows: it is listed in ``excluded.csv``
# with that reason and never enters a table. Damage is told by the files themselves:
# ``metrics.csv`` is written atomically and always ends with a newline, so a file without
# one, a row with fewer fields than the header, a value that is not a number, or a header
# without the §16.2 columns is a truncated or foreign file; ``summary.json`` must be one
# JSON object. The completion time that orders re-runs comes from ``summary.json``
# ``completed_at``, else from the file times (never from a folder name).

from __future__ import annotations

import csv
import io
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from mebench.run.artifacts import METRICS_COLUMNS
from mebench.metricspec import METRIC_NAMES, metric_spec
from mebench.support.naming import QUERY_CACHE_DIR

MARKER_FILES = ("metrics.csv", "summary.json", "run_config.yaml", "result.json")
SEED_DIR_RE = re.compile(r"^seed_\d+$")
REQUIRED_METRICS = ("acc_gt", "agreement")  # kl_mean/l1_mean are empty for hard_top1 (§16.2)

NO_SUMMARY = "no summary.json"
"""Status of a seed folder without ``summary.json``: the engine writes it last, so the run never finished."""


def seed_folders(root: Path) -> list[Path]:
    """Every seed or cell folder at or below ``root``, sorted by path."""
    found = {p.parent for name in MARKER_FILES for p in root.rglob(name) if p.is_file()}
    found |= {p.parent for p in root.rglob(QUERY_CACHE_DIR) if p.is_dir()}
    found |= {p for p in root.rglob("seed_*") if p.is_dir() and SEED_DIR_RE.match(p.name)}
    if root.is_dir() and (SEED_DIR_RE.match(root.name) or any((root / n).is_file() for n in MARKER_FILES)):
        found.add(root)
    return sorted(p for p in found if QUERY_CACHE_DIR not in p.parts)


def is_grid_cell(folder: Path) -> bool:
    """A grid cell writes ``result.json`` when it ends; its folder sits in ``cells/``."""
    return (folder / "result.json").exists() or folder.parent.name == "cells"


def read_summary(path: Path) -> tuple[dict[str, Any], str]:
    """``(summary, problem)``: the JSON object, or ``{}`` and why it cannot be read."""
    if not path.exists():
        return {}, ""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return {}, f"{path.name}: unreadable ({err})"
    if not text.strip():
        return {}, f"{path.name}: empty file"
    try:
        value = json.loads(text)
    except ValueError as err:
        return {}, f"{path.name}: invalid JSON ({err}; truncated?)"
    if not isinstance(value, dict):
        return {}, f"{path.name}: not a JSON object"
    return value, ""


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_config(path: Path) -> dict[str, Any]:
    """``run_config.yaml`` as a mapping, ``{}`` when absent or unreadable (it only fills in names).

    Read with libyaml's safe loader when PyYAML has it (``CSafeLoader``: the same safe subset as
    ``yaml.safe_load``, ~10x faster; a report reads one file per seed)."""
    try:
        value = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER) if path.exists() else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return value if isinstance(value, dict) else {}


def read_metrics(path: Path) -> tuple[list[dict[str, str]], str]:
    """``(rows, problem)``: every row of a whole ``metrics.csv``, or no row and the first defect found."""
    if not path.exists():
        return [], "no metrics.csv: no result rows (killed or interrupted before its first checkpoint)"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return [], f"metrics.csv: unreadable ({err})"
    if not text.endswith("\n"):
        return [], "metrics.csv: empty file" if not text else "metrics.csv: last line cut (no final newline: truncated)"
    lines = list(csv.reader(io.StringIO(text)))
    header = lines[0] if lines else []
    missing = [c for c in METRICS_COLUMNS if c not in header]
    if missing:
        return [], f"metrics.csv: header lacks column(s) {', '.join(missing)}"
    rows = []
    for lineno, fields in enumerate(lines[1:], start=2):
        row = dict(zip(header, fields))
        problem = _row_problem(fields, header, row)
        if problem:
            return [], f"metrics.csv line {lineno}: {problem}"
        rows.append(row)
    if not rows:
        return [], "metrics.csv: no result rows (header only: killed before its first checkpoint)"
    return rows, ""


def read_probe(path: Path, probe: str) -> dict[int, dict[str, float]]:
    """``{checkpoint B: {metric: value}}`` of one probe's rows in ``measurements.csv``; ``{}`` when the
    file is missing or not whole (a probe's numbers are then unknown, never guessed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    if not text.endswith("\n"):
        return {}
    out: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("probe") != probe:
            continue
        try:
            out.setdefault(int(row["checkpoint_B"]), {})[str(row["metric"])] = float(row["value"])
        except (KeyError, TypeError, ValueError):
            return {}
    return out


def _row_problem(fields: list[str], header: list[str], row: Mapping[str, str]) -> str:
    """Why one row cannot be read whole ("" when it can)."""
    if len(fields) != len(header):
        return f"{len(fields)} of {len(header)} fields (truncated)"
    for col in ("seed", "checkpoint_B"):
        if not re.fullmatch(r"-?\d+", row[col].strip()):
            return f"{col} {row[col]!r} is not an integer"
    if row["track"].strip().upper() not in ("A", "B"):
        return f"track {row['track']!r} is not A or B"
    for col in METRIC_NAMES:
        value = row[col].strip()
        if value == "" and col not in REQUIRED_METRICS:
            continue
        try:
            number = float(value)
        except ValueError:
            return f"{col} {value!r} is not a number"
        problem = metric_problem(col, number)
        if problem:
            return problem
    return ""


def metric_problem(name: str, value: float) -> str:
    """Why a metric's value is no measurement ("" when it is one): not finite, or outside the bounds
    its ``MetricSpec`` states (an agreement of 1.7)."""
    low, high = metric_spec(name).bounds
    if math.isfinite(value) and low <= value <= high:
        return ""
    return f"{name} {value:g} is outside its range [{low:g}, {high:g}]"


def result_problem(folder: Path) -> tuple[str, str]:
    """``(status, problem)`` of a grid cell's ``result.json``: missing, unreadable or not ``passed``."""
    record, problem = read_summary(folder / "result.json")
    if problem:
        return "damaged result.json", problem
    if not record:
        return "no result.json", "no result.json: the cell never finished (killed, or still running)"
    status = str(record.get("status"))
    if status != "passed":
        why = record.get("error") or "; ".join(record.get("problems") or []) or "no reason recorded"
        return f"cell {status}", f"cell {status}: {why}"
    return "", ""


def completion_time(summary: Mapping[str, Any], *files: Path) -> tuple[float, str]:
    """``(epoch seconds, where it came from)``: ``completed_at``, else the newest of ``files``' mtimes."""
    stamp = summary.get("completed_at") if isinstance(summary, Mapping) else None
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None:
            moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
            return moment.timestamp(), "completed_at"
    for f in files:
        if f.exists():
            return f.stat().st_mtime, f"{f.name} mtime"
    return math.nan, "unknown"


def leftover_cache(folder: Path) -> str:
    """`` (its .query_cache is still on disk)`` when a dead run left one, else ""."""
    return f" (its {QUERY_CACHE_DIR} is still on disk)" if (folder / QUERY_CACHE_DIR).is_dir() else ""
