"""DisGUIDE: cited defaults, a generator that never queries, the bounded replay buffer, both output
modes and the disagreement objective. The shared attack contract (budget, reproducibility, state
dependence, Track B split) runs over every registered attack in ``test_attack_registry.py``.

Runs on the synthetic SYNTH world (1x8x8 images, 4 classes, ``tiny_mlp``) with a tiny generator.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import disguide
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic

DOCS = Path(__file__).resolve().parent.parent / "docs" / "attacks"
register_synthetic()
TINY = dict(batch_size=8, nz=8, generator_width=4, replay_steps=1)


def substitute() -> nn.Module:
    p = get_profile("SYNTH")
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def make_attack(budget: int, checkpoints: tuple[int, ...], mode: str = "soft_prob", **kw) -> disguide.DisGUIDE:
    params = disguide.Params(**{**TINY, **kw})
    disguide.DisGUIDE.check_params(params, budget, checkpoints)
    p = get_profile("SYNTH")
    ctx = AttackContext(profile=p, output_mode=mode, num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=0, generator=torch.Generator().manual_seed(0), pool=None,
                        params=params, checkpoints=checkpoints, max_budget=budget, make_substitute=substitute)
    return ATTACKS.get("disguide")(ctx)


def run(attack: disguide.DisGUIDE):
    torch.manual_seed(123)
    spy = SpyNet(substitute())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    return oracle, state, spy, batches, models


REFS = re.compile(r"^(?:[\w./-]+:[\d,-]+(?:, )?)+$")


# contract 6 (attacks as published): every value docs/attacks/disguide.md cites is the default the
# attack runs with, and every parameter is cited there.
def test_defaults_are_the_cited_reference_values():
    cited = cited_defaults(DOCS / "disguide.md")
    assert set(cited) == {f.name for f in dataclasses.fields(disguide.Params)}
    defaults = disguide.Params()
    for name, (value, refs, kind) in cited.items():
        assert kind == "*" or REFS.match(refs), (name, refs)
        got = getattr(defaults, name)
        assert got == value and type(got) is type(value), f"{name}: default {got!r}, page {value!r} ({refs})"


# contract 1.1: the generator learns from the students alone, so every query is a student query: a
# run of whole iterations sends exactly batch_size images per query phase, and the victim sees each once.
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_every_query_is_a_student_batch_in_both_output_modes(mode):
    attack = make_attack(8 * 6 + 3, (19, 8 * 6 + 3), mode=mode)
    oracle, state, spy, batches, models = run(attack)
    assert spy.seen == oracle.queries_used == 51 == sum(len(b) for b in batches)
    assert [len(b) for b in batches] == [8, 8, 3, 8, 8, 8, 8]  # no probes; the phase cut at 19 is shortened
    assert attack.iteration == len(batches)  # query_steps 1: one iteration per batch
    assert set(models) == {19, 51} and all(isinstance(m, disguide.SoftVote) for m in models.values())


# contract 14.2 (memory of an attack is bounded): the replay ring holds at most
# min(replay_size, max_budget) images, keeps the newest, and samples distinct stored pairs.
def test_replay_buffer_is_bounded_fifo():
    ring = disguide.ReplayBuffer(5)
    for start in range(0, 12, 3):
        ring.add(torch.arange(start, start + 3).float().view(3, 1), torch.arange(start, start + 3))
    assert ring.size == 5 and ring.x.shape[0] == 5
    assert sorted(ring.y.tolist()) == [7, 8, 9, 10, 11]  # the five newest of 0..11
    x, y = ring.sample(4, torch.Generator().manual_seed(0))
    assert len(set(y.tolist())) == 4 and torch.equal(x.view(-1).long(), y)
    attack = make_attack(40, (40,), replay_size=16)
    run(attack)
    assert attack.replay.x.shape[0] == 16 and attack.replay.size == 16
    assert make_attack(40, (40,)).replay.capacity == 40  # default 1M: never more than the budget


# DisGUIDE's objective: the generator loss is the students' disagreement (0 for identical students)
# plus lambda_div times the negative entropy of the mean vote (minimal, -log K, for a uniform vote).
def test_generator_loss_is_disagreement_plus_diversity():
    attack = make_attack(40, (40,), lambda_div=0.0)
    x = torch.rand(6, *SYNTH_SHAPE)
    attack.students[1].load_state_dict(attack.students[0].state_dict())
    attack.students.eval()
    with torch.no_grad():
        assert float(attack.generator_loss(x)) == 0.0
    with torch.no_grad():
        for p in attack.students[1].parameters():
            p.add_(torch.randn_like(p))
    with torch.no_grad():  # the value only (a float of a tensor that needs grad warns)
        assert float(attack.generator_loss(x)) < 0.0
    diverse = make_attack(40, (40,), lambda_div=1.0)
    for s in diverse.students:
        for p in s.parameters():
            nn.init.zeros_(p)  # both students answer uniformly: std 0, mean vote uniform
    diverse.students.eval()
    expected = -torch.log(torch.tensor(float(SYNTH_CLASSES)))
    with torch.no_grad():
        assert abs(float(diverse.generator_loss(x)) - float(expected)) < 1e-4


# contract 7.1: one message naming key, value and rule.
@pytest.mark.parametrize("key,value", [("ensemble_size", 1), ("replay_size", 0), ("lr_milestones", (0.8, 0.4)),
                                       ("lr_schedule", "cosine"), ("epoch_iterations", 0)])
def test_bad_params_fail_with_one_message(key, value):
    with pytest.raises(ConfigError) as err:
        disguide.DisGUIDE.check_params(disguide.Params(**{key: value}), 1000, (1000,))
    assert err.value.key == f"attack.params.{key}" and "\n" not in str(err.value)


def _reference_lrs(budget: int, epoch_queries: int, milestones: tuple[float, ...], gamma: float) -> list[float]:
    """The learning rate of each epoch as the reference steps it (disguide/train.py:311, 322-327,
    341-353): MultiStepLR at ``int(m * N)`` of N = budget // epoch_queries + 1 epochs, stepped after each."""
    n = budget // epoch_queries + 1
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, sorted(int(m * n) for m in milestones), gamma)
    lrs = []
    for _ in range(n):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return lrs


