"""Read benchmark results into one tidy pandas DataFrame (contract §11, §16).

Two sources are understood: a runs folder as the engine writes it and a JSON report of the pytest
harness (only :func:`pytest_json_records` knows its layout). Both become a list of :class:`RunRecord`
(rows + summary), then one frame with a row per ``metrics.csv`` row plus the columns the report groups
by; a seed folder that cannot be read whole is a record with a ``problem`` and no row
(:func:`exclusions`). The sources and columns in detail are below. See docs/guide/reports.md.
"""
# Two sources are understood:
#
# * a runs folder as the engine writes it, ``runs/<run_name>/<timestamp>/seed_<s>/``
#   with ``metrics.csv`` (long format, §16.2), ``summary.json`` and
#   ``run_config.yaml``. ``PATH`` may be the whole runs folder, one run, one
#   timestamp or one seed folder: every ``metrics.csv`` below it is read;
# * a JSON report of the pytest benchmark harness, ``{"cells": [{"id", "metrics_rows",
#   "summary"}, ...]}``. Only :func:`pytest_json_records` knows that layout, so a
#   schema change there is a one-function change.
#
# Both become a list of :class:`RunRecord` (rows + summary), then one frame with a
# row per ``metrics.csv`` row plus the columns the report groups by: ``label``
# (the attack variant, ``summary["attack"]["label"]`` or else the attack name), ``attack``
# (the registry name, ``summary["attack"]["name"]``: ``metrics.csv``'s own ``attack`` column holds
# the label, so a relabelled null control such as ``untrained_generator_maze`` is still known by
# its name),
# ``dataset`` and ``victim_test_accuracy``. Extra keys are ignored, missing seeds
# simply mean fewer rows. A seed folder that cannot be read whole (a truncated ``metrics.csv``,
# an invalid ``summary.json``, no result rows, a grid cell without ``result.json``) or did not
# complete is read as a record with a ``problem`` and no row of the frame: :func:`exclusions`
# lists each one with its reason (:mod:`mebench.report.folders`).
#
# Each row also carries what tells its seed-run apart from another run of the same condition and
# seed: ``completed`` (epoch seconds, from ``summary.json`` ``completed_at`` or a file time),
# ``torch_threads``, ``device``, ``code_identity`` (else ``git <commit>``), ``plan_hash`` and
# ``kept_stale`` (a cell kept by ``--keep-stale``).

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from mebench.run.artifacts import METRICS_COLUMNS
from mebench.metricspec import METRIC_NAMES
from mebench.report.paths import resolve_stored
from mebench.report.records import full
from mebench.report.folders import (NO_SUMMARY, SEED_DIR_RE, completion_time, is_grid_cell, leftover_cache, metric_problem, read_config,
                                    read_metrics, read_probe, read_summary, result_problem, seed_folders)

METRIC_COLUMNS: tuple[str, ...] = METRIC_NAMES
"""The metrics of contract §1.3 (``mebench.metrics.METRICS``), in the order every report shows them."""

CSV_COLUMNS: tuple[str, ...] = METRICS_COLUMNS
"""The exact ``metrics.csv`` columns of contract §16.2 (``mebench.run.artifacts``)."""

EXTRA_COLUMNS: tuple[str, ...] = (
    "label", "dataset", "victim_test_accuracy", "victim_sha256", "victim_zoo", "defense", "defense_test_accuracy",
    "defense_agreement", "defense_perturbation", "defense_stream_l1", "defense_stream_label_change", "adaptive",
    "base_label", "status", "run_name", "run_id", "source",
    "completed", "completed_from", "torch_threads", "device", "code_identity", "plan_hash", "kept_stale",
    "stale_reason", "control_for", "wall_s", "queries_used", "torch_build", "cpu_model", "gpu",
)
"""Columns the loader adds to every row (``wall_s``: the seed-run's ``timings_s.total``; ``queries_used``: the
images its victim answered; ``torch_build``, ``cpu_model`` and ``gpu``: the machine it ran on, "" where an older
record does not say, see :func:`environment_of`)."""

UNKNOWN = "unknown"
UNRECORDED = "?"
"""``control_for`` of a run whose summary does not record its attack's ``null_control_for``."""

