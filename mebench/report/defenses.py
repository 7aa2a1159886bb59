"""The attack × defense matrix: Track A/B agreement of every attack behind every defense, with each
defense's utility cost (defended test accuracy, agreement with the undefended victim, mean
absolute perturbation of the probabilities; ``summary.json`` ``defense.utility``) in the header.

A defended victim is reported as ``<victim_id>+<defense>`` everywhere else in the report; here
the defense becomes a column again, next to ``none``.
"""

from __future__ import annotations

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_mean_std, table

KEYS = ("dataset", "output_mode", "substitute_arch", "base_victim", "label", "data_mode", "track", "checkpoint_B")


def defense_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """Long table: agreement mean ± std over seeds per attack, defense, track and checkpoint, plus the
    defense's utility cost (mean over the runs that recorded it). Empty without defended runs."""
    if "defense" not in frame or (frame["defense"].replace("", "none") == "none").all():
        return pd.DataFrame()
    f = frame.assign(defense=frame["defense"].replace("", "none"),
                     base_victim=frame["victim_id"].str.split("+").str[0])
    out = f.groupby([*KEYS, "defense"], sort=True).agg(
        agreement_mean=("agreement", "mean"), agreement_std=("agreement", lambda v: v.std(ddof=1)),
        n_seeds=("seed", "nunique"),
        defense_test_accuracy=("defense_test_accuracy", "mean"),
        defense_agreement=("defense_agreement", "mean"),
        defense_perturbation=("defense_perturbation", "mean")).reset_index()
    return out


def _header(m: pd.DataFrame, defense: str) -> str:
    if defense == "none":
        return "none"
    d = m[m["defense"] == defense]
    acc, pert = d["defense_test_accuracy"].mean(), d["defense_perturbation"].mean()
    return defense if pd.isna(acc) else f"{defense} (acc {acc:.3f}, |Δp| {pert:.3f})"


def defense_blocks(matrix: pd.DataFrame) -> list[Block]:
    """One table per (dataset, output mode, track): rows attack, columns defense, cells agreement at each budget."""
    blocks = [Block("h1", "mebench attack × defense matrix"), Block("p", (
        "Agreement with the undefended victim (mean ± std over seeds) at each budget, for every attack "
        "behind every defense. Column headers give the defense's cost to honest users on the test "
        "split: defended test accuracy and mean |defended − undefended probability|."))]
    for (dataset, mode, track), m in matrix.groupby(["dataset", "output_mode", "track"], sort=True):
        defenses = sorted(m["defense"].unique(), key=lambda d: (d != "none", d))
        budgets = sorted(m["checkpoint_B"].unique())
        rows = []
        for (label, dm), g in m.groupby(["label", "data_mode"], sort=True):
            cells = []
            for d in defenses:
                vals = [g[(g["defense"] == d) & (g["checkpoint_B"] == b)] for b in budgets]
                cells.append(" / ".join(fmt_mean_std(v["agreement_mean"].iloc[0], v["agreement_std"].iloc[0])
                                        if len(v) else "–" for v in vals))
            rows.append([f"{label} ({dm})", *cells])
        blocks += [Block("h2", f"{dataset} · {mode} · Track {track} (agreement @{' / @'.join(budget_label(int(b)) for b in budgets)})"),
                   table(["attack", *(_header(m, d) for d in defenses)], rows)]
    return blocks
