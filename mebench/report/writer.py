"""Build every report file from a runs folder or a pytest JSON report."""

from __future__ import annotations

import warnings
from datetime import datetime, timezone
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from mebench.report.aggregate import aggregate, aggregate_csv_frame, drop_reruns, to_long, victim_reference
from mebench.report.compare import comparison_blocks, comparison_points, compare_all
from mebench.report.adaptive import adaptive_blocks, adaptive_matrix
from mebench.report.defenses import defense_blocks, defense_matrix
from mebench.report.files import write_pages, write_table
from mebench.report.gains import (check_also_against, condition_roles, gain_blocks,
                                  gain_definitions, gain_table, leaderboard_gain_columns)
from mebench.report.leaderboard import (DEFINITION_TEXT, agreement_auc_per_seed, leaderboard_blocks,
                                        leaderboard_latex, leaderboard_table)
from mebench.report.detection import detection_blocks, detection_frame, detection_table
from mebench.report.health import health_blocks, health_frame
from mebench.report.presets import preset_blocks, preset_gaps
from mebench.report.readings import readings_blocks
from mebench.report.verification import roc_frame, verification_blocks, verification_frame, verification_table
from mebench.report.transfer import read_frames, with_transfer_column, write_transfer_report
from mebench.report.zoo import zoo_blocks, zoo_tables
from mebench.report.identity import separate_unpoolable, stale_runs
from mebench.report.detection_bench import write_detection_bench
from mebench.report.load import NoResultsError, exclusions, load_records, results_frame, split_incomplete
from mebench.report.paths import relative_path, relative_sources
from mebench.report.plots import slug, write_curve_figures, write_defense_scatter
from mebench.report.stats import N_BOOTSTRAP, definitions


def default_out_dir(path: str | Path | Sequence[str | Path]) -> Path:
    """``PATH/report`` for a folder, ``<stem>_report/`` next to a JSON report file (the first of several)."""
    p = Path(path) if isinstance(path, (str, Path)) else Path(list(path)[0])
    return p.parent / f"{p.stem}_report" if p.is_file() else p / "report"


