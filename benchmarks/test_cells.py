"""The benchmark grid: one test per attack variant × data mode × output mode × seed.

Each test runs ``engine.run_seed`` once with the harness's fixtures, records the
result (``<cells dir>/<cell id>/result.json`` and the JSON report), then checks
the contract on what the run produced. Ids read
``<benchmark>-<attack label>-<data mode>-<output mode>-s<seed>``, so
``-k dfme``, ``-k "random and hard_top1"`` or ``-k s0`` select what they say.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from mebench import engine
from mebench.cells import CellRecorder, PrefixAudit
from mebench.config import RunConfig
from mebench.grid import Cell
from mebench.oracle import Oracle
from mebench.training.track_a import TrackATrainer


def test_cell(cell: Cell, run_config: RunConfig, victim: engine.Prepared, oracle: Oracle,
              query_cache: PrefixAudit, track_a_trainer: TrackATrainer, cell_record: CellRecorder) -> None:
    with cell_record.running():
        result = engine.run_seed(run_config, cell.seed, victim, cell_record.artifacts_dir, progress=False,
                                 oracle=oracle, store=query_cache, trainer=track_a_trainer, say=cell_record.say)
    problems = contract_problems(run_config, cell, result, oracle, query_cache)
    cell_record.finish(result, problems)
    assert not problems, "contract violations:\n  " + "\n  ".join(problems)


def contract_problems(cfg: RunConfig, cell: Cell, result: engine.SeedResult, oracle: Oracle,
                      store: PrefixAudit) -> list[str]:
    """Every contract violation visible in one finished cell (empty list: the cell is sound)."""
    return [*budget_problems(cfg, result, oracle, store), *store.problems,
            *snapshot_problems(cfg, store), *track_a_problems(cfg, result),
            *[p for row in result.rows for p in row_problems(cfg, cell, row)],
            *([] if result.summary["cache"].get("deleted") else ["§11.2: the temporary query cache was not deleted"])]


def budget_problems(cfg: RunConfig, result: engine.SeedResult, oracle: Oracle, store: PrefixAudit) -> list[str]:
    """§1.1: the budget is spent exactly, one query per image, and every image is in the log."""
    want = cfg.budget.max_budget
    seen = {"oracle": oracle.queries_used, "summary": result.summary.get("queries_used"), "query log": store.final_size}
    return [f"§1.1: {what} counts {n} queries, the budget is {want}" for what, n in seen.items() if n != want]


def snapshot_problems(cfg: RunConfig, store: PrefixAudit) -> list[str]:
    """§7: Track A read D_B at every checkpoint (its content is audited by PrefixAudit)."""
    missing = sorted(set(cfg.budget.checkpoints) - set(store.reads))
    return [f"§7: D_B was never read at B={b}" for b in missing]


def track_a_problems(cfg: RunConfig, result: engine.SeedResult) -> list[str]:
    """§8: one Track A row per checkpoint, trained for S(B) = ceil(c * B) steps."""
    c = cfg.substitute.trackA.steps_coeff_c
    rows = [r["checkpoint_B"] for r in result.rows if r["track"] == "A"]
    out = [f"§8: {rows.count(b)} Track A rows at B={b}" for b in cfg.budget.checkpoints if rows.count(b) != 1]
    steps = result.summary.get("track_a_steps", {})
    out += [f"§8: Track A at B={b} ran {steps.get(str(b))} steps, S(B) = {math.ceil(c * b)}"
            for b in cfg.budget.checkpoints if steps.get(str(b)) != math.ceil(c * b)]
    return out


def row_problems(cfg: RunConfig, cell: Cell, row: dict[str, Any]) -> list[str]:
    """§1.3 / §16.2: metric ranges, soft-only metrics, and the row's identity columns."""
    where = f"B={row['checkpoint_B']} track {row['track']}"
    out = [f"§1.3: {where}: {k} = {row[k]!r} is not in [0, 1]" for k in ("acc_gt", "agreement")
           if not _in_range(row[k], 0.0, 1.0)]
    if cfg.attack.output_mode == "soft_prob":
        if not _in_range(row["kl_mean"], -1e-12, math.inf):
            out.append(f"§1.3: {where}: kl_mean = {row['kl_mean']!r} is not a finite number >= 0")
        if not _in_range(row["l1_mean"], 0.0, 1.0):
            out.append(f"§1.3: {where}: l1_mean = {row['l1_mean']!r} is not in [0, 1]")
    elif row["kl_mean"] is not None or row["l1_mean"] is not None:
        out.append(f"§1.3: {where}: hard_top1 rows carry no KL/L1")
    ident = {"seed": cell.seed, "attack": cell.label, "data_mode": cell.data_mode, "output_mode": cell.output_mode,
             "victim_id": cfg.victim.victim_id, "substitute_arch": cfg.substitute.arch}
    out += [f"§16.2: {where}: {k} = {row[k]!r}, expected {v!r}" for k, v in ident.items() if row[k] != v]
    if row["checkpoint_B"] not in cfg.budget.checkpoints:
        out.append(f"§16.2: row at B={row['checkpoint_B']}, not a checkpoint")
    return out


def _in_range(value: Optional[float], lo: float, hi: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
