"""Ownership verification in the report: for each method, attack and checkpoint, the share of clones
the owner catches at a false-positive rate of at most 1 % and 0.1 % of its negative models.

Reads ``summary.json`` ``verification`` (the ``verification`` probe: every checkpoint substitute's
score, and the owner's negatives' scores under the same key). Positives are one condition's clones
(one per seed, Track A and Track B apart); each is judged against the negatives of its own run
(``mebench.detection.rates.keyed_tpr_at_fpr``: for a key the owner fixed, every run holds the same
negatives and this is the plain bootstrap; DAWN's key is what each run's defense served). Writes
``verification.csv``, ``verification_roc.csv`` and ``verification.md``. See docs/results/verification.md.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import pandas as pd

from mebench.detection.rates import keyed_tpr_at_fpr, roc_points
from mebench.report.document import Block, budget_label, table
from mebench.report.load import UNKNOWN, RunRecord, as_float, mapping_section
from mebench.training import health

FPRS = (0.01, 0.001)
COND = ["dataset", "victim_id", "method", "defense", "attack", "data_mode", "output_mode", "arch",
        "checkpoint_B", "track"]


def verification_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per seed-run, checkpoint substitute and method: its score, the suspect queries, the
    negatives' scores it is judged against (a tuple), and whether the substitute collapsed (the run's
    training-health check: it answers one class for most of the test split)."""
    rows = []
    for rec in records:
        summary = rec.summary or {}
        ver = mapping_section(summary, "verification")
        if not ver or not rec.ok or not isinstance(ver.get("scores"), list):
            continue
        attack, dataset = mapping_section(summary, "attack"), mapping_section(summary, "dataset")
        defense = mapping_section(summary, "defense")
        sub = mapping_section(mapping_section(summary, "config"), "substitute")
        negs = mapping_section(mapping_section(ver, "negatives"), "scores")
        collapsed = {(str(h.get("track")), int(h.get("checkpoint_B", 0))) for h in summary.get("training_health") or []
                     if isinstance(h, dict) and health.collapsed(h.get("pred_top_share"), h.get("victim_top_share"))}
        base = {"dataset": str(dataset.get("name") or UNKNOWN),
                "victim_id": str(mapping_section(summary, "victim").get("victim_id") or UNKNOWN),
                "defense": str(defense.get("label") or defense.get("name") or "none"),
                "attack": str(attack.get("label") or attack.get("name") or UNKNOWN),
                "data_mode": str(dataset.get("data_mode") or UNKNOWN),
                "output_mode": str(attack.get("output_mode") or UNKNOWN),
                "arch": str(sub.get("arch") or UNKNOWN), "seed": int(summary.get("seed", 0)),
                "negatives_count": int(mapping_section(ver, "negatives").get("count") or 0)}
        for s in ver["scores"]:
            method, b = str(s.get("method")), int(s.get("checkpoint_B", 0))
            per = mapping_section(negs, method)
            neg = per.get("*") if "*" in per else per.get(str(b))
            rows.append({**base, "method": method, "checkpoint_B": b, "track": str(s.get("track")),
                         "score": _score(s.get("score")), "queries": as_float(s.get("queries")),
                         "negatives": tuple(_score(v) for v in (neg or ())),
                         "collapsed": (str(s.get("track")), b) in collapsed})
    return pd.DataFrame(rows, columns=COND + ["seed", "score", "queries", "negatives", "negatives_count", "collapsed"])


def _score(v: Any) -> float:
    """A recorded score; ``None`` (no evidence) reads as ``-inf``: never caught."""
    return -math.inf if v is None else float(v)


def verification_table(frame: pd.DataFrame, n_boot: int = 2000) -> pd.DataFrame:
    """One row per condition (``COND``): clones, TPR at each FPR with its 95 % interval and whether the
    negatives resolve it, the negatives behind it, the suspect queries per clone and how many of the
    clones collapsed to one class."""
    if frame.empty:
        return pd.DataFrame()
    rows = []
    for key, g in frame.groupby(COND, sort=True, dropna=False):
        sets: list[tuple] = []
        keys = []
        for neg in g["negatives"]:
            if neg not in sets:
                sets.append(neg)
            keys.append(sets.index(neg))
        row = {**dict(zip(COND, key)), "clones": len(g), "seeds": ",".join(str(s) for s in sorted(g["seed"])),
               "score_mean": float(pd.Series(g["score"]).replace(-math.inf, float("nan")).mean()),
               "negatives": min(len(s) for s in sets), "queries": float(g["queries"].mean()),
               "collapsed": int(g["collapsed"].sum())}
        for fpr in FPRS:
            r = keyed_tpr_at_fpr(g["score"].tolist(), keys, [list(s) for s in sets], fpr, n_boot=n_boot)
            row[f"tpr_at_{fpr:g}"] = r["tpr"]
            lo, hi = r["tpr_ci95"] or (None, None)
            row[f"tpr_lo_{fpr:g}"], row[f"tpr_hi_{fpr:g}"] = lo, hi
            row[f"resolved_{fpr:g}"] = r["resolved"]
        rows.append(row)
    return pd.DataFrame(rows)


