"""Gain over the null control: what an attack adds to a method-free baseline.

A *null control* is an attack whose class lists a data mode in ``null_control_for``; controls are
recognised by attack *name*, never by label (:data:`KNOWN_CONTROLS` for names the registry does not
know). Every other attack is paired by seed with each control of its data mode, per stratum (the
rules are below); ``also_against`` adds a control of another data mode. For ``kl_mean`` and
``l1_mean`` lower is better: a useful attack has a negative gain. See docs/guide/reports.md.
"""
# A *null control* is an attack whose class lists a data mode in
# ``null_control_for`` (``random`` for ``seed``/``surrogate``;
# ``untrained_generator`` and ``smooth_noise`` for ``data_free``). Controls are
# recognised by attack *name*, never by label, so a relabelled control is still a
# control; names the registry does not know fall back to :data:`KNOWN_CONTROLS`.
#
# For every other attack, per stratum (dataset, victim, output mode, substitute,
# data mode, metric, checkpoint) and per control of the same data mode:
#
# * ``gain = value(attack) − value(control)``, paired by seed: only seeds run by
#   both sides count, a seed missing on either side is dropped, never imputed;
# * the paired interval (Student t below 5 seeds, percentile bootstrap from 5) and Cohen's d of
#   :func:`mebench.report.stats.compare_groups`, and ``n_seeds``; with fewer than
#   2 paired seeds there is no interval and no CI claim (``n<2``);
# * controls have no attacker loop and report Track A only, so an attack's Track A
#   *and* Track B are both compared with the control's Track A (``control_track``);
# * the whole-curve ``agreement_auc`` gain is the paired difference of log-budget
#   AUCs (:func:`mebench.report.leaderboard.log_budget_auc`) over the checkpoints
#   every paired seed reached on both sides (``span_lo``–``span_hi``), so attack
#   and control are always integrated over the same budgets.
#
# For ``kl_mean`` and ``l1_mean`` lower is better: a useful attack has a negative gain.
#
# A control of another data mode can be named on purpose (``also_against``, ``mebench report
# --also-against NAME``): every attack of the same dataset, victim, output mode and substitute
# is then also paired with that control's Track A, whatever the attack's data mode (e.g. a
# GAN trained on proxy data against ``untrained_generator``). Those rows keep the attack's
# ``data_mode`` and name the control's in ``control_data_mode``; the default pairing (same
# data mode) is unchanged.

from __future__ import annotations

import sys
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from mebench.report.aggregate import (CONDITION_KEYS, HIGHER_IS_BETTER, METRIC_NOTES,
                                      metric_heading, to_long)
from mebench.report.document import Block, budget_label, fmt_signed, table
from mebench.report.leaderboard import log_budget_auc
from mebench.report.load import METRIC_COLUMNS, UNRECORDED
from mebench.report.stats import (CI_LEVEL, CI_TEXT, FEW_SEEDS_TEXT, MIN_SEEDS_FOR_BOOTSTRAP,
                                  MIN_SEEDS_FOR_INTERVAL, N_BOOTSTRAP, compare_groups, definitions)

KNOWN_CONTROLS: Mapping[str, frozenset[str]] = {
    "random": frozenset({"seed", "surrogate"}),
    "untrained_generator": frozenset({"data_free"}),
    "smooth_noise": frozenset({"data_free"}),
}
"""Fallback for attack names the registry lacks (results read where a plugin is not
installed). A registered attack's own ``null_control_for`` always wins."""

CONTROL_TRACK = "A"
AUC_METRIC = "agreement_auc"
METRIC_ORDER: tuple[str, ...] = (
    AUC_METRIC, "agreement", *(m for m in METRIC_COLUMNS if m != "agreement"),
)
GAIN_STRATUM: tuple[str, ...] = (
    "dataset", "victim_id", "output_mode", "substitute_arch", "data_mode",
)
"""Everything held fixed between an attack and its control (plus metric and checkpoint)."""

