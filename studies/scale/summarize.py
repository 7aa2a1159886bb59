"""Full-scale cells on one CPU: time, the estimate printed before they ran, and peak memory by B.

Reads every ``summary.json`` under this folder (one seed of a ``mebench run``) and the timing record
``timed.py`` wrote for it under ``results/cost/logs/<record>.json`` (``record`` is the run folder's
name, see ``RECORDS``); gives ``mebench docs`` two tables, so no number is typed:

- ``scale_cells.md``: per cell, its budgets, Track A steps, measured wall time, the estimate
  (``mebench.harness.cost``) printed before it started, and the machine's mean load while it ran;
- ``scale_memory.md``: the process's peak resident memory (``getrusage``) after Track A at each
  checkpoint, and the ratio of the largest budget's peak to the 100k one: within one 1M cell, and
  against a separate 100k cell of the same config (``*_100k`` folders) where one was run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2] / "results" / "scale"  # the set's records (this script lives in studies/)
#: run folder (the config's run name) -> the timing record under results/cost/logs/
RECORDS = {"mnist_lenet5_random_seed_1m": "random_seed_1m", "mnist_lenet5_dfme_1m": "dfme_1m",
           "mnist_lenet5_random_seed_100k": "random_seed_100k", "mnist_lenet5_dfme_100k": "dfme_100k"}


def idle_estimates(set_dir: Path = HERE) -> dict[str, Any]:
    """``idle_estimates.json``: the estimate of each record's command for an idle machine (load 0)."""
    f = set_dir / "idle_estimates.json"
    return json.loads(f.read_text())["estimates"] if f.is_file() else {}


def cells(set_dir: Path = HERE) -> list[dict[str, Any]]:
    """One entry per finished seed folder: its name, summary and timing record (``None`` if absent)."""
    out = []
    for f in sorted(set_dir.glob("*/*/seed_*/summary.json")):
        s = json.loads(f.read_text())
        if s.get("status") != "complete":
            continue
        name = f.parents[2].name
        log = set_dir.parent / "cost" / "logs" / f"{RECORDS.get(name, name)}.json"
        out.append({"name": name, "summary": s, "timed": json.loads(log.read_text()) if log.is_file() else None,
                    "idle": idle_estimates(set_dir).get(RECORDS.get(name, name))})
    return out


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min"


def cells_table(rows: list[dict[str, Any]]) -> str:
    out = ["| cell | attack | budgets | Track A steps | measured wall | estimate at the run's load | "
           "measured / estimate | estimate for an idle machine | mean load (CPUs) | Track A, attack time (summary.json) |",
           "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        s, t = r["summary"], r["timed"]
        steps = s.get("track_a_steps", {})
        budgets = ", ".join(f"{int(b):,}" for b in steps)
        wall = _minutes(t["wall_s"]) if t else "—"
        est = _minutes(t["estimate_s"]) if t else "—"
        ratio = f"{t['wall_s'] / t['estimate_s']:.2f}" if t and t["estimate_s"] else "—"
        load = f"{t['load_mean']} ({t['machine_cpus']})" if t else "—"
        idle = _minutes(r["idle"]["estimate_s"]) if r.get("idle") else "—"
        tim = s.get("timings_s", {})
        phases = f"{_minutes(tim.get('track_a', 0))}, {_minutes(tim.get('collect', 0))}"
        out.append(f"| {r['name']} | {s['attack']['name']} | {budgets} | {sum(steps.values()):,} | {wall} | {est} | "
                   f"{ratio} | {idle} | {load} | {phases} |")
    return "\n".join(out) + "\n"


def memory_table(rows: list[dict[str, Any]]) -> str:
    out = ["| cell | peak RSS after Track A at each B (MiB) | largest B / 100k, same cell | 1M cell / 100k cell |",
           "|---|---|---:|---:|"]
    by_name = {r["name"]: r["summary"] for r in rows}
    for r in rows:
        peak = {int(b): v for b, v in r["summary"].get("peak_rss_mib", {}).items()}
        if not peak:
            continue
        top = max(peak)
        listed = ", ".join(f"{b:,}: {v:,.0f}" for b, v in sorted(peak.items()))
        within = f"{peak[top] / peak[100_000]:.2f}" if 100_000 in peak and top > 100_000 else "—"
        other = by_name.get(r["name"].replace("_1m", "_100k")) if r["name"].endswith("_1m") else None
        other_peak = max((other or {}).get("peak_rss_mib", {}).values(), default=None)
        across = f"{peak[top] / other_peak:.2f}" if other_peak else "—"
        out.append(f"| {r['name']} | {listed} | {within} | {across} |")
    return "\n".join(out) + "\n"


def metrics_table(rows: list[dict[str, Any]]) -> str:
    """Track A agreement and test accuracy at each B, per cell (one seed each: no spread)."""
    out = ["| cell | B | Track A agreement | Track A acc_gt | Track B agreement |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        res = r["summary"].get("results", [])
        for b in sorted({int(x["checkpoint_B"]) for x in res}):
            got = {x["track"]: x for x in res if int(x["checkpoint_B"]) == b}
            a, tb = got.get("A", {}), got.get("B")
            b_agreement = f"{tb['agreement']:.4f}" if tb else "—"
            out.append(f"| {r['name']} | {b:,} | {a.get('agreement', float('nan')):.4f} | "
                       f"{a.get('acc_gt', float('nan')):.4f} | {b_agreement} |")
    return "\n".join(out) + "\n"


def tables(set_dir: Path = HERE) -> dict[str, str]:
    rows = cells(set_dir)
    return {"scale_cells.md": cells_table(rows), "scale_memory.md": memory_table(rows),
            "scale_metrics.md": metrics_table(rows)}


if __name__ == "__main__":
    for name, text in tables().items():
        print(f"## {name}\n\n{text}")
