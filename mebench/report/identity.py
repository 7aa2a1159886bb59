"""Which seed-runs may be pooled into one mean ± std, and which were kept stale (issue 43).

Seeds of one condition are pooled only when they ran alike: the same torch thread count, device,
code (``code_identity``, else the git commit and dirty flag), torch build, CPU model and GPU; otherwise each
combination is its own row, its label suffixed with what differs, and a warning names the seeds.
Cells kept by ``--keep-stale`` are pooled like any other but listed and warned about. Details below;
see docs/guide/reports.md.
"""
# Seeds of one condition are pooled only when they ran alike: the same torch thread count
# (CPU results depend on it: it changes the order of float reductions), the same device, the
# same code (``code_identity``, else the git commit and dirty flag of older records) and the same
# machine where records name it (torch build, CPU model and instruction set, GPU: across machines
# only distributions compare, so seeds of two machines are two rows, never one mean). A
# condition whose seeds differ in any of these is reported as one row per combination, its
# label suffixed with what differs (``random [threads 2]``), and a warning names the seeds
# of each. Victim builds (checkpoint sha256) are told apart earlier, by victim id
# (:func:`mebench.report.load.separate_victims`). A field a record lacks (an older record)
# differs from nothing: it splits a condition only where another seed records two values.
#
# Cells kept by ``--keep-stale`` (``summary.json`` ``resume.kept_stale``) are pooled like
# any other but listed, with their reason, in the leaderboard and warned about.

from __future__ import annotations

import warnings

import pandas as pd

from mebench.report.aggregate import CONDITION_KEYS
from mebench.report.document import Block, table

POOLING_FIELDS: dict[str, str] = {"torch_threads": "threads", "device": "device", "code_identity": "code",
                                  "torch_build": "torch", "cpu_model": "cpu", "gpu": "gpu"}
"""Columns that must agree between pooled seeds → the word that names them in a label."""


def separate_unpoolable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each condition whose seeds differ in a :data:`POOLING_FIELDS` column split by it."""
    fields = [f for f in POOLING_FIELDS if f in frame.columns]
    if frame.empty or not fields:
        return frame
    frame = frame.copy()
    for key, g in frame.groupby(list(CONDITION_KEYS), sort=True):
        differ = [f for f in fields if g.loc[g[f] != "", f].nunique() > 1]
        if not differ:
            continue
        suffix = g[differ].apply(lambda r: " ".join(f"{POOLING_FIELDS[f]} {r[f] or '?'}" for f in differ), axis=1)
        frame.loc[g.index, "label"] = g["label"] + " [" + suffix + "]"
        _warn_split(dict(zip(CONDITION_KEYS, key)), g.assign(_part=suffix), differ)
    return frame


def _warn_split(cond: dict, g: pd.DataFrame, differ: list[str]) -> None:
    parts = "; ".join(f"'{cond['label']} [{part}]': seeds {', '.join(map(str, sorted(p['seed'].unique())))}"
                      for part, p in g.groupby("_part", sort=True))
    warnings.warn(f"{cond['label']} ({cond['data_mode']}, {cond['output_mode']}, {cond['dataset']}, victim "
                  f"{cond['victim_id']}): its seeds ran with different {', '.join(POOLING_FIELDS[f] for f in differ)}"
                  f" and are not pooled: {parts}", stacklevel=3)


STALE_COLUMNS = ("label", "data_mode", "output_mode", "victim_id", "seed", "stale_reason", "source")


def stale_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per seed-run kept by ``--keep-stale`` (empty when none), with its reason."""
    if "kept_stale" not in frame.columns:
        return pd.DataFrame(columns=list(STALE_COLUMNS))
    rows = frame.loc[frame["kept_stale"], list(STALE_COLUMNS)].drop_duplicates()
    return rows.sort_values(list(STALE_COLUMNS), kind="stable").reset_index(drop=True)


def stale_blocks(stale: pd.DataFrame) -> list[Block]:
    """The leaderboard's section on results kept by ``--keep-stale`` (nothing when there are none)."""
    if stale.empty:
        return []
    rows = [[str(r.label), str(r.data_mode), str(r.output_mode), str(r.victim_id), str(r.seed),
             str(r.stale_reason) or "no reason recorded", str(r.source)] for r in stale.itertuples()]
    return [Block("h2", "Results kept stale (--keep-stale)"),
            Block("p", "These seed-runs were kept by --keep-stale although their plan, code or thread count "
                       "no longer matches the current ones; they are in the tables above, marked in the seeds "
                       "column."),
            table(["attack", "data mode", "output mode", "victim", "seed", "reason", "source"], rows)]
