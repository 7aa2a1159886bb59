"""The naive-vs-adaptive defense matrix (issue 38): per defense, the attack's agreement without it,
behind it (the naive attacker) and behind it against the best adaptive attacker
(``mebench.attacks.adaptive``), paired by seed, with the defense's utility cost beside it.

Each defended cell is marked ``vanishes``, ``no cost to <strategy>``, ``mostly recovered``,
``holds`` or ``no protection``; the rules, the choice of the best adaptive attacker and the
undefended-strategy column are below. See docs/defenses/adaptive.md.
"""
# Rows come from records whose ``adaptive`` column names the strategy (``naive`` when none); the
# naive and adaptive versions of one attack share ``base_label``. The undefended baseline is the
# naive attacker without a defense. For every defended (defense, budget, track) the *best*
# adaptive attacker is the strategy with the highest mean agreement over seeds (chosen after the
# fact, so its gain is an upper estimate with 3 seeds). Marks:
#
# - ``vanishes``: the naive drop is significant (its 95 % CI is below 0) and the best adaptive
#   attacker's is not (its CI reaches 0 or above): the protection is gone;
# - ``no cost to <strategy>``: the naive drop is significant; the best adaptive attacker does better
#   than the naive one and still agrees less than the undefended naive one, but no less than the same
#   strategy against the undefended victim (that paired CI reaches 0): what it gives up is the
#   strategy's own price (one-hot labels cost agreement without any defense), not the defense's;
# - ``mostly recovered``: the adaptive attacker wins back at least half of the naive drop (means);
# - ``holds``: none of these; ``no protection``: the naive drop itself is not significant.
#
# Beside them, the best adaptive strategy against the undefended victim (when measured) and what the
# defense takes from that same strategy, paired by seed: an adaptive attacker can pay for its strategy
# without any defense (one-hot labels cost agreement), and this column tells that price from the defense's.

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from mebench.report.document import Block, budget_label, fmt_gain, fmt_mean_std, table
from mebench.report.stats import CI_TEXT, MIN_SEEDS_FOR_INTERVAL, N_BOOTSTRAP, paired_ci

KEYS = ("dataset", "output_mode", "substitute_arch", "base_victim", "base_label", "data_mode", "track", "checkpoint_B")
UTILITY = ("defense_test_accuracy", "defense_perturbation", "defense_stream_l1", "defense_stream_label_change")


def adaptive_matrix(frame: pd.DataFrame, n_bootstrap: int = N_BOOTSTRAP) -> pd.DataFrame:
    """One row per defended condition (KEYS + defense): undefended, naive and best adaptive agreement,
    the paired differences with CIs, the mark and the defense's utility. Empty without an adaptive run."""
    if "adaptive" not in frame or (frame["adaptive"] == "naive").all():
        return pd.DataFrame()
    f = frame.assign(defense=frame["defense"].replace("", "none"), base_victim=frame["victim_id"].str.split("+").str[0])
    rows = []
    for key, g in f.groupby(list(KEYS), sort=True):
        by = {(d, a): s.groupby("seed")["agreement"].mean() for (d, a), s in g.groupby(["defense", "adaptive"])}
        if ("none", "naive") not in by:
            continue
        base = by[("none", "naive")]
        for defense in sorted({d for d, _ in by if d != "none"}):
            row = _row(dict(zip(KEYS, key)), defense, base, by, g[g["defense"] == defense], n_bootstrap)
            if row is not None:
                rows.append(row)
    return pd.DataFrame(rows)


