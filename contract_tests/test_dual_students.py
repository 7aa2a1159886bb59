"""Dual Students: cited defaults, a generator that never queries, the two students' disagreement
objective, the moving-average Track B and both output modes. The shared attack contract (budget,
reproducibility, state dependence, Track B split) runs in ``test_attack_registry.py``.

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
from mebench.attacks import dual_students as ds
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic

DOCS = Path(__file__).resolve().parent.parent / "docs" / "attacks"
register_synthetic()
TINY = dict(batch_size=8, nz=8, generator_width=4, student_steps=2, ema_interval=2)
REFS = re.compile(r"^(?:[\w./-]+:[\d,-]+(?:, )?)+$")


def substitute() -> nn.Module:
    p = get_profile("SYNTH")
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def make_attack(budget: int, checkpoints: tuple[int, ...], mode: str = "soft_prob", **kw) -> ds.DualStudents:
    params = ds.Params(**{**TINY, **kw})
    ds.DualStudents.check_params(params, budget, checkpoints)
    p = get_profile("SYNTH")
    ctx = AttackContext(profile=p, output_mode=mode, num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=0, generator=torch.Generator().manual_seed(0), pool=None,
                        params=params, checkpoints=checkpoints, max_budget=budget, make_substitute=substitute)
    return ATTACKS.get("dual_students")(ctx)


def run(attack: ds.DualStudents):
    torch.manual_seed(123)
    spy = SpyNet(substitute())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    return oracle, state, spy, batches, models


# contract 6 (attacks as published): every value docs/attacks/dual_students.md cites is the default
# the attack runs with, and every parameter is cited there.
def test_defaults_are_the_cited_reference_values():
    cited = cited_defaults(DOCS / "dual_students.md")
    assert set(cited) == {f.name for f in dataclasses.fields(ds.Params)}
    defaults = ds.Params()
    for name, (value, refs, kind) in cited.items():
        assert kind == "-" and REFS.match(refs), (name, refs)
        got = getattr(defaults, name)
        assert got == value and type(got) is type(value), f"{name}: default {got!r}, page {value!r} ({refs})"


# contract 1.1 + 8: no generator probes reach the victim (every batch is a student batch, exact at the
# odd checkpoint); Track B is the moving average of student 0, refreshed every ema_interval iterations.
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_student_batches_only_and_the_averaged_track_b(mode):
    attack = make_attack(8 * 8 + 5, (21, 69), mode=mode)
    oracle, state, spy, batches, models = run(attack)
    assert spy.seen == oracle.queries_used == 69
    assert [len(b) for b in batches] == [8, 8, 5, 8, 8, 8, 8, 8, 8]  # the batch cut at 21 is shortened
    assert attack.iteration == 4 and attack.averaged  # 9 batches of 2 phases: 4 whole iterations, 2 refreshes
    assert models[69] is attack.average and not any(p.requires_grad and p.grad is not None
                                                    for p in attack.average.parameters())
    live = dict(attack.students[0].named_parameters())
    assert any(not torch.equal(p, live[n]) for n, p in attack.average.named_parameters())  # an average, not a copy


# the averaging rule (moving_averages.py:21-35): the first refresh copies, later ones mix at the momentum.
def test_moving_average_copies_first_then_mixes():
    attack = make_attack(40, (40,), ema_momentum=0.5)
    live = attack.students[0]
    attack._average_step()
    assert all(torch.equal(a, b) for a, b in zip(attack.average.parameters(), live.parameters()))
    before = [p.clone() for p in attack.average.parameters()]
    with torch.no_grad():
        for p in live.parameters():
            p.add_(1.0)
    attack._average_step()
    assert all(torch.allclose(a, b + 0.5) for a, b in zip(attack.average.parameters(), before))
    assert make_attack(40, (40,), ema_momentum=0.0).track_b_model(None) is not None  # live student reported


# Dual Students' objective: G ascends the mean pairwise l1 distance of the students' logits, which is 0
# for identical students; in a generator step the students see G's pre-activation (train.py:56).
def test_generator_objective_and_pre_activation_input():
    attack = make_attack(40, (40,))
    a = torch.tensor([[-3.0, 0.0, 3.0]]).view(1, 1, 1, 3)
    p = get_profile("SYNTH")
    assert torch.allclose(attack.generator_input(a).view(-1), p.mean[0] + p.std[0] * a.view(-1))
    attack.students[1].load_state_dict(attack.students[0].state_dict())
    x = torch.rand(5, *SYNTH_SHAPE)
    with torch.no_grad():
        assert float(ds.pairwise_l1([s(x) for s in attack.students])) == 0.0
        for q in attack.students[1].parameters():
            q.add_(torch.randn_like(q))
        assert float(ds.pairwise_l1([s(x) for s in attack.students])) > 0.0


# contract 7.1: one message naming key, value and rule.
@pytest.mark.parametrize("key,value", [("num_students", 1), ("ema_interval", 0), ("ema_momentum", 1.0)])
def test_bad_params_fail_with_one_message(key, value):
    with pytest.raises(ConfigError) as err:
        ds.DualStudents.check_params(ds.Params(**{key: value}), 1000, (1000,))
    assert err.value.key == f"attack.params.{key}" and "\n" not in str(err.value)


# The named variant sample_mode "train" (both references sample in eval mode): the generator's batch
# norm normalises each query batch by its own statistics, so the queries differ from eval mode's
# from the first batch on; a mistyped mode is one config error before any work.
def test_sample_mode_decides_the_generators_mode_when_querying():
    first = {}
    for mode in ("eval", "train"):
        attack = make_attack(64, (64,), sample_mode=mode)
        state = type("S", (), {"queries_used": 0, "max_budget": 64, "budget_left": 64})()
        batch = attack.propose(8, state)
        assert attack.generator.training is (mode == "train")
        first[mode] = batch.x
    assert not torch.equal(first["eval"], first["train"])
    with pytest.raises(ConfigError) as err:
        make_attack(64, (64,), sample_mode="training")
    assert err.value.key == "attack.params.sample_mode"
