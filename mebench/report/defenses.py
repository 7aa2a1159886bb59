"""The attack × defense matrix: Track A/B agreement of every attack behind every defense, with each
defense's utility cost (defended test accuracy, agreement with the undefended victim, mean
absolute perturbation of the probabilities; ``summary.json`` ``defense.utility``) in the header.

A defended victim is reported as ``<victim_id>+<defense>`` everywhere else in the report; here
the defense becomes a column again, next to ``none``. The victim stays a row key and a column
(``base_victim``): two builds of one ``victim_id`` (a ``.pt`` and an ``.onnx`` with different
sha256, told apart as ``<victim_id>@<sha8>``) are never put in one row nor differenced across.
See docs/defenses/index.md.
"""

from __future__ import annotations

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_gain, fmt_mean_std, table
from mebench.report.stats import CI_TEXT, MIN_SEEDS_FOR_INTERVAL, N_BOOTSTRAP, paired_ci

KEYS = ("dataset", "output_mode", "substitute_arch", "base_victim", "label", "data_mode", "track", "checkpoint_B")


def defense_matrix(frame: pd.DataFrame, n_bootstrap: int = N_BOOTSTRAP) -> pd.DataFrame:
    """Long table: agreement mean ± std over seeds per attack, defense, track and checkpoint, the
    change against ``none`` paired by seed with the report's interval (``drop_*``), and the defense's
    utility cost (mean over the runs that recorded it). Empty without defended runs."""
    if "defense" not in frame or (frame["defense"].replace("", "none") == "none").all():
        return pd.DataFrame()
    f = frame.assign(defense=frame["defense"].replace("", "none"),
                     base_victim=frame["victim_id"].str.split("+").str[0])
    out = f.groupby([*KEYS, "defense"], sort=True).agg(
        agreement_mean=("agreement", "mean"), agreement_std=("agreement", lambda v: v.std(ddof=1)),
        n_seeds=("seed", "nunique"),
        defense_test_accuracy=("defense_test_accuracy", "mean"),
        victim_test_accuracy=("victim_test_accuracy", "mean"),
        defense_agreement=("defense_agreement", "mean"),
        defense_perturbation=("defense_perturbation", "mean")).reset_index()
    drops = [_drop(f, row, n_bootstrap) for _, row in out.iterrows()]
    return pd.concat([out, pd.DataFrame(drops, index=out.index)], axis=1)


def _drop(f: pd.DataFrame, row: pd.Series, n_bootstrap: int) -> dict:
    """Agreement behind the defense minus agreement without it, paired by seed (the report's 95 %
    interval, :func:`paired_ci`;
    no interval below 2 paired seeds)."""
    empty = {"drop_mean": None, "drop_ci_low": None, "drop_ci_high": None, "drop_n": 0}
    if row["defense"] == "none":
        return empty
    same = f
    for k in KEYS:
        same = same[same[k] == row[k]]
    by = {d: g.groupby("seed")["agreement"].mean() for d, g in same.groupby("defense")}
    if "none" not in by:
        return empty
    pair = pd.concat([by["none"], by[row["defense"]]], axis=1, keys=["none", "defended"]).dropna()
    if pair.empty:
        return empty
    if len(pair) < MIN_SEEDS_FOR_INTERVAL:
        diff = float((pair["defended"] - pair["none"]).mean())
        return {**empty, "drop_mean": diff, "drop_n": len(pair)}
    ci = paired_ci(pair["none"].to_numpy(), pair["defended"].to_numpy(), n_bootstrap=n_bootstrap)
    return {"drop_mean": ci.mean_diff, "drop_ci_low": ci.ci_lower, "drop_ci_high": ci.ci_upper, "drop_n": ci.n}


def _cell(v: pd.DataFrame) -> str:
    r = v.iloc[0]
    text = fmt_mean_std(r["agreement_mean"], r["agreement_std"])
    if r["defense"] == "none" or pd.isna(r["drop_mean"]):
        return text
    return f"{text} ({fmt_gain(r['drop_mean'], r['drop_ci_low'], r['drop_ci_high'], int(r['drop_n']))})"


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
        "behind every defense; in brackets the change against no defense, paired by seed (mean ["
        f"{CI_TEXT}]; n<2: no interval). Column headers give the defense's cost to honest users on "
        "the test split: defended test accuracy and mean |defended − undefended probability|."))]
    for (dataset, mode, track), m in matrix.groupby(["dataset", "output_mode", "track"], sort=True):
        defenses = sorted(m["defense"].unique(), key=lambda d: (d != "none", d))
        budgets = sorted(m["checkpoint_B"].unique())
        rows = []
        for (victim, label, dm), g in m.groupby(["base_victim", "label", "data_mode"], sort=True):
            cells = []
            for d in defenses:
                vals = [g[(g["defense"] == d) & (g["checkpoint_B"] == b)] for b in budgets]
                cells.append(" / ".join(_cell(v) if len(v) else "–" for v in vals))
            rows.append([str(victim), f"{label} ({dm})", *cells])
        victims = sorted(m["base_victim"].unique())
        note = [Block("p", f"Victims {', '.join(victims)}: each row is one victim; the defense headers "
                           "average its utility over them.")] if len(victims) > 1 else []
        blocks += [Block("h2", f"{dataset} · {mode} · Track {track} (agreement @{' / @'.join(budget_label(int(b)) for b in budgets)})"),
                   *note, table(["victim", "attack", *(_header(m, d) for d in defenses)], rows)]
    return blocks
