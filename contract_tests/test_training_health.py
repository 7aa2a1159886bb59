"""Training health (mebench.training.health): a collapsed or diverged checkpoint is flagged, never hidden.

The flags sit beside the contract's metrics (§1.3, §8) without changing them: recording the
losses leaves Track A bit-identical, a healthy run raises no flag, and a constant predictor or a
loss that climbs back is named in summary.json, in the run's progress lines and in the report.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mebench.run import engine
from mebench.report import write_report
from mebench.testing import CollapsingTrainer
from mebench.training.health import COLLAPSE_SHARE, LossCurve, assess, top_class_share
from mebench.training.loop import OptimizerSpec, train_steps
from mebench.run.plan import resolve, site


def _curve(values) -> LossCurve:
    return LossCurve.of(torch.tensor(values, dtype=torch.float32))


def test_loss_curve_windows_and_divergence():
    healthy = _curve([2.3 - 2.0 * i / 999 for i in range(1000)])  # falls steadily to 0.3
    assert healthy.window == 100 and healthy.steps == 1000
    assert healthy.first == pytest.approx(2.2009, abs=1e-3) and healthy.last == pytest.approx(0.3991, abs=1e-3)
    assert healthy.best == healthy.last and not healthy.diverged
    # the MNIST jbda_fast hard collapse: 0.26 by step 100, 2.24 from step 200 on
    collapsed = _curve([0.26] * 150 + [2.24] * 1850)
    assert collapsed.best == pytest.approx(0.26) and collapsed.last == pytest.approx(2.24) and collapsed.diverged
    # a small KL loss that doubles is minibatch noise, not divergence (the 0.5-nat margin)
    assert not _curve([0.05] * 500 + [0.11] * 500).diverged
    # a run that never learned has not diverged either
    assert not _curve([2.3] * 300).diverged
    short = _curve([1.0, 0.5, 3.0])  # fewer than 10 steps: one-step windows
    assert short.window == 1 and short.best == 0.5 and short.last == 3.0 and short.diverged
    assert LossCurve.of(torch.empty(0)) is None


def test_collapse_needs_a_constant_substitute_and_a_varied_victim():
    const = torch.zeros(50, 10)
    const[:, 3] = 1.0
    assert top_class_share(const) == 1.0
    assert top_class_share(torch.eye(10).repeat(5, 1)) == pytest.approx(0.1)
    flagged = assess("A", 10_000, 1.0, 0.1135)
    assert len(flagged["flags"]) == 1 and flagged["flags"][0].startswith("Track A B=10,000 collapsed")
    assert assess("A", 10_000, COLLAPSE_SHARE - 0.01, 0.1)["flags"] == []
    assert assess("B", 1_000, 0.95, 0.9)["flags"] == []  # the victim itself answers one class
    both = assess("A", 1_000, 1.0, 0.1, _curve([0.26] * 10 + [2.24] * 90))
    assert [f.split(":")[0] for f in both["flags"]] == ["Track A B=1,000 collapsed", "Track A B=1,000 diverged"]
    assert both["loss_best"] == pytest.approx(0.26) and both["loss_window"] == 10


def test_recording_losses_leaves_training_bit_identical():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(300, 6, generator=g), torch.randint(0, 3, (300,), generator=g)
    spec = OptimizerSpec(name="sgd", lr=0.1, momentum=0.9, weight_decay=5e-4)

    def train(losses=None):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        return train_steps(model, x, y, loss_fn=nn.functional.cross_entropy, steps=40, batch_size=32,
                           optimizer=spec, generator=torch.Generator().manual_seed(5), losses=losses)

    losses = torch.full((40,), float("nan"))
    plain, traced = train(), train(losses)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), traced.state_dict().values()))
    assert torch.isfinite(losses).all() and losses[0] > losses[-5:].mean()


@pytest.mark.slow
def test_a_healthy_run_records_every_checkpoint_and_raises_no_flag(make_cfg):
    cfg = make_cfg(attack={"name": "knockoff"})
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    health = summary["training_health"]
    assert sorted((r["track"], r["checkpoint_B"]) for r in health) == [("A", 200), ("A", 500), ("B", 200), ("B", 500)]
    for r in health:
        assert 0.0 < r["pred_top_share"] <= 1.0 and 0.0 < r["victim_top_share"] <= 1.0
        if r["track"] == "A":
            assert 0.0 < r["loss_best"] <= r["loss_last"] and r["loss_window"] >= 1
        else:
            assert "loss_last" not in r
    assert summary["health_flags"] == []
    assert not (write_report(res.directory, res.directory / "report").keys() & {"health_csv", "health_md"})


@pytest.mark.slow
def test_a_collapsed_track_a_is_flagged_in_the_summary_the_log_and_the_report(make_cfg, tmp_path):
    cfg = make_cfg()
    prep = engine.prepare(resolve(cfg), site(cfg))
    lines: list[str] = []
    seed_dir = tmp_path / "run" / "seed_0"
    result = engine.run_seed(resolve(cfg, 0), site(cfg), prep, seed_dir, progress=False, say=lines.append,
                             trainer=CollapsingTrainer(engine.make_track_a_trainer(resolve(cfg), prep), diverge=True))
    flags = result.summary["health_flags"]
    assert [f.split(":")[0] for f in flags] == ["Track A B=200 collapsed", "Track A B=200 diverged",
                                                "Track A B=500 collapsed", "Track A B=500 diverged"]
    assert sum(line.startswith("WARNING Track A") for line in lines) == 4
    a500 = [r for r in result.summary["training_health"] if r["checkpoint_B"] == 500][0]
    assert a500["pred_top_share"] == 1.0 and a500["loss_last"] == 5.0
    # the metrics themselves are untouched: a constant predictor's agreement is the victim's class-0 share
    row = [r for r in result.rows if r["checkpoint_B"] == 500][0]
    assert row["agreement"] < 0.5
    with pytest.warns(UserWarning, match="4 checkpoint"):
        files = write_report(seed_dir, tmp_path / "report")
    table = files["health_csv"].read_text().splitlines()
    assert len(table) == 5 and table[0].startswith("dataset,victim_id,label,")
    assert "collapsed" in files["health_md"].read_text()

