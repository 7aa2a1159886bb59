"""Each named CPU variant beside its reference preset: the variant's measured gap (issue 58).

The leaderboard runs an attack's reference preset where a seed fits the CPU and otherwise a named
variant labelled ``<preset label>_fast``; its attack page must say what the variant gives up. When a
set holds both labels of a pair in one stratum (dataset, victim, output mode, substitute, track,
checkpoint), this section shows ``variant − preset`` for agreement and test accuracy at each
checkpoint, paired by seed with the report's bootstrap interval (the rows of
:func:`mebench.report.compare.compare_all`, turned to read variant minus preset), the two means, and
the mean wall time of a seed-run of each (``timings_s.total``), the reason the variant exists.
See docs/guide/reports.md.
"""

from __future__ import annotations

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_value, table
from mebench.report.stats import CI_LEVEL, MIN_SEEDS_FOR_INTERVAL
from mebench.support.progress import duration

VARIANT_SUFFIX = "_fast"
"""A named CPU variant's label is its preset's label with this suffix (``qedg`` → ``qedg_fast``)."""
GAP_METRICS = ("agreement", "acc_gt")

GAP_COLUMNS = ("variant", "preset", "dataset", "victim_id", "output_mode", "data_mode", "track", "metric",
               "checkpoint_B", "seeds", "n_pairs", "mean_preset", "mean_variant", "gap", "ci_lower", "ci_upper",
               "ci_excludes_zero", "wall_s_preset", "wall_s_variant")


def preset_gaps(comps: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """One row per variant/preset pair, stratum, metric of :data:`GAP_METRICS` and checkpoint
    (:data:`GAP_COLUMNS`), ``gap`` = variant − preset; empty when no set holds both of a pair.
    ``frame`` (the loader's rows) gives each label's mean wall time per seed-run."""
    if comps.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    rows = comps[comps["metric"].isin(GAP_METRICS) & (comps["a_data_mode"] == comps["b_data_mode"])]
    a_fast = rows["a_label"] == rows["b_label"] + VARIANT_SUFFIX
    b_fast = rows["b_label"] == rows["a_label"] + VARIANT_SUFFIX
    rows = rows[a_fast | b_fast]
    if rows.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    flip = a_fast[rows.index]  # compare_all reads b − a; these rows have the variant as a
    out = pd.DataFrame({
        "variant": rows["a_label"].where(flip, rows["b_label"]),
        "preset": rows["b_label"].where(flip, rows["a_label"]),
        "dataset": rows["dataset"], "victim_id": rows["victim_id"], "output_mode": rows["output_mode"],
        "data_mode": rows["a_data_mode"], "track": rows["track"], "metric": rows["metric"],
        "checkpoint_B": rows["checkpoint_B"], "seeds": rows["seeds"], "n_pairs": rows["n_pairs"],
        "mean_preset": rows["mean_b"].where(flip, rows["mean_a"]),
        "mean_variant": rows["mean_a"].where(flip, rows["mean_b"]),
        "gap": rows["mean_diff"].where(~flip, -rows["mean_diff"]),
        "ci_lower": rows["ci_lower"].where(~flip, -rows["ci_upper"]),
        "ci_upper": rows["ci_upper"].where(~flip, -rows["ci_lower"]),
        "ci_excludes_zero": rows["statistically_significant"],
    })
    walls = _mean_walls(frame)
    for side in ("preset", "variant"):
        keys = list(zip(out["dataset"], out["victim_id"], out["output_mode"], out["data_mode"], out[side]))
        out[f"wall_s_{side}"] = [walls.get(k, float("nan")) for k in keys]
    order = ["variant", "dataset", "output_mode", "track", "metric", "checkpoint_B"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)[list(GAP_COLUMNS)]


def _mean_walls(frame: pd.DataFrame) -> dict[tuple, float]:
    """(dataset, victim, output mode, data mode, label) → mean ``timings_s.total`` over its seed-runs."""
    if frame.empty or "wall_s" not in frame.columns:
        return {}
    keys = ["dataset", "victim_id", "output_mode", "data_mode", "label"]
    per_seed = frame.drop_duplicates([*keys, "seed"])
    return per_seed.groupby(keys, sort=True)["wall_s"].mean().to_dict()


def _wall(x: float) -> str:
    return "–" if pd.isna(x) else duration(float(x))


def preset_blocks(gaps: pd.DataFrame) -> list[Block]:
    """The page: one section per variant (its heading names variant and preset, so an attack's page
    can embed its own), a row per dataset, output mode, track, metric and checkpoint."""
    blocks = [Block("h1", "mebench: named CPU variants against their presets"), Block("p", (
        f"Gap = variant − preset over the seeds both ran (paired by seed); {CI_LEVEL:.0%} percentile paired "
        f"bootstrap interval, none below {MIN_SEEDS_FOR_INTERVAL} pairs. Wall: the mean seed-run time "
        "(timings_s.total) of each on the machine the records name."))]
    heads = ["dataset", "output mode", "data mode", "track", "metric", "budget", "n", "preset", "variant", "gap",
             f"{CI_LEVEL:.0%} CI", "CI excludes 0", "wall preset", "wall variant"]
    for (variant, preset), g in gaps.groupby(["variant", "preset"], sort=True):
        blocks.append(Block("h2", f"{variant} against {preset}"))
        rows = []
        for _, r in g.iterrows():
            few = r["n_pairs"] < MIN_SEEDS_FOR_INTERVAL
            rows.append([str(r["dataset"]), str(r["output_mode"]), str(r["data_mode"]), str(r["track"]),
                         str(r["metric"]), budget_label(int(r["checkpoint_B"])), str(r["n_pairs"]),
                         fmt_value(r["mean_preset"]), fmt_value(r["mean_variant"]), fmt_value(r["gap"]),
                         f"n<{MIN_SEEDS_FOR_INTERVAL}" if few else f"[{fmt_value(r['ci_lower'])}, {fmt_value(r['ci_upper'])}]",
                         f"n<{MIN_SEEDS_FOR_INTERVAL}" if few else ("yes" if r["ci_excludes_zero"] else "no"),
                         _wall(r["wall_s_preset"]), _wall(r["wall_s_variant"])])
        blocks.append(table(heads, rows))
    return blocks


__all__ = ["GAP_COLUMNS", "VARIANT_SUFFIX", "preset_blocks", "preset_gaps"]
