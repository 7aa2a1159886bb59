"""What the victim's build does to the leaderboard: the headline's attacks against several builds of one
victim recipe (recipe seeds), the spread across builds beside the spread across seeds, and whether the
ranking holds in every build (docs/results/leaderboard.md, "Victim builds").

Reads the seed-runs of ``results/leaderboard-builds-mnist`` (the builds grid's cells and the
leaderboard's own cells of the first build, which have the same plans) and gives ``mebench docs`` the
table ``spread.md``. Track A agreement AUC over log10(budget), as the leaderboard computes it.

    python studies/leaderboard-builds-mnist/summarize.py     # prints the table
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean, stdev

from mebench.report.document import fmt_mean_std, fmt_value  # the report's digits, so equal means print alike


HERE = Path(__file__).resolve().parents[2] / "results" / "leaderboard-builds-mnist"  # the set's records


def auc(points: dict[int, float]) -> float:
    """A seed-run's agreement AUC over x = log10(B), as the leaderboard computes it (``log_budget_auc``)."""
    import numpy as np

    from mebench.report.leaderboard import log_budget_auc

    xs = sorted(points)
    return float(log_budget_auc(xs, np.array([[points[b] for b in xs]]))[0]) if len(xs) > 1 else float("nan")


def seed_runs(set_dir: Path) -> dict[tuple[str, str, str], dict[int, float]]:
    """{(attack label, victim build sha256[:12], victim id): {seed: Track A AUC}} of complete seed-runs."""
    out: dict[tuple[str, str, str], dict[int, float]] = {}
    for path in sorted(set_dir.glob("*/summary.json")):
        s = json.loads(path.read_text())
        if s.get("status") != "complete":
            continue
        rows = [r for r in s.get("results", []) if r["track"] == "A"]
        if not rows:
            continue
        victim = s.get("plan", {}).get("victim", {})
        key = (rows[0]["attack"], victim.get("checkpoint_sha256", "?")[:12], rows[0]["victim_id"])
        out.setdefault(key, {})[int(s["seed"])] = auc({int(r["checkpoint_B"]): float(r["agreement"]) for r in rows})
    return out


def spread_table(set_dir: Path) -> str:
    runs = seed_runs(set_dir)
    if not runs:
        return "*No records yet.*\n"
    builds = sorted({(k[2], k[1]) for k in runs})
    attacks = sorted({k[0] for k in runs})
    by = {(a, b): runs.get((a, b[1], b[0]), {}) for a in attacks for b in builds}
    ranks = {}
    for b in builds:  # rank of each attack within a build, by its mean over seeds (equal to 4 decimals: a tie)
        means = {a: round(mean(by[(a, b)].values()), 4) for a in attacks if by[(a, b)]}
        ranks[b] = {a: 1 + sum(m > means[a] for m in means.values()) for a in means}
    head = ["attack"] + [f"{vid} ({sha})" for vid, sha in builds] + [
        "mean over builds", "std across builds", "mean std across seeds", "rank in each build"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for a in sorted(attacks, key=lambda a: -mean(mean(v.values()) for b in builds if (v := by[(a, b)]))):
        cells, build_means, seed_stds = [], [], []
        for b in builds:
            v = list(by[(a, b)].values())
            if not v:
                cells.append("—")
                continue
            build_means.append(mean(v))
            if len(v) > 1:
                seed_stds.append(stdev(v))
            cells.append(f"{fmt_mean_std(mean(v), stdev(v))} (n={len(v)})" if len(v) > 1 else f"{fmt_value(v[0])} (n=1)")
        across = fmt_value(stdev(build_means)) if len(build_means) > 1 else "—"
        within = fmt_value(mean(seed_stds)) if seed_stds else "—"
        rank = ", ".join(str(ranks[b].get(a, "—")) for b in builds)
        lines.append("| " + " | ".join([a, *cells, fmt_value(mean(build_means)), across, within, rank]) + " |")
    complete = all(len(by[(a, b)]) == 3 for a in attacks for b in builds)
    holds = len({tuple(sorted(ranks[b].items())) for b in builds}) == 1
    note = (f"\nThe ranking (ties: equal means to 4 decimals) is {'the same' if holds else 'not the same'} in "
            f"every build{'' if complete else ' (some builds have fewer than 3 seeds so far)'}.\n")
    return "\n".join(lines) + "\n" + note


def tables(set_dir: Path = HERE) -> dict[str, str]:
    return {"spread.md": spread_table(set_dir)}


if __name__ == "__main__":
    print(spread_table(HERE))
