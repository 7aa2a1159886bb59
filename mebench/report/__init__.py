"""Reports from benchmark results: curves, leaderboard and paired comparisons.

``write_report(path, out_dir)`` reads a runs folder (``runs/<run>/<timestamp>/seed_<s>/``,
contract §16) or a pytest JSON report and writes curves, the leaderboard, pairwise comparisons,
gains over the null controls and the numbers behind them into ``out_dir`` (the files are listed
below). ``append_metadata``/``read_metadata`` maintain ``runs/run_metadata.jsonl``.
See docs/guide/reports.md.
"""
# What ``write_report`` writes into ``out_dir``:
#
# * ``curves_<dataset>_<mode>.png|svg`` — budget–performance curves (mean ± std over seeds);
# * ``leaderboard.md|html|csv|json`` — normalised log-budget agreement AUC and every
#   metric at every checkpoint, per (dataset, output mode) and track;
# * ``comparisons.md|csv|json`` — every pair of attacks, paired by seed: bootstrap CI of
#   the mean difference, Cohen's d, effect-size category and a few-seeds warning;
# * ``gains.md|csv|json`` — each attack's gain over the null control(s) of its data mode,
#   paired by seed, per track, metric and checkpoint (also in the leaderboard);
# * ``aggregate.csv`` and ``results.csv`` — the numbers behind all of the above.

from __future__ import annotations

from typing import Any

from mebench.report.metadata import (METADATA_FILE, append_metadata, config_hash,
                                     read_metadata, run_metadata_entry)

_LAZY = {"write_report": "writer", "default_out_dir": "writer",
         "load_results": "load", "NoResultsError": "load"}


def __getattr__(name: str) -> Any:
    """Import pandas/matplotlib only when a report is built, not when the engine
    just appends a metadata line."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"mebench.report.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'mebench.report' has no attribute '{name}'")


__all__ = [
    "METADATA_FILE", "NoResultsError", "append_metadata", "config_hash", "default_out_dir",
    "load_results", "read_metadata", "run_metadata_entry", "write_report",
]
