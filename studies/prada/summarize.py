"""PRADA before -> after, paired, from the committed records (docs/defenses/prada.md; issue 42).

Reads the seed-level ``summary.json`` of every cell folder under ``results/prada/cells/``
(labels ``prada``: the reference rule, ``prada_legacy``: mebench's older rule) and
``deviations.json``; writes ``before_after.json`` next to this file, and gives ``mebench docs`` its
tables (``tables``: the paired before -> after and each older option's effect), so no table is typed.

For each dataset and attack: the share of the attack's streams flagged (``flag_at_B``: the flag
the rule holds at B; ``flagged_within_B``: flagged at some query up to B, the report's
``flagged``), and the mean minimum W; for the benign streams the same shares (false positives).
Each is paired (same seed, same stream: PRADA changes no answer, so both rules watch the same
queries). A flag is 0 or 1 per stream, so the flagged shares get the exact McNemar test on the
streams only one rule flags; the mean minimum W gets the report's interval of the paired difference
(paired Student t for the 3 attack streams of a cell, percentile bootstrap for the 24 benign ones).

    python studies/prada/summarize.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from mebench.report import stats
from mebench.run.artifacts import atomic_write_text

HERE = Path(__file__).resolve().parents[2] / "results" / "prada"  # the set's records (this script lives in studies/)
RULES = {"prada": "after", "prada_legacy": "before"}


def _stream(rec: dict, b: int) -> dict[str, float]:
    at = rec.get("flagged_at")
    return {"flag_at_B": float(bool((rec.get("flag_at") or {}).get(str(b)))),
            "flagged_within_B": float(at is not None and at <= b), "min_w": rec.get("min_w")}


def load_cells(root: Path) -> dict[tuple, dict[str, float]]:
    """(dataset, kind, label, seed, source, stream, rule) -> the stream's values."""
    out: dict[tuple, dict[str, float]] = {}
    for f in sorted(root.glob("*/summary.json")):
        s = json.loads(f.read_text())
        det, ds = s["defense"]["detection"], s["dataset"]["name"]
        rule, seed = RULES[s["defense"].get("label") or "prada"], int(s["seed"])
        b = int(s["config"]["budget"]["max_budget"])
        attack = s["attack"].get("label") or s["attack"]["name"]
        out[(ds, "attack", attack, seed, "", 0, rule)] = _stream(det["attack"], b)
        for bs in det["benign"]:
            out[(ds, "benign", "benign", seed, bs["source"], bs["stream"], rule)] = _stream(bs, b)
    return out


def paired(before: list[float], after: list[float]) -> dict[str, Any]:
    """Means before and after, and the mean paired difference with the report's 95 % interval
    (``mebench.report.stats.paired_ci``: paired Student t below 5 pairs, percentile bootstrap from 5)."""
    ci = stats.paired_ci(before, after)
    return {"n": ci.n, "before": float(np.mean(before)), "after": float(np.mean(after)), "diff": ci.mean_diff,
            "ci95": [ci.ci_lower, ci.ci_upper], "ci_method": ci.method}


def paired_flags(before: list[float], after: list[float]) -> dict[str, Any]:
    """Shares flagged before and after (0/1 per stream, same streams) and the exact McNemar test: under
    "the rules flag alike" each stream flagged by one rule only is equally likely either way, so the
    count flagged only before is Binomial(discordant, 1/2) (``scipy.stats.binomtest``, two-sided; p = 1
    without a discordant stream). An interval of a 0/1 mean over 3 or 24 streams would claim more."""
    b, a = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    only_before, only_after = int((b & ~a).sum()), int((a & ~b).sum())
    p = binomtest(only_before, only_before + only_after, 0.5).pvalue if only_before + only_after else 1.0
    return {"n": int(b.size), "before": float(b.mean()), "after": float(a.mean()), "diff": float(a.mean() - b.mean()),
            "flagged_before": int(b.sum()), "flagged_after": int(a.sum()), "only_before": only_before,
            "only_after": only_after, "mcnemar_exact_p": float(p)}


