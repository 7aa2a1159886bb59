"""Gain over the null control in reports (contract §6 controls, §8 tracks, §10 seeds, §16).

Results are built in the exact shape :func:`mebench.report.load.load_results`
gives (``records_to_frame`` over ``RunRecord`` objects, one per seed-run), with
per-seed values chosen so every gain is known in advance: the report must find
it, pair it by seed, compare both tracks with the control's Track A, keep data
modes apart and make no interval claim from a single seed.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mebench.attacks import ATTACKS, Attack
from mebench.report import write_report
from mebench.report.aggregate import METRIC_TITLES
from mebench.report.gains import (KNOWN_CONTROLS, condition_roles, control_modes, controls_of,
                                  gain_table, leaderboard_gain_columns)
from mebench.report.leaderboard import agreement_auc_per_seed, leaderboard_table, log_budget_auc
from mebench.report.load import CSV_COLUMNS, RunRecord, records_to_frame
from mebench.report.stats import paired_bootstrap_ci

BUDGETS = (1000, 10_000, 100_000)
N_BOOT = 500


def _record(attack: str, data_mode: str, seed: int, agreement: Sequence[float],
            tracks: Sequence[str] = ("A",), label: str | None = None,
            budgets: Sequence[int] = BUDGETS, track_shift: float = 0.0) -> RunRecord:
    """One seed-run; Track B (if any) is ``track_shift`` above Track A at every budget."""
    rows = []
    for b, agr in zip(budgets, agreement):
        for track in tracks:
            v = agr + (track_shift if track == "B" else 0.0)
            rows.append({"seed": seed, "checkpoint_B": b, "track": track, "acc_gt": v - 0.01,
                         "agreement": v, "kl_mean": 1.0 - v, "l1_mean": (1.0 - v) / 10,
                         "attack": label or attack,  # metrics.csv holds the label (engine)
                         "data_mode": data_mode, "output_mode": "soft_prob",
                         "victim_id": "mnist_lenet5_v1", "substitute_arch": "lenet5"})
    attack_doc = {"name": attack, **({"label": label} if label else {})}
    return RunRecord(rows=rows, summary={"attack": attack_doc, "dataset": {"name": "MNIST"}},
                     run_name=label or attack, run_id="20250102-120000",
                     source=f"{label or attack}/seed_{seed}")


def _frame(records: list[RunRecord]) -> pd.DataFrame:
    return records_to_frame(records)


def _gain(gains: pd.DataFrame, label: str, control: str, metric: str = "agreement",
          checkpoint: int | None = 10_000, track: str = "A") -> pd.Series:
    sel = gains[(gains["label"] == label) & (gains["control_label"] == control)
                & (gains["metric"] == metric) & (gains["track"] == track)]
    sel = sel[sel["checkpoint_B"].isna()] if checkpoint is None else \
        sel[sel["checkpoint_B"] == checkpoint]
    assert len(sel) == 1, sel
    return sel.iloc[0]


BASE = {0: 0.40, 1: 0.55, 2: 0.47, 3: 0.61, 4: 0.35, 5: 0.52}
"""Control agreement per seed: a large seed effect that pairing must cancel."""
DELTA = {0: 0.10, 1: 0.12, 2: 0.08, 3: 0.11, 4: 0.09, 5: 0.13}
"""Known per-seed gain of the attack over the control."""


def _control_and_attack(seeds_ctl: Sequence[int], seeds_att: Sequence[int],
                        data_mode: str = "surrogate") -> pd.DataFrame:
    recs = [_record("random", data_mode, s, [BASE[s]] * 3) for s in seeds_ctl]
    recs += [_record("activethief", data_mode, s, [BASE[s] + DELTA[s]] * 3,
                     tracks=("A", "B"), label="activethief-kcenter", track_shift=-0.05)
             for s in seeds_att]
    return _frame(recs)


def test_gain_is_the_paired_difference_with_a_bracketing_ci():
    # contract 10: gain = mean over seeds of value(attack) - value(control), 95% CI (6 seeds:
    # the percentile bootstrap)
    gains = gain_table(_control_and_attack(range(6), range(6)), n_bootstrap=N_BOOT)
    row = _gain(gains, "activethief-kcenter", "random")
    deltas = np.array([DELTA[s] for s in range(6)])
    assert row["gain_mean"] == pytest.approx(deltas.mean(), abs=1e-12)
    assert row["ci_low"] <= row["gain_mean"] <= row["ci_high"]
    assert row["ci_low"] >= deltas.min() - 1e-12 and row["ci_high"] <= deltas.max() + 1e-12
    ctl = np.array([BASE[s] for s in range(6)])
    ci = paired_bootstrap_ci(ctl, ctl + deltas, n_bootstrap=N_BOOT)  # the one bootstrap
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.ci_lower, ci.ci_upper))
    assert row["n_seeds"] == 6 and row["seeds"] == "0;1;2;3;4;5"
    assert bool(row["ci_excludes_zero"]) and row["control_attack"] == "random"
    # lower-is-better metrics keep the raw sign: the attack's L1 is lower, the gain negative
    l1 = _gain(gains, "activethief-kcenter", "random", metric="l1_mean")
    assert l1["gain_mean"] == pytest.approx(-deltas.mean() / 10) and not l1["higher_is_better"]


def test_seeds_are_paired_and_a_seed_missing_on_one_side_is_dropped():
    # contract 10: seeds paired; seed 0 (control only) and seed 4 (attack only) are left out
    gains = gain_table(_control_and_attack([0, 1, 2, 3], [1, 2, 3, 4]), n_bootstrap=N_BOOT)
    row = _gain(gains, "activethief-kcenter", "random")
    assert row["n_seeds"] == 3 and row["seeds"] == "1;2;3"
    assert row["gain_mean"] == pytest.approx(np.mean([DELTA[s] for s in (1, 2, 3)]), abs=1e-12)
    unpaired = (np.mean([BASE[s] + DELTA[s] for s in (1, 2, 3, 4)])
                - np.mean([BASE[s] for s in (0, 1, 2, 3)]))
    assert abs(row["gain_mean"] - unpaired) > 0.01  # an unpaired mean would differ


def test_track_b_gain_is_taken_against_the_control_track_a():
    # contract 8: controls report Track A only; attack Track A and B both use it
    frame = _control_and_attack(range(3), range(3))
    stray = _record("random", "surrogate", 0, [0.99] * 3, tracks=("B",))  # must be ignored
    frame = pd.concat([frame, _frame([stray])], ignore_index=True)
    gains = gain_table(frame, n_bootstrap=N_BOOT)
    a = _gain(gains, "activethief-kcenter", "random", track="A")
    b = _gain(gains, "activethief-kcenter", "random", track="B")
    want = np.mean([DELTA[s] for s in range(3)])
    assert a["gain_mean"] == pytest.approx(want) and b["gain_mean"] == pytest.approx(want - 0.05)
    assert set(gains["control_track"]) == {"A"} and set(gains["track"]) == {"A", "B"}
    assert "random" not in set(gains["label"])  # contract 6: a control gets no gain row


@pytest.mark.slow
def test_data_free_attacks_meet_data_free_controls_only():
    # contract 6: each data mode is compared with its own controls, a gain per control
    recs = [_record("random", "surrogate", s, [0.5] * 3) for s in range(3)]
    recs += [_record("activethief", "surrogate", s, [0.6] * 3, label="activethief-kcenter")
             for s in range(3)]
    recs += [_record("dfme", "data_free", s, [0.35] * 3, tracks=("A", "B")) for s in range(3)]
    recs += [_record("untrained_generator", "data_free", s, [0.20] * 3) for s in range(3)]
    recs += [_record("smooth_noise", "data_free", s, [0.25] * 3) for s in range(3)]
    gains = gain_table(_frame(recs), n_bootstrap=N_BOOT)
    pairs = set(zip(gains["label"], gains["data_mode"], gains["control_label"]))
    assert pairs == {("activethief-kcenter", "surrogate", "random"),
                     ("dfme", "data_free", "untrained_generator"),
                     ("dfme", "data_free", "smooth_noise")}
    assert _gain(gains, "dfme", "untrained_generator", track="B")["gain_mean"] == \
        pytest.approx(0.15)
    assert _gain(gains, "dfme", "smooth_noise")["gain_mean"] == pytest.approx(0.10)


def test_a_single_paired_seed_makes_no_interval_claim(tmp_path):
    # contract 10: n < 2 -> no CI (NaN bounds, no "excludes 0"), the text says n<2
    gains = gain_table(_control_and_attack([0, 1], [1, 2]), n_bootstrap=N_BOOT)
    row = _gain(gains, "activethief-kcenter", "random")
    assert row["n_seeds"] == 1 and row["gain_mean"] == pytest.approx(DELTA[1])
    assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])
    assert row["ci_excludes_zero"] is None and row["note"].startswith("n<2")
    auc = _gain(gains, "activethief-kcenter", "random", metric="agreement_auc", checkpoint=None)
    assert auc["n_seeds"] == 1 and math.isnan(auc["ci_low"])


def test_controls_are_named_by_attack_not_by_label():
    # contract 6: a relabelled control is a control; an attack labelled "random" is not
    recs = [_record("random", "surrogate", s, [BASE[s]] * 3, label="uniform-pool")
            for s in range(3)]
    recs += [_record("activethief", "surrogate", s, [BASE[s] + DELTA[s]] * 3, label="random")
             for s in range(3)]
    frame = _frame(recs)
    roles = condition_roles(frame).set_index("label")["role"]
    assert roles.to_dict() == {"uniform-pool": "control", "random": "attack"}
    gains = gain_table(frame, n_bootstrap=N_BOOT)
    assert set(zip(gains["label"], gains["control_label"])) == {("random", "uniform-pool")}


def test_the_registry_declares_controls_with_a_fallback_for_unknown_names():
    # contract 6: null_control_for on the attack class wins; unknown names use the table
    assert control_modes("random") == ATTACKS.get("random").null_control_for
    assert control_modes("dfme") == frozenset() and control_modes("no-such-attack") == frozenset()
    for name, modes in KNOWN_CONTROLS.items():
        assert control_modes(name) == modes
    assert {"untrained_generator", "smooth_noise"} <= set(controls_of("data_free"))

    class FlatNoise(Attack):
        name = "report_test_flat_noise"
        data_modes = frozenset({"data_free"})
        null_control_for = frozenset({"data_free"})

        def propose(self, k, state):  # pragma: no cover - never run
            raise NotImplementedError

    ATTACKS.register(FlatNoise.name)(FlatNoise)
    try:
        assert control_modes(FlatNoise.name) == frozenset({"data_free"})
        assert FlatNoise.name in controls_of("data_free")
    finally:
        ATTACKS.unregister(FlatNoise.name)


def test_auc_gain_integrates_both_sides_over_the_same_checkpoints():
    # design: the leaderboard number's gain compares AUCs over one common log-budget span
    budgets = (1000, 10_000, 100_000, 1_000_000)
    recs = [_record("random", "surrogate", s, [0.3, 0.4, 0.5], budgets=budgets[:3])
            for s in range(3)]
    recs += [_record("activethief", "surrogate", s, [0.35, 0.5, 0.6, 0.9], budgets=budgets)
             for s in range(3)]
    gains = gain_table(_frame(recs), n_bootstrap=N_BOOT)
    row = _gain(gains, "activethief", "random", metric="agreement_auc", checkpoint=None)
    want = log_budget_auc(budgets[:3], np.array([0.35, 0.5, 0.6])) - \
        log_budget_auc(budgets[:3], np.array([0.3, 0.4, 0.5]))
    assert row["gain_mean"] == pytest.approx(float(want))
    assert (row["span_lo"], row["span_hi"]) == (1000, 100_000)
    assert not (gains["checkpoint_B"] == 1_000_000).any()  # the control never got there


shifts = st.floats(-0.5, 0.5, allow_nan=False, allow_infinity=False)
seed_values = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=8)


# contract 10 (property): an attack equal to the control shifted by c has gain c, CI [c, c]
@settings(max_examples=30, deadline=None)
@given(seed_values, shifts)
@pytest.mark.slow
def test_gain_of_a_shifted_control_is_the_shift(values, c):
    recs = [_record("random", "seed", s, [v] * 3) for s, v in enumerate(values)]
    recs += [_record("activethief", "seed", s, [v + c] * 3, tracks=("A", "B"))
             for s, v in enumerate(values)]
    gains = gain_table(_frame(recs), n_bootstrap=200)
    assert len(gains) == 2 * (1 + 4 * len(BUDGETS))  # both tracks: AUC + 4 metrics × budgets
    for metric in ("agreement", "acc_gt", "agreement_auc"):
        point = None if metric == "agreement_auc" else 1000
        row = _gain(gains, "activethief", "random", metric=metric, checkpoint=point)
        assert row["gain_mean"] == pytest.approx(c, abs=1e-9)
        assert row["ci_low"] == pytest.approx(c, abs=1e-9) == row["ci_high"]
        assert row["n_seeds"] == len(values)
    l1 = _gain(gains, "activethief", "random", metric="l1_mean", checkpoint=1000)
    assert l1["gain_mean"] == pytest.approx(-c / 10, abs=1e-9)


def test_leaderboard_columns_hold_the_auc_and_final_checkpoint_gains():
    # contract 16: one leaderboard row per (attack, track); gains as numbers, per control
    frame = _control_and_attack(range(4), range(4))
    gains = gain_table(frame, n_bootstrap=N_BOOT)
    board = leaderboard_gain_columns(leaderboard_table(agreement_auc_per_seed(frame)), gains,
                                     condition_roles(frame))
    assert len(board) == 3  # random A, activethief A and B
    by = board.set_index(["label", "track"])
    ctl_auc = by.loc[("random", "A"), "auc_mean"]
    for track, shift in (("A", 0.0), ("B", -0.05)):
        row = by.loc[("activethief-kcenter", track)]
        assert row["role"] == "attack" and row["attack"] == "activethief"
        assert row["gain_vs_random_auc"] == pytest.approx(row["auc_mean"] - ctl_auc)
        assert row["gain_vs_random_final_B"] == 100_000
        assert row["gain_vs_random_final"] == pytest.approx(
            np.mean([DELTA[s] for s in range(4)]) + shift)
        assert row["gain_vs_random_auc_ci_low"] <= row["gain_vs_random_auc"] \
            <= row["gain_vs_random_auc_ci_high"]
    control = by.loc[("random", "A")]
    assert control["role"] == "control" and pd.isna(control["gain_vs_random_auc"])


def _write_runs(root: Path, records: list[RunRecord]) -> None:
    for rec in records:
        folder = root / rec.run_name / rec.run_id / rec.source.split("/")[-1]
        folder.mkdir(parents=True)
        pd.DataFrame(rec.rows, columns=list(CSV_COLUMNS)).to_csv(folder / "metrics.csv",
                                                                 index=False)
        (folder / "summary.json").write_text(json.dumps(dict(rec.summary)))


@pytest.mark.slow
def test_report_writes_gains_files_and_leaderboard_columns(tmp_path):
    # contract 16: gains.csv|md|json; numbers stay numbers; leaderboard shows the gain
    recs = [_record("random", "surrogate", s, [BASE[s]] * 3) for s in range(3)]
    recs += [_record("activethief", "surrogate", s, [BASE[s] + DELTA[s]] * 3,
                     tracks=("A", "B"), label="activethief-kcenter") for s in range(3)]
    recs += [_record("dfme", "data_free", 0, [0.3] * 3),
             _record("untrained_generator", "data_free", 0, [0.2] * 3)]
    _write_runs(tmp_path, recs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = write_report(tmp_path, n_bootstrap=N_BOOT)
    assert {"gains_csv", "gains_md", "gains_json"} <= set(files)
    doc = json.loads(files["gains_json"].read_text())
    assert doc["definitions"]["control_track"].endswith("Track A, for attack Track A and Track B")
    rows = doc["rows"]
    assert len(rows) == len(pd.read_csv(files["gains_csv"]))
    assert all(isinstance(r["gain_mean"], float) and isinstance(r["n_seeds"], int) for r in rows)
    single = [r for r in rows if r["label"] == "dfme"]
    assert single and all(r["ci_low"] is None and r["ci_excludes_zero"] is None for r in single)
    md = files["gains_md"].read_text()
    dfme_lines = [ln for ln in md.splitlines() if ln.startswith("| dfme ")]
    assert dfme_lines and all("| n<2 | n<2 |" in ln and "yes" not in ln for ln in dfme_lines)
    board = json.loads(files["leaderboard_json"].read_text())["rows"]
    kc = next(r for r in board if r["label"] == "activethief-kcenter" and r["track"] == "B")
    assert isinstance(kc["gain_vs_random_auc"], float) and kc["gain_vs_random_auc_n_seeds"] == 3
    lb = files["leaderboard_md"].read_text()
    assert "— (control)" in lb and "vs random" in lb and "(n<2) vs untrained_generator" in lb
    assert "Gain over the null control" in files["comparisons_md"].read_text()


def test_l1_mean_is_named_as_mae_over_classes():
    # contract 1.3: l1_mean = mean over examples and classes of |p_v - p_s| (L1 / K)
    assert "MAE over classes" in METRIC_TITLES["l1_mean"]


def _cross_mode_records() -> list[RunRecord]:
    """A proxy-data GAN (surrogate) beside Random on its pool and two data-free controls."""
    recs = [_record("random", "surrogate", s, [BASE[s]] * 3) for s in range(3)]
    recs += [_record("dfms", "surrogate", s, [BASE[s] + DELTA[s]] * 3, tracks=("A", "B"),
                     track_shift=-0.05) for s in range(3)]
    recs += [_record("untrained_generator", "data_free", s, [BASE[s] - 0.2] * 3) for s in range(3)]
    recs += [_record("smooth_noise", "data_free", s, [BASE[s] - 0.1] * 3) for s in range(3)]
    return recs


def test_also_against_pairs_a_named_control_across_data_modes():
    # contract 6: by default a data mode meets its own controls only; a control named with
    # also_against is paired with every attack too, and the row says the control's data mode
    frame = _frame(_cross_mode_records())
    plain = gain_table(frame, n_bootstrap=N_BOOT)
    assert set(zip(plain["label"], plain["control_label"])) == {("dfms", "random")}
    assert set(plain["control_data_mode"]) == {"surrogate"}
    gains = gain_table(frame, ["untrained_generator"], n_bootstrap=N_BOOT)
    assert set(zip(gains["label"], gains["control_label"])) == {
        ("dfms", "random"), ("dfms", "untrained_generator")}  # smooth_noise was not named
    want = np.mean([DELTA[s] + 0.2 for s in range(3)])
    for track, shift in (("A", 0.0), ("B", -0.05)):
        row = _gain(gains, "dfms", "untrained_generator", track=track)
        assert row["gain_mean"] == pytest.approx(want + shift)
        assert (row["data_mode"], row["control_data_mode"]) == ("surrogate", "data_free")
        assert row["n_seeds"] == 3 and row["control_track"] == "A"
    same = gains[gains["control_label"] == "random"].drop(columns="control_data_mode")
    pd.testing.assert_frame_equal(same.reset_index(drop=True),
                                  plain.drop(columns="control_data_mode"))
    # the own-mode control is listed before the named one
    first = gains[(gains["track"] == "A")]["control_label"].tolist()
    assert first.index("random") < first.index("untrained_generator")


def test_also_against_refuses_a_name_that_is_not_a_control(tmp_path, capsys):
    # bad input fails before any work, naming the key, the value and the rule
    with pytest.raises(ValueError, match=r"also_against: 'dfme' is not a null control.*"
                                         r"untrained_generator"):
        gain_table(_frame(_cross_mode_records()), ["dfme"], n_bootstrap=N_BOOT)
    from mebench.report.cli import report_main
    missing = tmp_path / "no-such-runs"
    assert report_main([str(missing), "--also-against", "dfme"]) == 2
    err = capsys.readouterr().err
    assert "--also-against: 'dfme' is not a null control" in err and not missing.exists()


@pytest.mark.slow
def test_report_shows_the_named_control_and_its_data_mode(tmp_path):
    # contract 16: gains.csv/json carry control_data_mode and the rule; gains.md names the
    # control's data mode where it differs from the attack's; the leaderboard gets its columns
    _write_runs(tmp_path, _cross_mode_records())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = write_report(tmp_path, out_dir=tmp_path / "report", n_bootstrap=N_BOOT,
                             also_against=["untrained_generator"])
    doc = json.loads(files["gains_json"].read_text())
    assert doc["definitions"]["also_against"] == ["untrained_generator"]
    csv_rows = pd.read_csv(files["gains_csv"])
    cross = csv_rows[csv_rows["control_label"] == "untrained_generator"]
    assert not cross.empty and set(cross["control_data_mode"]) == {"data_free"}
    md = files["gains_md"].read_text()
    assert "| untrained_generator (A, data_free) |" in md and "| random (A) |" in md
    board = json.loads(files["leaderboard_json"].read_text())["rows"]
    row = next(r for r in board if r["label"] == "dfms" and r["track"] == "A")
    assert row["gain_vs_untrained_generator_final"] == pytest.approx(
        np.mean([DELTA[s] + 0.2 for s in range(3)]))


# issue 58: the leaderboard page says which registered attacks have their row from the records and the
# registry, never by hand: a row counts with 3 complete seeds at 1k and 10k; a failed seed-run, a
# defended run or a missing checkpoint does not count, and every registered attack and mode is listed.
def test_the_coverage_table_lists_every_registered_attack_and_counts_only_complete_rows():
    from mebench.report.coverage import coverage_markdown, coverage_rows, registered_attacks

    def summary(name, mode, seed, label=None, status="complete", budgets=(1000, 10000), defense="none"):
        return {"status": status, "seed": seed, "defense": {"name": defense},
                "attack": {"name": name, "output_mode": mode, "label": label or name},
                "dataset": {"data_mode": "surrogate"},
                "results": [{"track": "A", "checkpoint_B": b} for b in budgets]}

    summaries = [summary("knockoff", "soft_prob", s) for s in range(3)]
    summaries += [summary("knockoff", "hard_top1", s) for s in range(2)]
    summaries += [summary("knockoff", "hard_top1", 2, status="failed"),
                  summary("activethief", "soft_prob", 0, "activethief_fast"),
                  summary("activethief", "soft_prob", 1, "activethief_fast", budgets=(1000,)),
                  summary("activethief", "soft_prob", 2, "activethief_fast", defense="dawn")]
    attacks = registered_attacks()
    rows = {(r["attack"], r["output_mode"]): r for r in coverage_rows(summaries, attacks)}
    assert set(rows) == {(n, m) for n, (modes, _) in attacks.items() for m in modes}
    assert rows["knockoff", "soft_prob"]["covered"] and rows["knockoff", "soft_prob"]["rows"] == ["knockoff (surrogate): 3"]
    assert not rows["knockoff", "hard_top1"]["covered"]
    assert rows["activethief", "soft_prob"]["rows"] == ["activethief_fast (surrogate): 1"]
    assert not rows["activethief", "soft_prob"]["covered"] and rows["activethief", "hard_top1"]["rows"] == []
    text = coverage_markdown(summaries, attacks)
    assert f"1 of {len(rows)} attack × output-mode rows have 3 seeds." in text
    assert "knockoff (hard_top1)" in text.splitlines()[-1] and "knockoff (soft_prob)" not in text.splitlines()[-1]


# issue 58: Prediction Poisoning's Table 1 page sets each of the paper's numbers beside mebench's mean
# (Track B at 50k, 3 seeds, 95 % interval) and decides every gap over 5 points from the records: a
# quirk row with 3 seeds within 5 points of the paper explains it; otherwise it is "open", saying why.
def test_the_reproduction_table_decides_each_gap_from_the_records():
    from mebench.report.reproduction import Quirk, reproduction_markdown

    def summary(label, seed, acc, status="complete", budget=50_000, track="B"):
        return {"status": status, "seed": seed, "attack": {"label": label}, "dataset": {"name": "MNIST"},
                "results": [{"track": track, "checkpoint_B": budget, "acc_gt": acc},
                            {"track": "A", "checkpoint_B": budget, "acc_gt": 0.10}]}  # Track A never counts

    paper = {("MNIST", "near"): 90.0, ("MNIST", "far"): 80.0, ("MNIST", "lone"): 50.0, ("MNIST", "few"): 70.0}
    quirks = {"far_ref": Quirk("far", "the reference's step"), "lone_ref": Quirk("lone", "x")}
    recs = [summary("near", s, 0.91 + s / 1000) for s in range(3)]
    recs += [summary("far", s, 0.90) for s in range(3)] + [summary("far_ref", s, 0.82 + s / 100) for s in range(3)]
    recs += [summary("lone", s, 0.60) for s in range(3)] + [summary("lone_ref", s, 0.62) for s in range(2)]
    recs += [summary("few", 0, 0.70), summary("few", 1, 0.10, status="failed"), summary("few", 2, 0.10, budget=10_000)]
    text = reproduction_markdown(recs, paper, quirks)
    # 3 seeds: the t interval, mean ± t(0.975, 2) · s / sqrt(3) = 91.1 ± 0.25
    assert "| MNIST | `near` | 90.0 | 91.1 ± 0.1 (n=3) | [90.9, 91.3] | +1.1 |" in text
    assert "| MNIST | `far_ref` (of `far`) | the reference's step | 83.0 ± 1.0 (n=3) |" in text
    assert "| -7.0 [-9.5, -4.5] | +3.0 |" in text  # paired shift from its base row (-7 ± 2.48), gap to the paper
    assert "- MNIST `near`: within 5 points of the paper (91.1 vs 90.0)." in text
    assert "- MNIST `far`: +10.0 points from the paper, explained by `far_ref` (the reference's step: 83.0)" in text
    assert "- MNIST `lone`: +10.0 points from the paper, **open** (its quirk rows `lone_ref` are not complete yet)." in text
    assert "- MNIST `few`: 1 of 3 seeds so far." in text  # a failed seed-run and another budget do not count
    recs += [summary("lone_ref", 2, 0.62)]
    assert "**open** (no measured row brings it within 5 points)" in reproduction_markdown(recs, paper, quirks)
    assert "**open** (no quirk row measures it)" in reproduction_markdown(recs, paper, {})


def _gain_row(label: str, mean: float, lo: float, hi: float, n: int = 3, data_mode: str = "surrogate",
              control: str = "random") -> dict:
    return {"dataset": "MNIST", "output_mode": "soft_prob", "track": "A", "metric": "agreement_auc",
            "label": label, "data_mode": data_mode, "control_label": control, "control_data_mode": data_mode,
            "gain_mean": mean, "ci_low": lo, "ci_high": hi, "n_seeds": n}


def test_the_readings_sort_each_attack_by_its_interval_and_mark_collapsed_checkpoints():
    # contract 16: the leaderboard's sentences come from the gain table, never typed: above / same
    # queries / level / below / no interval, and a condition whose Track A substitute collapsed says so
    from mebench.report.readings import readings_blocks, verdict

    gains = pd.DataFrame([_gain_row("up", 0.05, 0.01, 0.09), _gain_row("same", 0.0, 0.0, 0.0),
                          _gain_row("flat", 0.01, -0.02, 0.03), _gain_row("down", -0.2, -0.3, -0.1),
                          _gain_row("single", 0.1, float("nan"), float("nan"), n=1)])
    assert [verdict(r) for _, r in gains.iterrows()] == ["above", "same queries", "level", "below", "few seeds"]
    health_rows = pd.DataFrame([
        {"dataset": "MNIST", "output_mode": "soft_prob", "label": "down", "data_mode": "surrogate", "seed": s,
         "track": "A", "checkpoint_B": 1000.0, "pred_top_share": 1.0, "victim_top_share": 0.11} for s in (0, 1)]
        + [{"dataset": "MNIST", "output_mode": "soft_prob", "label": "flat", "data_mode": "surrogate", "seed": 0,
            "track": "A", "checkpoint_B": 1000.0, "pred_top_share": 0.5, "victim_top_share": 0.11}])  # diverged only
    text = " ".join(b.text for b in readings_blocks(gains, health_rows) if b.kind == "p")
    line = text[text.index("Against random"):]
    assert line.index("up +0.0500") < line.index("its own queries") < line.index("same") < line.index("flat")
    assert "below it (interval below zero): down [Track A collapsed: 1k 2 seeds] −0.2000 [−0.3000, −0.1000]" in line
    assert "fewer than two paired seeds (no interval): single." in line
    assert "flat [Track A" not in line
    from mebench.report.health import HEALTH_COLUMNS

    for quiet in (pd.DataFrame(columns=list(HEALTH_COLUMNS)), health_rows.iloc[2:]):  # nothing collapsed
        assert "collapsed: 1k" not in " ".join(b.text for b in readings_blocks(gains, quiet) if b.kind == "p")


def test_a_collapse_is_marked_on_its_own_victims_reading_and_a_defended_flag_names_its_defense():
    # contract 16: with several victims (a zoo, builds, a defense in front) each victim's reading is its
    # own paragraph, named, and a collapsed Track A marks only the victim it happened on; the health
    # table gives a defended run the victim_id <victim>+<defense> of the report's other tables
    from mebench.report.health import health_frame
    from mebench.report.readings import readings_blocks

    gains = pd.DataFrame([{**_gain_row("up", 0.05, 0.01, 0.09), "victim_id": v} for v in ("v_a", "v_b")])
    health_rows = pd.DataFrame([{"dataset": "MNIST", "victim_id": "v_b", "output_mode": "soft_prob", "label": "up",
                                 "data_mode": "surrogate", "seed": 0, "track": "A", "checkpoint_B": 1000.0,
                                 "pred_top_share": 1.0, "victim_top_share": 0.11}])
    paras = [b.text for b in readings_blocks(gains, health_rows) if b.kind == "p"][1:]
    assert len(paras) == 2 and paras[0].startswith("On v_a: ") and paras[1].startswith("On v_b: ")
    assert "collapsed" not in paras[0] and "up [Track A collapsed: 1k 1 seed] +0.0500" in paras[1]
    one = [b.text for b in readings_blocks(gains[gains["victim_id"] == "v_a"], health_rows) if b.kind == "p"]
    assert not one[1].startswith("On ") and "collapsed" not in one[1]  # one victim: no name, v_b's flag not here

    def run(defense):
        rec = _record("random", "surrogate", 0, [0.5] * 3)
        rec.summary.update({"victim": {"victim_id": "mnist_lenet5"}, "training_health": [
            {"track": "A", "checkpoint_B": 1000, "pred_top_share": 0.95, "victim_top_share": 0.1,
             "flags": ["Track A B=1,000 collapsed: ..."]}], **({"defense": {"name": defense}} if defense else {})})
        return rec

    frame = health_frame([run("grad2"), run(None)])
    assert sorted(frame["victim_id"]) == ["mnist_lenet5", "mnist_lenet5+grad2"]
    assert sorted(frame["defense"]) == ["grad2", "none"]


def test_the_leaderboard_shows_each_rows_seed_run_cost():
    # contract 16: beside its AUC, a row's cost per seed-run: mean timings_s.total over its seeds and the
    # images its victim answered (a record without timings shows a dash, never a made-up number)
    from mebench.report.leaderboard import leaderboard_blocks

    recs = [_record("random", "surrogate", s, [BASE[s]] * 3) for s in range(2)]
    for rec, wall in zip(recs, (100.0, 200.0)):
        rec.summary.update({"timings_s": {"total": wall}, "queries_used": 10000})
    recs.append(_record("knockoff", "surrogate", 0, [0.5] * 3))
    frame = _frame(recs)
    board = leaderboard_table(agreement_auc_per_seed(frame))
    assert board.set_index("label").loc["random", "wall_mean"] == 150.0
    from mebench.report.aggregate import aggregate, to_long, victim_reference

    blocks = leaderboard_blocks(board, aggregate(to_long(frame)), victim_reference(frame), {})
    rows = {r[1]: r[-1] for b in blocks if b.kind == "table" and "seed-run cost (wall, queries)" in b.headers for r in b.rows}
    assert rows == {"random": "2m30s, 10,000", "knockoff": "–"}


@pytest.mark.parametrize("flipped", [False, True])
def test_a_named_variant_is_shown_beside_its_preset_with_its_gap_and_cost(flipped):
    # issue 58: a *_fast variant's page says what it gives up: variant − preset paired by seed, whichever
    # label a comparison row puts first (compare_all puts the preset first; ``flipped`` swaps each row's
    # sides), with each one's wall time per seed-run; an attack without its preset in the set gets no row
    from mebench.report.aggregate import to_long
    from mebench.report.compare import compare_all, comparison_points
    from mebench.report.presets import preset_blocks, preset_gaps

    preset, variant = "qedg", "qedg_fast"
    recs = [_record("qedg", "data_free", s, [BASE[s]] * 3, label=preset) for s in range(3)]
    recs += [_record("qedg", "data_free", s, [BASE[s] - DELTA[s]] * 3, label=variant) for s in range(3)]
    recs += [_record("ideal", "data_free", s, [0.3] * 3, label="ideal_fast") for s in range(3)]
    for rec, wall in zip(recs, (600.0, 660.0, 720.0, 60.0, 60.0, 60.0, 5.0, 5.0, 5.0)):
        rec.summary["timings_s"] = {"total": wall}
    frame = _frame(recs)
    comps = compare_all(comparison_points(to_long(frame), agreement_auc_per_seed(frame)), n_bootstrap=N_BOOT)
    if flipped:
        swap = {"a_label": "b_label", "b_label": "a_label", "a_data_mode": "b_data_mode",
                "b_data_mode": "a_data_mode", "mean_a": "mean_b", "mean_b": "mean_a"}
        comps = comps.rename(columns=swap).assign(mean_diff=-comps["mean_diff"], ci_lower=-comps["ci_upper"],
                                                  ci_upper=-comps["ci_lower"])
    gaps = preset_gaps(comps, frame)
    assert set(gaps["variant"]) == {variant} and set(gaps["preset"]) == {preset}
    row = gaps[(gaps["metric"] == "agreement") & (gaps["checkpoint_B"] == 10_000)].iloc[0]
    assert row["gap"] == pytest.approx(-np.mean(list(DELTA.values())[:3]))
    assert row["mean_preset"] == pytest.approx(np.mean([BASE[s] for s in range(3)]))
    assert row["ci_lower"] <= row["gap"] <= row["ci_upper"] < 0 and bool(row["ci_excludes_zero"])
    assert (row["wall_s_preset"], row["wall_s_variant"]) == (660.0, 60.0)
    text = "\n".join(b.text for b in preset_blocks(gaps))
    assert f"{variant} against {preset}" in text and "ideal_fast" not in text
    cells = [list(r) for b in preset_blocks(gaps) if b.kind == "table" for r in b.rows]
    (shown,) = [c for c in cells if c[5:8] == ["A", "agreement", "10k"]]
    assert shown[:5] == ["MNIST", "mnist_lenet5_v1", "lenet5", "soft_prob", "data_free"] and shown[8] == "3"
    assert shown[9:12] == ["0.4733", "0.3733", "-0.1000"] and shown[13:] == ["yes", "11m00s", "1m00s", "yes"]
    assert preset_gaps(compare_all(comparison_points(to_long(_frame(recs[6:])), agreement_auc_per_seed(
        _frame(recs[6:]))), n_bootstrap=N_BOOT), _frame(recs[6:])).empty
