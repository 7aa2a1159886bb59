"""The victim zoo: recipes grouped by `zoo`, a grid's `victims: [{zoo: NAME}]`, `mebench victim
train --all`, and the report's aggregation over victims × seeds with its rank-change flag."""

from __future__ import annotations

import pandas as pd
import pytest

from mebench.errors import ConfigError
from mebench.harness.grid import expand_zoos
from mebench.report.document import render_html, render_markdown
from mebench.report.zoo import zoo_blocks, zoo_tables

RECIPE = "name: {name}\ndataset: MNIST\narch: lenet5\nseed: {seed}\n{zoo}"


def write_recipes(root, recipes):
    folder = root / "configs" / "victims"
    folder.mkdir(parents=True)
    for name, seed, zoo in recipes:
        (folder / f"{name}.yaml").write_text(RECIPE.format(name=name, seed=seed, zoo=f"zoo: {zoo}\n" if zoo else ""))


def test_a_zoo_entry_becomes_one_victim_per_recipe(tmp_path):
    write_recipes(tmp_path, [("m_a", 0, "m"), ("m_a_s1", 1, "m"), ("m_b", 0, "m"), ("other", 0, None),
                             ("f_a", 0, "f")])
    out = expand_zoos([{"zoo": "m", "normalization": {"mean": [0.1], "std": [0.3]}}, {"key": "x", "victim_id": "x"}],
                      tmp_path)
    assert [v["key"] for v in out] == ["m_a", "m_a_s1", "m_b", "x"]
    assert out[0] == {"key": "m_a", "victim_id": "m_a", "checkpoint_ref": "victims/m_a.pt", "zoo": "m",
                      "normalization": {"mean": [0.1], "std": [0.3]}}
    with pytest.raises(ConfigError, match="zoos: f, m"):
        expand_zoos([{"zoo": "nope"}], tmp_path)
    with pytest.raises(ConfigError, match="names its victims itself"):
        expand_zoos([{"zoo": "m", "key": "k"}], tmp_path)


def test_the_shipped_zoos_hold_three_architectures_times_two_seeds():
    from pathlib import Path

    from mebench.victims.recipes import zoo_recipes

    root = Path(__file__).resolve().parent.parent / "configs" / "victims"
    for zoo, dataset in (("mnist", "MNIST"), ("fashionmnist", "FashionMNIST")):
        recipes = [r for _, r in zoo_recipes(root, zoo)]
        assert len(recipes) == 6 and {r.dataset for r in recipes} == {dataset}
        assert sorted((r.arch, r.seed) for r in recipes) == sorted(
            (a, s) for a in ("lenet5", "resnet8", "simple_cnn") for s in (0, 1))


def test_victim_train_all_argument_errors_are_one_line(capsys):
    from mebench.cli import main

    assert main(["victim", "train", "configs/victims/mnist_lenet5.yaml", "--all"]) == 2
    assert main(["victim", "train", "configs/victims/mnist_lenet5.yaml", "--zoo", "mnist"]) == 2
    assert main(["victim", "train", "--all", "--zoo", "no_such_zoo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "Traceback" not in err and "zoos:" in err


def frame(rows):
    keys = dict(victim_zoo="z", dataset="MNIST", output_mode="soft_prob", data_mode="surrogate", defense="none",
                track="A")
    return pd.DataFrame([{**keys, "label": a, "victim_id": v, "seed": s, "checkpoint_B": b, "agreement": x}
                         for a, v, s, b, x in rows])


# the aggregate is the mean ± std over all (victim, seed) runs; an attack whose rank differs
# between victims is flagged, one whose rank holds is not.
def test_report_aggregates_over_victims_and_flags_rank_changes():
    rows = [("random", "v1", 0, 1000, 0.50), ("random", "v1", 1, 1000, 0.60),
            ("random", "v2", 0, 1000, 0.80), ("random", "v2", 1, 1000, 0.90),
            ("thief", "v1", 0, 1000, 0.70), ("thief", "v1", 1, 1000, 0.70),
            ("thief", "v2", 0, 1000, 0.70), ("thief", "v2", 1, 1000, 0.72),
            ("random", "v1", 0, 10000, 0.9), ("random", "v2", 0, 10000, 0.9),
            ("thief", "v1", 0, 10000, 0.95), ("thief", "v2", 0, 10000, 0.96)]
    agg, per_victim = zoo_tables(frame(rows))
    r = agg[(agg.label == "random") & (agg.checkpoint_B == 1000)].iloc[0]
    assert r.agreement_mean == pytest.approx(0.70) and r.agreement_std == pytest.approx(pd.Series(
        [0.5, 0.6, 0.8, 0.9]).std()) and r.n_victims == 2 and r.n_runs == 4
    assert bool(r.rank_varies) and r.ranks == "1/2"
    assert not agg[agg.checkpoint_B == 10000].rank_varies.any()
    assert set(per_victim.columns) >= {"victim_id", "agreement_mean", "rank"}
    blocks = zoo_blocks(agg, per_victim)
    md, page = render_markdown(blocks), render_html(blocks, "zoo")
    assert "⚑ 1k: 1/2" in md and "<details><summary>per victim (2 victims)</summary>" in page
    assert zoo_tables(frame(rows).assign(victim_zoo=""))[0].empty
