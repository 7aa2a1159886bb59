"""The detection benchmark's report: TPR at a low FPR with bootstrap intervals, and ROC curves.

Reads every ``detection_bench.json`` (:data:`mebench.detection.bench.BENCH_FILE`) under the report's
paths, one per victim, and writes ``detection_bench.md|csv`` (one row per victim, detector and
attack, PRADA's evasion as its own rows) and ``roc_<dataset>.png|svg`` (one panel per detector, one
curve per attack, FPR on a log axis with 1 % and 0.1 % marked). Each rate is over all the attack's
streams (one per seed) against all benign clients; its 95 % interval is a percentile bootstrap
that resamples both and sets the threshold again each time (``mebench.detection.rates``).
See docs/defenses/detection_benchmark.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from mebench.detection.rates import BENCH_FILE, FPRS, score_streams
from mebench.report.document import Block, table


def find_benches(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every benchmark record under ``paths`` (a file itself, or found below a folder), sorted by dataset."""
    found: list[Path] = []
    for p in map(Path, paths):
        found += [p] if p.name == BENCH_FILE else sorted(p.rglob(BENCH_FILE)) if p.is_dir() else []
    recs = [json.loads(f.read_text(encoding="utf-8")) for f in dict.fromkeys(found)]
    return sorted(recs, key=lambda r: r["dataset"])


def attack_label(a: dict[str, Any]) -> str:
    share = a.get("evasion_share") or 0.0
    return a["attack"] + (f" + evasion {share:.0%} natural" if share else "")


def bench_rows(rec: dict[str, Any], n_boot: int = 2000) -> list[dict[str, Any]]:
    """One row per detector and attack (label), with the rates of :func:`mebench.detection.rates.score_streams`."""
    rows = []
    for det, d in rec["detectors"].items():
        groups: dict[str, list[dict]] = {}
        for a in d["attack"]:
            groups.setdefault(attack_label(a), []).append(a)
        for label, streams in groups.items():
            s = score_streams(d["benign"], streams, rec["budget"], n_boot)
            row = {"dataset": rec["dataset"], "detector": det, "attack": label, "budget": rec["budget"],
                   "n_attack": s["n_attack"], "n_benign": s["n_benign"], "flagged": s["flagged"],
                   "benign_flagged": s["benign_flagged"], "wall_s_per_1k_queries": d["wall_s"]["per_1k_queries"]}
            for fpr in FPRS:
                r = s[f"{fpr:g}"]
                row.update({f"tpr@{fpr:g}": r["tpr"], f"tpr@{fpr:g}_ci95": r["tpr_ci95"],
                            f"fpr@{fpr:g}": r["fpr"], f"resolved@{fpr:g}": r["resolved"],
                            f"median_queries@{fpr:g}": r["median_queries"]})
            rows.append(row)
    return rows


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _ci(v: float | None, ci: list[float] | None, resolved: bool = True) -> str:
    if _missing(v):
        return "–"
    star = "" if resolved else "*"
    return f"{v:.2f}{star} [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) else f"{v:.2f}{star}"


def _q(v: float | None) -> str:
    return "–" if _missing(v) else f"{v:,.0f}"