# issue 53: lr_schedule "epochs" (the default) gives, at every query count, the rate torch's MultiStepLR
# gives the reference's epoch; below one epoch's queries both milestones fall at epoch 0 (x 0.09 throughout).
@pytest.mark.parametrize("budget", [1_000, 10_000, 76_799, 76_800, 100_000, 400_000])
def test_epoch_schedule_is_the_references_multisteplr(budget):
    attack = make_attack(budget, (budget,), batch_size=256)
    assert attack.hp.lr_schedule == "epochs" and attack.hp.epoch_iterations == 150
    epoch_queries = 150 * 256
    ref = _reference_lrs(budget, epoch_queries, attack.hp.lr_milestones, attack.hp.lr_gamma)
    state = type("S", (), {"max_budget": budget, "queries_used": 0})()
    for q in sorted({0, 1, budget // 3, budget // 2, budget - 1, *range(0, budget, epoch_queries // 2)}):
        state.queries_used = q
        assert attack.hp.lr_gamma ** attack.lr_drops(state) == pytest.approx(ref[q // epoch_queries], rel=1e-12), q
    state.queries_used = 0
    assert attack.lr_drops(state) == (2 if budget < epoch_queries else 1 if budget < 2 * epoch_queries else 0)


# issue 53: lr_schedule "budget" (named variant) drops at 40 % and 80 % of the run's budget.
def test_budget_schedule_drops_at_fractions_of_the_budget():
    attack = make_attack(10_000, (10_000,), lr_schedule="budget")
    state = type("S", (), {"max_budget": 10_000, "queries_used": 0})()
    drops = []
    for q in (0, 3_999, 4_000, 7_999, 8_000, 9_999):
        state.queries_used = q
        drops.append(attack.lr_drops(state))
    assert drops == [0, 0, 1, 1, 2, 2]
