"""What the leaderboard's intervals say, in sentences generated from the same records (``readings.md``).

A leaderboard page needs a few words beside its tables: which attacks beat their null control, which
tie it, which fall below it, and which of them measure a failed training rather than their queries.
Typed by hand, such words go stale as soon as a record is added; here they are drawn from the gain
table (:mod:`mebench.report.gains`, Track A agreement AUC, paired by seed, 95 % interval: Student t below
5 seeds)
and the training-health records (:mod:`mebench.report.health`), one paragraph per dataset and output
mode. See docs/guide/reports.md.
"""
# Each attack row is sorted by its Track A AUC gain over each null control of its data mode:
#
# * **above**: the interval's lower end is above zero;
# * **below**: its upper end is below zero;
# * **the control's own queries**: gain exactly 0 on every seed (an attack whose strategy draws the
#   control's images, e.g. Knockoff Nets' random strategy and Random from the same pool): its Track
#   A *is* the control's, so the row says nothing about the attack's own loop (that is Track B);
# * **level**: the interval covers zero;
# * **too few seeds**: fewer than two paired seeds, no interval.
#
# A condition whose Track A substitutes collapsed to one class at some checkpoint
# (``mebench.training.health.collapsed`` on the recorded shares) is marked with the seeds and
# checkpoints that collapsed: its numbers measure the recipe failing on those queries.

from __future__ import annotations

import pandas as pd

from mebench.report.document import Block, budget_label
from mebench.report.stats import CI_TEXT
from mebench.support.naming import plural
from mebench.training import health

VERDICTS = ("above", "same queries", "level", "below", "few seeds")
PHRASES = {"above": "above it (interval above zero)",
           "same queries": "its own queries (gain 0 on every seed: the attack draws the control's images, so its "
                           "Track A is the control's)",
           "level": "level with it (interval covers zero)",
           "below": "below it (interval below zero)",
           "few seeds": "fewer than two paired seeds (no interval)"}


def verdict(gain: pd.Series) -> str:
    """One gain row's verdict (the rules above)."""
    n = int(gain["n_seeds"])
    if n < 2 or pd.isna(gain["ci_low"]) or pd.isna(gain["ci_high"]):
        return "few seeds"
    if gain["gain_mean"] == 0 and gain["ci_low"] == 0 and gain["ci_high"] == 0:
        return "same queries"
    if gain["ci_low"] > 0:
        return "above"
    if gain["ci_high"] < 0:
        return "below"
    return "level"


def _signed(v: float) -> str:
    return f"{v:+.4f}".replace("-", "−")


def collapse_marks(health_rows: pd.DataFrame | None) -> dict[tuple, str]:
    """(dataset, victim, output mode, label, data mode) → ' [collapsed: 1k 3 seeds, 10k 1 seed]' for Track
    A; the victim is the report's victim_id (``<victim>+<defense>`` behind a defense)."""
    if health_rows is None or health_rows.empty:
        return {}
    rows = health_rows[(health_rows["track"] == "A") & health_rows["checkpoint_B"].notna()]
    rows = rows if "victim_id" in rows else rows.assign(victim_id="")
    mask = [health.collapsed(p, v) for p, v in zip(rows["pred_top_share"], rows["victim_top_share"])]
    rows = rows[pd.Series(mask, index=rows.index, dtype=bool)]
    marks: dict[tuple, str] = {}
    for key, g in rows.groupby(["dataset", "victim_id", "output_mode", "label", "data_mode"], sort=True):
        parts = []
        for b, gb in g.groupby("checkpoint_B", sort=True):
            n = gb["seed"].nunique()
            parts.append(f"{budget_label(int(b))} {n} {plural(n, 'seed')}")
        marks[tuple(key)] = f" [Track A collapsed: {', '.join(parts)}]"
    return marks


def reading_lines(g: pd.DataFrame, marks: dict[tuple, str], dataset: str, mode: str, victim: str = "") -> list[str]:
    """One sentence per null control: the attacks of its data mode above, level with, below it (``g``: the
    Track A agreement-AUC gain rows of one dataset, victim and output mode)."""
    lines = []
    for (control, control_mode), gc in g.groupby(["control_label", "control_data_mode"], sort=True):
        groups: dict[str, list[str]] = {v: [] for v in VERDICTS}
        for _, r in gc.sort_values("gain_mean", ascending=False, kind="stable").iterrows():
            v = verdict(r)
            mark = marks.get((dataset, victim, mode, r["label"], r["data_mode"]), "")
            name = f"{r['label']}{mark}"
            if v in ("above", "below", "level"):
                name += f" {_signed(r['gain_mean'])} [{_signed(r['ci_low'])}, {_signed(r['ci_high'])}]"
            groups[v].append(name)
        parts = [f"{PHRASES[v]}: {', '.join(groups[v])}" for v in VERDICTS if groups[v]]
        lines.append(f"Against {control} ({control_mode}; Track A agreement AUC gain): " + "; ".join(parts) + ".")
    controls = set(zip(g["control_label"], g["control_data_mode"]))
    for key, mark in sorted(marks.items()):
        if key[:3] == (dataset, victim, mode) and (key[3], key[4]) in controls:
            lines.append(f"The control {key[3]} ({key[4]}){mark}.")
    return lines


def readings_blocks(gains: pd.DataFrame, health_rows: pd.DataFrame | None) -> list[Block]:
    """The readings page: one paragraph per (dataset, output mode) with gain rows, one per victim where the
    records hold several (each named; a collapse is marked on its own victim's line only)."""
    blocks = [Block("h1", "mebench leaderboard readings"), Block("p", (
        "What the intervals say, per dataset and output mode: each attack's Track A agreement AUC gain over "
        f"each null control of its data mode (paired by seed, mean [{CI_TEXT}]), grouped by "
        "whether the interval is above zero, covers it or is below it. [Track A collapsed: …] marks the "
        "checkpoints and seeds whose Track A substitute answered one class for the whole test split (training "
        "health): there the number measures a failed training, not the queries."))]
    if gains is None or gains.empty:
        return blocks
    auc = gains[(gains["metric"] == "agreement_auc") & (gains["track"] == "A")]
    auc = auc if "victim_id" in auc else auc.assign(victim_id="")
    marks = collapse_marks(health_rows)
    for (dataset, mode), g in auc.groupby(["dataset", "output_mode"], sort=True):
        blocks.append(Block("h2", f"{dataset} · {mode}"))
        several = g["victim_id"].nunique() > 1  # a zoo, several builds or defended victims: name each
        for victim, gv in g.groupby("victim_id", sort=True):
            text = " ".join(reading_lines(gv, marks, dataset, mode, str(victim)))
            blocks.append(Block("p", f"On {victim}: {text}" if several else text))
    return blocks
