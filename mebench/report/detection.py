"""Detection at a low false-positive rate: every detector defense (``prada``) against every attack.

For each detector, victim and checkpoint B, the negatives are the benign streams (all seeds and
sources), the positives one attack's streams (one per seed); the table's columns are below. No AUC
is given on purpose: a detector is used at a low false-positive rate, and an AUC averages over rates
nobody would deploy. See docs/defenses/detection_benchmark.md.
"""
# Per attack the table gives:
#
# - ``flagged``: share of the attack's streams flagged within B queries at the detector's own
#   threshold, and ``queries_to_detect``: the mean query after which they were flagged;
# - ``benign_flagged``: the same share for the benign streams (the false-positive rate at that
#   threshold);
# - ``tpr_at_1pct`` and ``tpr_at_0.1pct``: the true-positive rate at the strictest threshold that
#   flags at most 1 % / 0.1 % of the benign streams (``mebench.detection.rates.tpr_at_fpr``), with
#   the number of benign streams: below 1/FPR of them no false positive at all is allowed, and the
#   table says the FPR is not resolved. No AUC is given on purpose: a detector is used at a low
#   false-positive rate, and an AUC averages over rates nobody would deploy.

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

from mebench.detection.rates import tpr_at_fpr
from mebench.report.document import Block, budget_label, table
from mebench.report.load import UNKNOWN, RunRecord, as_float, mapping_section

DETECTION_COLUMNS = ("dataset", "victim_id", "defense", "output_mode", "stream", "label", "data_mode", "seed",
                     "index", "checkpoint_B", "score", "flagged_at", "delta")


def detection_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per detector stream and checkpoint (``summary.json`` ``defense.detection``): the
    attack's stream (``stream`` "attack", ``label`` the attack) and the benign streams (``stream``
    "benign", ``label`` their source), with the score at B and the query that was flagged.
    Benign streams depend on the seed only, so a benign stream seen by several cells is kept once."""
    rows = []
    for rec in records:
        summary = rec.summary or {}
        defense = mapping_section(summary, "defense")
        det = mapping_section(defense, "detection")
        if not det or not rec.ok:
            continue
        base = {"dataset": str(mapping_section(summary, "dataset").get("name") or UNKNOWN),
                "victim_id": str(mapping_section(summary, "victim").get("victim_id") or mapping_section(
                    mapping_section(summary, "config"), "victim").get("victim_id") or UNKNOWN),
                "defense": str(defense.get("label") or defense.get("name")),
                "seed": int(summary.get("seed", 0)), "delta": as_float(mapping_section(det, "params").get("delta"))}
        attack = mapping_section(summary, "attack")
        streams = [("attack", attack.get("label") or attack.get("name") or "", str(attack.get("output_mode") or ""),
                    str(mapping_section(summary, "dataset").get("data_mode") or ""), 0, mapping_section(det, "attack"))]
        streams += [("benign", str(b.get("source")), "", "", int(b.get("stream", 0)), b) for b in det.get("benign", [])]
        for kind, label, mode, dm, index, s in streams:
            for b, score in (s.get("score_at") or {}).items():
                rows.append({**base, "stream": kind, "label": label, "output_mode": mode, "data_mode": dm,
                             "index": index, "checkpoint_B": int(b), "score": as_float(score),
                             "flagged_at": s.get("flagged_at")})
    frame = pd.DataFrame(rows, columns=list(DETECTION_COLUMNS))
    benign = frame["stream"] == "benign"
    keys = ["dataset", "victim_id", "defense", "delta", "seed", "label", "index", "checkpoint_B"]
    return pd.concat([frame[~benign], frame[benign].drop_duplicates(subset=keys)], ignore_index=True)


FPRS = (0.01, 0.001)
GROUP = ["dataset", "victim_id", "defense", "delta", "checkpoint_B"]


def _flagged(f: pd.DataFrame) -> pd.Series:
    at = pd.to_numeric(f["flagged_at"], errors="coerce")
    return at.notna() & (at <= f["checkpoint_B"])


def detection_table(det: pd.DataFrame) -> pd.DataFrame:
    """One row per detector, victim, checkpoint and attack (see the module docstring)."""
    if det.empty:
        return pd.DataFrame()
    rows = []
    for key, g in det.groupby(GROUP, sort=True, dropna=False):
        benign = g[g["stream"] == "benign"]
        neg = benign["score"].fillna(-math.inf).to_numpy()
        for (label, mode, dm), a in g[g["stream"] == "attack"].groupby(["label", "output_mode", "data_mode"], sort=True):
            pos = a["score"].fillna(-math.inf).to_numpy()
            hit = _flagged(a)
            row = {**dict(zip(GROUP, key)), "attack": label, "output_mode": mode, "data_mode": dm,
                   "n_attack_streams": len(a), "n_benign_streams": len(benign),
                   "flagged": float(hit.mean()), "benign_flagged": float(_flagged(benign).mean()) if len(benign) else None,
                   "queries_to_detect": float(pd.to_numeric(a.loc[hit, "flagged_at"]).mean()) if hit.any() else None}
            for fpr in FPRS:
                r = tpr_at_fpr(pos, neg, fpr)
                row[f"tpr_at_{fpr:g}"] = r["tpr"]
                row[f"fpr_resolved_{fpr:g}"] = r["resolved"]
            rows.append(row)
    return pd.DataFrame(rows)


def _rate(v: float | None, resolved: bool = True) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.2f}" + ("" if resolved else "*")


def detection_blocks(table_: pd.DataFrame) -> list[Block]:
    blocks = [Block("h1", "mebench detection"), Block("p", (
        "Detector defenses against each attack's query stream. flagged: share of the attack's streams "
        "(one per seed) flagged within B queries at the detector's threshold (mean query of detection in "
        "brackets); benign: share of benign streams flagged at that threshold; TPR@1% / TPR@0.1%: share "
        "of attack streams above the strictest threshold that flags at most 1% / 0.1% of the benign "
        "streams. * marks a rate whose FPR the benign streams cannot resolve (fewer than 1/FPR of them: "
        "no false positive allowed)."))]
    keys = ["dataset", "victim_id", "defense", "delta"]
    for (dataset, victim, defense, delta), t in table_.groupby(keys, sort=True, dropna=False):
        rows = []
        for _, r in t.sort_values(["attack", "output_mode", "checkpoint_B"]).iterrows():
            q = "" if r["queries_to_detect"] is None or pd.isna(r["queries_to_detect"]) else f" ({r['queries_to_detect']:,.0f})"
            rows.append([f"{r['attack']} ({r['data_mode']}, {r['output_mode']})", budget_label(int(r["checkpoint_B"])),
                         f"{_rate(r['flagged'])}{q}", _rate(r["benign_flagged"]),
                         _rate(r["tpr_at_0.01"], bool(r["fpr_resolved_0.01"])),
                         _rate(r["tpr_at_0.001"], bool(r["fpr_resolved_0.001"])),
                         f"{int(r['n_attack_streams'])} / {int(r['n_benign_streams'])}"])
        named = "" if delta is None or math.isnan(delta) else f" (delta {delta:g})"  # a detector without delta
        blocks += [Block("h2", f"{dataset} · {victim} · {defense}{named}"),
                   table(["attack", "B", "flagged", "benign", "TPR@1%", "TPR@0.1%", "streams (attack / benign)"], rows)]
    return blocks
