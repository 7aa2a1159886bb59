"""Paths written into reports are relative to the file that holds them (issue 43).

A report folder (``runs/report/``) and a grid's ``report.json`` must survive moving or copying
``runs/`` (to another machine, into ``results/<set>/``): every path they store is written
relative to the folder of the file that stores it, with ``/`` separators, and read back with
:func:`resolve_stored`. Absolute paths stay only where no relative one exists (another drive).
See docs/guide/reports.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # the grid's writer imports this module: no pandas at import
    import pandas as pd

CELL_SEPARATOR = "::"
"""``<report.json>::<cell id>``: a record read from a pytest JSON report."""


def relative_path(path: str | Path, base: str | Path) -> str:
    """``path`` relative to the folder ``base`` (POSIX separators); absolute when no relative path exists."""
    target, start = Path(path).resolve(), Path(base).resolve()
    try:
        return Path(os.path.relpath(target, start)).as_posix()
    except ValueError:  # another drive (Windows): nothing relative to write
        return target.as_posix()


def relative_source(source: str, base: str | Path) -> str:
    """A record's ``source`` (a folder, or ``file::cell``) with its path part relative to ``base``."""
    file_part, sep, cell = str(source).partition(CELL_SEPARATOR)
    return relative_path(file_part, base) + sep + cell if file_part else str(source)


def relative_sources(frame: pd.DataFrame, base: str | Path) -> pd.DataFrame:
    """``frame`` with its ``source`` column relative to ``base`` (the folder it is written to)."""
    if "source" not in frame.columns or frame.empty:
        return frame
    return frame.assign(source=[relative_source(s, base) for s in frame["source"]])


def resolve_stored(stored: str, holder: str | Path) -> Path:
    """A path read from the file ``holder``: relative ones are taken from ``holder``'s folder."""
    p = Path(stored)
    return p if p.is_absolute() else Path(holder).resolve().parent / p


GRID_PATH_KEYS = ("artifacts_dir",)
"""Keys of a grid cell record that hold one path; ``artifacts`` maps file names to paths."""


def portable_grid_report(report: Mapping[str, Any], json_path: str | Path) -> dict[str, Any]:
    """A grid ``report.json`` document with every stored path relative to ``json_path``'s folder.

    For the grid's writer (``mebench.harness.session.BenchSession.finish``): ``files`` values, and each
    cell's ``artifacts_dir`` and ``artifacts`` values. Other fields are copied unchanged.
    """
    base = Path(json_path).resolve().parent
    out = dict(report)
    if isinstance(report.get("files"), Mapping):
        out["files"] = {k: relative_path(v, base) for k, v in report["files"].items()}
    out["cells"] = [_portable_cell(c, base) for c in report.get("cells") or []]
    return out


def _portable_cell(cell: Any, base: Path) -> Any:
    if not isinstance(cell, Mapping):
        return cell
    cell = dict(cell)
    for key in GRID_PATH_KEYS:
        if isinstance(cell.get(key), str):
            cell[key] = relative_path(cell[key], base)
    if isinstance(cell.get("artifacts"), Mapping):
        cell["artifacts"] = {k: relative_path(v, base) for k, v in cell["artifacts"].items()}
    return cell
