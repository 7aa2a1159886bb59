"""A paper's table beside mebench's records: each of the paper's numbers, mebench's mean over seeds
with its 95 % interval and the gap, then the rows that change one setting of the reference code (its
quirks), and for every gap over a threshold the measured row that explains it, or "open".

Torch-free (the report layer). A study script (``studies/<set>/summarize.py``) holds the paper's
numbers and the quirk rows and calls :func:`reproduction_markdown`; ``mebench docs`` pastes the result.
See docs/results/table1.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean, stdev
from typing import Any, Iterable, Mapping, Optional

from mebench.report.stats import MIN_SEEDS_FOR_INTERVAL, paired_ci


@dataclass(frozen=True)
class Quirk:
    """A row that runs ``base`` with one or more of the reference code's settings (``what``)."""

    base: str
    what: str


def seed_values(summaries: Iterable[Mapping[str, Any]], metric: str, track: str,
                budget: int) -> dict[tuple[str, str], dict[int, float]]:
    """``{(dataset, attack label): {seed: metric}}`` of the complete seed-runs at ``budget`` on ``track``."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for s in summaries:
        if s.get("status") != "complete":
            continue
        label = str((s.get("attack") or {}).get("label") or (s.get("attack") or {}).get("name"))
        dataset = str((s.get("dataset") or {}).get("name"))
        for r in s.get("results") or []:
            if r.get("track") == track and int(r.get("checkpoint_B", -1)) == budget and r.get(metric) is not None:
                out.setdefault((dataset, label), {})[int(s.get("seed", r.get("seed", 0)))] = float(r[metric])
    return out


def _summary(values: Mapping[int, float], scale: float) -> tuple[Optional[float], str, str]:
    """(mean, "mean ± std (n)", "[lo, hi]") of ``values`` times ``scale``."""
    v = [values[k] * scale for k in sorted(values)]
    if not v:
        return None, "no records yet", "–"
    text = f"{mean(v):.1f} ± {stdev(v):.1f} (n={len(v)})" if len(v) > 1 else f"{v[0]:.1f} (n=1)"
    if len(v) < MIN_SEEDS_FOR_INTERVAL:
        return mean(v), text, "–"
    ci = paired_ci([0.0] * len(v), v)  # paired with zeros: the report's interval of the mean
    return mean(v), text, f"[{ci.ci_lower:.1f}, {ci.ci_upper:.1f}]"


def _gap(m: Optional[float], paper: float) -> str:
    return "–" if m is None else f"{m - paper:+.1f}"


def reproduction_markdown(summaries: Iterable[Mapping[str, Any]], paper: Mapping[tuple[str, str], float],
                          quirks: Mapping[str, Quirk], *, metric: str = "acc_gt", track: str = "B",
                          budget: int = 50_000, scale: float = 100.0, threshold: float = 5.0,
                          seeds: int = 3) -> str:
    """Two tables and a list: the paper's cells (``paper``: ``{(dataset, label): number}``, in the
    paper's unit, ``scale`` times the record's ``metric``) beside mebench's; the ``quirks`` rows of each
    dataset with their shift from their base row (paired by seed); and, for each paper cell, whether
    its gap exceeds ``threshold`` and which measured quirk row of the same base lands within
    ``threshold`` of the paper (it explains the gap), else "open"."""
    runs = seed_values(summaries, metric, track, budget)
    datasets = list(dict.fromkeys(d for d, _ in paper))
    head = ["victim", "attack", "paper", f"mebench (Track {track}, mean ± std)", "95 % interval", "gap"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    means: dict[tuple[str, str], Optional[float]] = {}
    for (dataset, label), number in paper.items():
        m, text, ci = _summary(runs.get((dataset, label), {}), scale)
        means[(dataset, label)] = m
        lines.append(f"| {dataset} | `{label}` | {number:.1f} | {text} | {ci} | {_gap(m, number)} |")
    qhead = ["victim", "row", "what it changes", f"mebench (Track {track}, mean ± std)", "95 % interval",
             "shift from its base row (paired)", "gap to the paper"]
    qlines = ["| " + " | ".join(qhead) + " |", "|" + "|".join("---" for _ in qhead) + "|"]
    explained: dict[tuple[str, str], list[str]] = {}
    for dataset in datasets:
        for label, q in quirks.items():
            values = runs.get((dataset, label), {})
            m, text, ci = _summary(values, scale)
            base = runs.get((dataset, q.base), {})
            pair = sorted(set(values) & set(base))
            if len(pair) >= MIN_SEEDS_FOR_INTERVAL:
                d = paired_ci([base[s] * scale for s in pair], [values[s] * scale for s in pair])
                shift = f"{d.mean_diff:+.1f} [{d.ci_lower:+.1f}, {d.ci_upper:+.1f}]"
            else:
                shift = "–"
            number = paper.get((dataset, q.base))
            gap = "–" if number is None else _gap(m, number)
            qlines.append(f"| {dataset} | `{label}` (of `{q.base}`) | {q.what} | {text} | {ci} | {shift} | {gap} |")
            if m is not None and number is not None and len(values) >= seeds and abs(m - number) <= threshold:
                explained.setdefault((dataset, q.base), []).append(f"`{label}` ({q.what}: {m:.1f})")
    notes = []
    for (dataset, label), number in paper.items():
        values, m = runs.get((dataset, label), {}), means[(dataset, label)]
        where = f"{dataset} `{label}`"
        if m is None or len(values) < seeds:
            notes.append(f"- {where}: {len(values)} of {seeds} seeds so far.")
        elif abs(m - number) <= threshold:
            notes.append(f"- {where}: within {threshold:g} points of the paper ({m:.1f} vs {number:.1f}).")
        elif (dataset, label) in explained:
            notes.append(f"- {where}: {m - number:+.1f} points from the paper, explained by "
                         + "; ".join(explained[(dataset, label)]) + f", within {threshold:g} points of it.")
        else:
            own = [q for q, v in quirks.items() if v.base == label]
            missing = [q for q in own if len(runs.get((dataset, q), {})) < seeds]
            why = (f"its quirk rows {', '.join(f'`{q}`' for q in missing)} are not complete yet" if missing else
                   f"no measured row brings it within {threshold:g} points" if own else "no quirk row measures it")
            notes.append(f"- {where}: {m - number:+.1f} points from the paper, **open** ({why}).")
    return ("\n".join(lines) + "\n\n" + "\n".join(qlines) + "\n\n"
            + f"Gaps over {threshold:g} points (a quirk row explains a gap when its {seeds}-seed mean lands within "
            + f"{threshold:g} points of the paper):\n\n" + "\n".join(notes) + "\n")
