"""The naive-vs-adaptive matrix (``mebench.report.adaptive``): adaptive rows are their own condition,
paired by seed with the undefended naive attacker, and a defense whose protection an adaptive
attacker removes is marked (contract §10: results are paired by seed, never pooled across conditions)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mebench.run.artifacts import write_metrics_csv
from mebench.report.adaptive import adaptive_blocks, adaptive_matrix
from mebench.report.load import load_results


def frame(undefended: float, naive: float, adaptive: float, noise: float = 0.01,
          own: float | None = None) -> pd.DataFrame:
    rows = []
    conditions = [("none", "naive", undefended), ("rs", "naive", naive), ("rs", "argmax", adaptive),
                  ("rs", "multi_query", adaptive - 0.05)]
    if own is not None:  # the argmax attacker against the undefended victim
        conditions.append(("none", "argmax", own))
    for seed in (0, 1, 2):
        for defense, strategy, value in conditions:
            label = "random" if strategy == "naive" else f"random.{strategy}"
            rows.append({"dataset": "MNIST", "output_mode": "soft_prob", "substitute_arch": "lenet5",
                         "victim_id": "v" if defense == "none" else f"v+{defense}", "label": label,
                         "base_label": "random", "adaptive": strategy, "data_mode": "surrogate", "track": "A",
                         "checkpoint_B": 1000, "defense": defense, "seed": seed,
                         "agreement": value + noise * seed, "defense_test_accuracy": 0.99,
                         "defense_perturbation": 0.1, "defense_stream_l1": 0.5, "defense_stream_label_change": 0.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("undefended, naive, adaptive, mark", [
    (0.90, 0.30, 0.90, "⚠ vanishes"),
    (0.90, 0.30, 0.70, "⚠ mostly recovered"),
    (0.90, 0.30, 0.35, "holds"),
    (0.90, 0.90, 0.95, "no protection"),
])
def test_the_mark_follows_the_paired_differences(undefended, naive, adaptive, mark):
    m = adaptive_matrix(frame(undefended, naive, adaptive), n_bootstrap=500)
    assert len(m) == 1
    r = m.iloc[0]
    assert r["mark"] == mark
    assert r["best_adaptive"] == "argmax"  # the strategy with the highest mean
    assert r["naive_drop_mean"] == pytest.approx(naive - undefended)
    assert r["adaptive_drop_mean"] == pytest.approx(adaptive - undefended)
    assert r["recovered_mean"] == pytest.approx(adaptive - naive)
    assert r["naive_drop_n"] == 3


def test_no_matrix_without_an_adaptive_run():
    f = frame(0.9, 0.3, 0.9)
    assert adaptive_matrix(f[f["adaptive"] == "naive"]).empty


def test_the_table_names_the_strategy_and_the_stream_utility():
    blocks = adaptive_blocks(adaptive_matrix(frame(0.9, 0.3, 0.9), n_bootstrap=200))
    rows = [b for b in blocks if b.kind == "table"][0].rows
    assert rows[0][0] == "rs" and rows[0][4].startswith("argmax: ") and rows[0][6] == "⚠ vanishes"
    assert rows[0][7] == "–"  # the argmax attacker was not run without the defense
    assert rows[0][10] == "0.500"


def test_the_best_strategy_is_also_shown_against_the_undefended_victim():
    """An argmax attacker pays for one-hot labels without any defense; the matrix shows that level and
    what the defense itself takes from the same strategy, paired by seed."""
    m = adaptive_matrix(frame(0.90, 0.30, 0.70, own=0.80), n_bootstrap=300)
    r = m.iloc[0]
    assert r["own_undefended_mean"] == pytest.approx(0.81)  # mean over seeds of 0.80 + 0.01 * seed
    assert r["defense_cost_mean"] == pytest.approx(0.70 - 0.80)
    assert r["defense_cost_n"] == 3
    rows = [b for b in adaptive_blocks(m) if b.kind == "table"][0].rows
    assert rows[0][7].startswith("0.8100 ± ") and "-0.1000" in rows[0][7]
    assert r["mark"] == "⚠ mostly recovered"  # the defense takes 0.10 from the argmax attacker too


def test_a_defense_that_takes_nothing_from_the_adaptive_strategy_is_marked():
    """Reverse sigmoid keeps every top-1: the argmax attacker agrees less than the undefended soft-label
    attacker, but exactly as much as argmax without the defense; the gap is one-hot labels' price."""
    m = adaptive_matrix(frame(0.93, 0.75, 0.83, own=0.83), n_bootstrap=300)
    r = m.iloc[0]
    assert r["adaptive_drop_ci_high"] < 0 and r["defense_cost_mean"] == pytest.approx(0.0)
    assert r["mark"] == "⚠ no cost to argmax"
    # an adaptive attacker that does worse than the naive one is no reason for a warning
    worse = adaptive_matrix(frame(0.93, 0.90, 0.83, own=0.83), n_bootstrap=300).iloc[0]
    assert worse["mark"] == "holds"


def _cell(folder: Path, budgets: tuple[int, ...], stream: dict[int, tuple[float, float]] | None) -> None:
    folder.mkdir(parents=True)
    (folder / "run_config.yaml").write_text("attack: {name: random}\ndataset: {name: MNIST}\n")
    write_metrics_csv(folder / "metrics.csv", [
        {"seed": 0, "checkpoint_B": b, "track": "A", "acc_gt": 0.5, "agreement": 0.5, "kl_mean": 0.5,
         "l1_mean": 0.05, "attack": "random", "data_mode": "surrogate", "output_mode": "soft_prob",
         "victim_id": "v+mad", "substitute_arch": "lenet5"} for b in budgets])
    last = budgets[-1]
    final = {"queries": last, "stream_l1": 0.9, "stream_label_change": 0.8}
    (folder / "summary.json").write_text(json.dumps({
        "status": "complete", "seed": 0, "attack": {"name": "random", "label": "random"},
        "dataset": {"name": "MNIST"}, "victim": {"victim_id": "v", "test_accuracy": 0.99},
        "defense": {"name": "mad", "stream_utility": final}}))
    if stream is not None:
        lines = ["seed,checkpoint_B,track,probe,metric,value"]
        for b, (l1, change) in stream.items():
            lines += [f"0,{b},-,stream_utility,stream_l1,{l1}", f"0,{b},-,stream_utility,stream_label_change,{change}"]
        (folder / "measurements.csv").write_text("\n".join(lines) + "\n")


def test_stream_utility_is_read_at_each_rows_own_checkpoint(tmp_path):
    """A 1k row shows the stream utility of the first 1,000 answered queries, not the run's final one;
    without the per-checkpoint record only the checkpoint summary.json was taken at gets a value."""
    _cell(tmp_path / "with" / "stamp" / "seed_0", (1000, 10000), {1000: (0.5, 0.25), 10000: (0.9, 0.8)})
    _cell(tmp_path / "without" / "stamp" / "seed_0", (1000, 10000), None)
    f = load_results(tmp_path).set_index(["run_name", "checkpoint_B"])
    assert f.loc[("with", 1000), "defense_stream_l1"] == 0.5
    assert f.loc[("with", 1000), "defense_stream_label_change"] == 0.25
    assert f.loc[("with", 10000), "defense_stream_l1"] == 0.9
    assert pd.isna(f.loc[("without", 1000), "defense_stream_l1"])
    assert f.loc[("without", 10000), "defense_stream_label_change"] == 0.8