def bench_blocks(recs: list[dict[str, Any]], rows: pd.DataFrame, figures: dict[str, str]) -> list[Block]:
    blocks = [Block("h1", "mebench detection benchmark"), Block("p", (
        "Detectors on thousands of benign clients and on attack streams. TPR@1% / TPR@0.1%: share of an "
        "attack's streams (one per seed) scoring above the strictest threshold that flags at most 1% / 0.1% "
        "of the benign clients, with a 95% bootstrap interval (attack and benign streams resampled, the "
        "threshold set again each time; * marks a rate the benign clients cannot resolve, fewer than 1/FPR of "
        "them); queries: median query at which the detected streams crossed that threshold; flagged / benign: "
        "shares flagged at the detector's own threshold."))]
    for rec in recs:
        r = rows[rows["dataset"] == rec["dataset"]]
        users = pd.Series([b["user"] for b in next(iter(rec["detectors"].values()))["benign"]]).value_counts()
        blocks += [Block("h2", f"{rec['dataset']} · {rec['victim'].get('victim_id')} · B = {rec['budget']:,}"),
                   Block("p", f"Benign clients: {int(users.sum()):,} ("
                              + ", ".join(f"{n:,} {u}" for u, n in users.items()) + "), lengths "
                              f"{rec['traffic']['min_length']}–{rec['traffic']['max_length']}, from the test splits of "
                              + ", ".join(n for n, _ in rec["sources"]) + ".")]
        body = [[x["detector"], x["attack"], f"{x['n_attack']} / {x['n_benign']:,}",
                 _ci(x["tpr@0.01"], x["tpr@0.01_ci95"], bool(x["resolved@0.01"])), _q(x["median_queries@0.01"]),
                 _ci(x["tpr@0.001"], x["tpr@0.001_ci95"], bool(x["resolved@0.001"])), _q(x["median_queries@0.001"]),
                 f"{x['flagged']:.2f}", f"{x['benign_flagged']:.3f}"] for _, x in r.iterrows()]
        blocks.append(table(["detector", "attack", "streams (attack / benign)", "TPR@1% [95% CI]", "queries",
                             "TPR@0.1% [95% CI]", "queries", "flagged", "benign"], body))
        wall = [[det, f"{d['wall_s']['fit']:.1f}", f"{d['wall_s']['benign']:.1f}", f"{d['wall_s']['attack']:.1f}",
                 f"{d['wall_s']['per_1k_queries'] * 1000:.1f}"] for det, d in rec["detectors"].items()]
        blocks += [Block("p", f"Detection cost (wall time, {rec.get('torch_threads', '?')} torch thread(s); "
                              "no substitute is trained):"),
                   table(["detector", "fit (s)", "benign clients (s)", "attack streams (s)", "ms per 1k queries"], wall)]
        if rec["dataset"] in figures:
            blocks.append(Block("p", f"ROC curves: `{figures[rec['dataset']]}` (and `.svg`) beside this report."))
    return blocks


def write_roc(rec: dict[str, Any], out: Path) -> dict[str, Path]:
    """PNG + SVG: one panel per detector, one ROC curve per attack (log FPR axis)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from mebench.detection.rates import roc_points

    dets = list(rec["detectors"])
    fig, axes = plt.subplots(1, len(dets), figsize=(5 * len(dets), 4.2), squeeze=False)
    floor = min(5e-4, 0.5 / max(1, len(next(iter(rec["detectors"].values()))["benign"])))
    for ax, det in zip(axes[0], dets):
        d = rec["detectors"][det]
        neg = [-np.inf if b["score"] is None else b["score"] for b in d["benign"]]
        groups: dict[str, list[float]] = {}
        for a in d["attack"]:
            groups.setdefault(attack_label(a), []).append(-np.inf if a["score"] is None else a["score"])
        for label, pos in groups.items():
            fpr, tpr = roc_points(pos, neg)
            ax.step(np.maximum(fpr, floor), tpr, where="post", label=f"{label} ({len(pos)})")
        for f in FPRS:
            ax.axvline(f, color="grey", lw=0.8, ls=":")
        ax.set(xscale="log", xlim=(floor, 1.0), ylim=(-0.02, 1.02), xlabel="false-positive rate (benign clients)",
               ylabel="true-positive rate (attack streams)", title=f"{det} · {len(neg):,} benign")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{rec['dataset']} · {rec['victim'].get('victim_id')} · B = {rec['budget']:,}", fontsize=10)
    fig.tight_layout()
    stem = out / f"roc_{rec['dataset'].lower()}"
    paths = {"png": stem.with_suffix(".png"), "svg": stem.with_suffix(".svg")}
    fig.savefig(paths["png"], dpi=120)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(paths["svg"])
    plt.close(fig)
    return paths


def write_detection_bench(paths: Sequence[Path], out: Path) -> dict[str, Path]:
    """The benchmark's pages, table and ROC figures for the records under ``paths`` (none: nothing)."""
    from mebench.report.files import write_pages, write_table

    recs = find_benches(paths)
    if not recs:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    figures = {}
    for rec in recs:
        for ext, p in write_roc(rec, out).items():
            files[f"roc_{rec['dataset'].lower()}_{ext}"] = p
        figures[rec["dataset"]] = files[f"roc_{rec['dataset'].lower()}_png"].name
    rows = pd.DataFrame([r for rec in recs for r in bench_rows(rec)])
    write_table(rows, out, "detection_bench", files)
    write_pages(bench_blocks(recs, rows, figures), out, "detection_bench", "mebench detection benchmark",
                 files, html=False)
    return files
