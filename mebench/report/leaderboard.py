"""Leaderboard: one summary number per attack plus mean ± std at every checkpoint.

The summary number is the normalised log-budget AUC of agreement (its definition is below), per
seed over the checkpoints all seeds of the condition reached, then mean ± sample std. Tables are
built per (dataset, output mode) and track (contract §8), rows ranked by AUC, each AUC beside its
gain over the null control (:mod:`mebench.report.gains`). See docs/guide/reports.md.
"""
# **Summary number — normalised log-budget AUC of agreement.** For one seed with
# checkpoints ``B_1 < … < B_m`` and agreements ``a_1 … a_m`` (contract §1.3),
#
#     AUC = trapezoid(a, x) / (x_m - x_1),   x_i = log10(B_i),
#
# i.e. the mean agreement over the budget span when budgets are read on the log
# axis the curves are drawn on (each decade weighs the same). Since agreement lies
# in [0, 1], so does the AUC; with a single checkpoint it is that agreement. It is
# computed per seed over the checkpoints *all* seeds of the condition reached, then
# averaged (mean ± sample std over seeds). AUCs compare fairly only over the same
# span; the span is printed next to each value and a note flags a table whose
# rows differ.
#
# Tables are built per (dataset, output mode) and track (A = SFP primary, B = AOP
# secondary, contract §8), rows ranked by AUC. Next to each attack's AUC stands its
# **gain over the null control** of its data mode (paired by seed, 95 % CI; see
# :mod:`mebench.report.gains`), and each track gets a table of agreement gains at
# every checkpoint. Controls themselves are marked, not ranked against themselves.

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from mebench.report.aggregate import CONDITION_KEYS, METRIC_NOTES, metric_heading
from mebench.report.document import Block, budget_label, fmt_gain, fmt_mean_std, table
from mebench.report.identity import stale_blocks
from mebench.report.load import METRIC_COLUMNS
from mebench.report.stats import CI_TEXT
from mebench.support.progress import duration

TRACK_TITLES = {"A": "Track A (SFP: standard from-scratch protocol, primary)",
                "B": "Track B (AOP: attacker-original protocol, secondary)"}


def log_budget_auc(budgets: Sequence[float], values: np.ndarray) -> np.ndarray:
    """Normalised trapezoid AUC over log10(budget) along the last axis of ``values``."""
    x = np.log10(np.asarray(budgets, dtype=float))
    y = np.asarray(values, dtype=float)
    if x.size == 1:
        return y[..., 0]
    area = (np.diff(x) * (y[..., 1:] + y[..., :-1]) / 2.0).sum(axis=-1)  # trapezoid rule
    return area / (x[-1] - x[0])


