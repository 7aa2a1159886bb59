"""Results over a victim zoo: every attack aggregated over the zoo's victims × seeds.

A victim belongs to a zoo when its config says so (``victim.zoo``; a grid's ``victims: [{zoo:
NAME}]`` sets it for every recipe of the zoo). For each zoo, dataset, output mode, data mode,
defense, track and checkpoint B, every attack gets the mean ± sample std of its agreement over all
(victim, seed) runs, the number of victims and runs, and its per-victim means (the breakdown the
HTML page shows folded). An attack is **flagged** when its rank among the attacks (by per-victim
mean agreement, 1 = highest) is not the same on every victim: a ranking that one victim network
would give is then not a property of the attack. See docs/guide/victims.md.
"""

from __future__ import annotations

import math

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_mean_std, fmt_value, table

KEYS = ["victim_zoo", "dataset", "output_mode", "data_mode", "defense", "track", "checkpoint_B"]


def zoo_tables(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(aggregate over victims × seeds with the rank flag, per-victim means); empty without zoos."""
    if "victim_zoo" not in frame or not (frame["victim_zoo"].fillna("") != "").any():
        return pd.DataFrame(), pd.DataFrame()
    f = frame[frame["victim_zoo"].fillna("") != ""]
    per_victim = (f.groupby(KEYS + ["label", "victim_id"], sort=True)["agreement"]
                  .agg(["mean", "count"]).reset_index()
                  .rename(columns={"mean": "agreement_mean", "count": "n_seeds"}))
    per_victim["rank"] = per_victim.groupby(KEYS + ["victim_id"])["agreement_mean"].rank(
        ascending=False, method="min").astype(int)
    rows = []
    for key, g in f.groupby(KEYS + ["label"], sort=True):
        pv = per_victim.set_index(KEYS + ["label"]).loc[[key]]
        ranks = sorted(set(pv["rank"]))
        rows.append({**dict(zip(KEYS + ["label"], key)),
                     "agreement_mean": float(g["agreement"].mean()),
                     "agreement_std": float(g["agreement"].std(ddof=1)) if len(g) > 1 else math.nan,
                     "n_victims": int(g["victim_id"].nunique()), "n_runs": int(len(g)),
                     "ranks": "/".join(str(r) for r in ranks), "rank_varies": len(ranks) > 1})
    return pd.DataFrame(rows), per_victim


def zoo_blocks(agg: pd.DataFrame, per_victim: pd.DataFrame) -> list[Block]:
    """One section per zoo, dataset, output mode and track; a folded per-victim table under each."""
    blocks = [Block("h1", "mebench results over victim zoos"),
              Block("p", "Agreement with each victim, mean ± std over the zoo's victims × seeds. "
                         "ranks: the attack's rank on each victim (1 = highest agreement); "
                         "⚑ marks an attack whose rank changes from one victim to another.")]
    for key, g in agg.groupby(["victim_zoo", "dataset", "output_mode", "data_mode", "defense", "track"], sort=True):
        zoo, ds, mode, dm, defense, track = key
        budgets = sorted(g["checkpoint_B"].unique())
        title = f"zoo {zoo} · {ds} · {mode} · {dm} · Track {track}" + (f" · defense {defense}" if defense != "none" else "")
        blocks.append(Block("h2", title))
        rows = []
        for label, a in g.groupby("label", sort=True):
            a = a.set_index("checkpoint_B")
            cells = [fmt_mean_std(a.loc[b, "agreement_mean"], a.loc[b, "agreement_std"]) if b in a.index else "–"
                     for b in budgets]
            flag = "⚑ " + "; ".join(f"{budget_label(int(b))}: {a.loc[b, 'ranks']}" for b in budgets
                                   if b in a.index and a.loc[b, "rank_varies"])
            rows.append([label, *cells, str(int(a["n_victims"].max())), str(int(a["n_runs"].max())),
                         flag if "⚑ " != flag else ""])
        blocks.append(table(["attack", *[f"agreement @{budget_label(int(b))}" for b in budgets], "victims", "runs",
                             "rank changes"], rows))
        sel = per_victim
        for k, v in zip(["victim_zoo", "dataset", "output_mode", "data_mode", "defense", "track"], key):
            sel = sel[sel[k] == v]
        blocks.append(Block("details", f"per victim ({sel['victim_id'].nunique()} victims)"))
        prow = []
        for (label, victim), pv in sel.groupby(["label", "victim_id"], sort=True):
            pv = pv.set_index("checkpoint_B")
            prow.append([label, victim, *[f"{fmt_value(pv.loc[b, 'agreement_mean'])} (rank {pv.loc[b, 'rank']})"
                                          if b in pv.index else "–" for b in budgets]])
        blocks.append(table(["attack", "victim", *[f"agreement @{budget_label(int(b))}" for b in budgets]], prow))
        blocks.append(Block("end_details"))
    return blocks


__all__ = ["zoo_tables", "zoo_blocks"]