def roc_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The ROC of each method, dataset, checkpoint and track over every clone of the set (all attacks)
    against the negatives (for a per-run key, all runs' negatives pooled): one row per point."""
    rows = []
    keys = ["dataset", "victim_id", "method", "defense", "checkpoint_B", "track"]
    for key, g in frame.groupby(keys, sort=True, dropna=False):
        negatives = [v for neg in dict.fromkeys(g["negatives"]) for v in neg]
        fpr, tpr = roc_points(g["score"].tolist(), negatives)
        rows += [{**dict(zip(keys, key)), "fpr": float(f), "tpr": float(t)} for f, t in zip(fpr, tpr)]
    return pd.DataFrame(rows)


def _rate(r: pd.Series, fpr: float) -> str:
    v = r[f"tpr_at_{fpr:g}"]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    lo, hi = r[f"tpr_lo_{fpr:g}"], r[f"tpr_hi_{fpr:g}"]
    text = f"{v:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and not pd.isna(lo) else f"{v:.2f}"
    return text if bool(r[f"resolved_{fpr:g}"]) else f"{text}*"


def _queries(q: float) -> str:
    return "–" if q is None or math.isnan(q) else f"{q:,.0f}"


def caught_by_none(table_: pd.DataFrame) -> list[str]:
    """One line per dataset, track and checkpoint: the attacks whose clones no method caught at FPR 1 %."""
    lines = []
    if table_.empty:
        return lines
    for (dataset, track, b), t in table_.groupby(["dataset", "track", "checkpoint_B"], sort=True):
        per = t.groupby(["attack", "data_mode", "output_mode", "defense", "arch"])["tpr_at_0.01"].max()
        evade = [_name(a, dm, m, d, arch, t["arch"].mode()[0]) for (a, dm, m, d, arch), v in per.items() if not v]
        lines.append(f"{dataset}, Track {track}, {budget_label(int(b))}: "
                     + (", ".join(evade) if evade else "none: every attack's clones were caught by some method") + ".")
    return lines


def _name(attack: str, data_mode: str, mode: str, defense: str, arch: str, usual_arch: str) -> str:
    extra = ("" if defense == "none" else f", behind {defense}") + ("" if arch == usual_arch else f", {arch} substitute")
    return f"{attack} ({data_mode}, {mode}{extra})"


#: What the mark of a condition with collapsed substitutes (``_collapsed``) means.
COLLAPSED_NOTE = ("[k/n collapsed] marks a condition where k of its n clones collapsed (the run's training-health "
                  "check found each answering one class for most of the test split): there a method's decision is "
                  "its answer to a one-class model, not evidence about a working clone.")


def _collapsed(r: pd.Series) -> str:
    k = int(r.get("collapsed", 0) or 0)
    return f" [{k}/{int(r['clones'])} collapsed]" if k else ""


def overview_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One dataset's Track A at a glance: a row per attack condition and checkpoint, TPR at FPR 1 % per
    method (the clones caught, of those scored)."""
    t = t[t["track"] == "A"]
    methods = sorted(t["method"].unique())
    usual = t["arch"].mode()[0] if len(t) else ""
    rows = []
    keys = ["defense", "attack", "data_mode", "output_mode", "arch", "checkpoint_B"]
    for key, g in t.groupby(keys, sort=True):
        d, a, dm, m, arch, b = key
        by = g.set_index("method")
        cells = [f"{by.loc[x, 'tpr_at_0.01']:.2f} ({round(by.loc[x, 'tpr_at_0.01'] * by.loc[x, 'clones'])}/{int(by.loc[x, 'clones'])})"
                 if x in by.index else "–" for x in methods]
        rows.append([_name(a, dm, m, d, arch, usual) + _collapsed(g.iloc[0]), budget_label(int(b)), *cells])
    return ["attack", "B", *[f"{x} TPR@1%" for x in methods]], rows


def verification_blocks(table_: pd.DataFrame) -> list[Block]:
    blocks = [Block("h1", "mebench verification"), Block("p", (
        "Ownership verification on the clones of each attack. TPR@1% / TPR@0.1%: share of the clones "
        "(one per seed) whose score is above the strictest threshold that flags at most 1% / 0.1% of the "
        "owner's negative models (trained on ground truth only), with its 95% bootstrap interval (clones "
        "and negatives resampled). * marks a rate the negatives cannot resolve (fewer than 1/FPR of them: "
        "no false positive allowed). Queries: images the owner sends to one suspect. " + COLLAPSED_NOTE))]
    for (dataset, victim), t in table_.groupby(["dataset", "victim_id"], sort=True):
        headers, rows = overview_rows(t)
        blocks += [Block("h2", f"{dataset} · {victim} · Track A at FPR 1%"), table(headers, rows)]
    for (dataset, victim, method), t in table_.groupby(["dataset", "victim_id", "method"], sort=True):
        rows = []
        for _, r in t.sort_values(["track", "defense", "attack", "output_mode", "arch", "checkpoint_B"]).iterrows():
            extra = ("" if r["defense"] == "none" else f", behind {r['defense']}")
            rows.append([f"{r['attack']} ({r['data_mode']}, {r['output_mode']}{extra}){_collapsed(r)}", r["arch"], r["track"],
                         budget_label(int(r["checkpoint_B"])), _rate(r, 0.01), _rate(r, 0.001),
                         f"{int(r['clones'])} / {int(r['negatives'])}", _queries(r["queries"])])
        blocks += [Block("h2", f"{dataset} · {victim} · {method}"),
                   table(["attack", "substitute", "track", "B", "TPR@1%", "TPR@0.1%", "clones / negatives",
                          "queries"], rows)]
    blocks += [Block("h2", "Caught by no method at FPR 1%"), Block("p", " ".join(caught_by_none(table_)))]
    for (dataset, victim), t in table_.groupby(["dataset", "victim_id"], sort=True):
        blocks += [Block("h2", f"{dataset} · {victim} · who evades which method (Track A, FPR 1%)"),
                   Block("p", " ".join(evasion_lines(t)))]
    return blocks


def evasion_lines(t: pd.DataFrame, track: str = "A") -> list[str]:
    """One dataset's conditions sorted by how each method fares, one sentence per method and checkpoint:
    the attacks whose clones it catches every time, those it catches some of the time and those that
    evade it (no clone caught) at FPR 1 %; then one sentence on which rates the negatives resolve."""
    t = t[t["track"] == track]
    if t.empty:
        return []
    usual = t["arch"].mode()[0]
    lines = []
    for (method, b), g in t.groupby(["method", "checkpoint_B"], sort=True):
        groups: dict[str, list[str]] = {"all": [], "some": [], "none": []}
        for _, r in g.sort_values(["attack", "data_mode", "output_mode", "defense", "arch"]).iterrows():
            v = r["tpr_at_0.01"]
            name = _name(r["attack"], r["data_mode"], r["output_mode"], r["defense"], r["arch"], usual) + _collapsed(r)
            groups["none" if not v else "all" if v >= 1.0 else "some"].append(
                name if v in (0, 1) else f"{name} {round(v * r['clones'])}/{int(r['clones'])}")
        n = len(g)
        parts = []
        if groups["all"]:
            parts.append("catches every clone of " + ("every attack it scored" if len(groups["all"]) == n else ", ".join(groups["all"])))
        if groups["some"]:
            parts.append("some clones of " + ", ".join(groups["some"]))
        if groups["none"]:
            parts.append("is evaded by " + ("every attack it scored" if len(groups["none"]) == n else ", ".join(groups["none"])))
        lines.append(f"{method} at {budget_label(int(b))}: " + "; ".join(parts) + ".")
    if t["collapsed"].astype(int).any():
        lines.append(COLLAPSED_NOTE)
    negs = sorted({int(v) for v in t["negatives"]})
    for fpr in FPRS:
        flags = t[f"resolved_{fpr:g}"].astype(bool)
        need = math.ceil(1 / fpr)
        state = ("resolved in every cell" if flags.all() else "resolved in no cell" if not flags.any()
                 else f"resolved in {int(flags.sum())} of {len(flags)} cells")
        lines.append(f"FPR {fpr:.1%}".replace(".0%", "%") + f" is {state} ({'/'.join(map(str, negs))} negatives; "
                     f"{need:,} resolve it).")
    return lines
