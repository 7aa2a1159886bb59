"""``mebench report`` on a synthetic runs folder (contract §0 outputs, §8, §10, §16).

A tiny generator writes ``runs/<run>/<timestamp>/seed_<s>/`` folders exactly as
the engine does (metrics.csv long format, summary.json, run_config.yaml) with
known values, including a missing seed, a single-seed condition, a re-run and a
hard-label run. The report's numbers are then checked against pandas/numpy
computations on the same values.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pandas as pd
import pytest
import yaml

from mebench.report import load_results, write_report
from mebench.report.aggregate import aggregate, aggregate_csv_frame, drop_reruns, to_long, victim_reference
from mebench.report.cli import report_main
from mebench.report.load import CSV_COLUMNS
from mebench.report.plots import colour_map, plot_curves
from mebench.report.stats import cohens_d, paired_t_ci

BUDGETS = (1000, 10_000, 100_000)
VICTIM_ACC = 0.9912
N_BOOT = 1000
# (run name, attack, label or None, data mode, output mode, seeds, tracks, base agreement)
CONDITIONS = [
    ("rand_seed_soft", "random", None, "seed", "soft_prob", (0, 1, 2), ("A",), 0.50),
    ("at_kc_soft", "activethief", "activethief-kcenter", "surrogate", "soft_prob",
     (0, 1, 2), ("A", "B"), 0.62),
    ("at_dfal_soft", "activethief", "activethief-dfal", "surrogate", "soft_prob",
     (0, 1), ("A", "B"), 0.60),  # seed 2 missing
    ("dfme_soft", "dfme", None, "data_free", "soft_prob", (0,), ("A", "B"), 0.30),
    ("rand_seed_hard", "random", None, "seed", "hard_top1", (0, 1, 2), ("A",), 0.45),
]


def _rows(cond: tuple, seed: int, rng: np.random.Generator) -> list[dict]:
    _, attack, _, data_mode, mode, _, tracks, base = cond
    rows = []
    for b in BUDGETS:
        for track in tracks:
            agr = base + 0.1 * math.log10(b / 1000) - (0.03 if track == "B" else 0.0)
            agr += rng.normal(0, 0.02)
            soft = mode == "soft_prob"
            rows.append({
                "seed": seed, "checkpoint_B": b, "track": track,
                "acc_gt": agr - 0.01 + rng.normal(0, 0.005), "agreement": agr,
                "kl_mean": 1.0 / math.log10(b) + rng.normal(0, 0.01) if soft else None,
                "l1_mean": 0.2 / math.log10(b) + rng.normal(0, 0.002) if soft else None,
                "attack": attack, "data_mode": data_mode, "output_mode": mode,
                "victim_id": "mnist_lenet5_v1", "substitute_arch": "lenet5",
            })
    return rows


def _summary(cond: tuple) -> dict:
    attack = {"name": cond[1], "params": {"k": 3}}
    if cond[2]:
        attack["label"] = cond[2]
    return {"victim": {"victim_id": "mnist_lenet5_v1", "test_accuracy": VICTIM_ACC,
                       "sha256": "ab12"},
            "config": {"run": {"name": cond[0]}}, "dataset": {"name": "MNIST"},
            "attack": attack, "unexpected_key": [1, 2]}


def _write_seed(folder: Path, rows: list[dict], summary: dict) -> None:
    folder.mkdir(parents=True)
    pd.DataFrame(rows, columns=list(CSV_COLUMNS)).to_csv(folder / "metrics.csv", index=False)
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "run_config.yaml").write_text(yaml.safe_dump(summary["config"]))


def make_runs(root: Path) -> pd.DataFrame:
    """Write the synthetic runs folder; return the rows a report must use."""
    rng = np.random.default_rng(0)
    truth = []
    for cond in CONDITIONS:
        for seed in cond[5]:
            rows = _rows(cond, seed, rng)
            _write_seed(root / cond[0] / "20250102-120000" / f"seed_{seed}", rows,
                        {**_summary(cond), "completed_at": "2025-01-02T12:30:00Z"})
            truth += [{**r, "label": cond[2] or cond[1]} for r in rows]
    # an older run of the same config (written last, completed first): replaced by the later one
    stale = [{**r, "agreement": 0.0} for r in _rows(CONDITIONS[0], 0, rng)]
    _write_seed(root / CONDITIONS[0][0] / "20250101-080000" / "seed_0", stale,
                {**_summary(CONDITIONS[0]), "completed_at": "2025-01-01T08:30:00Z"})
    return pd.DataFrame(truth)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    truth = make_runs(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the re-run replacement warning is expected
        files = write_report(root, n_bootstrap=N_BOOT)
    return root, truth, files


def _read(files: dict, key: str) -> pd.DataFrame:
    return pd.read_csv(files[key], keep_default_na=True)


@pytest.mark.slow
def test_writes_png_svg_markdown_html_and_comparisons(report):
    # contract 0: budget-performance curves + tables are the primary outputs
    root, _, files = report
    assert all(p.parent == root / "report" and p.exists() for p in files.values())
    for mode in ("soft_prob", "hard_top1"):
        assert files[f"curves_mnist_{mode}_png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        svg = ElementTree.parse(files[f"curves_mnist_{mode}_svg"]).getroot()
        assert svg.tag.endswith("svg") and "agreement" in ElementTree.tostring(svg, "unicode")
    html = files["leaderboard_html"].read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<table>") >= 4
    assert "curves_mnist_soft_prob.png" in files["leaderboard_md"].read_text()
    assert {"comparisons_csv", "comparisons_json", "comparisons_md"} <= set(files)


# contract §16 (pages generated from records): `mebench docs` asks for no figures; the report's
# Markdown is the same, byte for byte, and no image is drawn or returned.
@pytest.mark.slow
def test_a_report_without_figures_writes_the_same_markdown_and_no_image(report, tmp_path):
    root = report[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        drawn = write_report(root, tmp_path / "drawn", n_bootstrap=50)
        bare = write_report(root, tmp_path / "bare", n_bootstrap=50, figures=False)
    assert not list((tmp_path / "bare").glob("*.png")) and not list((tmp_path / "bare").glob("*.svg"))
    assert all(p.exists() for p in bare.values()) and not any(k.startswith("curves_") for k in bare)
    md = sorted(k for k in drawn if k.endswith("_md"))
    assert "curves_mnist_soft_prob_png" in drawn and md == sorted(k for k in bare if k.endswith("_md"))
    def body(path: Path) -> list[str]:  # the provenance line carries the time it was written
        return [line for line in path.read_text().splitlines() if not line.startswith("Generated by mebench")]

    assert all(body(drawn[k]) == body(bare[k]) for k in md)
    assert "curves_mnist_soft_prob.png" in bare["leaderboard_md"].read_text()


def test_aggregate_is_mean_and_sample_std_over_seeds(report):
    # contract 10: mean ± std over seeds; ddof=1; empty std for one seed; re-run replaced
    _, truth, files = report
    long = truth.melt(id_vars=["label", "data_mode", "output_mode", "track", "checkpoint_B",
                               "seed"], value_vars=["acc_gt", "agreement", "kl_mean", "l1_mean"],
                      var_name="metric").dropna(subset=["value"])
    keys = ["label", "data_mode", "output_mode", "track", "checkpoint_B", "metric"]
    want = long.groupby(keys)["value"].agg(["mean", "std", "count"]).reset_index()
    got = _read(files, "aggregate_csv").rename(columns={"attack": "label"})  # the label is written as 'attack'
    got = got.merge(want, on=keys, how="outer", indicator=True)
    assert (got["_merge"] == "both").all() and len(got) == len(want)
    np.testing.assert_allclose(got["mean_x"], got["mean_y"], rtol=1e-12)
    np.testing.assert_allclose(got["std_x"], got["std_y"], rtol=1e-9)  # NaN == NaN here
    assert (got["n_seeds"] == got["count"]).all()
    assert got.loc[got["label"] == "dfme", "std_x"].isna().all()
    hard = got[got["output_mode"] == "hard_top1"]
    assert set(hard["metric"]) == {"acc_gt", "agreement"}  # contract 1.3: no KL/L1 for hard


def _truth_auc(truth: pd.DataFrame) -> pd.DataFrame:
    wide = truth.pivot_table(index=["output_mode", "label", "data_mode", "track", "seed"],
                             columns="checkpoint_B", values="agreement")
    y = wide[list(BUDGETS)].to_numpy()
    # log10 budgets 3, 4, 5 are equally spaced: trapezoid / span = (y0 + 2 y1 + y2) / 4
    auc = pd.Series((y[:, 0] + 2 * y[:, 1] + y[:, 2]) / 4, index=wide.index, name="auc")
    return auc.groupby(level=[0, 1, 2, 3]).agg(["mean", "std", "count"]).reset_index()


def test_leaderboard_auc_equals_pandas_computation(report):
    # contract 0: one summary number per attack: normalised log-budget agreement AUC
    _, truth, files = report
    keys = ["output_mode", "label", "data_mode", "track"]
    got = _read(files, "leaderboard_csv").merge(_truth_auc(truth), on=keys)
    assert len(got) == 8
    np.testing.assert_allclose(got["auc_mean"], got["mean"], rtol=1e-12)
    np.testing.assert_allclose(got["auc_std"], got["std"], rtol=1e-9)
    assert ((got["auc_mean"] >= 0) & (got["auc_mean"] <= 1)).all()
    for _, g in got.groupby(["output_mode", "track"]):
        assert list(g.sort_values("rank")["auc_mean"]) == sorted(g["auc_mean"], reverse=True)
    md, html = files["leaderboard_md"].read_text(), files["leaderboard_html"].read_text()
    for _, r in got.iterrows():
        cell = f"{r['mean']:.4f}" + ("" if math.isnan(r["std"]) else f" ± {r['std']:.4f}")
        assert cell in md and cell in html


def test_leaderboard_shows_every_checkpoint(report):
    # contract 16.2: every checkpoint_B appears as mean ± std per attack
    _, truth, files = report
    md = files["leaderboard_md"].read_text()
    sel = truth[(truth["label"] == "activethief-kcenter") & (truth["track"] == "A")]
    for b, g in sel.groupby("checkpoint_B"):
        for metric in ("agreement", "acc_gt", "kl_mean", "l1_mean"):
            assert f"{g[metric].mean():.4f} ± {g[metric].std():.4f}" in md
    for label in ("@1k", "@10k", "@100k", "Track A (SFP", "Track B (AOP", "0.9912"):
        assert label in md


def test_comparisons_are_paired_by_seed(report):
    # contract 10: seeds pair the groups; a seed missing on one side is left out
    _, truth, files = report
    comps = _read(files, "comparisons_csv")
    row = comps[(comps["a_label"] == "random") & (comps["b_label"] == "activethief-dfal")
                & (comps["track"] == "A") & (comps["metric"] == "agreement")
                & (comps["checkpoint_B"] == 10_000)].iloc[0]
    sel = truth[(truth["track"] == "A") & (truth["checkpoint_B"] == 10_000)
                & (truth["output_mode"] == "soft_prob")]
    a = sel[sel["label"] == "random"].set_index("seed")["agreement"]
    b = sel[sel["label"] == "activethief-dfal"].set_index("seed")["agreement"]
    a_p, b_p = a.loc[[0, 1]].to_numpy(), b.loc[[0, 1]].to_numpy()
    assert row["n_pairs"] == 2 and str(row["seeds"]) == "0;1"
    assert row["mean_diff"] == pytest.approx(np.mean(b_p - a_p), rel=1e-12)
    assert abs(row["mean_diff"] - (b.mean() - a.mean())) > 1e-4  # unpaired would differ
    ci = paired_t_ci(a_p, b_p)  # two pairs: the t interval, not the bootstrap
    assert (row["ci_lower"], row["ci_upper"]) == pytest.approx((ci.ci_lower, ci.ci_upper))
    assert row["ci_method"] == "t"
    assert row["cohens_d"] == pytest.approx(cohens_d(a_p, b_p))
    assert isinstance(row["warning"], str) and "Student t" in row["warning"]
    assert not (comps["output_mode"] == "hard_top1").any()  # one attack: nothing to pair


def test_l1_mean_is_named_mae_over_classes_everywhere(report):
    # contract 1.3: l1_mean is L1 / K (mean over examples and classes), not a paper's L1
    _, _, files = report
    assert "L1 (MAE over classes)" in files["curves_mnist_soft_prob_svg"].read_text()
    note = "l1_mean = mean |p_v − p_s| over test examples and classes (L1 distance / K)"
    for key in ("leaderboard_md", "leaderboard_html", "comparisons_md"):
        assert note in files[key].read_text()
    assert "l1_mean — L1 (MAE over classes)" in files["leaderboard_md"].read_text()


def test_gains_need_a_control_of_the_same_data_mode(report):
    # contract 6: random ran in seed mode only, so surrogate and data_free attacks get no gain
    _, _, files = report
    assert _read(files, "gains_csv").empty
    md = files["gains_md"].read_text()
    assert "surrogate" in md and "no null control run (controls of surrogate: random)" in md
    assert "no control paired" in files["leaderboard_md"].read_text()
    board = _read(files, "leaderboard_csv")
    assert set(board.loc[board["label"] == "random", "role"]) == {"control"}


def test_comparisons_json_keeps_numbers(report):
    # contract 16: numbers stay numbers in machine-readable reports
    _, _, files = report
    doc = json.loads(files["comparisons_json"].read_text())
    rows = doc["rows"]
    assert len(rows) == len(_read(files, "comparisons_csv"))
    assert doc["definitions"]["min_seeds_for_bootstrap"] == 5
    assert all(isinstance(r["mean_diff"], float) and isinstance(r["n_pairs"], int) for r in rows)
    auc_rows = [r for r in rows if r["metric"] == "agreement_auc"]
    assert auc_rows and all(r["checkpoint_B"] is None for r in auc_rows)
    assert "agreement_auc" in files["comparisons_md"].read_text()


def test_curve_figure_layout(report):
    # contract 8 + 1.3: log budget axis, Track A solid / B dashed, bands, victim line
    root, _, _ = report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = drop_reruns(load_results(root))
    agg = aggregate(to_long(frame))
    victims, colours = victim_reference(frame), colour_map(agg)
    soft = agg[agg["output_mode"] == "soft_prob"]
    fig = plot_curves(soft, victims, "t", colours)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_xscale() for ax in axes] == ["log"] * 4
    acc, agr = axes[0], axes[1]
    curves = [ln for ln in agr.get_lines()]
    assert len(curves) == 7  # random A, kcenter A+B, dfal A+B, dfme A+B
    assert sorted(ln.get_linestyle() for ln in curves) == ["-"] * 4 + ["--"] * 3
    assert len(agr.collections) == 5  # no ±std band for the single-seed dfme curves
    assert any(list(ln.get_ydata()) == [VICTIM_ACC] * 2 for ln in acc.get_lines())
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"activethief-kcenter (surrogate)", "activethief-dfal (surrogate)",
            "Track A", "Track B"} <= set(labels)
    hard = plot_curves(agg[agg["output_mode"] == "hard_top1"], victims, "t", colours)
    assert len([ax for ax in hard.axes if ax.get_visible()]) == 2
    hard_colour = hard.axes[1].get_lines()[0].get_color()
    assert hard_colour == colours[("random", "seed")]


def _cells(root: Path) -> dict:
    cells = []
    for csv in sorted(root.glob("*/20250102-120000/seed_*/metrics.csv")):
        rows = pd.read_csv(csv).astype(object)
        rows = rows.where(rows.notna(), None).to_dict(orient="records")
        summary = json.loads((csv.parent / "summary.json").read_text())
        cells.append({"id": f"{csv.parts[-4]}-{csv.parent.name}", "metrics_rows": rows,
                      "summary": summary, "outcome": "passed"})
    return {"cells": cells + [{"id": "failed-cell", "outcome": "failed"}]}


@pytest.mark.slow
def test_pytest_json_report_gives_same_numbers(report, tmp_path):
    # contract 16: the harness's JSON report and the runs folder give the same numbers
    root, _, files = report
    doc = _cells(root)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="failed-cell: cell failed"):
        loaded = load_results(path)  # the failed cell is left out, and named
    from_json = aggregate_csv_frame(aggregate(to_long(drop_reruns(loaded))))
    from_runs = _read(files, "aggregate_csv")
    pd.testing.assert_frame_equal(from_json, from_runs, check_dtype=False)
    # the CLI on a (smaller, hard-label only) JSON report writes next to it by default
    hard = {"cells": [c for c in doc["cells"] if "hard" in c["id"]]}
    path.write_text(json.dumps(hard))
    assert report_main([str(path), "--n-bootstrap", "200"]) == 0
    out = tmp_path / "bench_report"
    assert (out / "leaderboard.html").exists() and (out / "curves_mnist_hard_top1.svg").exists()
    assert len(pd.read_csv(out / "results.csv")) == 3 * len(BUDGETS)


def test_cli_fails_cleanly_without_results(tmp_path, capsys):
    # contract 16: a path without results is an error, not an empty report
    assert report_main([str(tmp_path)]) == 2
    assert report_main([str(tmp_path / "missing")]) == 2
    assert "no metrics rows" in capsys.readouterr().err


def test_loader_tolerates_missing_files_and_extra_columns(tmp_path):
    # contract 16.1: summary.json missing or partial, extra columns, unreadable csv
    rows = _rows(CONDITIONS[0], 0, np.random.default_rng(1))
    seed_dir = tmp_path / "r" / "t1" / "seed_0"
    seed_dir.mkdir(parents=True)
    pd.DataFrame(rows).assign(seconds=1.5).to_csv(seed_dir / "metrics.csv", index=False)
    (seed_dir / "run_config.yaml").write_text("dataset: {name: FashionMNIST}\n")
    (seed_dir / "summary.json").write_text(json.dumps({"seed": 0}))  # partial: every section missing
    bad = tmp_path / "r" / "t2" / "seed_1"
    bad.mkdir(parents=True)
    (bad / "metrics.csv").write_text("")
    unfinished = tmp_path / "r" / "t3" / "seed_2"
    unfinished.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(unfinished / "metrics.csv", index=False)
    with pytest.warns(UserWarning) as record:
        frame = load_results(tmp_path)
    messages = " ".join(str(w.message) for w in record)
    assert "seed_1: metrics.csv: empty file" in messages and "seed_2: no summary.json" in messages
    assert len(frame) == len(rows) and set(frame["seed"]) == {0}
    assert set(frame["label"]) == {"random"} and set(frame["dataset"]) == {"FashionMNIST"}
    assert frame["victim_test_accuracy"].isna().all()
    assert frame["agreement"].tolist() == pytest.approx([r["agreement"] for r in rows])
