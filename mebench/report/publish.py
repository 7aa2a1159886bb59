"""``mebench records``: copy finished seed-runs into a result set, records only (docs/results/index.md).

A set (``results/<set>/``) holds what the report and ``mebench docs`` read, never weights or query
caches. Every seed or cell folder below a source (``mebench run``'s ``<run>/<ts>/seed_<s>/``, a grid's
``--mebench-cells``) that the report would read (complete, undamaged, a cell that passed) is copied,
keeping its path, but only groups (a run, or a cell id without ``-s<seed>``) with at least
``min_seeds`` of them. Each folder is written beside its place and renamed into it: whole or absent.
A set holds one build (checkpoint sha256) of each victim: a copy that would mix two is refused
before anything is written. Torch-free.
"""

from __future__ import annotations

import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from mebench.report.folders import SEED_DIR_RE
from mebench.report.load import NoResultsError, RunRecord, load_runs_folder, mapping_section, victim_sha256
from mebench.support.naming import QUERY_CACHE_DIR, cell_condition, plural

#: What a set never holds: weights, checkpoints and query caches.
LEFT_OUT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".onnx", ".ts")


class MixedBuildsError(NoResultsError):
    """The copy would leave a set holding two builds of one victim (nothing was written)."""


@dataclass
class Copied:
    """What :func:`copy_records` did: folders copied (relative to the set), and each left out with why."""

    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def base_of(folder: Path, source: Path) -> Path:
    """The folder ``folder``'s path in the set is taken relative to (resolved): the source, or, where the
    source is one seed-run itself (a grid cell, or a run's ``seed_<s>``), the folder its layout starts at
    (the cell's parent; the run's parent, three levels up), so it keeps its own name in the set.
    Resolved first: a relative seed folder may not name three levels above it."""
    folder, source = folder.resolve(), source.resolve()
    if folder != source:
        return source
    return folder.parents[2] if SEED_DIR_RE.match(folder.name) else folder.parent


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


def victim_build(record: RunRecord) -> tuple[str, str]:
    """``(victim_id, checkpoint sha256)`` a seed-run was measured against (empty strings where unrecorded)."""
    victim = mapping_section(record.summary, "victim")
    return str(victim.get("victim_id") or ""), victim_sha256(victim)


def _check_one_build(dest: Path, incoming: dict[str, RunRecord]) -> None:
    """Refuse, before anything is written, a copy after which ``dest`` would hold seed-runs measured
    against two builds (checkpoint sha256) of one victim: the report would split that victim into
    ``<victim_id>@<sha>`` rows (``load.separate_victims``), and the set's pages would compare across
    them. ``incoming``: {path relative to the set: record}; a record it replaces does not count."""
    kept = {} if not dest.is_dir() else {
        str(Path(r.source).resolve().relative_to(dest.resolve())): r for r in load_runs_folder(dest) if r.ok}
    builds: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rel, rec in {**kept, **incoming}.items():
        victim, sha = victim_build(rec)
        if victim and sha:
            builds[victim][sha].append(rel if rel in incoming else str(dest / rel))
    for victim, shas in sorted(builds.items()):
        if len(shas) > 1:
            held = "; ".join(f"{sha[:12]} ({len(rels)} {plural(len(rels), 'seed-run')}, e.g. {sorted(rels)[0]})"
                             for sha, rels in sorted(shas.items()))
            raise MixedBuildsError(
                f"{dest}: a set holds one build of each victim, and {victim} would hold several: {held}; "
                "train the set's build (docs/guide/victims.md, the build of a victim) or copy into another set")


def copy_records(sources: Iterable[Path], dest: Path, min_seeds: int = 3) -> Copied:
    """Copy every finished seed-run below each source into ``dest`` (module docstring). Nothing is
    written when the set would then hold two builds of one victim (:class:`MixedBuildsError`)."""
    if min_seeds < 1:
        raise ValueError(f"min_seeds: {min_seeds} must be at least 1")
    done = Copied()
    plan: dict[str, tuple[Path, RunRecord]] = {}
    # a group is counted over every source that shares a base: three cell folders named on the
    # command line are one group of three seeds, as they are inside their cells folder
    groups: dict[tuple[Path, str], dict[Path, RunRecord]] = defaultdict(dict)  # (base, group): {folder: record}
    for source in map(Path, sources):
        if not source.is_dir():
            raise NoResultsError(f"{source}: no such folder")
        if dest.resolve() == source.resolve() or dest.resolve().is_relative_to(source.resolve()):
            raise NoResultsError(f"{dest}: the set cannot lie inside the source {source}")
        for rec in load_runs_folder(source):
            if not rec.ok:
                done.skipped.append(f"{rec.source}: {rec.problem or rec.status}")
                continue
            folder = Path(rec.source).resolve()
            base = base_of(folder, source)
            groups[(base, group_of(folder, base))][folder] = rec
    for (base, group), members in sorted(groups.items()):
        if len(members) < min_seeds:
            done.skipped += [f"{r.source}: its group {group} has {len(members)} finished "
                             f"{plural(len(members), 'seed-run')}, fewer than {min_seeds}" for r in members.values()]
            continue
        for folder, rec in members.items():
            plan[str(folder.relative_to(base))] = (folder, rec)
    _check_one_build(dest, {rel: rec for rel, (_, rec) in plan.items()})
    for rel, (folder, _) in plan.items():
        _copy_folder(folder, dest / rel)
        done.copied.append(rel)
    return done
