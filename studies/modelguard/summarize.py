"""ModelGuard's measured deviations from the reference, from ``deviations.json`` (written by
``deviations.py``; docs/defenses/modelguard_w.md and modelguard_s.md).

``mebench docs`` calls ``tables(set_dir)`` for the block the report does not draw:
``deviations.md``, one row per victim and answer stream.
"""

from __future__ import annotations

import json
from pathlib import Path

from mebench.report.document import Block, render_markdown, table

STREAMS = {"test": "own test split", "pool_test": "attacker pool (other dataset's test split)"}


def tables(set_dir: Path) -> dict[str, str]:
    data = json.loads((Path(set_dir) / "deviations.json").read_text())
    rows = []
    for vid, v in data["victims"].items():
        for key, label in STREAMS.items():
            s, w = v["modelguard_s_precision"][key], v["modelguard_w_solvers"][key]
            rows.append([vid, label, f"{s['answers']:,}", f"{s['same_answer_share']:.4f}",
                         ", ".join(map(str, s["centroids_float64"])), f"{w['answers']:,}", f"{w['differ_share']:.4f}",
                         f"{w['max_l1_difference']:.4f}", f"{w['max_objective_difference']:.1e}",
                         f"{w['differ_share_reference_batch']:.4f}", f"{w['seconds_per_1000_answers']:.2f}"])
    head = ["victim", "stream", "MG-S answers", "same answer, float64 vs float32 centroids",
            "centroids per class (float64)", "MG-W answers", "differing vertex, dual simplex vs interior point",
            "largest L1 between them", "largest objective gap", "differing vertex, 512 vs 32 answers per LP",
            "s / 1,000 answers"]
    intro = f"ε = {data['epsilon']:g} (L1), both defenses; the pool stream in a seeded order (seed {data['order_seed']})."
    return {"deviations.md": render_markdown([Block("p", text=intro), table(head, rows)])}
