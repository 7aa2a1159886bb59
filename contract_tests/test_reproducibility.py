"""Contract §7, §8, §10, §17.3: D_B prefixes, Track A from scratch and bit-identical reruns."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mebench.run import engine
from mebench.data.cache import QueryStore
from mebench.training.loop import OptimizerSpec, steps_for_budget
from mebench.training.track_a import TrackASpec, TrackATrainer
from mebench.run.plan import resolve, site


def _rows(res):
    return [r for s in res.seeds for r in s.rows]


@pytest.mark.slow
def test_same_config_gives_bit_identical_metrics_and_weights_on_cpu(make_cfg):
    # contract 8, 10, 17.3: Track A is deterministic under fixed seeds
    cfg = make_cfg()
    a, b = engine.run(cfg, progress=False), engine.run(cfg, progress=False)
    assert _rows(a) == _rows(b)
    wa = torch.load(a.directory / "seed_0" / "final_substitute.ckpt", weights_only=True)
    wb = torch.load(b.directory / "seed_0" / "final_substitute.ckpt", weights_only=True)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_different_run_seeds_give_different_query_sets(make_cfg):
    # contract 10: the run seed drives attack sampling
    cfg = make_cfg()
    prep = engine.prepare(resolve(cfg), site(cfg))
    a0 = engine.make_attack(resolve(cfg, 0), prep, engine.build_pool(resolve(cfg, 0), prep))
    a1 = engine.make_attack(resolve(cfg, 1), prep, engine.build_pool(resolve(cfg, 1), prep))
    again = engine.make_attack(resolve(cfg, 0), prep, engine.build_pool(resolve(cfg, 0), prep))
    assert not torch.equal(a0.sampler.order[:100], a1.sampler.order[:100])
    assert torch.equal(a0.sampler.order, again.sampler.order)


def _spec(mode: str = "soft_prob") -> TrackASpec:
    return TrackASpec("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,), init_seed=1234, batch_size=128,
                      steps_coeff_c=0.2, optimizer=OptimizerSpec("sgd", 0.05, 0.9, 0.0), output_mode=mode)


def test_track_a_starts_from_the_same_fresh_init_at_every_checkpoint():
    # contract 8: fixed initialization seed; model re-instantiated at each checkpoint
    t = TrackATrainer(_spec(), "cpu")
    torch.manual_seed(99)  # global RNG state must not matter
    m1 = t.fresh_model()
    torch.rand(1000)
    m2 = t.fresh_model()
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_track_a_resets_optimizer_and_schedule_between_checkpoints():
    # contract 8: optimizer and LR schedule state never carry over: training on D_B
    # gives the same model whether or not another checkpoint was trained before
    t = TrackATrainer(_spec(), "cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 1, 8, 8, generator=g)
    y = torch.softmax(torch.randn(300, 4, generator=g), 1)
    alone = TrackATrainer(_spec(), "cpu").train(x[:200], y[:200])
    t.train(x, y)
    after = t.train(x[:200], y[:200])
    assert all(torch.equal(a, b) for a, b in zip(alone.state_dict().values(), after.state_dict().values()))


@given(st.integers(1, 10**7))
def test_steps_rule_is_ceil_of_point_two_b(b):
    # contract 8: S(B) = ceil(0.2 * B), exactly (no float rounding surprises)
    assert steps_for_budget(b, 0.2) == -(-b // 5)
    assert steps_for_budget(b, 0.2) == math.ceil(b / 5)


def test_track_a_runs_exactly_s_b_steps_at_batch_128(make_cfg, monkeypatch):
    # contract 8: S(B) steps at the fixed batch size, recorded in summary.json
    import json

    import mebench.training.loop as loop

    seen = []
    orig = loop.batch_indices

    def spy(n, steps, batch_size, generator, chunk_steps=512):
        seen.append((n, steps, batch_size))
        return orig(n, steps, batch_size, generator, chunk_steps)

    monkeypatch.setattr(loop, "batch_indices", spy)
    res = engine.run(make_cfg(budget={"max_budget": 501, "checkpoints": [101, 501]}), progress=False)
    assert seen == [(101, 21, 128), (501, 101, 128)]
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["track_a_steps"] == {"101": 21, "501": 101}
    assert summary["track_a"]["batch_size"] == 128 and summary["track_a"]["steps_coeff_c"] == 0.2


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cps=st.lists(st.integers(1, 400), min_size=1, max_size=4, unique=True).map(sorted))
@pytest.mark.slow
def test_d_b_is_a_prefix_of_d_b_prime(cps, make_cfg, monkeypatch):
    # contract 7: D_B is the first B queried images; for B < B', D_B is a prefix of D_B'
    snapshots = {}
    orig = QueryStore.prefix

    def spy(self, n, device="cpu"):
        x, y = orig(self, n, device)
        snapshots[n] = (x.clone(), y.clone())
        return x, y

    monkeypatch.setattr(QueryStore, "prefix", spy)
    monkeypatch.setattr(TrackATrainer, "steps", lambda self, b: 1)  # only the data matter here
    engine.run(make_cfg(budget={"max_budget": cps[-1], "checkpoints": cps}), progress=False)
    assert sorted(snapshots) == cps
    full_x, full_y = snapshots[cps[-1]]
    for b in cps:
        x, y = snapshots[b]
        assert x.shape[0] == b
        assert torch.equal(x, full_x[:b]) and torch.equal(y, full_y[:b])


def test_d_b_holds_the_oracle_outputs_of_exactly_those_images(make_cfg, monkeypatch):
    # contract 7: D_B pairs each queried image with the oracle's answer to it
    cfg = make_cfg()
    seen = []
    orig_append = QueryStore.append

    def spy(self, x, y):
        seen.append((x.clone(), y.clone()))
        orig_append(self, x, y)

    monkeypatch.setattr(QueryStore, "append", spy)
    res = engine.run(cfg, progress=False)
    x = torch.cat([s[0] for s in seen])
    y = torch.cat([s[1] for s in seen])
    prep = engine.prepare(resolve(cfg), site(cfg))
    torch.testing.assert_close(prep.victim.probs(x), y)
    assert res.seeds[0].summary["queries_used"] == x.shape[0] == cfg.budget.max_budget
