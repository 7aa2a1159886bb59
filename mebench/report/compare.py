"""All pairwise attack comparisons, paired by seed (see :mod:`mebench.report.stats`).

Comparisons are made only inside a *stratum* where everything but the attack is held fixed
(dataset, victim, output mode, substitute architecture, track, metric and checkpoint, plus the
whole-curve ``agreement_auc``); every pair of conditions is compared on the seeds both have, a
missing seed left out, never imputed. The baseline ``random`` is always put first, so differences
read "attack b minus random"; the page also shows each attack's gain over its null control
(:mod:`mebench.report.gains`). See docs/guide/reports.md.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from mebench.report.aggregate import HIGHER_IS_BETTER, METRIC_NOTES
from mebench.report.document import Block, budget_label, fmt_value, table
from mebench.report.gains import GAIN_TEXT, gain_section
from mebench.report.stats import (CI_LEVEL, CI_TEXT, FEW_SEEDS_TEXT, MIN_SEEDS_FOR_INTERVAL,
                                  compare_groups)

BASELINE_LABEL = "random"
STRATUM_KEYS: tuple[str, ...] = (
    "dataset", "victim_id", "output_mode", "substitute_arch", "track", "metric", "checkpoint_B", "span",
)
"""``span`` is the AUC's budget span (``"1000-10000"``; empty for single checkpoints): AUCs over
different checkpoints are never compared."""
CONDITION_IN_STRATUM: tuple[str, ...] = ("label", "data_mode")


def _order(cond: tuple[str, str]) -> tuple[bool, str, str]:
    return (cond[0] != BASELINE_LABEL, cond[0], cond[1])


def comparison_points(long: pd.DataFrame, auc: pd.DataFrame) -> pd.DataFrame:
    """Per-seed values to compare: every metric at every checkpoint, and the AUC.

    AUC rows carry ``metric = "agreement_auc"`` and an empty (``<NA>``) checkpoint.
    """
    points = long.assign(checkpoint_B=long["checkpoint_B"].astype("Int64"), span="")
    whole = auc.assign(metric="agreement_auc", checkpoint_B=pd.array([pd.NA] * len(auc), dtype="Int64"),
                       span=auc["span_lo"].astype(str) + "-" + auc["span_hi"].astype(str))
    cols = [*STRATUM_KEYS, *CONDITION_IN_STRATUM, "seed", "value"]
    return pd.concat([points[cols], whole[cols]], ignore_index=True)


def compare_all(points: pd.DataFrame, **bootstrap: Any) -> pd.DataFrame:
    """One row per (stratum, condition pair) with the fields of ``compare_groups``."""
    rows = []
    for key, g in points.groupby(list(STRATUM_KEYS), sort=True, dropna=False):
        wide = g.pivot(index="seed", columns=list(CONDITION_IN_STRATUM), values="value")
        conds = sorted(wide.columns, key=_order)
        # one array per stratum: selecting column pairs from the MultiIndex frame was most of a report's time
        values = wide[conds].to_numpy(dtype=float)
        seeds = np.asarray(wide.index)
        stratum = dict(zip(STRATUM_KEYS, key))
        higher = HIGHER_IS_BETTER.get(stratum["metric"], True)
        for (i, ca), (j, cb) in combinations(enumerate(conds), 2):
            both = ~np.isnan(values[:, i]) & ~np.isnan(values[:, j])  # seeds run by both
            rows.append({
                **stratum,
                "a_label": ca[0], "a_data_mode": ca[1], "b_label": cb[0], "b_data_mode": cb[1],
                "seeds": ";".join(str(s) for s in seeds[both]),
                "higher_is_better": higher,
                **compare_groups(values[both, i], values[both, j], **bootstrap),
            })
    columns = [*STRATUM_KEYS, "a_label", "a_data_mode", "b_label", "b_data_mode", "seeds",
               "higher_is_better", *compare_groups([], [])]
    return pd.DataFrame(rows, columns=columns)


def _row_cells(r: pd.Series) -> list[str]:
    point = f"whole curve ({r['span']})" if pd.isna(r["checkpoint_B"]) else f"@{budget_label(int(r['checkpoint_B']))}"
    if r["n_pairs"] < MIN_SEEDS_FOR_INTERVAL:  # no interval, no claim
        ci = claim = f"n<{MIN_SEEDS_FOR_INTERVAL}"
    else:
        ci = f"[{fmt_value(r['ci_lower'])}, {fmt_value(r['ci_upper'])}]"
        claim = "yes" if r["statistically_significant"] else "no"
    return [f"{r['b_label']}/{r['b_data_mode']} − {r['a_label']}/{r['a_data_mode']}",
            r["metric"], point, str(r["n_pairs"]), fmt_value(r["mean_diff"]), ci,
            fmt_value(r["cohens_d"]), r["effect_size_category"], claim,
            "⚠" if r["warning"] else ""]


SHOWN_METRICS = ("agreement_auc", "agreement", "acc_gt")


def comparison_blocks(comps: pd.DataFrame, gains: pd.DataFrame | None = None) -> list[Block]:
    """Markdown/HTML page: gains over the null control, then pairwise comparisons, for
    agreement AUC, agreement and acc_gt (every metric is in the CSV/JSON files)."""
    blocks = [Block("h1", "mebench pairwise comparisons"), Block("p", (
        f"Difference = b − a over seeds run by both (paired by seed). CI: {CI_TEXT}, of the mean "
        f"difference. d: Cohen's d with pooled sample std "
        f"(|d| 0.2/0.5/0.8 = small/medium/large). {FEW_SEEDS_TEXT}; n<{MIN_SEEDS_FOR_INTERVAL}: no interval. "
        "For kl_mean and l1_mean lower is better. "
        "This page shows agreement AUC, agreement and acc_gt; comparisons.csv/json hold "
        "every metric.")), Block("p", "Note: " + METRIC_NOTES["l1_mean"])]
    if gains is not None and not gains.empty:
        blocks += [Block("h2", "Gain over the null control"), Block("p", GAIN_TEXT),
                   *gain_section(gains, SHOWN_METRICS, level=3),
                   Block("h2", "Pairwise comparisons")]
    if comps.empty:
        return blocks + [Block("p", "No two attacks share a stratum: nothing to compare.")]
    shown = comps[comps["metric"].isin(SHOWN_METRICS)]
    heads = ["b − a", "metric", "budget", "n", "mean diff", f"{CI_LEVEL:.0%} CI", "d", "effect",
             "CI excludes 0", "few seeds"]
    level = "h3" if gains is not None and not gains.empty else "h2"
    for key, g in shown.groupby(["dataset", "output_mode", "track"], sort=True):
        blocks.append(Block(level, f"{key[0]} · {key[1]} · Track {key[2]}"))
        g = g.assign(_m=g["metric"].map({m: i for i, m in enumerate(SHOWN_METRICS)}))
        g = g.sort_values(["_m", "checkpoint_B", "a_label", "b_label"], kind="stable",
                          na_position="first")
        blocks.append(table(heads, [_row_cells(r) for _, r in g.iterrows()]))
    return blocks
