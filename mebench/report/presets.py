"""Each named CPU variant beside its reference preset: the variant's measured gap (issue 58).

A set holding labels ``X`` and ``X_fast`` in one stratum (dataset, victim, output mode, substitute,
track, checkpoint) gets ``variant − preset`` for agreement and test accuracy, paired by seed with
the report's bootstrap interval (the rows of :func:`mebench.report.compare.compare_all`, turned to
read variant minus preset), the two means, each one's mean seed-run wall time and whether both ran
on one machine; labels the pooling split suffixed pair with the variant of the same suffix.
See docs/guide/reports.md.
"""

from __future__ import annotations

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_value, table
from mebench.report.stats import CI_LEVEL, CI_TEXT, MIN_SEEDS_FOR_INTERVAL
from mebench.support.progress import duration

VARIANT_SUFFIX = "_fast"
"""A named CPU variant's label is its preset's label with this suffix (``qedg`` → ``qedg_fast``)."""
GAP_METRICS = ("agreement", "acc_gt")

GAP_COLUMNS = ("variant", "preset", "dataset", "victim_id", "substitute_arch", "output_mode", "data_mode", "track",
               "metric", "checkpoint_B", "seeds", "n_pairs", "mean_preset", "mean_variant", "gap", "ci_lower",
               "ci_upper", "ci_excludes_zero", "wall_s_preset", "wall_s_variant", "one_machine")
"""``one_machine``: the two ran on one machine (torch build, CPU model, device, GPU) as their records name it."""

_MACHINE = ("torch_build", "cpu_model", "device", "gpu")


def split_label(label: str) -> tuple[str, str]:
    """``"maze_fast [torch 2.15.0]"`` → ``("maze_fast", " [torch 2.15.0]")``: a label and the suffix the
    pooling split (:mod:`mebench.report.identity`) gave it, "" when none."""
    base, bracket, rest = label.partition(" [")
    return base, bracket + rest


def _is_variant_of(variant: pd.Series, preset: pd.Series) -> pd.Series:
    """Row by row: ``variant`` is ``preset``'s named CPU variant, both with the same pooling suffix."""
    v, p = variant.map(split_label), preset.map(split_label)
    return pd.Series([vb == pb + VARIANT_SUFFIX and vs == ps for (vb, vs), (pb, ps) in zip(v, p)],
                     index=variant.index, dtype=bool)


def preset_gaps(comps: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """One row per variant/preset pair, stratum, metric of :data:`GAP_METRICS` and checkpoint
    (:data:`GAP_COLUMNS`), ``gap`` = variant − preset; empty when no set holds both of a pair.
    ``frame`` (the loader's rows) gives each label's mean wall time per seed-run and its machines."""
    if comps.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    rows = comps[comps["metric"].isin(GAP_METRICS) & (comps["a_data_mode"] == comps["b_data_mode"])]
    a_fast, b_fast = _is_variant_of(rows["a_label"], rows["b_label"]), _is_variant_of(rows["b_label"], rows["a_label"])
    rows = rows[a_fast | b_fast]
    if rows.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS))
    flip = a_fast[rows.index]  # compare_all reads b − a; these rows have the variant as a
    out = pd.DataFrame({
        "variant": rows["a_label"].where(flip, rows["b_label"]),
        "preset": rows["b_label"].where(flip, rows["a_label"]),
        "dataset": rows["dataset"], "victim_id": rows["victim_id"], "substitute_arch": rows["substitute_arch"],
        "output_mode": rows["output_mode"], "data_mode": rows["a_data_mode"], "track": rows["track"],
        "metric": rows["metric"], "checkpoint_B": rows["checkpoint_B"], "seeds": rows["seeds"],
        "n_pairs": rows["n_pairs"],
        "mean_preset": rows["mean_b"].where(flip, rows["mean_a"]),
        "mean_variant": rows["mean_a"].where(flip, rows["mean_b"]),
        "gap": rows["mean_diff"].where(~flip, -rows["mean_diff"]),
        "ci_lower": rows["ci_lower"].where(~flip, -rows["ci_upper"]),
        "ci_upper": rows["ci_upper"].where(~flip, -rows["ci_lower"]),
        "ci_excludes_zero": rows["statistically_significant"],
    })
    walls, machines = _per_label(frame)
    keys = {side: list(zip(out["dataset"], out["victim_id"], out["substitute_arch"], out["output_mode"],
                           out["data_mode"], out[side])) for side in ("preset", "variant")}
    for side in ("preset", "variant"):
        out[f"wall_s_{side}"] = [walls.get(k, float("nan")) for k in keys[side]]
    out["one_machine"] = [len(machines.get(p, set()) | machines.get(v, set())) == 1
                          for p, v in zip(keys["preset"], keys["variant"])]
    order = ["variant", "dataset", "victim_id", "substitute_arch", "output_mode", "track", "metric", "checkpoint_B"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)[list(GAP_COLUMNS)]


