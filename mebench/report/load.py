"""Read benchmark results into one tidy pandas DataFrame (contract §11, §16).

Two sources are understood:

* a runs folder as the engine writes it, ``runs/<run_name>/<timestamp>/seed_<s>/``
  with ``metrics.csv`` (long format, §16.2), ``summary.json`` and
  ``run_config.yaml``. ``PATH`` may be the whole runs folder, one run, one
  timestamp or one seed folder: every ``metrics.csv`` below it is read;
* a JSON report of the pytest benchmark harness, ``{"cells": [{"id", "metrics_rows",
  "summary"}, ...]}``. Only :func:`pytest_json_records` knows that layout, so a
  schema change there is a one-function change.

Both become a list of :class:`RunRecord` (rows + summary), then one frame with a
row per ``metrics.csv`` row plus the columns the report groups by: ``label``
(the attack variant, ``summary["attack"]["label"]`` or else the attack name), ``attack``
(the registry name, ``summary["attack"]["name"]``: ``metrics.csv``'s own ``attack`` column holds
the label, so a relabelled null control such as ``untrained_generator_maze`` is still known by
its name),
``dataset`` and ``victim_test_accuracy``. Extra keys are ignored, missing seeds
simply mean fewer rows, and unreadable files are skipped with a warning.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import yaml

from mebench.artifacts import METRICS_COLUMNS
from mebench.metrics import METRIC_NAMES

METRIC_COLUMNS: tuple[str, ...] = METRIC_NAMES
"""The metrics of contract §1.3 (``mebench.metrics.METRICS``), in the order every report shows them."""

CSV_COLUMNS: tuple[str, ...] = METRICS_COLUMNS
"""The exact ``metrics.csv`` columns of contract §16.2 (``mebench.artifacts``)."""

EXTRA_COLUMNS: tuple[str, ...] = (
    "label", "dataset", "victim_test_accuracy", "victim_sha256", "victim_zoo", "defense", "defense_test_accuracy",
    "defense_agreement", "defense_perturbation", "status", "run_name", "run_id", "source",
)
"""Columns the loader adds to every row."""

UNKNOWN = "unknown"

NO_SUMMARY = "no summary.json"
"""Status of a seed folder without ``summary.json``: the engine writes it last, so the run never finished."""


class NoResultsError(ValueError):
    """``PATH`` holds no readable result: no ``metrics.csv`` rows, no report cells."""


@dataclass(frozen=True)
class RunRecord:
    """The results of one seed-run: its metric rows and its ``summary.json``.

    ``run_name``/``run_id`` identify the run (folder names or a cell id);
    ``source`` says where the rows were read, for warnings and for ordering
    re-runs (a later ``run_id`` replaces an earlier one, see
    :func:`mebench.report.aggregate.drop_reruns`).
    """

    rows: list[dict[str, Any]]
    summary: Mapping[str, Any] = field(default_factory=dict)
    run_config: Mapping[str, Any] = field(default_factory=dict)
    run_name: str = ""
    run_id: str = ""
    source: str = ""


def load_results(path: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Every result under ``path`` (folders and/or pytest JSON reports; one or several) as one frame.

    Runs against different victim checkpoints (sha256) under one ``victim_id`` are
    told apart (:func:`separate_victims`). Raises :class:`NoResultsError` when
    nothing can be read, so a typo in a path fails loudly instead of producing an
    empty report.
    """
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    return results_frame(load_records(paths), paths)


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


DETECTION_COLUMNS = ("dataset", "victim_id", "defense", "output_mode", "stream", "label", "data_mode", "seed",
                     "index", "checkpoint_B", "score", "flagged_at", "delta")


