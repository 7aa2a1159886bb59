"""Mean ± std over seeds at every budget checkpoint (contract §10: 3 seeds by default).

A *condition* is everything that defines one curve: dataset, victim, output
mode, substitute architecture, attack label and data mode. Seeds of a
condition are aggregated per track, checkpoint and metric with the sample
standard deviation (``ddof=1``); with a single seed the std is NaN (written
empty), never a misleading 0. See docs/guide/reports.md.
"""

from __future__ import annotations

import math
import warnings
from datetime import datetime, timezone

import pandas as pd

from mebench.run.artifacts import AGGREGATE_COLUMNS, seed_aggregate
from mebench.metricspec import AGREEMENT_AUC, METRICS
from mebench.report.load import METRIC_COLUMNS

CONDITION_KEYS: tuple[str, ...] = (
    "dataset", "victim_id", "output_mode", "substitute_arch", "label", "data_mode",
)
"""Columns that together name one attack configuration (one curve colour)."""

POINT_KEYS: tuple[str, ...] = (*CONDITION_KEYS, "track", "checkpoint_B")
"""One point of one curve; a seed contributes at most one row per point."""

AGG_KEYS: tuple[str, ...] = (*POINT_KEYS, "metric")

_REPORTED = (*METRICS, AGREEMENT_AUC)

HIGHER_IS_BETTER: dict[str, bool] = {m.name: m.higher_is_better for m in _REPORTED}
"""Direction of every reported metric, from the metric table (``mebench.metrics.METRICS``)."""

METRIC_TITLES: dict[str, str] = {m.name: f"{m.title} {'↑' if m.higher_is_better else '↓'}" for m in _REPORTED}
"""Human names of the metrics, used by plot titles and table headings alike."""

METRIC_NOTES: dict[str, str] = {m.name: m.note for m in _REPORTED if m.note}
"""One line per metric whose name could be misread; printed under every table that shows it."""


def metric_heading(metric: str) -> str:
    """``l1_mean — L1 (MAE over classes) ↓``: the column name and what it measures."""
    title = METRIC_TITLES.get(metric)
    return f"{metric} — {title}" if title else metric


def drop_reruns(frame: pd.DataFrame) -> pd.DataFrame:
    """Keep one row per (condition, seed, track, checkpoint): that of the run completed last.

    Running the same config twice (or a ``mebench run`` and a grid cell of one condition and
    seed) gives a seed two results; counting both would give it double weight. Repeats are
    ordered by completion time (``completed``: ``summary.json`` ``completed_at``, else a file
    time; :mod:`mebench.report.folders`), never by folder name, with the source path as the
    tie-break; one warning names each replaced run, the run that replaced it and both times,
    and says when their plan or code identity differ.
    """
    keys = [*POINT_KEYS, "seed"]
    when = frame["completed"] if "completed" in frame else pd.Series(math.nan, index=frame.index)
    ordered = frame.assign(_when=when.fillna(-math.inf)).sort_values(["_when", "source"], kind="stable")
    kept = ordered.drop_duplicates(subset=keys, keep="last")
    if len(kept) < len(frame):
        _warn_replaced(ordered.loc[ordered.index.difference(kept.index)], kept, keys)
    return kept.drop(columns="_when").sort_values(keys, kind="stable").reset_index(drop=True)


def _warn_replaced(gone: pd.DataFrame, kept: pd.DataFrame, keys: list[str]) -> None:
    """One warning: each (replaced run, seed) with the run that replaced it."""
    cols = [c for c in ("source", "_when", "completed_from", "plan_hash", "code_identity") if c in kept]
    pairs = gone.merge(kept[[*keys, *cols]], on=keys, suffixes=("", "_kept"))
    lines = sorted({_replacement(r) for _, r in pairs.iterrows()})
    more = f"; and {len(lines) - 3} more" if len(lines) > 3 else ""
    warnings.warn(f"{len(lines)} seed-run(s) repeat a (condition, seed) of another run; the one completed "
                  f"last is kept: {'; '.join(lines[:3])}{more}", stacklevel=3)


def _replacement(r: pd.Series) -> str:
    """``<source> (seed s, completed T) replaced by <source> (completed T')`` and what else differs."""
    old, new = _when(r["_when"], r.get("completed_from")), _when(r["_when_kept"], r.get("completed_from_kept"))
    tie = "" if r["_when_kept"] > r["_when"] else " (no later completion time: kept by path order)"
    differ = [name for col, name in (("plan_hash", "plan"), ("code_identity", "code identity"))
              if col in r and r[col] != r[f"{col}_kept"]]
    also = f"; their {' and '.join(differ)} differ" if differ else ""
    return f"{r['source']} (seed {r['seed']}, completed {old}) replaced by {r['source_kept']} (completed {new}){tie}{also}"


def _when(epoch: float, where: object) -> str:
    if not math.isfinite(epoch):
        return "at an unknown time"
    stamp = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp} by {where}" if where else stamp


def to_long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (point, seed, metric) with a finite value.

    The attack *name* rides along (when the frame has it) because null controls are
    identified by name, not by label (:mod:`mebench.report.gains`). Empty cells (KL/L1
    of ``hard_top1`` runs, §16.2) disappear here, so they never count as a seed in a mean.
    """
    ids = [*POINT_KEYS, "seed", *(["attack"] if "attack" in frame.columns else [])]
    long = frame.melt(id_vars=ids, value_vars=list(METRIC_COLUMNS),
                      var_name="metric", value_name="value")
    return long.dropna(subset=["value"]).reset_index(drop=True)


def aggregate(long: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std (ddof=1), seed count and seeds per condition/track/checkpoint/metric
    (``mebench.run.artifacts.seed_aggregate``, the one aggregation)."""
    return seed_aggregate(long, AGG_KEYS)


def aggregate_csv_frame(agg: pd.DataFrame) -> pd.DataFrame:
    """``agg`` in the one schema of every aggregate.csv (``artifacts.AGGREGATE_COLUMNS``; the label is
    written as ``attack``, as in metrics.csv)."""
    return agg.rename(columns={"label": "attack"})[list(AGGREGATE_COLUMNS)]


def victim_reference(frame: pd.DataFrame) -> pd.DataFrame:
    """Victim test accuracy per (dataset, output_mode, victim_id), from summary.json.

    Victims without a recorded accuracy are left out (nothing to draw).
    """
    keys = ["dataset", "output_mode", "victim_id"]
    ref = frame.dropna(subset=["victim_test_accuracy"]).groupby(keys, sort=True)
    return ref["victim_test_accuracy"].first().reset_index()