GAIN_COLUMNS: tuple[str, ...] = (
    *GAIN_STRATUM, "label", "attack", "track", "control_label", "control_attack",
    "control_data_mode", "control_track", "metric", "checkpoint_B", "gain_mean", "ci_low",
    "ci_high", "n_seeds", "seeds", "ci_excludes_zero", "mean_attack", "mean_control", "cohens_d",
    "higher_is_better", "span_lo", "span_hi", "note",
)


def _registry() -> Any:
    """The attack registry if this process already imported it (the grid, a test), else ``None``.

    The report never imports it itself: attack modules import torch, and ``mebench report`` stays
    torch-free. Results carry their attack's ``null_control_for`` in ``summary.json``
    (``attack.null_control_for``, read into the ``control_for`` column), which wins over both.
    """
    module = sys.modules.get("mebench.attacks")
    return getattr(module, "ATTACKS", None)


def control_modes(attack: str) -> frozenset[str]:
    """Data modes for which ``attack`` (a registry name) is the null control."""
    registry = _registry()
    if registry is not None and attack in registry:
        return frozenset(registry.get(attack).null_control_for)
    return KNOWN_CONTROLS.get(attack, frozenset())


def controls_of(data_mode: str) -> list[str]:
    """Names of every known control of ``data_mode`` (for "no control run" notes)."""
    registry = _registry()
    names = set(KNOWN_CONTROLS) | (set(registry.names()) if registry is not None else set())
    return sorted(n for n in names if data_mode in control_modes(n))