def agreement_auc_per_seed(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, track, seed): ``value`` = AUC, plus its budget span."""
    rows = []
    for key, g in frame.groupby([*CONDITION_KEYS, "track"], sort=True):
        wide = g.pivot(index="seed", columns="checkpoint_B", values="agreement")
        wide = wide.dropna(axis=1, how="any").sort_index(axis=1)
        if wide.shape[1] == 0:
            continue
        auc = log_budget_auc(list(wide.columns), wide.to_numpy())
        cost = g.groupby("seed")[["wall_s", "queries_used"]].first()  # the loader's per-run columns
        for seed, value in zip(wide.index, auc):
            rows.append({**dict(zip([*CONDITION_KEYS, "track"], key)), "seed": int(seed),
                         "value": float(value), "span_lo": int(wide.columns[0]),
                         "span_hi": int(wide.columns[-1]), "n_checkpoints": wide.shape[1],
                         "wall_s": float(cost.at[seed, "wall_s"]), "queries_used": float(cost.at[seed, "queries_used"])})
    cols = [*CONDITION_KEYS, "track", "seed", "value", "span_lo", "span_hi", "n_checkpoints", "wall_s", "queries_used"]
    return pd.DataFrame(rows, columns=cols)


def leaderboard_table(auc: pd.DataFrame) -> pd.DataFrame:
    """AUC mean ± std per (condition, track), ranked within (dataset, output_mode, track)."""
    keys = [*CONDITION_KEYS, "track"]
    board = auc.groupby(keys, sort=True).agg(
        auc_mean=("value", "mean"), auc_std=("value", lambda v: v.std(ddof=1)),
        n_seeds=("value", "count"), span_lo=("span_lo", "first"), span_hi=("span_hi", "first"),
        wall_mean=("wall_s", "mean"), queries=("queries_used", "max"),
    ).reset_index()
    # AUCs are comparable only over the same checkpoints: rank within (dataset, mode, track, span)
    groups = ["dataset", "output_mode", "track", "span_lo", "span_hi"]
    board = board.sort_values([*groups, "auc_mean"], ascending=[True] * len(groups) + [False], kind="stable")
    board["rank"] = board.groupby(groups).cumcount() + 1
    return board.reset_index(drop=True)


def _span(row: pd.Series) -> str:
    return f"{budget_label(int(row['span_lo']))}–{budget_label(int(row['span_hi']))}"


Lookup = dict[tuple, tuple[float, float]]


def _lookup(agg: pd.DataFrame) -> Lookup:
    """(condition…, track, metric, checkpoint) → (mean, std), built once per table."""
    keys = [*CONDITION_KEYS, "track", "metric", "checkpoint_B"]
    index = zip(*(agg[k] for k in keys))
    return dict(zip(index, zip(agg["mean"], agg["std"])))


def _cell(lookup: Lookup, row: pd.Series, metric: str, b: int) -> str:
    key = (*(row[k] for k in (*CONDITION_KEYS, "track")), metric, b)
    return fmt_mean_std(*lookup[key]) if key in lookup else "–"


def _ident(row: pd.Series) -> list[str]:
    return [str(row["label"]), str(row["data_mode"]), str(row["substitute_arch"]),
            str(row["victim_id"])]


IDENT_HEADERS = ["attack", "data mode", "substitute", "victim"]


GainLookup = dict[tuple, dict[str, dict[tuple[str, Any], pd.Series]]]
"""(condition…, track) → control label → (metric, checkpoint or None) → gain row."""


def _gain_lookup(gains: pd.DataFrame | None) -> GainLookup:
    lookup: GainLookup = {}
    if gains is None:
        return lookup
    for _, r in gains.iterrows():
        row_key = tuple(r[k] for k in (*CONDITION_KEYS, "track"))
        point = None if pd.isna(r["checkpoint_B"]) else int(r["checkpoint_B"])
        lookup.setdefault(row_key, {}).setdefault(r["control_label"], {})[(r["metric"], point)] = r
    return lookup


def _gain_text(g: pd.Series | None) -> str:
    return "–" if g is None else fmt_gain(g["gain_mean"], g["ci_low"], g["ci_high"],
                                          int(g["n_seeds"]))


def _auc_gain_cell(gl: GainLookup, row: pd.Series) -> str:
    """The main table's gain cell: one entry per control, or why there is none."""
    if row.get("role") == "control":
        return "— (control)"
    per_control = gl.get(tuple(row[k] for k in (*CONDITION_KEYS, "track")), {})
    if not per_control:
        return "no control paired"
    return "; ".join(f"{_gain_text(points.get(('agreement_auc', None)))} vs {control}"
                     for control, points in sorted(per_control.items()))


def _gain_blocks(board: pd.DataFrame, gl: GainLookup, budgets: list[int]) -> list[Block]:
    """Agreement gain over each control at every checkpoint, one row per (attack, control)."""
    rows = []
    for _, r in board.iterrows():
        per_control = gl.get(tuple(r[k] for k in (*CONDITION_KEYS, "track")), {})
        for control, points in sorted(per_control.items()):
            auc = points.get(("agreement_auc", None))
            n = "–" if auc is None else str(auc["n_seeds"])
            rows.append([*_ident(r), f"{control} (A)", n, _gain_text(auc),
                         *(_gain_text(points.get(("agreement", b))) for b in budgets)])
    if not rows:
        return []
    heads = [*IDENT_HEADERS, "control (track)", "n", "AUC gain",
             *(f"agreement gain @{budget_label(b)}" for b in budgets)]
    return [Block("p", "Gain over the null control (attack − control, paired by seed; mean "
                       "[95% CI], n<2: no interval); the control's Track A is the reference "
                       "for both tracks. Every metric: gains.md/csv/json."),
            table(heads, rows)]


COST_HEADER = "seed-run cost (wall, queries)"
"""The seed-run's cost: mean ``timings_s.total`` over its seeds (the whole seed-run, both tracks and every
probe, on the machines and threads the caption names) and the images its victim answered."""


def _cost_cell(row: pd.Series) -> str:
    wall, queries = row.get("wall_mean"), row.get("queries")
    if wall is None or pd.isna(wall):
        return "–"
    text = duration(wall)  # as the progress lines write it
    return text if queries is None or pd.isna(queries) else f"{text}, {int(queries):,}"


def _stale_counts(stale: pd.DataFrame | None) -> dict[tuple, int]:
    """(label, data mode, output mode, victim) → seeds kept by ``--keep-stale``."""
    if stale is None or stale.empty:
        return {}
    keys = ["label", "data_mode", "output_mode", "victim_id"]
    return {tuple(k): int(n) for k, n in stale.groupby(keys)["seed"].nunique().items()}


