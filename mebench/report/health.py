"""The training-health flags of the runs a report reads (``mebench.training.health``).

``summary.json`` keeps, per checkpoint and track, the substitute's top-class share and (Track A)
its loss windows, with the flags they raised. The report lists every flagged checkpoint in
``health.csv|md``, so a table's outlier can be told apart from a training that collapsed or
diverged; the flagged numbers stay in every other table (they are what the protocol measured).
See docs/guide/reports.md.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from mebench.report.document import Block, budget_label, table
from mebench.report.load import UNKNOWN, RunRecord, defended_victims, mapping_section
from mebench.training.health import restart_flag

HEALTH_COLUMNS = ("dataset", "victim_id", "label", "data_mode", "output_mode", "seed", "track", "checkpoint_B",
                  "pred_top_share", "victim_top_share", "loss_best", "loss_last", "flag", "defense")


def health_frame(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per flag raised in a complete run (empty when no checkpoint was flagged). A run behind a
    defense has the victim_id ``<victim>+<defense>`` of the report's other tables, so its flag is never
    read as the undefended victim's."""
    rows = []
    for rec in records:
        summary = rec.summary or {}
        if not rec.ok:
            continue
        attack, dataset = mapping_section(summary, "attack"), mapping_section(summary, "dataset")
        defense = mapping_section(summary, "defense") or mapping_section(rec.run_config, "defense")
        base = {"dataset": str(dataset.get("name") or UNKNOWN),
                "victim_id": str(mapping_section(summary, "victim").get("victim_id") or UNKNOWN),
                "defense": str(defense.get("label") or defense.get("name") or "none"),
                "label": str(attack.get("label") or attack.get("name") or UNKNOWN),
                "data_mode": str(dataset.get("data_mode") or ""), "output_mode": str(attack.get("output_mode") or ""),
                "seed": int(summary.get("seed", 0))}
        for r in summary.get("training_health") or []:
            for flag in r.get("flags") or []:
                rows.append({**base, **{k: r.get(k) for k in ("track", "checkpoint_B", "pred_top_share",
                                                              "victim_top_share", "loss_best", "loss_last")},
                             "flag": flag})
        for r in summary.get("attack_restarts") or []:  # attack.divergence_restarts: the attack's own loop
            rows.append({**base, "track": "B", "checkpoint_B": None, "pred_top_share": None, "victim_top_share": None,
                         "loss_best": None, "loss_last": None, "flag": restart_flag(r)})
    # a defended victim is another victim, as in every other table: victim_id <victim>+<defense>
    frame = defended_victims(pd.DataFrame(rows, columns=list(HEALTH_COLUMNS)))
    return frame.sort_values(["dataset", "victim_id", "label", "data_mode", "output_mode", "seed", "track",
                              "checkpoint_B"], ignore_index=True)


def health_blocks(frame: pd.DataFrame) -> list[Block]:
    blocks = [Block("h1", "mebench training health"), Block("p", (
        "Checkpoints whose training collapsed (the substitute gives at least 90% of the test split one "
        "class, the victim does not) or diverged (Track A's last training-loss window above twice its best "
        "and by more than 0.5 nats), and every model of an attack's own loop that reached a NaN loss and was "
        "trained again (attack.divergence_restarts); mebench.training.health. Their numbers stay in every table: they are "
        "what the protocol measured, but they measure a failed training rather than the queries."))]
    for (dataset, victim), t in frame.groupby(["dataset", "victim_id"], sort=True):
        rows = [[f"{r.label} ({r.data_mode}, {r.output_mode})", str(r.seed), r.track,
                 "–" if pd.isna(r.checkpoint_B) else budget_label(int(r.checkpoint_B)),
                 "–" if pd.isna(r.pred_top_share) else f"{r.pred_top_share:.3f} / {r.victim_top_share:.3f}",
                 "–" if pd.isna(r.loss_best) else f"{r.loss_best:.3f} → {r.loss_last:.3f}", r.flag.split(":")[0]]
                for r in t.itertuples()]
        blocks += [Block("h2", f"{dataset} · {victim}"),
                   table(["attack", "seed", "track", "B", "top-class share (substitute / victim)",
                          "loss best → last", "flag"], rows)]
    return blocks