def detection_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per detector stream and checkpoint (``summary.json`` ``defense.detection``): the
    attack's stream (``stream`` "attack", ``label`` the attack) and the benign streams (``stream``
    "benign", ``label`` their source), with the score at B and the query that was flagged.
    Benign streams depend on the seed only, so a benign stream seen by several cells is kept once."""
    rows = []
    for rec in records:
        summary = rec.summary or {}
        defense = _section(summary, "defense")
        det = _section(defense, "detection")
        if not det or summary.get("status", "complete") != "complete":
            continue
        base = {"dataset": str(_section(summary, "dataset").get("name") or UNKNOWN),
                "victim_id": str(_section(summary, "victim").get("victim_id") or _section(
                    _section(summary, "config"), "victim").get("victim_id") or UNKNOWN),
                "defense": str(defense.get("label") or defense.get("name")),
                "seed": int(summary.get("seed", 0)), "delta": _as_float(_section(det, "params").get("delta"))}
        attack = _section(summary, "attack")
        streams = [("attack", attack.get("label") or attack.get("name") or "", str(attack.get("output_mode") or ""),
                    str(_section(summary, "dataset").get("data_mode") or ""), 0, _section(det, "attack"))]
        streams += [("benign", str(b.get("source")), "", "", int(b.get("stream", 0)), b) for b in det.get("benign", [])]
        for kind, label, mode, dm, index, s in streams:
            for b, score in (s.get("score_at") or {}).items():
                rows.append({**base, "stream": kind, "label": label, "output_mode": mode, "data_mode": dm,
                             "index": index, "checkpoint_B": int(b), "score": _as_float(score),
                             "flagged_at": s.get("flagged_at")})
    frame = pd.DataFrame(rows, columns=list(DETECTION_COLUMNS))
    benign = frame["stream"] == "benign"
    keys = ["dataset", "victim_id", "defense", "delta", "seed", "label", "index", "checkpoint_B"]
    return pd.concat([frame[~benign], frame[benign].drop_duplicates(subset=keys)], ignore_index=True)


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
    """One record per ``metrics.csv`` found below ``root`` (in sorted path order)."""
    records = []
    for csv_path in sorted(root.rglob("metrics.csv")):
        record = _read_seed_folder(csv_path.parent)
        if record is not None:
            records.append(record)
    return records


def _read_seed_folder(folder: Path) -> RunRecord | None:
    try:
        rows = pd.read_csv(folder / "metrics.csv", dtype=str, keep_default_na=False)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        warnings.warn(f"{folder / 'metrics.csv'}: skipped, unreadable ({err})", stacklevel=3)
        return None
    summary = _read_mapping(folder / "summary.json", json.loads)
    if not (folder / "summary.json").exists():
        warnings.warn(f"{folder}: no summary.json (run still going or killed); its rows are "
                      f"read with status '{NO_SUMMARY}' and left out of rankings", stacklevel=3)
        summary = {"status": NO_SUMMARY}
    return RunRecord(
        rows=rows.to_dict(orient="records"),
        summary=summary,
        run_config=_read_mapping(folder / "run_config.yaml", yaml.safe_load),
        run_name=folder.parent.parent.name,
        run_id=folder.parent.name,
        source=str(folder),
    )


def _read_mapping(path: Path, parse: Any) -> Mapping[str, Any]:
    """A JSON/YAML mapping, or ``{}`` (with a warning) if absent or malformed."""
    if not path.exists():
        return {}
    try:
        value = parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as err:
        warnings.warn(f"{path}: ignored, unreadable ({err})", stacklevel=4)
        return {}
    return value if isinstance(value, Mapping) else {}


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
    where each row has the ``metrics.csv`` columns. Cells without rows (errored or
    skipped cells) are left out, errored ones with a warning; a cell whose status is not
    ``passed`` keeps its rows with status ``cell <status>`` (left out of rankings later).
    """
    records = []
    for i, cell in enumerate(doc.get("cells", []) if isinstance(doc, Mapping) else []):
        if not isinstance(cell, Mapping):
            continue
        cell_id = str(cell.get("id", f"cell{i}"))
        if not cell.get("metrics_rows"):
            _warn_rowless_cell(cell, f"{source}::{cell_id}")
            continue
        summary = dict(cell.get("summary") or {})
        outcome = cell.get("status", cell.get("outcome"))
        if outcome not in (None, "passed"):  # a cell that failed its contract checks is not a result
            summary["status"] = f"cell {outcome}"
        records.append(RunRecord(
            rows=[dict(r) for r in cell["metrics_rows"] if isinstance(r, Mapping)],
            summary=summary,
            run_config=summary.get("config") or {},
            run_name=cell_id,
            run_id=str(summary.get("timestamp", "")),
            source=f"{source}::{cell_id}",
        ))
    return records


def _warn_rowless_cell(cell: Mapping[str, Any], where: str) -> None:
    """A cell that errored before writing any metrics row is left out, and said so (skipped cells are silent)."""
    status = cell.get("status", cell.get("outcome"))
    if status not in ("passed", "skipped"):
        error = f": {cell['error']}" if cell.get("error") else ""
        warnings.warn(f"left out {where}: status '{status}', no metrics rows{error}", stacklevel=4)


def records_to_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per metrics row, typed: metrics float (NaN when empty), seed/B int."""
    rows = []
    for rec in records:
        extra = _record_columns(rec)
        rows.extend({**{c: r.get(c, "") for c in CSV_COLUMNS}, **extra} for r in rec.rows)
    frame = pd.DataFrame(rows, columns=[*CSV_COLUMNS, *EXTRA_COLUMNS])
    return _typed(frame)


def _record_columns(rec: RunRecord) -> dict[str, Any]:
    """Per-run columns taken from summary.json (falling back to run_config.yaml)."""
    summary, config = rec.summary, rec.run_config
    attack = _section(summary, "attack") or _section(config, "attack")
    victim = _section(summary, "victim")
    dataset = _section(summary, "dataset") or _section(config, "dataset")
    status = summary.get("status", "complete") if summary else "complete"
    defense = _section(summary, "defense") or _section(config, "defense")
    name = {"attack": str(attack["name"])} if attack.get("name") else {}  # else metrics.csv's column
    return {
        **name,
        "label": attack.get("label") or attack.get("name") or "",
        "defense": str(defense.get("label") or defense.get("name") or "none"),
        "defense_test_accuracy": _as_float(_section(defense, "utility").get("test_accuracy")),
        "defense_agreement": _as_float(_section(defense, "utility").get("agreement_with_undefended")),
        "defense_perturbation": _as_float(_section(defense, "utility").get("mean_abs_perturbation")),
        "dataset": str(dataset.get("name") or UNKNOWN),
        "victim_test_accuracy": _as_float(victim.get("test_accuracy")),
        "victim_sha256": str(victim.get("checkpoint_sha256") or victim.get("sha256") or ""),
        "victim_zoo": str(victim.get("zoo") or ""),
        "status": str(status),
        "run_name": rec.run_name,
        "run_id": rec.run_id,
        "source": rec.source,
    }


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key) if isinstance(doc, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _as_float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Coerce types; drop rows whose seed/checkpoint/track cannot be read."""
    for col in (*METRIC_COLUMNS, "victim_test_accuracy", "defense_test_accuracy", "defense_agreement",
                "defense_perturbation"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    for col in ("seed", "checkpoint_B"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    text_cols = ["track", "attack", "data_mode", "output_mode", "victim_id",
                 "substitute_arch", "label", "dataset", "victim_sha256", "defense", "status", "run_name", "run_id",
                 "source"]
    for col in text_cols:
        frame[col] = frame[col].fillna("").astype(str).str.strip()
    frame["label"] = frame["label"].where(frame["label"] != "", frame["attack"])
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