def _seeds_cell(row: pd.Series, stale: dict[tuple, int]) -> str:
    n = stale.get(tuple(row[k] for k in ("label", "data_mode", "output_mode", "victim_id")), 0)
    return f"{row['n_seeds']} ({n} kept stale)" if n else str(row["n_seeds"])


def _track_blocks(board: pd.DataFrame, agg: pd.DataFrame, track: str,
                  gl: GainLookup, stale: dict[tuple, int] | None = None) -> list[Block]:
    budgets = sorted(agg["checkpoint_B"].unique())
    lookup = _lookup(agg)
    blocks = [Block("h3", TRACK_TITLES.get(track, f"Track {track}"))]
    rows = [["#" + str(r["rank"]), *_ident(r), _seeds_cell(r, stale or {}),
             fmt_mean_std(r["auc_mean"], r["auc_std"]), _span(r), _auc_gain_cell(gl, r),
             *(_cell(lookup, r, "agreement", b) for b in budgets), _cost_cell(r)] for _, r in board.iterrows()]
    heads = ["rank", *IDENT_HEADERS, "seeds", "agreement AUC (log-budget)", "AUC span",
             "AUC gain over control [95% CI]",
             *(f"agreement @{budget_label(b)}" for b in budgets), COST_HEADER]
    from mebench.report.transfer import HEADLINE_METHODS, transfer_cell

    for _, prefix, title in HEADLINE_METHODS:  # mebench.report.transfer: PGD, then CW L2
        if f"{prefix}_mean" in board and board[f"{prefix}_mean"].notna().any():
            eps = ", ".join(f"{e:g}" for e in sorted(board[f"{prefix}_eps"].dropna().unique()))
            heads.append(f"{title} transfer (ε {eps})")
            rows = [row + [transfer_cell(r, prefix)] for row, (_, r) in zip(rows, board.iterrows())]
    blocks.append(table(heads, rows))
    if board["span_lo"].nunique() > 1 or board["span_hi"].nunique() > 1:
        blocks.append(Block("p", "Note: AUC spans differ between rows; rows are ranked only against "
                                 "rows with the same span (the rank restarts at #1 for each span)."))
    blocks += _gain_blocks(board, gl, budgets)
    for metric in [m for m in METRIC_COLUMNS if m != "agreement"]:
        if not (agg["metric"] == metric).any():
            continue
        rows = [[*_ident(r), *(_cell(lookup, r, metric, b) for b in budgets)]
                for _, r in board.iterrows()]
        blocks.append(Block("p", f"{metric_heading(metric)} (mean ± std over seeds) by budget:"))
        blocks.append(table([*IDENT_HEADERS, *(f"@{budget_label(b)}" for b in budgets)], rows))
        if metric in METRIC_NOTES:
            blocks.append(Block("p", "Note: " + METRIC_NOTES[metric]))
    return blocks


def leaderboard_blocks(board: pd.DataFrame, agg: pd.DataFrame, victims: pd.DataFrame,
                       figures: dict[tuple[str, str], str],
                       gains: pd.DataFrame | None = None, provenance: dict[str, Any] | None = None,
                       excluded: pd.DataFrame | None = None, stale: pd.DataFrame | None = None) -> list[Block]:
    """The whole leaderboard page; ``figures`` maps (dataset, mode) → image file name.

    ``gains`` is :func:`mebench.report.gains.gain_table`'s frame; ``board`` may carry a
    ``role`` column (``"control"`` rows get no gain). ``provenance`` (version, commit,
    date, inputs) heads the page; ``excluded`` runs (:func:`mebench.report.load.exclusions`: not
    complete or damaged) are listed at its end with their reasons, after the ``stale`` ones
    (:func:`mebench.report.identity.stale_runs`), whose conditions are marked in the seeds column.
    """
    gl = _gain_lookup(gains)
    blocks = [Block("h1", "mebench leaderboard")]
    if provenance:
        blocks.append(Block("p", provenance_text(provenance)))
    blocks.append(Block("p", DEFINITION_TEXT))
    for (dataset, mode), sub in board.groupby(["dataset", "output_mode"], sort=True):
        blocks.append(Block("h2", f"{dataset} · {mode}"))
        if (dataset, mode) in figures:
            blocks.append(Block("img", f"{dataset} {mode} curves", src=figures[(dataset, mode)]))
        vic = victims[(victims["dataset"] == dataset) & (victims["output_mode"] == mode)]
        for _, v in vic.iterrows():
            blocks.append(Block("p", f"Victim {v['victim_id']}: test accuracy "
                                     f"{v['victim_test_accuracy']:.4f}"))
        sub_agg = agg[(agg["dataset"] == dataset) & (agg["output_mode"] == mode)]
        for track, tb in sub.groupby("track", sort=True):
            blocks += _track_blocks(tb, sub_agg[sub_agg["track"] == track], track, gl, _stale_counts(stale))
    blocks += stale_blocks(stale) if stale is not None else []
    if excluded is not None and not excluded.empty:
        blocks += [Block("h2", "Runs left out (not complete)"),
                   Block("p", "These seed-runs did not finish or cannot be read whole (interrupted, failed, a "
                              "grid cell that failed its contract checks, a truncated or missing file); they "
                              "are in no table, ranking or gain above."),
                   table(["run", "attack", "data mode", "output mode", "victim", "seed", "status", "reason",
                          "source"],
                         [[str(r[c]) for c in ("run_name", "label", "data_mode", "output_mode", "victim_id", "seed",
                                               "status", "reason", "source")] for _, r in excluded.iterrows()])]
    return blocks


