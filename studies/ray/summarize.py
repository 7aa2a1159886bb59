"""One Ray node against two, from the records ``timed.py`` wrote under ``logs/`` (issue 37).

``tables(set_dir)`` gives ``mebench docs`` the table of docs/guide/ray.md (block
``ray/nodes.md``): per timed grid command, the nodes (one CPU each), the cells and how many
passed, the wall time, the speed-up against the one-node run of the same command, the mean
per-cell time (``cell_s``: the cell's own work, without Ray's scheduling) and the machine's mean
1-minute load average while it ran next to its CPU count (load above the CPU count means the nodes
shared the CPUs with other work, which skews the comparison).

    python studies/ray/summarize.py
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "results" / "ray"  # the set's records (this script lives in studies/)


def records(set_dir: Path = HERE) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((set_dir / "logs").glob("*.json"))]


def _seconds(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def table(rows: list[dict]) -> str:
    one = {r["command"]: r["wall_s"] for r in rows if r["nodes"] == 1}
    out = ["| record | nodes x CPUs | cells (passed) | wall | speed-up vs 1 node | mean cell_s | mean load (CPUs) |",
           "|---|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["command"], r["nodes"])):
        cells = r["cells"]
        passed = sum(c["status"] == "passed" for c in cells)
        per_cell = [c["timings"].get("cell_s", 0.0) for c in cells]
        mean = sum(per_cell) / len(per_cell) if per_cell else float("nan")
        base = one.get(r["command"])
        speedup = f"{base / r['wall_s']:.2f}" if base else "-"
        out.append(f"| {r['name']} | {r['nodes']} x {r['cpus_per_node']} | {len(cells)} ({passed}) | "
                   f"{_seconds(r['wall_s'])} | {speedup} | {mean:.0f} s | {r['load_mean']} ({r['machine_cpus']}) |")
    return "\n".join(out) + "\n"


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """``nodes.md`` for ``mebench docs``."""
    return {"nodes.md": table(records(set_dir))}


if __name__ == "__main__":
    print(table(records(HERE)), end="")
