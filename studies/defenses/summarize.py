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

import pandas as pd

HERE = Path(__file__).resolve().parents[2] / "results" / "defenses"  # the set's records (this script lives in studies/)
FIXED = ("test_accuracy", "agreement_with_undefended", "mean_abs_perturbation")


def utility_frame(set_dir: Path = HERE) -> pd.DataFrame:
    """One row per defended seed-run the report reads: victim, defense label and its ``defense.utility``."""
    from mebench.report.load import load_records

    rows = []
    for rec in load_records([set_dir]):
        defense = rec.summary.get("defense") or {}
        utility = defense.get("utility") or {}
        if not rec.ok or not utility:
            continue
        rows.append({"victim": (rec.summary.get("victim") or {}).get("victim_id"),
                     "defense": defense.get("label") or defense.get("name"), **utility})
    return pd.DataFrame(rows)


def utility_table(frame: pd.DataFrame) -> str:
    """Markdown: per victim and defense, the fitted defense's cost and its time per 1,000 answers."""
    lines = ["| victim | defense | runs | defended test accuracy | agreement with undefended | mean \\|Δp\\| "
             "| s / 1,000 answers, median [range] | overhead over none, s / 1,000, median |",
             "|---|---|---|---|---|---|---|---|"]
    for (victim, defense), g in frame.groupby(["victim", "defense"], sort=True):
        spread = [g[k].max() - g[k].min() for k in FIXED]
        note = "" if max(spread) < 1e-9 else f" (differs across runs by up to {max(spread):.1e})"
        s = g["seconds_per_1000_answers"]
        lines.append(f"| {victim} | {defense} | {len(g)} | {g['test_accuracy'].iloc[0]:.4f}{note} "
                     f"| {g['agreement_with_undefended'].iloc[0]:.4f} | {g['mean_abs_perturbation'].iloc[0]:.4f} "
                     f"| {s.median():.3f} [{s.min():.3f}, {s.max():.3f}] "
                     f"| {g['overhead_seconds_per_1000'].median():+.3f} |")
    return "\n".join(lines) + "\n"


def protection_table(matrix: pd.DataFrame) -> str:
    """Markdown: per (dataset, budget), Track A agreement without a defense and its change behind each one."""
    from mebench.report.document import budget_label, fmt_gain

    a = matrix[matrix["track"] == "A"]
    out = []
    for (dataset, budget), m in a.groupby(["dataset", "checkpoint_B"], sort=True):
        columns = sorted({(r.label, r.data_mode, r.output_mode) for r in m.itertuples()},
                         key=lambda c: (c[1], c[0], c[2] != "soft_prob"))
        head = [f"{label} ({mode})" for label, _, mode in columns]
        out += [f"### {dataset} · Track A · {budget_label(int(budget))}", "",
                "| defense | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
        for defense in sorted(m["defense"].unique(), key=lambda d: (d != "none", d)):
            cells = []
            for label, dm, mode in columns:
                hit = m[(m["defense"] == defense) & (m["label"] == label) & (m["data_mode"] == dm)
                        & (m["output_mode"] == mode)]
                if hit.empty:
                    cells.append("–")
                    continue
                r = hit.iloc[0]
                cells.append(f"{r['agreement_mean']:.3f}" if defense == "none" else
                             fmt_gain(r["drop_mean"], r["drop_ci_low"], r["drop_ci_high"], int(r["drop_n"])))
            out.append(f"| {'none (agreement)' if defense == 'none' else defense} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def tables(set_dir: Path = HERE) -> dict[str, str]:
    from mebench.report.defenses import defense_matrix
    from mebench.report.load import load_results

    return {"utility.md": utility_table(utility_frame(set_dir)),
            "protection.md": protection_table(defense_matrix(load_results(set_dir)))}


if __name__ == "__main__":
    for text in tables().values():
        print(text)
