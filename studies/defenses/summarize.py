"""What each defense of the defense grids costs honest users, from the committed records of this set
(``configs/benchmarks/{mnist,fashionmnist}_defenses.yaml``; docs/results/defenses.md).

Every defended seed-run measures its defense on the victim's test split before the attack
(``summary.json`` ``defense.utility``): defended test accuracy, agreement with the undefended victim's
labels, mean absolute perturbation of the probabilities, and seconds per 1,000 answers (with the
overhead over no defense). A defense is fitted once per victim from a fixed defender seed, so its
accuracy, agreement and perturbation are the same in every seed-run (the table says so where runs
disagree); its time is a measurement of each run, given as the median and range.

``protection.md`` turns the report's attack × defense matrix (``defenses.md``: one column per defense)
around: per dataset and budget, one row per defense and one column per attack and output mode, each
cell Track A's change in agreement against no defense, paired by seed with the report's interval
(``mebench.report.defenses.defense_matrix``); the first row is the undefended agreement.
``mebench docs`` calls ``tables(set_dir)`` for both.

    python studies/defenses/summarize.py      # prints both tables
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_gain, render_markdown, table

HERE = Path(__file__).resolve().parents[2] / "results" / "defenses"  # the set's records (this script lives in studies/)
FIXED = ("test_accuracy", "agreement_with_undefended", "mean_abs_perturbation")


def utility_frame(records: Iterable) -> pd.DataFrame:
    """One row per defended seed-run the report reads (``records``: ``mebench.report.load.load_records``):
    victim, defense label and its ``defense.utility``."""
    rows = []
    for rec in records:
        defense = rec.summary.get("defense") or {}
        utility = defense.get("utility") or {}
        if not rec.ok or not utility:
            continue
        rows.append({"victim": (rec.summary.get("victim") or {}).get("victim_id"),
                     "defense": defense.get("label") or defense.get("name"), **utility})
    return pd.DataFrame(rows)


def utility_table(frame: pd.DataFrame) -> str:
    """Markdown: per victim and defense, the fitted defense's cost and its time per 1,000 answers."""
    rows = []
    for (victim, defense), g in frame.groupby(["victim", "defense"], sort=True):
        spread = max(g[k].max() - g[k].min() for k in FIXED)
        note = "" if spread < 1e-9 else f" (differs across runs by up to {spread:.1e})"
        s = g["seconds_per_1000_answers"]
        rows.append([victim, defense, str(len(g)), f"{g['test_accuracy'].iloc[0]:.4f}{note}",
                     f"{g['agreement_with_undefended'].iloc[0]:.4f}", f"{g['mean_abs_perturbation'].iloc[0]:.4f}",
                     f"{s.median():.3f} [{s.min():.3f}, {s.max():.3f}]",
                     f"{g['overhead_seconds_per_1000'].median():+.3f}"])
    return render_markdown([table(["victim", "defense", "runs", "defended test accuracy", "agreement with undefended",
                                   "mean |Δp|", "s / 1,000 answers, median [range]",
                                   "overhead over none, s / 1,000, median"], rows)])


def protection_table(matrix: pd.DataFrame) -> str:
    """Markdown: per (dataset, budget), Track A agreement without a defense and its change behind each one."""
    blocks = []
    for (dataset, budget), m in matrix[matrix["track"] == "A"].groupby(["dataset", "checkpoint_B"], sort=True):
        found = {(r.defense, r.label, r.data_mode, r.output_mode): r for r in m.itertuples()}
        columns = sorted({key[1:] for key in found}, key=lambda c: (c[1], c[0], c[2] != "soft_prob"))
        rows = []
        for defense in sorted(m["defense"].unique(), key=lambda d: (d != "none", d)):
            cells = [_protection_cell(found.get((defense, *c))) for c in columns]
            rows.append(["none (agreement)" if defense == "none" else defense, *cells])
        blocks += [Block("h3", f"{dataset} · Track A · {budget_label(int(budget))}"),
                   table(["defense", *(f"{label} ({mode})" for label, _, mode in columns)], rows)]
    return render_markdown(blocks)


def _protection_cell(r) -> str:
    """The undefended agreement, a defended row's paired change, or "–" where the grid has no such cell."""
    if r is None:
        return "–"
    if r.defense == "none":
        return f"{r.agreement_mean:.3f}"
    return fmt_gain(r.drop_mean, r.drop_ci_low, r.drop_ci_high, int(r.drop_n))


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's tables for ``mebench docs``; its records are read once for both."""
    from mebench.report.defenses import defense_matrix
    from mebench.report.load import load_records, results_frame

    records = load_records([set_dir])
    return {"utility.md": utility_table(utility_frame(records)),
            "protection.md": protection_table(defense_matrix(results_frame(records, [set_dir])))}


if __name__ == "__main__":
    for text in tables().values():
        print(text)
