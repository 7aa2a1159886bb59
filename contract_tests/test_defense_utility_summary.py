"""The defense grids' utility table (studies/defenses/summarize.py, docs/results/defenses.md): a defense is
fitted once per victim, so its cost to honest users is one value whatever the seed-run, and the table says
so when runs disagree; its time is each run's measurement, given as the median and range."""

from __future__ import annotations

import pandas as pd
from _studies import study


def _row(defense: str, acc: float, secs: float) -> dict:
    return {"victim": "v", "defense": defense, "test_images": 10, "test_accuracy": acc,
            "agreement_with_undefended": 1.0, "mean_abs_perturbation": 0.1,
            "seconds_per_1000_answers": secs, "overhead_seconds_per_1000": secs - 0.1}


def test_one_cost_per_defense_and_the_times_spread():
    summarize = study("defenses", "summarize.py")
    table = summarize.utility_table(pd.DataFrame([_row("mad", 0.98, 0.2), _row("mad", 0.98, 0.4), _row("mad", 0.98, 0.3),
                                                  _row("noise", 0.97, 0.1), _row("noise", 0.96, 0.1)]))
    assert "| v | mad | 3 | 0.9800 | 1.0000 | 0.1000 | 0.300 [0.200, 0.400] | +0.200 |" in table
    assert "| v | noise | 2 | 0.9700 (differs across runs by up to 1.0e-02) |" in table


def test_protection_rows_are_defenses_and_cells_their_paired_change():
    summarize = study("defenses", "summarize.py")
    base = {"dataset": "MNIST", "data_mode": "surrogate", "track": "A", "checkpoint_B": 1000, "agreement_std": 0.0}
    rows = [{**base, "label": "random", "output_mode": "soft_prob", "defense": "none", "agreement_mean": 0.5,
             "drop_mean": None, "drop_ci_low": None, "drop_ci_high": None, "drop_n": 0},
            {**base, "label": "random", "output_mode": "soft_prob", "defense": "mad", "agreement_mean": 0.2,
             "drop_mean": -0.3, "drop_ci_low": -0.4, "drop_ci_high": -0.2, "drop_n": 3},
            {**base, "label": "random", "output_mode": "hard_top1", "defense": "none", "agreement_mean": 0.4,
             "drop_mean": None, "drop_ci_low": None, "drop_ci_high": None, "drop_n": 0},
            {**base, "track": "B", "label": "random", "output_mode": "soft_prob", "defense": "mad",
             "agreement_mean": 0.9, "drop_mean": 0.4, "drop_ci_low": 0.3, "drop_ci_high": 0.5, "drop_n": 3}]
    table = summarize.protection_table(pd.DataFrame(rows))
    assert "### MNIST · Track A · 1k" in table and "Track B" not in table
    assert "| defense | random (soft_prob) | random (hard_top1) |" in table
    assert "| none (agreement) | 0.500 | 0.400 |" in table
    assert "| mad | -0.3000 [-0.4000, -0.2000] | – |" in table