def _row(key: dict, defense: str, base: pd.Series, by: dict, g: pd.DataFrame, n_bootstrap: int) -> Optional[dict]:
    naive = by.get((defense, "naive"))
    adaptive = {a: s for (d, a), s in by.items() if d == defense and a != "naive"}
    if naive is None and not adaptive:
        return None
    best = max(adaptive, key=lambda a: adaptive[a].mean()) if adaptive else None
    util = {c: float(g.loc[g["adaptive"] == "naive", c].mean()) if c in g and (g["adaptive"] == "naive").any()
            else float(g[c].mean()) if c in g else float("nan") for c in UTILITY}
    out = {**key, "defense": defense, "undefended_mean": base.mean(), "undefended_std": base.std(ddof=1),
           "naive_mean": None if naive is None else naive.mean(), "naive_std": None if naive is None else naive.std(ddof=1),
           "best_adaptive": best, "adaptive_mean": None if best is None else adaptive[best].mean(),
           "adaptive_std": None if best is None else adaptive[best].std(ddof=1),
           "strategies": ";".join(f"{a}={s.mean():.4f}" for a, s in sorted(adaptive.items())), **util}
    out.update(_paired("naive_drop", base, naive, n_bootstrap))
    out.update(_paired("adaptive_drop", base, None if best is None else adaptive[best], n_bootstrap))
    out.update(_paired("recovered", naive, None if best is None else adaptive[best], n_bootstrap))
    own = None if best is None else by.get(("none", best))
    out["own_undefended_mean"] = None if own is None else own.mean()
    out["own_undefended_std"] = None if own is None else own.std(ddof=1)
    out.update(_paired("defense_cost", own, None if best is None else adaptive[best], n_bootstrap))
    out["mark"] = _mark(out)
    return out


def _paired(name: str, a: Optional[pd.Series], b: Optional[pd.Series], n_bootstrap: int) -> dict[str, Any]:
    """mean(b - a) over the seeds both have, with the report's 95 % interval (:func:`paired_ci`;
    none below 2 seeds)."""
    empty = {f"{name}_mean": None, f"{name}_ci_low": None, f"{name}_ci_high": None, f"{name}_n": 0}
    if a is None or b is None:
        return empty
    pair = pd.concat([a, b], axis=1, keys=["a", "b"]).dropna()
    if pair.empty:
        return empty
    if len(pair) < MIN_SEEDS_FOR_INTERVAL:
        return {**empty, f"{name}_mean": float((pair["b"] - pair["a"]).mean()), f"{name}_n": len(pair)}
    ci = paired_ci(pair["a"].to_numpy(), pair["b"].to_numpy(), n_bootstrap=n_bootstrap)
    return {f"{name}_mean": ci.mean_diff, f"{name}_ci_low": ci.ci_lower, f"{name}_ci_high": ci.ci_upper,
            f"{name}_n": ci.n}


def _mark(r: dict) -> str:
    """The module docstring's marks, from the paired differences."""
    drop, hi = r["naive_drop_mean"], r["naive_drop_ci_high"]
    if drop is None or r["adaptive_drop_mean"] is None:
        return ""
    if hi is None or hi >= 0:
        return "no protection"
    a_hi = r["adaptive_drop_ci_high"]
    if a_hi is not None and a_hi >= 0:
        return "⚠ vanishes"
    c_lo, c_hi = r.get("defense_cost_ci_low"), r.get("defense_cost_ci_high")
    gained = r.get("recovered_mean") is not None and r["recovered_mean"] > 0  # it beats the naive attacker
    if gained and c_lo is not None and c_hi is not None and c_lo <= 0 <= c_hi:
        return f"⚠ no cost to {r['best_adaptive']}"
    if r["adaptive_drop_mean"] >= drop / 2:
        return "⚠ mostly recovered"
    return "holds"


def _fmt(r: pd.Series, prefix: str) -> str:
    """``mean ± std``, and for naive/adaptive the paired change against no defense in brackets."""
    text = fmt_mean_std(r[f"{prefix}_mean"], r[f"{prefix}_std"])
    if prefix == "undefended":
        return text
    p = f"{prefix}_drop"
    if r[f"{p}_mean"] is None or pd.isna(r[f"{p}_mean"]):
        return text
    return f"{text} ({fmt_gain(r[f'{p}_mean'], r[f'{p}_ci_low'], r[f'{p}_ci_high'], int(r[f'{p}_n']))})"