def provenance_text(p: dict[str, Any]) -> str:
    """'Generated by mebench 0.1.0 (commit abc123, uncommitted changes) on DATE from: a, b'."""
    commit = p.get("commit") or "unknown commit"
    dirty = ", uncommitted changes" if p.get("dirty") else ""
    return (f"Generated by mebench {p.get('mebench_version')} (commit {commit}{dirty}) on {p.get('created_utc')} "
            f"from: {', '.join(p.get('inputs', []))}.")


def leaderboard_latex(board: pd.DataFrame, agg: pd.DataFrame) -> str:
    """A booktabs LaTeX tabular per dataset: rank, attack, data mode, output mode, track, victim,
    span, agreement AUC and agreement / test accuracy at the span's largest checkpoint (mean ± std).

    Rows are grouped by (output mode, track, span), the groups the ranks run within,
    with a ``\\midrule`` between groups.
    """
    lookup = _lookup(agg)
    groups = ["output_mode", "track", "span_lo", "span_hi"]
    out = ["% mebench leaderboard (needs \\usepackage{booktabs}); ranks run within each block of equal",
           "% output mode, track and span; @B_max = the largest checkpoint of the row's span"]
    for dataset, sub in board.groupby("dataset", sort=True):
        out += ["", f"% {_tex(dataset)}", "\\begin{tabular}{rllllllccc}", "\\toprule",
                "Rank & Attack & Data mode & Output mode & Track & Victim & Span & Agreement AUC & "
                "Agreement @$B_{\\max}$ & Acc @$B_{\\max}$ \\\\", "\\midrule"]
        for i, (_, block) in enumerate(sub.sort_values([*groups, "rank"], kind="stable").groupby(groups, sort=False)):
            out += ["\\midrule"] if i else []
            out += [" & ".join(_latex_cells(lookup, r)) + " \\\\" for _, r in block.iterrows()]
        out += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(out) + "\n"


def _latex_cells(lookup: Lookup, r: pd.Series) -> list[str]:
    top = int(r["span_hi"])
    return [str(r["rank"]), _tex(r["label"]), _tex(r["data_mode"]), _tex(r["output_mode"]), _tex(r["track"]),
            _tex(r["victim_id"]), _tex(_span(r)), _tex(fmt_mean_std(r["auc_mean"], r["auc_std"])),
            _tex(_cell(lookup, r, "agreement", top)), _tex(_cell(lookup, r, "acc_gt", top))]


_TEX = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "#": "\\#", "_": "\\_", "$": "\\$",
        "{": "\\{", "}": "\\}", "~": "\\textasciitilde{}", "^": "\\^{}", "±": "$\\pm$", "–": "--"}


def _tex(text: str) -> str:
    """Escape LaTeX's special characters, one character at a time; ± and – become LaTeX."""
    return "".join(_TEX.get(ch, ch) for ch in str(text))


DEFINITION_TEXT = (
    "Values are mean ± sample std (ddof=1) over seeds; a value without ± comes from a "
    "single seed. Agreement AUC (log-budget) = trapezoid area under the per-seed agreement "
    "curve over x = log10(budget), divided by the log10 span of the checkpoints, so it is "
    "the mean agreement with every budget decade weighted equally and lies in [0, 1]. "
    "Rows are ranked by it among rows over the same budget span. acc_gt and agreement: higher is better; kl_mean and l1_mean: "
    "lower is better. Track A (SFP) is the primary, comparable measure of query quality; "
    "Track B (AOP) is the attack's own loop (secondary). Gain over control = attack − null "
    "control of the same data mode (random for seed/surrogate; untrained_generator and "
    "smooth_noise for data_free), paired by seed, with a " + CI_TEXT + "; "
    "both tracks of an attack are compared with the control's Track A; n<2: no interval. "
    + METRIC_NOTES["l1_mean"] + "."
)
