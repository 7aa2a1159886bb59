"""Estimated vs measured wall time, from the records ``timed.py`` wrote under ``logs/`` (issue 40).

``tables(set_dir)`` gives ``mebench docs`` the table of docs/guide/grid.md (block
``cost/estimate_vs_measured.md``): per timed command, the cells it ran, workers x threads, the
estimate printed before it started, the measured wall time, their ratio and the machine's mean
1-minute load average while it ran (the machine has ``machine_cpus`` CPUs; load above that means
the command shared them with other work, which the calibration measured too when it ran under it).
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "results" / "cost"  # the set's records (this script lives in studies/)


def records(set_dir: Path = HERE) -> list[dict]:
    """The timed commands (``logs/``, then ``logs/superseded/``: estimated by an earlier estimator);
    a record's ``note`` says how its estimate differs from today's."""
    rows = [json.loads(p.read_text()) for p in sorted((set_dir / "logs").glob("*.json"))]
    old = [{**json.loads(p.read_text()), "superseded": True} for p in sorted((set_dir / "logs" / "superseded").glob("*.json"))]
    return rows + old


def minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def table(rows: list[dict]) -> str:
    out = ["| record | command | cells | workers x threads | estimate | measured | measured / estimate | mean load (CPUs) |",
           "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        ratio = r["wall_s"] / r["estimate_s"] if r["estimate_s"] else float("nan")
        mark = f" ({r['note']})" if r.get("note") else ""
        out.append(f"| {r['name']} | `{r['command']}` | {r['cells']} | {r['workers']} x {r['threads']} | "
                   f"{minutes(r['estimate_s'])}{mark} | {minutes(r['wall_s'])} | {ratio:.2f} | "
                   f"{r['load_mean']} ({r['machine_cpus']}) |")
    return "\n".join(out) + "\n"


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """``estimate_vs_measured.md`` for ``mebench docs``."""
    return {"estimate_vs_measured.md": table(records(set_dir))}


if __name__ == "__main__":
    print(table(records(HERE)), end="")
