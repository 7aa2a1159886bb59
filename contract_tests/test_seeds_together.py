"""Seeds together in the engine (contract §8 Track A, §10 seeding): ``engine.run(seeds_together=True)``
really trains the seeds' Track A substitutes in one stacked call per checkpoint, each seed's
queries are those it makes alone, and the metrics equal the seed-by-seed run up to the float
tolerance of ``test_track_a_batched.py``; the default follows the device's measurement."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from mebench.run import engine, together
from mebench.run.together import default_for


def metrics(result):
    rows = {}
    for s in result.seeds:
        with open(s.directory / "metrics.csv") as f:
            for r in csv.DictReader(f):
                rows[(s.seed, r["checkpoint_B"], r["track"])] = r
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory, synth_victim_path):
    """The same 3-seed SYNTH run seed by seed and together (calls of the stacked trainer counted)."""
    from mebench.config import parse_config
    from mebench.testing import deep_update, synthetic_config_dict

    tmp = tmp_path_factory.mktemp("together")
    cfg = parse_config(deep_update(synthetic_config_dict(tmp, synth_victim_path), {"run": {"seeds": [0, 1, 2]}}))
    calls = []
    real = together.train_seeds_together

    def counting(trainer, datasets, **kw):
        calls.append([int(x.shape[0]) for x, _ in datasets])
        return real(trainer, datasets, **kw)

    alone = engine.run(cfg, progress=False, seeds_together=False)
    together.train_seeds_together = counting
    try:
        joint = engine.run(cfg, progress=False, seeds_together=True)
    finally:
        together.train_seeds_together = real
    return alone, joint, calls


# §8: one stacked training per checkpoint, over all three seeds' D_B.
@pytest.mark.slow
def test_engine_trains_the_seeds_together(runs):
    _, joint, calls = runs
    assert calls == [[200, 200, 200], [500, 500, 500]]
    summary = json.loads((joint.seeds[1].directory / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["track_a_seeds_together"] == {"seeds": [0, 1, 2]}
    assert summary["track_a_steps"] == {"200": 40, "500": 100}  # every seed's steps were counted


# §10: each seed queries what it queries alone (its RNG states travel with it), so Track A's
# metrics agree within the batched trainer's rounding (other queries would move them far more).
@pytest.mark.slow
def test_together_matches_seed_by_seed(runs):
    alone, joint = metrics(runs[0]), metrics(runs[1])
    assert alone.keys() == joint.keys() and len(alone) == 6
    for key, a in alone.items():
        for m in ("agreement", "acc_gt", "kl_mean", "l1_mean"):
            assert float(joint[key][m]) == pytest.approx(float(a[m]), abs=2e-3), (key, m)
    assert len({alone[(s, "500", "A")]["kl_mean"] for s in (0, 1, 2)}) == 3  # the seeds differ


# The default follows the measurement: off on the CPU (no gain), off where nothing was measured.
def test_default_follows_the_measured_devices():
    assert default_for("cpu") is False and default_for(torch.device("cpu")) is False
    assert default_for("cuda") is together.DEFAULT_ON.get("cuda", False)


# A failing seed stops the others at their next hand-over and its error reaches the caller.
def test_a_failing_seed_stops_the_group():
    from mebench.training.loop import OptimizerSpec
    from mebench.training.track_a import TrackASpec, TrackATrainer

    base = TrackATrainer(TrackASpec("lenet5", 1, 10, (28, 28), (0.1,), (0.3,), 1, 16, 0.2, OptimizerSpec(),
                                    "soft_prob"), "cpu")
    x, y = torch.rand(20, 1, 28, 28), torch.softmax(torch.randn(20, 10), 1)

    def one(seed, trainer):
        if seed == 1:
            raise ValueError("seed 1 broke")
        return trainer.train(x, y)

    with pytest.raises(ValueError, match="seed 1 broke"):
        together.run_together([0, 1, 2], base, one)


# §10: a seed's global RNG streams (torch, NumPy, Python) survive the hand-overs: what it draws
# after a checkpoint is what it draws when run alone.
def test_each_seed_keeps_its_random_streams():
    import random

    import numpy as np

    from mebench.support.seeding import seed_everything
    from mebench.training.loop import OptimizerSpec
    from mebench.training.track_a import TrackASpec, TrackATrainer

    base = TrackATrainer(TrackASpec("lenet5", 1, 10, (28, 28), (0.1,), (0.3,), 1, 16, 0.2, OptimizerSpec(),
                                    "soft_prob"), "cpu")
    x, y = torch.rand(20, 1, 28, 28), torch.softmax(torch.randn(20, 10), 1)

    def draws():
        return torch.rand(2).tolist() + [float(np.random.rand()), random.random()]

    def one(seed, trainer):
        seed_everything(seed)
        first = draws()
        trainer.train(x, y)
        return first + draws()

    def alone(seed):
        seed_everything(seed)
        return draws() + draws()

    assert together.run_together([0, 1, 2], base, one) == [alone(s) for s in (0, 1, 2)]