def condition_roles(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per condition (:data:`CONDITION_KEYS`): its attack name and ``role``
    (``"control"`` when the attack is a null control of the condition's data mode)."""
    recorded = frame["control_for"] if "control_for" in frame else pd.Series(UNRECORDED, index=frame.index)
    conds = frame.assign(control_for=recorded)[[*CONDITION_KEYS, "attack", "control_for"]].drop_duplicates(
        subset=list(CONDITION_KEYS))
    role = ["control" if m in _modes(a, r) else "attack"
            for a, m, r in zip(conds["attack"], conds["data_mode"], conds["control_for"])]
    return conds.drop(columns="control_for").assign(role=role).reset_index(drop=True)


def _modes(attack: str, recorded: str) -> frozenset[str]:
    """The run's own record of its attack's ``null_control_for`` (``;``-joined), else the name's."""
    return control_modes(attack) if recorded == UNRECORDED else frozenset(filter(None, recorded.split(";")))


def check_also_against(names: Iterable[str], key: str = "also_against") -> list[str]:
    """``names`` if each is a registered null control; else ``ValueError`` naming ``key``,
    the name and the rule."""
    names = list(names)
    known = sorted({n for mode in ("seed", "surrogate", "data_free") for n in controls_of(mode)})
    for name in names:
        if not control_modes(name):
            raise ValueError(f"{key}: {name!r} is not a null control (an attack name whose "
                             f"null_control_for is not empty: {', '.join(known)})")
    return names


def gain_table(frame: pd.DataFrame, also_against: Iterable[str] = (),
               **bootstrap: Any) -> pd.DataFrame:
    """Every gain over a null control (columns :data:`GAIN_COLUMNS`).

    ``frame`` is what :func:`mebench.report.load.load_results` returns (after
    :func:`~mebench.report.aggregate.drop_reruns`); ``also_against`` names controls every
    attack is also paired with across data modes (module docstring); ``bootstrap`` is passed
    to :func:`~mebench.report.stats.compare_groups` (e.g. ``n_bootstrap``).
    """
    also_against = check_also_against(also_against)
    long = to_long(frame).drop(columns="attack", errors="ignore")
    long = long.merge(condition_roles(frame), on=list(CONDITION_KEYS))
    controls = long[(long["role"] == "control") & (long["track"] == CONTROL_TRACK)]
    attacks = long[long["role"] == "attack"]
    across = [k for k in GAIN_STRATUM if k != "data_mode"]
    rows: list[dict[str, Any]] = []
    for key, ctl_g in controls.groupby(across, sort=True):
        att_g = attacks.merge(pd.DataFrame([dict(zip(across, key))]), on=across)
        for (c_label, c_attack, c_mode), ctl in ctl_g.groupby(["label", "attack", "data_mode"],
                                                              sort=True):
            for (label, attack, track, mode), att in att_g.groupby(
                    ["label", "attack", "track", "data_mode"], sort=True):
                if mode != c_mode and c_attack not in also_against:
                    continue
                ident = {**dict(zip(across, key)), "data_mode": mode, "label": label,
                         "attack": attack, "track": track, "control_label": c_label,
                         "control_attack": c_attack, "control_data_mode": c_mode,
                         "control_track": CONTROL_TRACK}
                rows += [{**ident, **r} for r in _pair_gains(att, ctl, bootstrap)]
    return _tidy(pd.DataFrame(rows, columns=list(GAIN_COLUMNS)))


def _pair_gains(att: pd.DataFrame, ctl: pd.DataFrame,
                bootstrap: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Gain rows of one (attack, track) against one control: AUC, then every point."""
    on = ["metric", "checkpoint_B", "seed"]
    both = att[[*on, "value"]].merge(ctl[[*on, "value"]], on=on, suffixes=("_att", "_ctl"))
    rows = []
    auc = _paired_auc(both[both["metric"] == "agreement"])
    if auc is not None:
        seeds, budgets, a_auc, c_auc = auc
        rows.append({"metric": AUC_METRIC, "checkpoint_B": pd.NA, "span_lo": budgets[0],
                     "span_hi": budgets[-1], **_gain(seeds, c_auc, a_auc, AUC_METRIC, bootstrap)})
    for (metric, b), g in both.groupby(["metric", "checkpoint_B"], sort=True):
        g = g.sort_values("seed")
        rows.append({"metric": metric, "checkpoint_B": int(b),
                     **_gain(g["seed"], g["value_ctl"], g["value_att"], metric, bootstrap)})
    return rows


def _paired_auc(agr: pd.DataFrame) -> tuple[list[int], list[int], np.ndarray, np.ndarray] | None:
    """Per paired seed, both AUCs over the checkpoints every paired seed has on both sides."""
    if agr.empty:
        return None
    wide_att = agr.pivot(index="seed", columns="checkpoint_B", values="value_att")
    wide_att = wide_att.dropna(axis=1, how="any").sort_index(axis=1)
    if wide_att.shape[1] == 0:
        return None
    wide_ctl = agr.pivot(index="seed", columns="checkpoint_B", values="value_ctl")
    wide_ctl = wide_ctl.loc[wide_att.index, wide_att.columns]
    budgets = [int(b) for b in wide_att.columns]
    return ([int(s) for s in wide_att.index], budgets,
            log_budget_auc(budgets, wide_att.to_numpy()),
            log_budget_auc(budgets, wide_ctl.to_numpy()))


def _gain(seeds: Iterable[Any], ctl: Any, att: Any, metric: str,
          bootstrap: Mapping[str, Any]) -> dict[str, Any]:
    res = compare_groups(np.asarray(ctl, dtype=float), np.asarray(att, dtype=float), **bootstrap)
    return {
        "gain_mean": res["mean_diff"], "ci_low": res["ci_lower"], "ci_high": res["ci_upper"],
        "n_seeds": res["n_pairs"], "seeds": ";".join(str(int(s)) for s in seeds),
        "ci_excludes_zero": res["statistically_significant"], "mean_attack": res["mean_b"],
        "mean_control": res["mean_a"], "cohens_d": res["cohens_d"],
        "higher_is_better": HIGHER_IS_BETTER.get(metric, True), "note": res["warning"],
    }


def _tidy(gains: pd.DataFrame) -> pd.DataFrame:
    """Nullable integer budgets (AUC rows have none) and a stable reading order: per
    stratum, the controls of the attack's own data mode first, then ``also_against`` ones."""
    order = {m: i for i, m in enumerate(METRIC_ORDER)}
    gains = gains.astype({"checkpoint_B": "Int64", "span_lo": "Int64", "span_hi": "Int64",
                          "n_seeds": "int64"})
    gains = gains.assign(_m=gains["metric"].map(order),
                         _x=gains["control_data_mode"] != gains["data_mode"])
    gains = gains.sort_values([*GAIN_STRATUM, "label", "track", "_x", "control_label", "_m",
                               "checkpoint_B"], kind="stable", na_position="first")
    return gains.drop(columns=["_m", "_x"]).reset_index(drop=True)


def _control_columns(sel: pd.DataFrame, control: str, part: str) -> pd.DataFrame:
    """``gain_vs_<control>_<part>[_ci_low|_ci_high|_n_seeds|_B]`` for one control."""
    stem = f"gain_vs_{control}_{part}"
    names = {"gain_mean": stem, "ci_low": f"{stem}_ci_low", "ci_high": f"{stem}_ci_high",
             "n_seeds": f"{stem}_n_seeds"}
    if part == "final":
        names["checkpoint_B"] = f"{stem}_B"
    keys = [*CONDITION_KEYS, "track"]
    picked = sel[sel["control_label"] == control][[*keys, *names]].rename(columns=names)
    return picked.astype({f"{stem}_n_seeds": "Int64"})


def leaderboard_gain_columns(board: pd.DataFrame, gains: pd.DataFrame,
                             roles: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard frame plus ``attack``, ``role`` and, for every control label ``c``,
    the gain of the leaderboard number (``gain_vs_c_auc``…) and of agreement at the
    largest checkpoint both sides reached (``gain_vs_c_final``…, budget in ``…_B``).

    One row per (condition, track) as before; a cell is empty where the row's data mode
    has no such control, and on control rows.
    """
    keys = [*CONDITION_KEYS, "track"]
    out = board.merge(roles, on=list(CONDITION_KEYS), how="left")
    auc = gains[gains["metric"] == AUC_METRIC]
    final = gains[gains["metric"] == "agreement"].sort_values("checkpoint_B", kind="stable")
    final = final.groupby([*keys, "control_label"], sort=False).tail(1)
    for control in sorted(gains["control_label"].unique()):
        for part, sel in (("auc", auc), ("final", final)):
            out = out.merge(_control_columns(sel, control, part), on=keys, how="left")
    at = list(board.columns).index("label") + 1
    front = [*board.columns[:at], "attack", "role", *board.columns[at:]]
    return out[[*front, *(c for c in out.columns if c not in front)]]


def gain_definitions(n_bootstrap: int = N_BOOTSTRAP,
                     also_against: Iterable[str] = ()) -> dict[str, Any]:
    """The rules behind ``gains.json``, written next to the numbers."""
    return {
        **definitions(n_bootstrap),
        "gain": "mean over paired seeds of value(attack) - value(control)",
        "control": "an attack whose null_control_for lists the data mode (matched by attack name)",
        "also_against": list(also_against),
        "also_against_rule": ("controls named with --also-against are paired with every attack "
                              "of the same dataset, victim, output mode and substitute, whatever "
                              "its data mode; control_data_mode names the control's"),
        "stratum": [*GAIN_STRATUM, "metric", "checkpoint_B"],
        "control_track": f"the control's Track {CONTROL_TRACK}, for attack Track A and Track B",
        "agreement_auc": ("paired difference of log-budget agreement AUCs over the checkpoints "
                          "every paired seed reached on both sides (span_lo..span_hi)"),
        "no_interval_below_n": MIN_SEEDS_FOR_INTERVAL,
        "metric_notes": dict(METRIC_NOTES),
    }


# -- pages ----------------------------------------------------------------------------------

GAIN_TEXT = (
    f"Gain = value(attack) − value(control) over the seeds run by both (paired by seed; a seed "
    f"missing on either side is dropped). Each attack is compared with every null control of "
    f"its data mode (controls are recognised by attack name); the control's Track "
    f"{CONTROL_TRACK} is the reference for both the attack's Track A and Track B. CI: "
    f"{CI_TEXT}, of the mean gain; n<{MIN_SEEDS_FOR_INTERVAL}: "
    f"a single paired seed, no interval and no CI claim. {FEW_SEEDS_TEXT}. The whole-curve agreement AUC gain "
    f"integrates both sides over the "
    f"same checkpoints. For kl_mean and l1_mean lower is better, so a negative gain is an "
    f"improvement."
)


def _point(checkpoint: Any) -> str:
    return "whole curve" if pd.isna(checkpoint) else f"@{budget_label(int(checkpoint))}"


def _gain_cells(r: pd.Series) -> list[str]:
    few = r["n_seeds"] < MIN_SEEDS_FOR_INTERVAL
    ci = (f"n<{MIN_SEEDS_FOR_INTERVAL}" if few
          else f"[{fmt_signed(r['ci_low'])}, {fmt_signed(r['ci_high'])}]")
    claim = f"n<{MIN_SEEDS_FOR_INTERVAL}" if few else ("yes" if r["ci_excludes_zero"] else "no")
    few_for_ci = not few and r["n_seeds"] < MIN_SEEDS_FOR_BOOTSTRAP
    other_mode = "" if r["control_data_mode"] == r["data_mode"] else f", {r['control_data_mode']}"
    return [str(r["label"]), str(r["track"]),
            f"{r['control_label']} ({r['control_track']}{other_mode})",
            str(r["metric"]), _point(r["checkpoint_B"]), str(r["n_seeds"]),
            fmt_signed(r["gain_mean"]), ci, claim, "⚠" if few_for_ci else "", str(r["seeds"])]


GAIN_HEADERS = ["attack", "track", "control (track)", "metric", "budget", "n", "gain",
                f"{CI_LEVEL:.0%} CI", "CI excludes 0", "few seeds", "seeds"]


def gain_section(gains: pd.DataFrame, metrics: Iterable[str] | None = None,
                 level: int = 2) -> list[Block]:
    """One table per (dataset, output mode, data mode, substitute, victim).

    ``metrics`` restricts the rows shown (the CSV/JSON always hold every metric).
    """
    shown = gains if metrics is None else gains[gains["metric"].isin(list(metrics))]
    blocks: list[Block] = []
    for key, g in shown.groupby(list(GAIN_STRATUM), sort=True):
        dataset, victim, mode, arch, data_mode = key
        blocks.append(Block(f"h{level}", f"{dataset} · {mode} · {data_mode} · substitute "
                                         f"{arch} · victim {victim}"))
        blocks.append(table(GAIN_HEADERS, [_gain_cells(r) for _, r in g.iterrows()]))
    notes = [METRIC_NOTES[m] for m in METRIC_NOTES if (shown["metric"] == m).any()]
    return blocks + [Block("p", "Note: " + n) for n in notes]


def missing_controls(roles: pd.DataFrame) -> list[str]:
    """One sentence per stratum whose attacks have no null control run to compare with."""
    lines = []
    for key, g in roles.groupby(list(GAIN_STRATUM), sort=True):
        if (g["role"] == "control").any():
            continue
        dataset, victim, mode, arch, data_mode = key
        expected = ", ".join(controls_of(data_mode)) or "none registered"
        lines.append(f"{dataset} · {mode} · {data_mode} (substitute {arch}, victim {victim}): "
                     f"no null control run (controls of {data_mode}: {expected}); no gain for "
                     f"{', '.join(sorted(g['label']))}.")
    return lines


def gain_blocks(gains: pd.DataFrame, roles: pd.DataFrame) -> list[Block]:
    """The whole ``gains.md`` page."""
    blocks = [Block("h1", "mebench gain over the null control"), Block("p", GAIN_TEXT),
              Block("p", "Metrics: " + "; ".join(metric_heading(m) for m in METRIC_ORDER))]
    blocks += [Block("p", line) for line in missing_controls(roles)]
    if gains.empty:
        return blocks + [Block("p", "No attack shares a stratum with a null control of its "
                                    "data mode: no gain to report.")]
    return blocks + gain_section(gains)
