"""``mebench records``: copy finished seed-runs into a result set, records only (docs/results/index.md).

A set (``results/<set>/``) holds what the report and ``mebench docs`` read, never weights or query
caches. Every seed or cell folder below a source (``mebench run``'s ``<run>/<ts>/seed_<s>/``, a grid's
``--mebench-cells``) that the report would read (complete, undamaged, a cell that passed) is copied,
keeping its path, but only groups (a run, or a cell id without ``-s<seed>``) with at least
``min_seeds`` of them. Each folder is written beside its place and renamed into it: whole or absent.
Torch-free.
"""

from __future__ import annotations

import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from mebench.report.folders import SEED_DIR_RE
from mebench.report.load import NoResultsError, load_runs_folder
from mebench.support.naming import QUERY_CACHE_DIR, cell_condition, plural

#: What a set never holds: weights, checkpoints and query caches.
LEFT_OUT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".onnx", ".ts")


@dataclass
class Copied:
    """What :func:`copy_records` did: folders copied (relative to the set), and each left out with why."""

    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def group_of(folder: Path, source: Path) -> str:
    """The condition a seed-run belongs to: ``<run>/<timestamp>`` for a run's seed folder, the cell id
    without its ``-s<seed>`` for a grid cell."""
    if SEED_DIR_RE.match(folder.name):
        return str(folder.parent.relative_to(source))
    return cell_condition(str(folder.relative_to(source)))


def _record_files(folder: Path) -> Iterable[Path]:
    for f in sorted(folder.rglob("*")):
        if f.is_file() and QUERY_CACHE_DIR not in f.relative_to(folder).parts and f.suffix not in LEFT_OUT_SUFFIXES:
            yield f


def _copy_folder(folder: Path, target: Path) -> None:
    """Write ``folder``'s record files into a sibling of ``target``, then rename it into place; a folder
    already at ``target`` is replaced only once the new one is whole, and comes back if the rename fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp, old = target.parent / f".{target.name}.{tag}.tmp", target.parent / f".{target.name}.{tag}.old"
    try:
        tmp.mkdir()
        for f in _record_files(folder):
            out = tmp / f.relative_to(folder)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
        if target.exists():
            target.rename(old)
        try:
            tmp.rename(target)
        except OSError:
            if old.exists():
                old.rename(target)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)


def copy_records(sources: Iterable[Path], dest: Path, min_seeds: int = 3) -> Copied:
    """Copy every finished seed-run below each source into ``dest`` (module docstring)."""
    if min_seeds < 1:
        raise ValueError(f"min_seeds: {min_seeds} must be at least 1")
    done = Copied()
    for source in map(Path, sources):
        if not source.is_dir():
            raise NoResultsError(f"{source}: no such folder")
        if dest.resolve() == source.resolve() or dest.resolve().is_relative_to(source.resolve()):
            raise NoResultsError(f"{dest}: the set cannot lie inside the source {source}")
        groups: dict[str, list[Path]] = defaultdict(list)
        for rec in load_runs_folder(source):
            folder = Path(rec.source)
            if not rec.ok:
                done.skipped.append(f"{folder}: {rec.problem or rec.status}")
                continue
            groups[group_of(folder, source)].append(folder)
        for group, folders in sorted(groups.items()):
            if len(folders) < min_seeds:
                done.skipped += [f"{f}: its group {group} has {len(folders)} finished "
                                 f"{plural(len(folders), 'seed-run')}, fewer than {min_seeds}" for f in folders]
                continue
            for folder in folders:
                rel = folder.relative_to(source)
                _copy_folder(folder, dest / rel)
                done.copied.append(str(rel))
    return done
