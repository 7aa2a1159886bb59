"""IDEAL and QEDG, the round-based hard-label synthesis attacks (contract §1.1, §6, §8, §13.2).

The shared attack contract (budget, reproducibility, state dependence, Track B split) runs over
them in ``test_attack_registry.py``; this module checks what is theirs: the cited reference
defaults, the hard-label restriction, one query per pool image, QEDG's selection and losses
against the reference's formulas, and that QEDG's Track B copy leaves the live substitute alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import ideal, qedg
from mebench.attacks.qedg import rotate
from mebench.attacks.synthesis import SynthGenerator, quantize, reset_generator
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic

register_synthetic()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "attacks"
MODULES = {"ideal": ideal, "qedg": qedg}


def make(name: str, budget: int, checkpoints: tuple[int, ...], output_mode: str = "hard_top1", **kw):
    cls = ATTACKS.get(name)
    params = MODULES[name].Params(**{**cls.smoke_params, **kw})
    cls.check_params(params, budget, checkpoints)
    p = get_profile("SYNTH")
    ctx = AttackContext(profile=p, output_mode=output_mode, num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=0, generator=torch.Generator().manual_seed(0), pool=None,
                        params=params, checkpoints=checkpoints, max_budget=budget, data_mode="data_free",
                        make_substitute=lambda: build_model("tiny_mlp", p.channels, p.num_classes, p.input_size,
                                                            p.mean, p.std))
    return cls(ctx)


def victim() -> nn.Module:
    torch.manual_seed(5)
    p = get_profile("SYNTH")
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std).eval()


# contract §6 (attacks as published): every default the page cites is the default the attack runs with,
# and every parameter is cited; QEDG's FashionMNIST script values come from dataset_defaults.
@pytest.mark.parametrize("name", ["ideal", "qedg"])
def test_defaults_are_the_cited_reference_values(name):
    cited = cited_defaults(DOCS / f"{name}.md")
    params = MODULES[name].Params()
    assert set(cited) == {f.name for f in dataclasses.fields(params)}
    for field, (value, source, _) in cited.items():
        got = getattr(params, field)
        assert got == value and type(got) is type(value), f"{name}.{field}: {got!r} vs cited {value!r} ({source})"
    if name == "qedg":
        assert qedg.QEDG.dataset_defaults("FashionMNIST") == {"balance_scale": 3.0, "crop_first": False}
        assert qedg.QEDG.dataset_defaults("MNIST") == {}


# contract §13.2: both read top-1 labels only; a soft_prob run is refused before any work.
@pytest.mark.parametrize("name", ["ideal", "qedg"])
def test_soft_prob_is_refused(name):
    assert ATTACKS.get(name).output_modes == frozenset({"hard_top1"})
    with pytest.raises(ConfigError) as err:
        make(name, 100, (100,), output_mode="soft_prob")
    assert err.value.key == "attack.output_mode"


# contract §1.1: every image the victim sees is charged once and joins the pool once (no re-labelling
# per epoch, unlike IDEAL's reference loop); the budget is exact at an odd remainder.
@pytest.mark.parametrize("name", ["ideal", "qedg"])
def test_each_pool_image_is_one_query(name):
    attack = make(name, 77, (33, 77))
    spy = SpyNet(victim())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    x, y = attack.pool()
    assert oracle.queries_used == spy.seen == len(x) == len(y) == 77
    assert torch.equal(x, torch.cat([b.x for b in batches]))
    assert torch.equal(x, quantize(x))  # 8-bit pixels, as the reference's PNGs
    assert sorted(models) == [33, 77]


# contract §16 (records): a selecting attack's rounds depend on its substitute, not on its parameters,
# so the run counts them (summary.json attack_stats): every closed round trained on the pool, every
# generator run, the rounds sent unselected.
@pytest.mark.parametrize("name", ["ideal", "qedg"])
def test_rounds_and_generator_runs_are_counted(name):
    attack = make(name, 77, (33, 77))
    assert attack.run_stats() == {"rounds": 0, "syntheses": 0, "fallback_rounds": 0}
    _, _, batches, _ = drive_attack(attack, SpyNet(victim()), SYNTH_SHAPE, SYNTH_CLASSES)
    stats = attack.run_stats()
    rounds = {b.meta["round"] for b in batches}
    assert stats["rounds"] == len(rounds) == max(rounds) + 1 >= -(-77 // attack.hp.batch_size)
    assert stats["syntheses"] >= stats["rounds"] and stats["fallback_rounds"] <= stats["rounds"]


# QEDG reference behaviour as docs/attacks/qedg.md states it: a round whose selection comes back
# empty is synthesized again, at most ``max_empty_rounds`` times, then sent unselected; every
# generator run and every unselected round is counted (summary.json attack_stats).
@pytest.mark.parametrize("empties", [1, 2, 5])
def test_qedg_empty_selection_is_synthesized_again_then_sent_unselected(empties, monkeypatch):
    attack = make("qedg", 77, (77,), max_empty_rounds=2)  # at most 3 generator runs a round
    tries = attack.hp.max_empty_rounds + 1
    streak = {"n": 0, "rounds": 0}
    synthesized: list[torch.Tensor] = []
    new_round, synthesize = attack._new_round, attack._synthesize

    def counting_new_round():
        streak["n"], streak["rounds"] = 0, streak["rounds"] + 1
        return new_round()

    def keeping_synthesize():
        synthesized.append(synthesize())
        return synthesized[-1]

    def select(x):  # the first `empties` tries of each round select nothing, then everything
        streak["n"] += 1
        return x[:0] if streak["n"] <= empties else x

    monkeypatch.setattr(attack, "_new_round", counting_new_round)
    monkeypatch.setattr(attack, "_synthesize", keeping_synthesize)
    monkeypatch.setattr(attack, "_select", select)
    oracle, _, batches, _ = drive_attack(attack, SpyNet(victim()), SYNTH_SHAPE, SYNTH_CLASSES)
    rounds, stats = streak["rounds"], attack.run_stats()
    assert oracle.queries_used == 77 and rounds == -(-77 // attack.hp.batch_size)
    runs = min(empties + 1, tries)  # generator runs a round
    assert stats["syntheses"] == len(synthesized) == runs * rounds
    assert stats["fallback_rounds"] == (rounds if empties >= tries else 0)
    # what each round sends is its last generator run's batch, selected or (after the last try) not
    sent = torch.cat([b.x for b in batches])
    assert torch.equal(sent, torch.cat(synthesized[runs - 1::runs])[:77])


# QEDG reference (utils.py:215-239): only images whose substitute top-1 probability is at most the
# threshold are sent; with threshold 1 everything is.
def test_qedg_selects_uncertain_images_only():
    attack = make("qedg", 64, (64,), select_threshold=0.3)
    x = attack._synthesize()
    chosen = attack._select(x)
    with torch.no_grad():
        top = attack.student.eval()(chosen).softmax(1).max(1).values
    assert bool((top <= 0.3).all())
    assert len(attack._select(x)) <= len(x)
    everything = make("qedg", 64, (64,), select_threshold=1.0)
    assert len(everything._select(everything._synthesize())) == everything.hp.batch_size


# QEDG reference formulas: the over-confidence loss, the per-class cosine loop and the imbalance CE.
def test_qedg_losses_match_the_reference_formulas():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(9, 1, 4, 4, generator=g)
    t = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2, 1])
    loop = 0.0
    for c in range(int(t.max()) + 1):  # utils.py:317-323
        v = x[t == c].flatten(1)
        sim = (v @ v.t()) / (v.norm(dim=1, keepdim=True) @ v.norm(dim=1, keepdim=True).t())
        loop += float((sim * torch.ones_like(sim).triu(1)).sum())
    assert qedg.diversity_loss(x, t).item() == pytest.approx(loop / 9, rel=1e-5)
    p = torch.softmax(torch.randn(5, 4, generator=g), 1)
    assert qedg.over_confidence_loss(p).item() == pytest.approx(float(p.std(1).sum() / 5), rel=1e-6)
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    labels = torch.tensor([0, 0, 1])
    ce = F.cross_entropy(logits, labels, reduction="none")
    assert qedg.imbalance_ce(logits, labels, 3.0).item() == pytest.approx(float(ce[0] + 3 * (ce[1] + ce[2])) / 3)


# QEDG's synthesis view draws one transform for the batch; its selection view one per image.
def test_qedg_view_is_batchwide_in_synthesis_and_per_image_at_selection():
    x = torch.rand(1, 1, 8, 8).expand(16, 1, 8, 8).contiguous()
    same = qedg.geometric(x, torch.Generator().manual_seed(1), False, 2, True)
    assert all(torch.equal(same[0], s) for s in same)
    each = qedg.geometric(x, torch.Generator().manual_seed(1), True, 2, True)
    assert not all(torch.equal(each[0], s) for s in each)
    assert float(each.min()) >= 0 and float(each.max()) <= 1


# contract §8: QEDG's Track B is a copy trained further on the pool; the live substitute is untouched.
def test_qedg_track_b_copy_leaves_the_live_substitute():
    attack = make("qedg", 48, (48,), final_epochs=2)
    spy = SpyNet(victim())
    drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    before = {k: v.clone() for k, v in attack.student.state_dict().items()}
    copy = attack.track_b_model(type("S", (), {"queries_used": 48})())
    assert copy is not attack.student
    assert all(torch.equal(before[k], v) for k, v in attack.student.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in copy.state_dict().items())


# the references' reset_model: N(0, 0.02) weights, N(1, 0.02) batch-norm scales, zero biases, from the
# generator given (so two rounds start from different, reproducible weights).
def test_generator_reset_is_seeded_and_dcgan_scaled():
    gen = SynthGenerator(8, (1, 8, 8), 4)
    reset_generator(gen, torch.Generator().manual_seed(3))
    a = [p.clone() for p in gen.parameters()]
    reset_generator(gen, torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a, gen.parameters()))
    assert abs(float(gen.project.weight.detach().std()) - 0.02) < 0.005 and float(gen.project.bias.detach().abs().max()) == 0.0
    with torch.no_grad():
        out = gen(torch.randn(4, 8))
    assert out.shape == (4, 1, 8, 8) and float(out.min()) >= 0 and float(out.max()) <= 1


def test_quantize_truncates_like_the_references_png():
    x = torch.tensor([0.0, 0.5, 1.0, 1.2, -0.1, 0.99999])
    assert torch.equal(quantize(x) * 255, torch.tensor([0.0, 127.0, 255.0, 255.0, 0.0, 254.0]))


# QEDG's query-free augmentation (utils.py:396-405): in 2.5 % of batches the sure images are flipped;
# labels and queries are untouched, and the reference's `--free_aug False` is argparse's True.
def test_free_aug_flips_only_the_sure_images_of_a_chosen_batch():
    x = torch.arange(2 * 1 * 2 * 3, dtype=torch.float32).view(2, 1, 2, 3)
    logits = torch.tensor([[10.0, 0.0], [0.1, 0.0]])  # image 0 sure (p > 0.95), image 1 not
    g = torch.Generator().manual_seed(0)
    outs = [qedg.free_aug(x, logits, g) for _ in range(400)]
    changed = [o for o in outs if not torch.equal(o, x)]
    assert 0 < len(changed) < 30  # about 2.5 % of 400 batches
    for o in changed:
        assert torch.equal(o[1], x[1])  # the unsure image is never flipped
        assert torch.equal(o[0], x[0].flip(2)) or torch.equal(o[0], x[0].flip(1))
    assert {torch.equal(o[0], x[0].flip(2)) for o in changed} == {True, False}  # both flips occur


# issue 53: the reference's view turns counter-clockwise (torchvision's rotate, utils.py:339).
def test_qedg_rotation_is_torchvisions_counter_clockwise_turn():
    import torchvision.transforms.functional as TF
    from torchvision.transforms import InterpolationMode

    g = torch.Generator().manual_seed(0)
    x = torch.rand(48, 1, 28, 28, generator=g)
    corner = torch.zeros(1, 1, 8, 8)
    corner[0, 0, 0, 3] = 1.0  # a pixel on the top edge: a +90 degree turn puts it on the left edge
    assert rotate(corner, torch.tensor([90.0]))[0, 0, :, 0].sum() == 1.0
    for angle in (90.0, 180.0):  # quarter turns: pixel for pixel
        ref = TF.rotate(x, angle, interpolation=InterpolationMode.NEAREST)
        assert torch.equal(rotate(x, torch.full((48,), angle)), ref)
    angles = 90 + 90 * torch.rand(48, generator=g)  # RandomRotation([90, 180])
    ref = torch.cat([TF.rotate(x[i:i + 1], float(a), interpolation=InterpolationMode.NEAREST)
                     for i, a in enumerate(angles)])
    differ = float((rotate(x, angles) != ref).float().mean())
    assert differ < 5e-4  # nearest-neighbour ties at a few pixel borders (float rounding of the grid)
    assert float((rotate(x, -angles) != ref).float().mean()) > 0.5  # the other turn is far off


# issue 53: the synthesis and selection views rotate by an angle drawn in [90, 180] degrees.
def test_qedg_view_rotates_by_90_to_180_degrees(monkeypatch):
    seen = []
    real = qedg.rotate
    monkeypatch.setattr(qedg, "rotate", lambda t, deg: seen.append(deg.clone()) or real(t, deg))
    qedg.geometric(torch.rand(64, 1, 8, 8), torch.Generator().manual_seed(2), True, 1, True)
    angles = torch.cat(seen)
    assert angles.shape == (64,) and float(angles.min()) >= 90 and float(angles.max()) <= 180
    assert float(angles.max() - angles.min()) > 45  # drawn, not fixed


# issue 53: the reference flips in 0.05 x 0.5 of the batches: RandomHorizontalFlip()/RandomVerticalFlip()
# (p 0.5, one coin per batch tensor) after its own 5 % draw. Both rates measured on 20,000 batches.
def test_free_aug_rate_is_the_references():
    import random

    import torchvision.transforms as T

    n = 20_000
    x = torch.arange(4, dtype=torch.float32).view(1, 1, 2, 2)
    logits = torch.tensor([[10.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    ours = sum(not torch.equal(qedg.free_aug(x, logits, g), x) for _ in range(n)) / n
    random.seed(0)
    torch.manual_seed(0)
    ref = 0
    for _ in range(n):  # utils.py:396-405 with torchvision's own transforms
        if random.random() < 0.05:
            flip = T.RandomHorizontalFlip() if random.randint(0, 1) == 0 else T.RandomVerticalFlip()
            ref += not torch.equal(flip(x), x)
    ref /= n
    sd = (0.025 * 0.975 / n) ** 0.5  # about 0.0011
    assert abs(ours - 0.025) < 4 * sd and abs(ref - 0.025) < 4 * sd and abs(ours - ref) < 5 * sd


def test_free_aug_is_a_checked_switch():
    assert qedg.Params().free_aug is True
    with pytest.raises(ConfigError) as err:
        make("qedg", 100, (100,), free_aug="False")
    assert err.value.key == "attack.params.free_aug"