EXCLUDED_COLUMNS: tuple[str, ...] = ("run_name", "run_id", "label", "data_mode", "output_mode", "victim_id",
                                     "seed", "status", "reason", "source")
"""``excluded.csv``: one row per seed-run the report did not read, with a one-line reason."""


class NoResultsError(ValueError):
    """``PATH`` holds no readable result: no ``metrics.csv`` rows, no report cells."""


@dataclass(frozen=True)
class RunRecord:
    """The results of one seed-run: its metric rows and its ``summary.json``.

    ``run_name``/``run_id`` identify the run (folder names or a cell id) for people only;
    ``source`` says where the rows were read. ``completed`` (epoch seconds; NaN when unknown)
    orders re-runs (:func:`mebench.report.aggregate.drop_reruns`), ``completed_from`` says
    where it came from. ``problem`` (one line) marks a record the report does not read:
    damaged, partial or not complete; ``status`` is then its short category.
    """

    rows: list[dict[str, Any]]
    summary: Mapping[str, Any] = field(default_factory=dict)
    run_config: Mapping[str, Any] = field(default_factory=dict)
    run_name: str = ""
    run_id: str = ""
    source: str = ""
    completed: float = math.nan
    completed_from: str = ""
    problem: str = ""
    status: str = ""
    stream: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """The ``stream_utility`` probe's numbers per checkpoint (``measurements.csv``), when recorded."""

    @property
    def state(self) -> str:
        """``complete`` or why not: the recorded category, else the summary's status."""
        if self.status:
            return self.status
        return str(self.summary.get("status", "complete")) if self.summary else "complete"

    @property
    def ok(self) -> bool:
        """Read into the results: no problem and complete."""
        return not self.problem and self.state == "complete"