def _own(r: pd.Series) -> str:
    """The best adaptive strategy without the defense, and the defense's paired cost to it."""
    if r["own_undefended_mean"] is None or pd.isna(r["own_undefended_mean"]):
        return "–"
    text = fmt_mean_std(r["own_undefended_mean"], r["own_undefended_std"])
    if r["defense_cost_mean"] is None or pd.isna(r["defense_cost_mean"]):
        return text
    return f"{text} ({fmt_gain(r['defense_cost_mean'], r['defense_cost_ci_low'], r['defense_cost_ci_high'], int(r['defense_cost_n']))})"


def _num(v: Any, digits: int = 3) -> str:
    return "–" if v is None or pd.isna(v) else f"{v:.{digits}f}"


def adaptive_blocks(matrix: pd.DataFrame) -> list[Block]:
    """One table per (dataset, output mode, attack, track): rows defense × budget."""
    blocks = [Block("h1", "mebench defenses against adaptive attackers"), Block("p", (
        "Agreement with the undefended victim (mean ± std over seeds): without the defense, behind it "
        "against the naive attacker, and behind it against the best adaptive attacker (the strategy "
        "with the highest mean; in brackets the change against no defense, paired by seed, mean ["
        f"{CI_TEXT}]). 'recovered': adaptive minus naive, paired. Utility: defended test accuracy, "
        "mean |Δp| per class on the test split, and on the attacker's own stream the mean L1 "
        "|Δp| and the share of answers whose top-1 changed. ⚠ vanishes: the naive drop is significant "
        "and the adaptive one is not; ⚠ mostly recovered: the adaptive attacker wins back at least "
        "half of the naive drop; ⚠ no cost to <strategy>: the defense takes nothing measurable from the "
        "best adaptive strategy, whose remaining gap to the undefended attacker is the strategy's own "
        "price. 'same strategy, undefended': the best adaptive strategy against the "
        "victim without the defense, and in brackets what the defense takes from it (paired)."))]
    heads = ["defense", "B", "undefended", "naive", "best adaptive", "recovered", "mark",
             "same strategy, undefended", "test acc",
             "test |Δp|", "stream L1 |Δp|", "stream label change"]
    for (dataset, mode, label, dm, track), m in matrix.groupby(
            ["dataset", "output_mode", "base_label", "data_mode", "track"], sort=True):
        rows = []
        for _, r in m.sort_values(["defense", "checkpoint_B"]).iterrows():
            adaptive = "–" if r["best_adaptive"] is None or pd.isna(r["best_adaptive"]) else \
                f"{r['best_adaptive']}: {_fmt(r, 'adaptive')}"
            rec = fmt_gain(r["recovered_mean"], r["recovered_ci_low"], r["recovered_ci_high"], int(r["recovered_n"]))
            rows.append([str(r["defense"]), budget_label(int(r["checkpoint_B"])), _fmt(r, "undefended"),
                         "–" if r["naive_mean"] is None or pd.isna(r["naive_mean"]) else _fmt(r, "naive"),
                         adaptive, rec, str(r["mark"]), _own(r), _num(r["defense_test_accuracy"]),
                         _num(r["defense_perturbation"], 4), _num(r["defense_stream_l1"]),
                         _num(r["defense_stream_label_change"])])
        blocks += [Block("h2", f"{dataset} · {mode} · {label} ({dm}) · Track {track}"), table(heads, rows)]
        strategies = [f"{r['defense']} @{budget_label(int(r['checkpoint_B']))}: {r['strategies']}"
                      for _, r in m.iterrows() if r["strategies"]]
        if strategies:
            blocks.append(Block("p", "Every adaptive strategy's mean agreement: " + "; ".join(strategies) + "."))
    return blocks
