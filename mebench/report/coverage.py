"""Which registered attacks a result set covers: for every attack and output mode it supports, the
rows its records hold (each label with its complete seeds at the required checkpoints) and whether
the set has the attack's row. A leaderboard page shows it, so what is still missing is read from the
records and the registry, never typed (docs/results/leaderboard.md).

``coverage_markdown(summaries, attacks)`` takes the records' ``summary.json`` dicts and
``{attack name: (output modes it supports, is a null control)}`` (``registered_attacks()`` reads
the registry; it imports torch).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from mebench.report.document import budget_label

#: What makes an attack's row complete on the leaderboard: these seeds, each with Track A at these checkpoints.
SEEDS = 3
BUDGETS = (1_000, 10_000)


def registered_attacks() -> dict[str, tuple[tuple[str, ...], bool]]:
    """Every registered attack: the output modes it supports and whether it is a null control."""
    from mebench.attacks import ATTACKS

    return {n: (tuple(sorted(ATTACKS.get(n).output_modes)), bool(getattr(ATTACKS.get(n), "null_control_for", None)))
            for n in ATTACKS.names()}


def seeds_by_row(summaries: Iterable[Mapping[str, Any]], budgets: Sequence[int] = BUDGETS) -> dict[tuple, set[int]]:
    """``{(attack name, output mode, label, data mode): seeds}`` of complete seed-runs with a Track A
    result at every one of ``budgets`` (no defense in front of the victim)."""
    out: dict[tuple, set[int]] = {}
    for s in summaries:
        attack, dataset = s.get("attack") or {}, s.get("dataset") or {}
        defense = (s.get("defense") or {}).get("name") or "none"
        if s.get("status") != "complete" or defense != "none":
            continue
        have = {int(r.get("checkpoint_B", 0)) for r in s.get("results", []) if r.get("track") == "A"}
        if not set(budgets) <= have:
            continue
        key = (str(attack.get("name")), str(attack.get("output_mode")), str(attack.get("label") or attack.get("name")),
               str(dataset.get("data_mode")))
        out.setdefault(key, set()).add(int(s.get("seed", 0)))
    return out


def coverage_rows(summaries: Iterable[Mapping[str, Any]], attacks: Mapping[str, tuple[Sequence[str], bool]],
                  seeds: int = SEEDS, budgets: Sequence[int] = BUDGETS) -> list[dict[str, Any]]:
    """One row per registered attack and output mode it supports: its rows in the records
    (``label (data mode): n seeds``) and ``covered`` (some row has ``seeds`` seeds at every budget)."""
    have = seeds_by_row(summaries, budgets)
    rows = []
    for name in sorted(attacks):
        modes, control = attacks[name]
        for mode in modes:
            found = sorted((label, dm, len(s)) for (a, m, label, dm), s in have.items() if a == name and m == mode)
            rows.append({"attack": name, "output_mode": mode, "control": control,
                         "rows": [f"{label} ({dm}): {n}" for label, dm, n in found],
                         "covered": any(n >= seeds for *_, n in found)})
    return rows


def coverage_markdown(summaries: Iterable[Mapping[str, Any]], attacks: Mapping[str, tuple[Sequence[str], bool]],
                      seeds: int = SEEDS, budgets: Sequence[int] = BUDGETS) -> str:
    """The coverage table and one sentence naming what is missing."""
    rows = coverage_rows(list(summaries), attacks, seeds, budgets)
    at = " and ".join(budget_label(int(b)) for b in budgets)
    lines = [f"Every registered attack in every output mode it supports: its rows in these records (label, "
             f"data mode: seeds complete with Track A at {at}) and whether the attack has its row "
             f"({seeds} seeds).", "",
             "| attack | output mode | rows in the records (seeds) | has its row |", "|---|---|---|---|"]
    for r in rows:
        name = f"{r['attack']} (null control)" if r["control"] else r["attack"]
        lines.append(f"| {name} | {r['output_mode']} | {'; '.join(r['rows']) or '–'} | "
                     f"{'yes' if r['covered'] else 'no'} |")
    missing = [f"{r['attack']} ({r['output_mode']})" for r in rows if not r["covered"]]
    done = sum(r["covered"] for r in rows)
    lines += ["", f"{done} of {len(rows)} attack × output-mode rows have {seeds} seeds. "
              + (f"Not yet: {', '.join(missing)}." if missing else "None is missing.")]
    return "\n".join(lines) + "\n"
