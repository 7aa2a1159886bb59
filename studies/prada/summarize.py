"""PRADA before -> after, paired, from the committed records (docs/defenses/prada.md; issue 42).

Reads the seed-level ``summary.json`` of every cell folder under ``results/prada/cells/``
(labels ``prada``: the reference rule, ``prada_legacy``: mebench's older rule) and
``deviations.json``; writes ``before_after.json`` next to this file, and gives ``mebench docs`` its
tables (``tables``: the paired before -> after and each older option's effect), so no table is typed.

For each dataset and attack: the share of the attack's streams flagged (``flag_at_B``: the flag
the rule holds at B; ``flagged_within_B``: flagged at some query up to B, the report's
``flagged``), and the mean minimum W; for the benign streams the same shares (false positives).
Each is paired (same seed, same stream: PRADA changes no answer, so both rules watch the same
queries) and the difference after - before has a 95 % bootstrap interval (2,000 resamples of the
pairs; with 3 attack streams per cell it is descriptive).

    python studies/prada/summarize.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

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


def paired(before: list[float], after: list[float], rng: np.random.Generator, n_boot: int = 2000) -> dict[str, Any]:
    """Means before and after, and the mean paired difference with a 95 % bootstrap interval."""
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    d = a - b
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    return {"n": int(d.size), "before": float(b.mean()), "after": float(a.mean()), "diff": float(d.mean()),
            "ci95": [float(lo), float(hi)]}


def before_after(cells: dict[tuple, dict[str, float]]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(42)
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
            row[m] = paired([p[0] for p in pairs], [p[1] for p in pairs], rng) if pairs else None
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
    """Markdown: per victim dataset and stream, each value before -> after with the paired difference and CI."""
    lines = ["| dataset | streams | n | flagged at B: before -> after (diff [95% CI]) | min W: before -> after (diff [95% CI]) |",
             "|---|---|---|---|---|"]
    def cell(p: dict[str, Any] | None) -> str:
        if p is None:
            return "-"
        return (f"{p['before']:.3f} -> {p['after']:.3f} ({p['diff']:+.3f} "
                f"[{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}])")
    for r in rows:
        n = (r["min_w"] or r["flag_at_B"] or {}).get("n", 0)
        lines.append(f"| {r['dataset']} | {r['label']} | {n} | {cell(r['flag_at_B'])} | {cell(r['min_w'])} |")
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