def _per_label(frame: pd.DataFrame) -> tuple[dict[tuple, float], dict[tuple, set]]:
    """(dataset, victim, substitute, output mode, data mode, label) → the mean ``timings_s.total`` over
    its seed-runs, and → the machines they ran on (torch build, CPU model, device, GPU)."""
    keys = ["dataset", "victim_id", "substitute_arch", "output_mode", "data_mode", "label"]
    if frame.empty or "wall_s" not in frame.columns:
        return {}, {}
    groups = frame.drop_duplicates([*keys, "seed"]).groupby(keys, sort=True)
    machine_cols = [c for c in _MACHINE if c in frame.columns]
    machines = {key: set(map(tuple, g[machine_cols].to_numpy().tolist())) for key, g in groups}
    return groups["wall_s"].mean().to_dict(), machines


def _wall(x: float) -> str:
    return "–" if pd.isna(x) else duration(float(x))


def preset_blocks(gaps: pd.DataFrame) -> list[Block]:
    """The page: one section per variant (its heading names variant and preset, so an attack's page
    can embed its own), a row per dataset, output mode, track, metric and checkpoint."""
    blocks = [Block("h1", "mebench: named CPU variants against their presets"), Block("p", (
        f"Gap = variant − preset over the seeds both ran (paired by seed); {CI_TEXT}, none below "
        f"{MIN_SEEDS_FOR_INTERVAL} pairs. Wall: the mean seed-run time "
        "(timings_s.total) of each. One machine: whether both ran on one torch build, CPU model, device and "
        "GPU as their records name them; where not, gap and wall times compare two machines."))]
    heads = ["dataset", "victim", "substitute", "output mode", "data mode", "track", "metric", "budget", "n",
             "preset", "variant", "gap", f"{CI_LEVEL:.0%} CI", "CI excludes 0", "wall preset", "wall variant",
             "one machine"]
    for (variant, preset), g in gaps.groupby(["variant", "preset"], sort=True):
        blocks.append(Block("h2", f"{variant} against {preset}"))
        rows = []
        for _, r in g.iterrows():
            few = f"n<{MIN_SEEDS_FOR_INTERVAL}" if r["n_pairs"] < MIN_SEEDS_FOR_INTERVAL else ""
            ci = few or f"[{fmt_value(r['ci_lower'])}, {fmt_value(r['ci_upper'])}]"
            rows.append([str(r["dataset"]), str(r["victim_id"]), str(r["substitute_arch"]), str(r["output_mode"]),
                         str(r["data_mode"]), str(r["track"]), str(r["metric"]), budget_label(int(r["checkpoint_B"])),
                         str(r["n_pairs"]), fmt_value(r["mean_preset"]), fmt_value(r["mean_variant"]),
                         fmt_value(r["gap"]), ci, few or ("yes" if r["ci_excludes_zero"] else "no"),
                         _wall(r["wall_s_preset"]), _wall(r["wall_s_variant"]), "yes" if r["one_machine"] else "no"])
        blocks.append(table(heads, rows))
    return blocks


__all__ = ["GAP_COLUMNS", "VARIANT_SUFFIX", "preset_blocks", "preset_gaps", "split_label"]