def provenance(paths: Sequence[str | Path], out: str | Path = ".") -> dict[str, Any]:
    """What the report was made with: mebench version, commit, date (UTC) and the inputs read
    (relative to the report folder ``out``, so the report survives moving ``runs/``)."""
    from mebench import __version__
    from mebench.support.runinfo import git_commit

    commit = git_commit()
    return {"mebench_version": __version__, "commit": commit["commit"], "dirty": commit["dirty"],
            "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "inputs": [relative_path(p, out) for p in paths]}


def write_report(path: str | Path | Sequence[str | Path], out_dir: str | Path | None = None,
                 n_bootstrap: int = N_BOOTSTRAP,
                 also_against: Sequence[str] = (), figures: bool = True) -> dict[str, Path]:
    """Write curves (PNG, SVG), leaderboard (MD, HTML, CSV, JSON, TeX), comparisons
    (MD, CSV, JSON), gains over the null control (MD, CSV, JSON), the aggregate
    table, the tidy input rows and the runs left out (``excluded.csv``).

    ``path`` is a runs folder, one run or seed folder, or a pytest JSON report, or
    a list of them; ``out_dir`` defaults to :func:`default_out_dir`. Runs that did
    not complete are left out of every table and listed apart (``excluded.csv`` and
    the leaderboard's last section). ``also_against`` names null controls every attack is
    also paired with across data modes (:mod:`mebench.report.gains`). Returns
    {file key: path}. Raises :class:`mebench.report.load.NoResultsError` when nothing can be
    read, ``ValueError`` (before reading anything) for a name in ``also_against`` that is not
    a null control. ``figures`` False draws no figure (the pages name them all the same):
    ``mebench docs`` keeps only Markdown, and drawing is most of a report's time.
    """
    also_against = check_also_against(also_against)
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    bench = write_detection_bench([Path(p) for p in paths], Path(out_dir) if out_dir is not None else default_out_dir(path))
    try:
        records = load_records([Path(p) for p in paths])
    except NoResultsError:
        if bench:  # a detection benchmark's records alone (results/detect): no run to report
            return bench
        raise
    excluded = exclusions(records)
    for run in excluded.itertuples():
        warnings.warn(f"left out {run.run_name} seed {run.seed or '?'} ({run.source}): {run.reason}", stacklevel=2)
    if bench and not any(rec.ok for rec in records):
        return bench
    if not any(rec.ok for rec in records):
        raise NoResultsError(f"{', '.join(map(str, paths))}: no complete run (every run was left out: "
                             f"{len(excluded)} listed with their reasons above)" if len(excluded) else
                             f"{', '.join(map(str, paths))}: no metrics rows found (expected metrics.csv "
                             "files under runs/<run>/<timestamp>/seed_<s>/ or a JSON report)")
    frame, _ = split_incomplete(results_frame(records, paths))
    frame = separate_unpoolable(drop_reruns(frame))
    long = to_long(frame)
    agg, victims = aggregate(long), victim_reference(frame)
    auc = agreement_auc_per_seed(frame)
    roles = condition_roles(frame)
    gains = gain_table(frame, also_against, n_bootstrap=n_bootstrap)
    board = leaderboard_gain_columns(leaderboard_table(auc), gains, roles)
    transfer_frames = read_frames(records, set(frame["source"]) if "source" in frame else None)
    board = with_transfer_column(board, transfer_frames["transfer"])
    comps = compare_all(comparison_points(long, auc), n_bootstrap=n_bootstrap)
    out = Path(out_dir) if out_dir is not None else default_out_dir(path)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    curves = write_curve_figures(agg, victims, out, draw=figures)
    if figures:
        files.update({f"curves_{slug(dataset)}_{slug(mode)}_{ext}": p
                      for (dataset, mode), fig_paths in curves.items() for ext, p in fig_paths.items()})
    write_table(relative_sources(frame, out), out, "results", files)
    write_table(aggregate_csv_frame(agg), out, "aggregate", files)
    prov = provenance(paths, out)
    write_table(board, out, "leaderboard", files, definitions={"text": DEFINITION_TEXT, "provenance": prov})
    files["leaderboard_tex"] = out / "leaderboard.tex"
    files["leaderboard_tex"].write_text(leaderboard_latex(board, agg), encoding="utf-8")
    write_table(relative_sources(excluded, out), out, "excluded", files)
    write_table(comps, out, "comparisons", files, definitions=definitions(n_bootstrap))
    write_table(gains, out, "gains", files, definitions=gain_definitions(n_bootstrap, also_against))
    img = {k: p["png"].name for k, p in curves.items()}
    stale = stale_runs(frame)
    for run in stale.itertuples():
        warnings.warn(f"{run.source}: seed {run.seed} of {run.label} was kept by --keep-stale "
                      f"({run.stale_reason or 'no reason recorded'}); marked in the leaderboard", stacklevel=2)
    write_pages(leaderboard_blocks(board, agg, victims, img, gains, provenance=prov,
                                    excluded=relative_sources(excluded, out), stale=relative_sources(stale, out)), out,
                 "leaderboard", "mebench leaderboard", files)
    write_pages(comparison_blocks(comps, gains), out, "comparisons", "mebench comparisons",
                 files, html=False)
    write_pages(gain_blocks(gains, roles), out, "gains", "mebench gains", files, html=False)
    health = health_frame(records)  # read once: the readings mark collapses, the health section lists every flag
    write_pages(readings_blocks(gains, health), out, "readings", "mebench leaderboard readings",
                files, html=False)
    parts = ReportParts(records, frame, out, files, n_bootstrap, figures, transfer_frames, health, comps)
    for _, section in SECTIONS:
        section(parts)
    return {**files, **bench}


@dataclass
class ReportParts:
    """What the report's own sections read: the records, the pooled frame, where to write, and the
    files written so far (each section adds its own)."""

    records: Any
    frame: Any
    out: Path
    files: dict[str, Path]
    n_bootstrap: int
    figures: bool
    transfer_frames: Any
    health: Any  # mebench.report.health.health_frame of the records
    comps: Any  # mebench.report.compare.compare_all of the pooled rows


def _defenses(r: ReportParts) -> None:
    matrix = defense_matrix(r.frame, n_bootstrap=r.n_bootstrap)
    if matrix.empty:
        return
    write_table(matrix, r.out, "defenses", r.files)
    scatter = write_defense_scatter(matrix, r.out, draw=r.figures)
    if r.figures:
        r.files.update({f"defenses_{slug(dataset)}_{slug(mode)}_{ext}": p
                        for (dataset, mode), fig_paths in scatter.items() for ext, p in fig_paths.items()})
    write_pages(defense_blocks(matrix), r.out, "defenses", "mebench defenses", r.files, html=False)


def _adaptive(r: ReportParts) -> None:
    adaptive = adaptive_matrix(r.frame, n_bootstrap=r.n_bootstrap)
    if not adaptive.empty:
        write_table(adaptive, r.out, "adaptive", r.files)
        write_pages(adaptive_blocks(adaptive), r.out, "adaptive", "mebench adaptive attackers", r.files, html=False)


def _zoo(r: ReportParts) -> None:
    zoo, per_victim = zoo_tables(r.frame)
    if not zoo.empty:
        write_table(zoo, r.out, "zoo", r.files)
        write_table(per_victim, r.out, "zoo_victims", r.files)
        write_pages(zoo_blocks(zoo, per_victim), r.out, "zoo", "mebench victim zoos", r.files)


def _detection(r: ReportParts) -> None:
    detection = detection_table(detection_frame(r.records))
    if not detection.empty:
        write_table(detection, r.out, "detection", r.files)
        write_pages(detection_blocks(detection), r.out, "detection", "mebench detection", r.files, html=False)


def _health(r: ReportParts) -> None:
    health = r.health
    if health.empty:
        return
    restarts = int(health["checkpoint_B"].isna().sum())
    also = f" and {restarts} attack model(s) restarted after a NaN loss" if restarts else ""
    warnings.warn(f"{len(health) - restarts} checkpoint(s) flagged by the training-health checks{also}: see "
                  f"{r.out / 'health.md'}", stacklevel=3)
    write_table(health, r.out, "health", r.files)
    write_pages(health_blocks(health), r.out, "health", "mebench training health", r.files, html=False)


def _verification(r: ReportParts) -> None:
    frame = verification_frame(r.records)
    if frame.empty:
        return
    table_ = verification_table(frame, n_boot=r.n_bootstrap)
    write_table(table_, r.out, "verification", r.files)
    write_table(roc_frame(frame), r.out, "verification_roc", r.files)
    write_pages(verification_blocks(table_), r.out, "verification", "mebench verification", r.files, html=False)


def _presets(r: ReportParts) -> None:
    gaps = preset_gaps(r.comps, r.frame)
    if not gaps.empty:
        write_table(gaps, r.out, "presets", r.files, definitions=definitions(r.n_bootstrap))
        write_pages(preset_blocks(gaps), r.out, "presets", "mebench variants against presets", r.files, html=False)


def _transfer(r: ReportParts) -> None:
    r.files.update(write_transfer_report(r.transfer_frames, r.frame, r.out, figures_too=r.figures))


#: The report's own sections after the leaderboard, comparisons and gains, in the order they are written;
#: each writes its tables and page when its records hold anything for it. A new section is one entry.
SECTIONS: tuple[tuple[str, Callable[[ReportParts], None]], ...] = (
    ("defenses", _defenses), ("adaptive", _adaptive), ("zoo", _zoo), ("detection", _detection),
    ("health", _health), ("transfer", _transfer), ("verification", _verification), ("presets", _presets))
