"""PRADA's evasion beside the plain attacker, and where the false positives come from
(docs/defenses/detection_benchmark.md; issue 38). ``tables`` gives ``mebench docs`` its tables:

- ``evasion.md``: per victim, detector and attack, TPR at FPR ≤ 1 % and ≤ 0.1 % of the plain
  attacker and of the evasion attacker (natural images interleaved, charged), and the difference
  evasion − plain with a 95 % bootstrap interval: seeds resampled jointly (a seed's plain and evasion
  streams stay paired), benign clients resampled apart, the threshold set again on each resample;
- ``benign_users.md``: per victim and detector, the share of each kind of benign client (``in``,
  ``ood``, ``mixed``) above the threshold that flags at most 1 % of all of them, and flagged at the
  detector's own threshold;
- ``prada_speed.md``: PRADA's batched scoring against the query-by-query implementation on the same
  benign clients (``prada_speed.py``): seconds per client in alternating rounds, and whether every
  client's record is identical.

    python studies/detect/summarize.py      # prints the tables
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[2] / "results" / "detect"  # the set's records (this script lives in studies/)
FPRS = (0.01, 0.001)


def _score(s: dict) -> float:
    return -math.inf if s["score"] is None else float(s["score"])


def _threshold(neg: np.ndarray, fpr: float) -> float:
    """The strictest threshold flagging at most ``fpr`` of ``neg`` (mebench.detection.rates.tpr_at_fpr)."""
    neg = np.sort(neg)[::-1]
    allowed = int(math.floor(fpr * neg.size + 1e-12))
    return -math.inf if allowed >= neg.size else float(neg[allowed])


def evasion_rows(rec: dict[str, Any], n_boot: int = 2000) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for det, d in rec["detectors"].items():
        neg = np.array([_score(b) for b in d["benign"]])
        by: dict[tuple, dict[int, float]] = {}
        for a in d["attack"]:
            by.setdefault((a["attack"], bool(a.get("evasion_share"))), {})[a["seed"]] = _score(a)
        for attack in sorted({k[0] for k in by}):
            plain, evade = by.get((attack, False), {}), by.get((attack, True), {})
            seeds = sorted(set(plain) & set(evade))
            if not seeds:
                continue
            p, e = np.array([plain[s] for s in seeds]), np.array([evade[s] for s in seeds])
            row: dict[str, Any] = {"dataset": rec["dataset"], "detector": det, "attack": attack, "n": len(seeds),
                                   "share": max(a.get("evasion_share") or 0.0 for a in d["attack"])}
            for fpr in FPRS:
                t = _threshold(neg, fpr)
                diffs = np.empty(n_boot)
                for i in range(n_boot):
                    ti = _threshold(neg[rng.integers(0, neg.size, neg.size)], fpr)
                    pick = rng.integers(0, len(seeds), len(seeds))
                    diffs[i] = (e[pick] > ti).mean() - (p[pick] > ti).mean()
                row[f"{fpr:g}"] = {"plain": float((p > t).mean()), "evasion": float((e > t).mean()),
                                   "diff": float((e > t).mean() - (p > t).mean()),
                                   "ci95": [float(v) for v in np.percentile(diffs, [2.5, 97.5])],
                                   "resolved": neg.size * fpr >= 1.0}
            rows.append(row)
    return rows


def user_rows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for det, d in rec["detectors"].items():
        neg = np.array([_score(b) for b in d["benign"]])
        t = _threshold(neg, 0.01)
        for user in ("in", "ood", "mixed"):
            mine = [b for b in d["benign"] if b["user"] == user]
            if mine:
                rows.append({"dataset": rec["dataset"], "detector": det, "user": user, "n": len(mine),
                             "above_1pct": float(np.mean([_score(b) > t for b in mine])),
                             "flagged": float(np.mean([b["flagged_at"] is not None for b in mine]))})
    return rows


def evasion_table(rows: list[dict[str, Any]]) -> str:
    head = ["victim", "detector", "attack", "seeds"] + [f"TPR@{f:.1%}".replace(".0%", "%") + ": plain → evasion (diff [95% CI])"
                                                        for f in FPRS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = []
        for f in FPRS:
            c = r[f"{f:g}"]
            star = "" if c["resolved"] else "*"
            cells.append(f"{c['plain']:.2f}{star} → {c['evasion']:.2f}{star} ({c['diff']:+.2f} "
                         f"[{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}])")
        lines.append(f"| {r['dataset']} | {r['detector']} | {r['attack']} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def user_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| victim | detector | benign user | clients | above the 1% threshold | flagged (own threshold) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['detector']} | {r['user']} | {r['n']:,} | {r['above_1pct']:.3f} | "
                     f"{r['flagged']:.3f} |")
    return "\n".join(lines) + "\n"


def speed_table(rec: dict[str, Any] | None) -> str:
    """PRADA's batched scoring against the query-by-query implementation (``prada_speed.py``)."""
    if rec is None:
        return "No `prada_speed.json` record.\n"
    sec, n = rec["seconds"], rec["streams"]
    per = {k: ", ".join(f"{v / n:.3f}" for v in sec[k]) for k in ("before", "after")}
    lines = ["| victim | benign clients (queries) | s per client, query by query | s per client, batched | speedup "
             "| identical records | load average (1 min) | torch threads |", "|---|---|---|---|---|---|---|---|",
             f"| {rec['dataset']} | {n:,} ({rec['queries']:,}) | {per['before']} | {per['after']} | "
             f"{sum(sec['before']) / sum(sec['after']):.2f}x | {'yes' if rec['identical_records'] else 'NO'} | "
             f"{', '.join(f'{v:.1f}' for v in sec['load_avg_1min'])} | {rec['torch_threads']} |"]
    return "\n".join(lines) + "\n"


def records(set_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(set_dir.glob("*/detection_bench.json"))]


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's tables for ``mebench docs`` (``<!-- mebench:begin detect/<name> -->`` blocks)."""
    recs = records(set_dir)
    speed = set_dir / "prada_speed.json"
    return {"evasion.md": evasion_table([r for rec in recs for r in evasion_rows(rec)]),
            "benign_users.md": user_table([r for rec in recs for r in user_rows(rec)]),
            "prada_speed.md": speed_table(json.loads(speed.read_text(encoding="utf-8")) if speed.is_file() else None)}


if __name__ == "__main__":
    for name, text in tables(HERE).items():
        print(f"## {name}\n\n{text}")
