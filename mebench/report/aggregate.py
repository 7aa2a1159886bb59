"""Mean ± std over seeds at every budget checkpoint (contract §10: 3 seeds by default).

A *condition* is everything that defines one curve: dataset, victim, output
mode, substitute architecture, attack label and data mode. Seeds of a
condition are aggregated per track, checkpoint and metric with the sample
standard deviation (``ddof=1``); with a single seed the std is NaN (written
empty), never a misleading 0.
"""

from __future__ import annotations

import warnings

import pandas as pd

from mebench.artifacts import AGGREGATE_COLUMNS, seed_aggregate
from mebench.metrics import AGREEMENT_AUC, METRICS
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
    """Keep one row per (condition, seed, track, checkpoint): the latest run's.

    Running the same config twice writes a second ``<timestamp>`` folder; counting
    both would give that seed double weight. Runs are ordered by ``run_id`` (the
    timestamp folder name sorts chronologically) and the last one wins.
    """
    keys = [*POINT_KEYS, "seed"]
    ordered = frame.sort_values(["run_id", "source"], kind="stable")
    kept = ordered.drop_duplicates(subset=keys, keep="last")
    dropped = len(frame) - len(kept)
    if dropped:
        gone = ordered.loc[ordered.index.difference(kept.index)]
        names = sorted({f"{r.get('source', '?')} (seed {r['seed']})" for _, r in gone.iterrows()})
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        warnings.warn(f"{dropped} metrics rows repeat a (condition, seed, track, checkpoint) "
                      f"of a later run and were replaced by it; dropped: {', '.join(names[:3])}{more}",
                      stacklevel=2)
    return kept.sort_values([*POINT_KEYS, "seed"], kind="stable").reset_index(drop=True)


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
    (``mebench.artifacts.seed_aggregate``, the one aggregation)."""
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
