"""MAZE: every probe counted, the reference's cost per iteration, exact stops at odd budgets,
reproducibility, the replay buffer, and soft_prob only.

Runs on the synthetic SYNTH world (1x8x8 images, 4 classes, ``tiny_mlp``) with a tiny generator,
driven by the engine's own query loop through the real oracle; a spy around the victim network
counts every image that reaches its forward pass.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import maze
from mebench.data.profiles import get_profile
from mebench.errors import ConfigError
from mebench.models.generators import seeded_generator
from mebench.models.registry import build_model
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic
from mebench.validation import validate

register_synthetic()
TINY = dict(batch_size=4, ndirs=2, latent_dim=8, generator_width=4, iter_clone=3, iter_exp=2)
G_COST, C_COST = 4 * 3, 4  # batch * (1 + ndirs), batch
ITER_COST = 4 * ((3 - 1) + 3 * 1)


def substitute() -> nn.Module:
    p = get_profile("SYNTH")
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def make_attack(budget: int, checkpoints: tuple[int, ...], seed: int = 0, **kw) -> maze.MAZE:
    params = maze.Params(**{**TINY, **kw})
    maze.MAZE.check_params(params, budget, checkpoints)
    p = get_profile("SYNTH")
    ctx = AttackContext(profile=p, output_mode="soft_prob", num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=seed, generator=torch.Generator().manual_seed(seed),
                        pool=None, params=params, checkpoints=checkpoints, max_budget=budget,
                        make_substitute=substitute, data_mode="data_free")
    return ATTACKS.get("maze")(ctx)


def run(attack: maze.MAZE):
    """Drive ``attack`` through the engine loop; returns oracle, state, spy, batches and Track B models."""
    torch.manual_seed(123)
    spy = SpyNet(substitute())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    return oracle, state, spy, batches, models


# contract 1.1: MAZE's iteration costs B·((iter_clone − 1) + (1 + ndirs)·iter_gen) queries, probes
# included, and the reused base batch is never sent twice (the reference re-sends it uncounted).
def test_iteration_cost_and_every_probe_counted():
    assert maze.iteration_cost(maze.Params()) == 128 * (4 + 11 * 1) == 1920
    n_iter = 3
    attack = make_attack(n_iter * ITER_COST, (n_iter * ITER_COST,))
    oracle, state, spy, batches, _ = run(attack)
    assert spy.seen == oracle.queries_used == len(state.store) == n_iter * ITER_COST
    assert attack.iteration == n_iter
    assert [len(b) for b in batches] == [G_COST, C_COST, C_COST] * n_iter
    x = state.store.prefix(len(state.store))[0]
    assert torch.unique(x.flatten(1), dim=0).shape[0] == len(x)  # no image answered twice
    assert len(attack.replay) == n_iter * 4  # the last clone batch of every iteration


# contract 1.1 / 14.2: the run stops exactly at odd budgets, whatever the phase costs (12 and 4).
@pytest.mark.parametrize("budget,checkpoints", [(997, (997,)), (1001, (333, 1001)), (7, (7,)), (13, (1, 5, 13))])
def test_exact_stop_at_odd_budgets(budget, checkpoints):
    oracle, _, spy, batches, models = run(make_attack(budget, checkpoints))
    assert oracle.queries_used == spy.seen == budget and oracle.budget_left == 0
    assert sorted(models) == list(checkpoints)
    assert sum(len(b) for b in batches) == budget


# contract 14.2: shortened phases only where a checkpoint or the budget's end cuts a phase (no spin).
@settings(max_examples=15, deadline=None)
@given(budget=st.integers(1, 300), cuts=st.lists(st.integers(1, 300), max_size=4))
def test_short_phases_only_at_checkpoints(budget, cuts):
    cps = tuple(sorted({c for c in cuts if c < budget} | {budget}))
    oracle, _, _, batches, _ = run(make_attack(budget, cps))
    assert oracle.queries_used == budget
    assert len([b for b in batches if len(b) not in (G_COST, C_COST)]) <= len(cps)


# contract 10: a fixed seed gives the same queries and the same clone on CPU; another seed does not.
def test_determinism_for_fixed_seed():
    runs = [run(make_attack(200, (50, 200), seed=s)) for s in (5, 5, 6)]
    (x1, y1), (x2, y2), (x3, _) = (r[1].store.prefix(200) for r in runs)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    s1, s2 = (r[4][200].state_dict() for r in runs[:2])
    assert all(torch.equal(s1[k], s2[k]) for k in s1)


# contract 8: Track B is the live clone; the generator starts from the untrained_generator control's
# weights for the same seed (the control with MAZE's generator settings), so the gain is training's.
def test_track_b_is_the_clone_and_the_control_shares_the_initial_generator():
    attack = make_attack(100, (100,))
    g0 = {k: v.clone() for k, v in attack.generator.state_dict().items()}
    _, _, _, _, models = run(attack)
    assert models[100] is attack.clone and not attack.clone.training
    p = get_profile("SYNTH")
    ctx = AttackContext(profile=p, output_mode="soft_prob", num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=0, generator=torch.Generator().manual_seed(0), pool=None,
                        params=ATTACKS.get("untrained_generator").Params(batch_size=4, nz=8, generator_width=4,
                                                                           pixel_map="unit_tanh", head_affine=True),
                        checkpoints=(100,), max_budget=100, make_substitute=substitute, data_mode="data_free")
    control = ATTACKS.get("untrained_generator")(ctx)
    c0 = control.generator.state_dict()
    assert g0.keys() == c0.keys() and all(torch.equal(g0[k], c0[k]) for k in g0)
    assert any(not torch.equal(g0[k], v) for k, v in attack.generator.state_dict().items())  # G was trained


# the replay buffer keeps every appended row, in order, across capacity growth.
def test_replay_buffer_appends_in_place():
    buf = maze.ReplayBuffer()
    xs = [torch.full((3, 1, 2, 2), float(i)) for i in range(5)]
    for i, x in enumerate(xs):
        buf.add(x, torch.full((3, 4), float(i)))
    x, y = buf.view()
    assert len(buf) == 15 and torch.equal(x, torch.cat(xs)) and torch.equal(y[:, 0], torch.arange(5.0).repeat_interleave(3))


# KL(victim || clone) is >= 0, 0 when the clone's softmax equals the victim's answer, finite at p = 0.
def test_kl_per_sample():
    logits = torch.randn(6, 4)
    assert torch.allclose(maze.kl_per_sample(torch.softmax(logits, 1), logits), torch.zeros(6), atol=1e-6)
    onehot = torch.eye(4)[[0, 1, 2, 3, 0, 1]]
    kl = maze.kl_per_sample(onehot, logits)
    assert torch.isfinite(kl).all() and (kl > 0).all()


# contract 15.2 / 6.1: MAZE needs data_free and soft_prob; bad values fail with one line naming the key.
def test_config_rules(make_cfg):
    base = dict(dataset={"data_mode": "data_free", "surrogate_name": None}, attack={"name": "maze", "params": dict(TINY)})
    validate(make_cfg(**base))
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim={"output_mode": "hard_top1"},
                          **{**base, "attack": {**base["attack"], "output_mode": "hard_top1"}}))
    assert err.value.key == "attack.output_mode" and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="data_free"):
        validate(make_cfg(attack={"name": "maze", "params": dict(TINY)}))
    for key, value in (("ndirs", 0), ("mu", 0.0), ("iter_exp", -1), ("pixel_map", "sigmoid")):
        with pytest.raises(ConfigError) as err:
            validate(make_cfg(**{**base, "attack": {"name": "maze", "params": {key: value}}}))
        assert err.value.key == f"attack.params.{key}"
    assert seeded_generator(8, (1, 8, 8), 4, 0, head_affine=True).head[1].affine