def load_results(path: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Every result under ``path`` (folders and/or pytest JSON reports; one or several) as one frame.

    Runs against different victim checkpoints (sha256) under one ``victim_id`` are
    told apart (:func:`separate_victims`); a record with a problem is left out with a warning
    naming it and its reason. Raises :class:`NoResultsError` when
    nothing can be read, so a typo in a path fails loudly instead of producing an
    empty report.
    """
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    records = load_records(paths)
    for rec in records:
        if rec.problem:
            warnings.warn(f"left out {rec.source}: {rec.problem}", stacklevel=2)
    return results_frame(records, paths)


def results_frame(records: Sequence[RunRecord], paths: Sequence[Path]) -> pd.DataFrame:
    """:func:`load_results` on records already read from ``paths``."""
    frame = records_to_frame(records)
    if frame.empty:
        raise NoResultsError(f"{', '.join(map(str, paths))}: no metrics rows found (expected metrics.csv "
                             "files under runs/<run>/<timestamp>/seed_<s>/ or a JSON report)")
    return defended_victims(separate_victims(frame))


def load_records(paths: Sequence[Path]) -> list[RunRecord]:
    """The seed-runs under ``paths`` (folders and/or pytest JSON reports), each once."""
    records: list[RunRecord] = []
    for p in map(Path, paths):
        if not p.exists():
            raise NoResultsError(f"{p}: no such file or folder")
        records += load_json_report(p) if p.is_file() else load_runs_folder(p)
    return unique_records(records)


def defended_victims(frame: pd.DataFrame) -> pd.DataFrame:
    """A defended victim is another victim: its runs get ``victim_id`` ``<victim_id>+<defense>``,
    so attacks are ranked, compared and paired with controls under the same defense only."""
    defended = frame["defense"].replace("", "none") != "none"
    if defended.any():
        frame = frame.copy()
        frame.loc[defended, "victim_id"] = frame.loc[defended, "victim_id"] + "+" + frame.loc[defended, "defense"]
    return frame


def unique_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    """One record per source (seed folder, or report file + cell id): a source read twice
    (a path given twice, or a folder inside another given path) is kept once, with a warning."""
    kept: dict[str, RunRecord] = {}
    for rec in records:
        key = _source_key(rec.source)
        if key in kept:
            warnings.warn(f"{rec.source}: read twice (overlapping or repeated PATH); kept once", stacklevel=3)
            continue
        kept[key] = rec
    return list(kept.values())


def _source_key(source: str) -> str:
    """``source`` with its file part resolved, so ``runs/x`` and ``./runs/x`` are one source."""
    file_part, sep, cell = source.partition("::")
    return str(Path(file_part).resolve()) + sep + cell if file_part else source


def separate_victims(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``victim_id`` used with several checkpoint sha256 becomes ``<victim_id>@<sha[:8]>`` per checkpoint.

    Seeds against different victim weights must never be pooled into one mean;
    a warning names the victim and the checkpoints found.
    """
    known = frame[frame["victim_sha256"] != ""]
    shas = known.groupby("victim_id")["victim_sha256"].unique()
    mixed = {v: sorted(s) for v, s in shas.items() if len(s) > 1}
    if not mixed:
        return frame
    frame = frame.copy()
    for victim, found in mixed.items():
        rows = frame["victim_id"] == victim
        frame.loc[rows, "victim_id"] = victim + "@" + frame.loc[rows, "victim_sha256"].str[:8].replace("", UNKNOWN)
        warnings.warn(f"victim_id '{victim}' names {len(found)} different checkpoints "
                      f"(sha256 {', '.join(x[:8] for x in found)}): their runs are reported apart as "
                      f"{', '.join(victim + '@' + x[:8] for x in found)}", stacklevel=2)
    return frame


def split_incomplete(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(complete, excluded)``: rows of runs that did not finish (interrupted, failed) are excluded.

    Excluded rows never enter a ranking, a comparison or a gain; the report lists them apart.
    """
    bad = frame["status"] != "complete"
    return frame.loc[~bad].reset_index(drop=True), frame.loc[bad].reset_index(drop=True)


def load_runs_folder(root: Path) -> list[RunRecord]:
    """One record per seed or cell folder found below ``root`` (:func:`mebench.report.folders.seed_folders`)."""
    return [_read_seed_folder(folder) for folder in seed_folders(root)]


def _read_seed_folder(folder: Path) -> RunRecord:
    """The folder's record; rows are kept only for naming it when it has a ``problem``."""
    summary, summary_problem = read_summary(folder / "summary.json")
    rows, metrics_problem = read_metrics(folder / "metrics.csv")
    status, problem = _folder_state(folder, summary, summary_problem, metrics_problem)
    completed, completed_from = completion_time(summary, folder / "summary.json", folder / "metrics.csv")
    # runs/<run_name>/<timestamp>/seed_<s>/, or a grid cell's own folder (--mebench-cells: named by its cell id)
    run_name, run_id = ((folder.parent.parent.name, folder.parent.name) if SEED_DIR_RE.match(folder.name)
                        else (folder.name, ""))
    return RunRecord(
        rows=rows, summary=summary, run_config=read_config(folder / "run_config.yaml"),
        run_name=run_name, run_id=run_id, source=str(folder),
        completed=completed, completed_from=completed_from,
        stream=read_probe(folder / "measurements.csv", "stream_utility") if not problem else {},
        problem=problem + leftover_cache(folder) if problem else "", status=status,
    )


def _folder_state(folder: Path, summary: Mapping[str, Any], summary_problem: str,
                  metrics_problem: str) -> tuple[str, str]:
    """``(status, problem)``: the first reason the folder cannot be read, ``("complete", "")`` if none."""
    if summary_problem:
        return "damaged summary.json", summary_problem
    run_status = str(summary.get("status", "complete")) if (folder / "summary.json").exists() else NO_SUMMARY
    if run_status not in ("complete", NO_SUMMARY):
        error = f": {summary['error']}" if summary.get("error") else ""
        return run_status, f"status '{run_status}'{error}"
    if is_grid_cell(folder):
        status, problem = result_problem(folder)
        if problem:
            return status, problem
    if metrics_problem:
        return ("no result rows" if "no result rows" in metrics_problem else "damaged metrics.csv"), metrics_problem
    if run_status == NO_SUMMARY:
        return NO_SUMMARY, "no summary.json: the run never finished (killed, or still running)"
    return "complete", ""


def load_json_report(path: Path) -> list[RunRecord]:
    """Records from a pytest benchmark JSON report file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise NoResultsError(f"{path}: not a readable JSON report ({err})") from err
    return pytest_json_records(doc, source=str(path))


def pytest_json_records(doc: Mapping[str, Any], source: str = "") -> list[RunRecord]:
    """The one place that knows the harness's JSON layout.

    Expected: ``{"cells": [{"id": str, "metrics_rows": [row, ...], "summary": {...}}]}``
    where each row has the ``metrics.csv`` columns. A cell whose status is not ``passed``
    (failed its contract checks, errored) is a record with a problem, named in
    ``excluded.csv``; skipped cells are not results and are left out silently. Completion
    time: the summary's ``completed_at``, else the report's ``created_utc``.
    """
    records = []
    created = doc.get("created_utc") if isinstance(doc, Mapping) else None
    for i, cell in enumerate(doc.get("cells", []) if isinstance(doc, Mapping) else []):
        if not isinstance(cell, Mapping):
            continue
        cell_id = str(cell.get("id", f"cell{i}"))
        outcome = cell.get("status", cell.get("outcome"))
        if outcome == "skipped" and not cell.get("metrics_rows"):
            continue
        if cell.get("artifacts_dir") and source:  # a slim cell: its summary, rows and config from its folder
            cell = full(cell, resolve_stored(str(cell["artifacts_dir"]), source))
        summary = dict(cell.get("summary") or {})
        completed, completed_from = completion_time({"completed_at": summary.get("completed_at") or created},
                                                    Path(source))
        rec = RunRecord(rows=[dict(r) for r in cell.get("metrics_rows") or [] if isinstance(r, Mapping)],
                        summary=summary, run_config=summary.get("config") or {}, run_name=cell_id,
                        run_id=str(summary.get("timestamp", "")), source=f"{source}::{cell_id}",
                        completed=completed, completed_from=completed_from if completed_from != "unknown" else "")
        records.append(_cell_state(rec, cell, outcome))
    return records


def _cell_state(rec: RunRecord, cell: Mapping[str, Any], outcome: Any) -> RunRecord:
    """A cell that did not pass, or passed without rows, gets its status and a one-line problem."""
    if outcome not in (None, "passed"):
        why = cell.get("error") or "; ".join(cell.get("problems") or []) or "no reason recorded"
        return replace(rec, status=f"cell {outcome}", problem=f"cell {outcome}: {why}")
    if not rec.rows:
        return replace(rec, status="no result rows", problem="cell passed without metrics rows")
    for row in rec.rows:
        for name in METRIC_NAMES:
            value = row.get(name)
            problem = metric_problem(name, float(value)) if isinstance(value, (int, float)) else ""
            if problem:
                return replace(rec, status="damaged", problem=f"metrics row B={row.get('checkpoint_B')}: {problem}")
    return rec


def records_to_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per metrics row of every readable, complete record, typed: metrics float (NaN when empty),
    seed/B int. Records with a problem contribute nothing here (:func:`exclusions` names them)."""
    rows = []
    for rec in records:
        if rec.problem:
            continue
        extra = _record_columns(rec)
        rows.extend({**{c: r.get(c, "") for c in CSV_COLUMNS}, **extra, **_stream_columns(rec, r)} for r in rec.rows)
    frame = pd.DataFrame(rows, columns=[*CSV_COLUMNS, *EXTRA_COLUMNS])
    return _typed(frame)


def _record_columns(rec: RunRecord) -> dict[str, Any]:
    """Per-run columns taken from summary.json (falling back to run_config.yaml)."""
    summary, config = rec.summary, rec.run_config
    attack = mapping_section(summary, "attack") or mapping_section(config, "attack")
    victim = mapping_section(summary, "victim")
    dataset = mapping_section(summary, "dataset") or mapping_section(config, "dataset")
    defense = mapping_section(summary, "defense") or mapping_section(config, "defense")
    name = {"attack": str(attack["name"])} if attack.get("name") else {}  # else metrics.csv's column
    controls = attack.get("null_control_for")
    return {
        **name,
        "label": attack.get("label") or attack.get("name") or "",
        "defense": str(defense.get("label") or defense.get("name") or "none"),
        "defense_test_accuracy": as_float(mapping_section(defense, "utility").get("test_accuracy")),
        "defense_agreement": as_float(mapping_section(defense, "utility").get("agreement_with_undefended")),
        "defense_perturbation": as_float(mapping_section(defense, "utility").get("mean_abs_perturbation")),
        **_adaptive_columns(attack),
        "dataset": str(dataset.get("name") or UNKNOWN),
        "victim_test_accuracy": as_float(victim.get("test_accuracy")),
        "victim_sha256": victim_sha256(victim),
        "victim_zoo": str(victim.get("zoo") or ""),
        "status": rec.state, "run_name": rec.run_name, "run_id": rec.run_id, "source": rec.source,
        "control_for": ";".join(sorted(map(str, controls))) if isinstance(controls, list) else UNRECORDED,
        "wall_s": as_float(mapping_section(summary, "timings_s").get("total")),
        "queries_used": as_float(summary.get("queries_used")),
        **identity_columns(rec),
    }


def _stream_columns(rec: RunRecord, row: Mapping[str, Any]) -> dict[str, float]:
    """The stream utility at the row's own checkpoint: cumulative over the first B answered queries
    (``measurements.csv``). Without those rows, summary.json's value counts only for the checkpoint it
    was taken at (its ``queries``); an earlier checkpoint's is unknown (NaN), never the final one."""
    try:
        budget = int(row.get("checkpoint_B", ""))
    except (TypeError, ValueError):
        budget = -1
    at = rec.stream.get(budget)
    if at is None and not rec.stream:
        final = mapping_section(mapping_section(rec.summary, "defense"), "stream_utility")
        at = final if as_float(final.get("queries")) == budget else None
    at = at or {}
    return {"defense_stream_l1": as_float(at.get("stream_l1")),
            "defense_stream_label_change": as_float(at.get("stream_label_change"))}


def _adaptive_columns(attack: Mapping[str, Any]) -> dict[str, str]:
    """``adaptive``: the attacker's strategy (``naive`` for records without one); ``base_label``:
    the attack's label without it (``random.argmax`` -> ``random``), what naive and adaptive share."""
    strategy = str(mapping_section(attack, "adaptive").get("strategy") or "naive")
    label = str(attack.get("label") or attack.get("name") or "")
    suffix = f".{strategy}"
    return {"adaptive": strategy, "base_label": label[: -len(suffix)] if label.endswith(suffix) else label}


def identity_columns(rec: RunRecord) -> dict[str, Any]:
    """What tells two seed-runs of one condition apart: when they ended, on what, with which code."""
    summary = rec.summary
    machine, git, resume = mapping_section(summary, "machine"), mapping_section(summary, "git"), mapping_section(summary, "resume")
    threads = machine.get("torch_threads")
    code = summary.get("code_identity") or (
        f"git {str(git['commit'])[:12]}{'+dirty' if git.get('dirty') else ''}" if git.get("commit") else "")
    return {"completed": rec.completed, "completed_from": rec.completed_from,
            "torch_threads": str(threads) if threads is not None else "",
            "device": str(machine.get("device") or ""), "code_identity": str(code),
            "plan_hash": str(summary.get("plan_hash") or ""), "kept_stale": bool(resume.get("kept_stale")),
            "stale_reason": str(resume.get("reason") or "") if resume.get("kept_stale") else "",
            **environment_of(summary)}


def environment_of(summary: Mapping[str, Any]) -> dict[str, str]:
    """The environment a seed-run's numbers depend on beyond its code (contract: records name the torch
    build, the CPU model and the threads): ``torch_build`` (``versions.torch``), ``cpu_model`` (the model
    name, with the instruction set torch's kernels used in brackets) and ``gpu`` (the card's name on
    CUDA); "" for what an older record does not say."""
    machine, versions = mapping_section(summary, "machine"), mapping_section(summary, "versions")
    cpu, capability = str(machine.get("cpu_model") or ""), str(machine.get("cpu_capability") or "")
    return {"torch_build": str(versions.get("torch") or ""),
            "cpu_model": f"{cpu} ({capability})" if cpu and capability else cpu,
            "gpu": str(machine.get("gpu") or "")}


def exclusions(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per seed-run left out (:data:`EXCLUDED_COLUMNS`), named by what could be read of it."""
    rows = []
    for rec in records:
        if rec.ok:
            continue
        first = rec.rows[0] if rec.rows else {}
        summary, config = rec.summary, rec.run_config
        attack = mapping_section(summary, "attack") or mapping_section(config, "attack")
        seed = summary.get("seed", first.get("seed", _seed_of_name(rec.source)))
        rows.append({"run_name": rec.run_name, "run_id": rec.run_id,
                     "label": str(attack.get("label") or attack.get("name") or first.get("attack") or ""),
                     "data_mode": str(first.get("data_mode") or mapping_section(summary, "dataset").get("data_mode") or ""),
                     "output_mode": str(first.get("output_mode") or attack.get("output_mode") or ""),
                     "victim_id": str(first.get("victim_id") or mapping_section(summary, "victim").get("victim_id") or ""),
                     "seed": "" if seed is None else str(seed), "status": rec.state,
                     "reason": rec.problem or f"status '{rec.state}'", "source": rec.source})
    frame = pd.DataFrame(rows, columns=list(EXCLUDED_COLUMNS))
    return frame.sort_values(["source", "run_name"], kind="stable").reset_index(drop=True)


def _seed_of_name(source: str) -> str:
    """The seed a folder or cell name carries (``seed_3``, ``<cell id>-s3``), else ""."""
    match = re.search(r"(?:^seed_|-s)(\d+)$", Path(source.partition("::")[0]).name if "::" not in source
                      else source.partition("::")[2])
    return match.group(1) if match else ""


def victim_sha256(victim: Mapping[str, Any]) -> str:
    """The build (checkpoint sha256) a summary's ``victim`` section names; ``""`` where unrecorded."""
    return str(victim.get("checkpoint_sha256") or victim.get("sha256") or "")


def mapping_section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key) if isinstance(doc, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def as_float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Coerce types; drop rows whose seed/checkpoint/track cannot be read."""
    for col in (*METRIC_COLUMNS, "victim_test_accuracy", "defense_test_accuracy", "defense_agreement",
                "defense_perturbation", "defense_stream_l1", "defense_stream_label_change", "wall_s", "queries_used"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    for col in ("seed", "checkpoint_B"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    text_cols = ["track", "attack", "data_mode", "output_mode", "victim_id",
                 "substitute_arch", "label", "dataset", "victim_sha256", "defense", "status", "run_name", "run_id",
                 "source", "completed_from", "torch_threads", "device", "code_identity", "plan_hash", "stale_reason",
                 "control_for", "adaptive", "base_label", "torch_build", "cpu_model", "gpu"]
    frame["completed"] = pd.to_numeric(frame["completed"], errors="coerce").astype(float)
    frame["kept_stale"] = frame["kept_stale"].fillna(False).astype(bool)
    for col in text_cols:
        frame[col] = frame[col].fillna("").astype(str).str.strip()
    frame["label"] = frame["label"].where(frame["label"] != "", frame["attack"])
    frame["base_label"] = frame["base_label"].where(frame["base_label"] != "", frame["label"])
    frame["adaptive"] = frame["adaptive"].replace("", "naive")
    for col in ("attack", "label", "data_mode", "output_mode", "victim_id", "substitute_arch"):
        frame[col] = frame[col].replace("", UNKNOWN)
    frame["track"] = frame["track"].str.upper()
    bad = frame["seed"].isna() | frame["checkpoint_B"].isna() | ~frame["track"].isin(["A", "B"])
    if bad.any():
        warnings.warn(f"skipped {int(bad.sum())} metrics rows without a valid seed, "
                      "checkpoint_B or track (A/B)", stacklevel=3)
    frame = frame.loc[~bad].copy()
    frame["seed"] = frame["seed"].astype("int64")
    frame["checkpoint_B"] = frame["checkpoint_B"].astype("int64")
    return frame.reset_index(drop=True)