def before_after(cells: dict[tuple, dict[str, float]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[tuple]] = {}
    for key in cells:
        if key[-1] == "after" and key[:-1] + ("before",) in cells:
            groups.setdefault(key[:3], []).append(key[:-1])
    rows = []
    for (ds, kind, label), keys in sorted(groups.items()):
        row: dict[str, Any] = {"dataset": ds, "stream": kind, "label": label}
        for m in ("flag_at_B", "flagged_within_B", "min_w"):
            pairs = [(cells[k + ("before",)][m], cells[k + ("after",)][m]) for k in keys]
            pairs = [p for p in pairs if None not in p]
            test = paired if m == "min_w" else paired_flags
            row[m] = test([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else None
        rows.append(row)
    return rows


def deviation_effects(dev: dict[str, Any]) -> list[dict[str, Any]]:
    """Per dataset, stream kind and variant: flagged share at B and mean min W, and their change
    against the reference rule (same streams)."""
    rows = []
    for ds, rec in dev["datasets"].items():
        kinds = {f"attack:{a}": [s for s in rec["attack"] if s["attack"] == a]
                 for a in sorted({s["attack"] for s in rec["attack"]})}
        kinds["benign"] = rec["benign"]
        for kind, streams in kinds.items():
            ref_f = np.mean([bool(s["reference"]["flag_at_B"]) for s in streams])
            ref_w = np.mean([s["reference"]["min_w"] for s in streams])
            for v in dev["variants"]:
                f = float(np.mean([bool(s[v]["flag_at_B"]) for s in streams]))
                w = float(np.mean([s[v]["min_w"] for s in streams]))
                rows.append({"dataset": ds, "streams": kind, "n": len(streams), "variant": v, "flag_at_B": f,
                             "flag_change": f - float(ref_f), "mean_min_w": w, "min_w_change": w - float(ref_w),
                             "max_abs_min_w_change": float(max(abs(s[v]["min_w"] - s["reference"]["min_w"])
                                                               for s in streams))})
    return rows


COLUMNS = [("MNIST", "benign"), ("MNIST", "attack:random"), ("MNIST", "attack:activethief_kcenter_fast"),
           ("FashionMNIST", "benign"), ("FashionMNIST", "attack:random"),
           ("FashionMNIST", "attack:activethief_kcenter_fast"), ("MNIST", "attack:dfme"), ("FashionMNIST", "attack:dfme")]


def deviations_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per variant, the change of the mean minimum W against the reference rule (largest
    single-stream change in brackets) and any change of the flagged share at B."""
    at = {(r["dataset"], r["streams"], r["variant"]): r for r in rows}
    head = ["variant"] + [f"{ds} {k.removeprefix('attack:')}" for ds, k in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in dict.fromkeys(r["variant"] for r in rows):
        if v == "reference":
            continue
        cells = []
        for ds, k in COLUMNS:
            r = at.get((ds, k, v))
            cell = "–" if r is None else f"{r['min_w_change']:+.3f} ({r['max_abs_min_w_change']:.3f})"
            if r is not None and r["flag_change"]:
                cell += f"; flagged {r['flag_change']:+.3f}"
            cells.append(cell)
        lines.append("| " + " | ".join([f"`{v}`", *cells]) + " |")
    return "\n".join(lines) + "\n"


def before_after_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per victim dataset and stream, the streams flagged before -> after with the exact McNemar
    p, and the mean minimum W before -> after with the paired difference and its interval."""
    lines = ["| dataset | streams | n | flagged at B: before -> after (exact McNemar p) | min W: before -> after (diff [95% CI]) |",
             "|---|---|---|---|---|"]
    def flags(p: dict[str, Any] | None) -> str:
        if p is None:
            return "-"
        return f"{p['flagged_before']}/{p['n']} -> {p['flagged_after']}/{p['n']} (p {p['mcnemar_exact_p']:.3f})"
    def cell(p: dict[str, Any] | None) -> str:
        if p is None:
            return "-"
        return (f"{p['before']:.3f} -> {p['after']:.3f} ({p['diff']:+.3f} "
                f"[{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}])")
    for r in rows:
        n = (r["min_w"] or r["flag_at_B"] or {}).get("n", 0)
        lines.append(f"| {r['dataset']} | {r['label']} | {n} | {flags(r['flag_at_B'])} | {cell(r['min_w'])} |")
    return "\n".join(lines) + "\n"


def summarize(set_dir: Path = HERE) -> dict[str, Any]:
    """The paired before -> after rows and each older option's effect, from the committed records."""
    out: dict[str, Any] = {"before_after": before_after(load_cells(set_dir / "cells"))}
    dev = set_dir / "deviations.json"
    if dev.is_file():
        out["deviations"] = deviation_effects(json.loads(dev.read_text()))
    return out


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's tables for ``mebench docs`` (``<!-- mebench:begin prada/<name> -->`` blocks)."""
    out = summarize(set_dir)
    found = {"before_after.md": before_after_table(out["before_after"])}
    if "deviations" in out:
        found["deviations.md"] = deviations_table(out["deviations"])
    return found


def main() -> None:
    out = summarize(HERE)
    atomic_write_text(HERE / "before_after.json", json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
