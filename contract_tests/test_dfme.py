"""DFME: every image counted (probes included), exact stops, no spin, determinism, validation.

Runs on the synthetic SYNTH world (1x8x8 images, 4 classes, ``tiny_mlp``) with a
tiny generator, driven by the engine's own query loop (``mebench.run.engine.collect``)
through the real oracle and query store. A spy module wrapped around the
victim network counts every image that reaches the victim's forward pass.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import dfme
from mebench.config.validation import attack_params, load_config, validate
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.errors import ConfigError, DivergenceError
from mebench.models.generators import PIXEL_MAPS, make_generator, to_pixels
from mebench.models.registry import build_model
from mebench.state import EngineState
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic
from mebench.types import OracleOutput
from mebench.victims.wrapper import FrozenVictim

#: The attack pages: "Defaults and their source" is the one place a default is cited.
DOCS = Path(__file__).resolve().parent.parent / "docs" / "attacks"

register_synthetic()
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = dict(batch_size=4, grad_m=2, nz=8, generator_width=4, student_steps=3)
G_COST, S_COST = 4 * 3, 4  # batch * (m + 1), batch


def substitute(dataset: str = "SYNTH") -> nn.Module:
    p = get_profile(dataset)
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def make_attack(budget: int, checkpoints: tuple[int, ...], seed: int = 0, dataset: str = "SYNTH",
                params: dfme.Params | None = None, **kw) -> dfme.DFME:
    params = params or dfme.Params(**{**TINY, **kw})
    dfme.DFME.check_params(params, budget, checkpoints)
    p = get_profile(dataset)
    ctx = AttackContext(profile=p, output_mode="soft_prob", num_classes=p.num_classes,
                        input_shape=p.input_shape, device=torch.device("cpu"), seed=seed,
                        generator=torch.Generator().manual_seed(seed), pool=None, params=params,
                        checkpoints=checkpoints, max_budget=budget, make_substitute=lambda: substitute(dataset))
    return ATTACKS.get("dfme")(ctx)


def run(attack: dfme.DFME):
    """Drive ``attack`` through the engine loop; returns oracle, state, spy, batches and Track B models."""
    torch.manual_seed(123)
    spy = SpyNet(substitute())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    return oracle, state, spy, batches, models


# contract 1.1: every image the victim sees is counted, the m perturbed probes included.
@pytest.mark.slow
def test_counting_includes_probes():
    attack = make_attack(1001, (100, 1001))
    oracle, state, spy, batches, _ = run(attack)
    assert spy.seen == oracle.queries_used == len(state.store) == sum(len(b) for b in batches) == 1001
    gen = [b for b in batches if b.meta["phase"] == "generator"]
    assert gen and sum(b.meta["generator_samples"] * 3 for b in gen) > 0.3 * 1001  # probes are real queries
    full = next(b for b in gen if len(b) == G_COST)
    probes = full.x.view(4, 3, *SYNTH_SHAPE)
    step = float((probes[:, 1:] - probes[:, :1]).abs().amax())
    std = get_profile("SYNTH").std[0]
    assert 0 < step <= attack.hp.grad_epsilon * std  # copies: base + eps * unit direction, through mean + std*tanh


# contract 1.1 / 14.2: the run stops exactly at budgets smaller than one phase (12 and 4) and at a
# checkpoint of 1 (odd remainders at ordinary budgets: test_attack_registry.py).
@pytest.mark.parametrize("budget,checkpoints", [(7, (7,)), (13, (1, 5, 13))])
def test_exact_stop_below_one_phase(budget, checkpoints):
    attack = make_attack(budget, checkpoints)
    oracle, state, spy, batches, models = run(attack)
    assert oracle.queries_used == spy.seen == budget and oracle.budget_left == 0
    assert sorted(models) == list(checkpoints)  # contract 8: Track B at every checkpoint
    assert all(len(b) >= 1 for b in batches)


# contract 14.2: propose(k) returns exactly k images in [0, 1] for any k >= 1 and any phase (no spin).
@settings(max_examples=25, deadline=None)
@given(ks=st.lists(st.integers(1, 30), min_size=1, max_size=25))
@pytest.mark.slow
def test_any_k_returns_exactly_k(ks):
    attack = make_attack(10_000, (10_000,))
    state = EngineState(10_000, (10_000,), None, torch.device("cpu"))  # type: ignore[arg-type]
    victim = FrozenVictim(substitute(), "cpu")
    for k in ks:
        phase_before = attack.phase
        batch = attack.propose(k, state)
        assert len(batch) == k and batch.x.shape[1:] == SYNTH_SHAPE
        assert float(batch.x.min()) >= 0 and float(batch.x.max()) <= 1
        state.queries_used += k
        attack.observe(batch, OracleOutput("soft_prob", victim.probs(batch.x)), state)
        if phase_before == 0 and k < 3:  # too small for one probe set: a student step, G phase stays due
            assert attack.phase == 0 and batch.meta["phase"] == "student"
        else:
            assert attack.phase != phase_before


# contract 14.2: shortened phases happen only where a checkpoint cuts a phase (no spin, no dribbling).
@settings(max_examples=15, deadline=None)
@given(budget=st.integers(1, 400), cuts=st.lists(st.integers(1, 400), max_size=4))
@pytest.mark.slow
def test_short_phases_only_at_checkpoints(budget, cuts):
    cps = tuple(sorted({c for c in cuts if c < budget} | {budget}))
    attack = make_attack(budget, cps)
    oracle, _, _, batches, _ = run(attack)
    assert oracle.queries_used == budget
    short = [b for b in batches if len(b) not in (G_COST, S_COST)]
    assert len(short) <= len(cps)
    assert len(batches) <= math.ceil(budget / S_COST) + len(cps)


# contract 8: Track B is the live student in eval mode at every checkpoint, never a best-so-far copy.
def test_track_b_is_the_current_student():
    attack = make_attack(400, (100, 400))
    _, _, _, _, models = run(attack)
    assert models[100] is models[400] is attack.student
    assert not attack.student.training


# contract 15.2 / 6.1: DFME needs data_free and soft_prob; a hard_top1 config fails with one line.
def test_hard_top1_config_rejected(make_cfg):
    base = dict(dataset={"data_mode": "data_free", "surrogate_name": None},
                attack={"name": "dfme", "params": dict(TINY)})
    validate(make_cfg(**base))  # the soft_prob variant is valid
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim={"output_mode": "hard_top1"},
                          **{**base, "attack": {**base["attack"], "output_mode": "hard_top1"}}))
    msg = str(err.value)
    assert err.value.key == "attack.output_mode" and "\n" not in msg
    assert "soft_prob" in msg and "logits" in msg
    with pytest.raises(ConfigError, match="data_free"):
        validate(make_cfg(attack={"name": "dfme", "params": dict(TINY)}))  # surrogate mode
    with pytest.raises(ConfigError, match="grad_m"):
        validate(make_cfg(**{**base, "attack": {"name": "dfme", "params": {"grad_m": 0}}}))
    with pytest.raises(ConfigError, match="normalized_tanh, unit_tanh") as err:
        validate(make_cfg(**{**base, "attack": {"name": "dfme", "params": {"pixel_map": "sigmoid"}}}))
    assert err.value.key == "attack.params.pixel_map"
    meta = dfme.DFME.describe()
    assert meta["output_modes"] == ["soft_prob"] and "logits" in meta["output_mode_restriction"]
    assert meta["state_dependent_queries"] and meta["has_track_b"] and meta["data_modes"] == ["data_free"]


# contract 15.2: the shipped MNIST configs: the paper preset runs the reference values (no overrides),
# the unit-pixel variant differs from it only by its pixel map, hard_top1 fails with one clear line.
def test_shipped_mnist_configs():
    cfg = load_config(CONFIGS / "mnist_lenet5_dfme.yaml", check_files=False)
    assert cfg.attack.name == "dfme" and list(cfg.budget.checkpoints) == [1_000, 10_000, 100_000]
    assert attack_params(cfg) == dfme.Params()
    variant = load_config(CONFIGS / "variants" / "mnist_lenet5_dfme_unit_pixels.yaml", check_files=False)
    assert variant.attack_label() == "dfme_unitpix" and variant.attack_label() != cfg.attack_label()
    assert attack_params(variant) == dataclasses.replace(dfme.Params(), pixel_map="unit_tanh")
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "mnist_lenet5_dfme_hard.yaml", check_files=False)
    assert err.value.key == "attack.output_mode" and "\n" not in str(err.value)


REFS = re.compile(r"^(?:[\w./-]+:\d+(?:, )?)+$")  # every DFME default cites file:line only


# contract 6 (DFME as published): every value docs/attacks/dfme.md cites from the reference code is the
# default the attack really runs with, on MNIST and on CIFAR-10, and every parameter is cited.
@pytest.mark.parametrize("dataset", ["MNIST", "CIFAR10"])
def test_defaults_are_the_cited_reference_values(dataset):
    cited = {name: (value, refs) for name, (value, refs, _) in cited_defaults(DOCS / "dfme.md").items()}
    assert all(REFS.match(refs) for _, refs in cited.values()), cited
    assert set(cited) == {f.name for f in dataclasses.fields(dfme.Params)}
    hp = make_attack(10**6, (10**6,), dataset=dataset, params=dfme.Params()).hp
    for name, (value, refs) in cited.items():
        got = getattr(hp, name)
        assert got == value and type(got) is type(value), f"{name}: default {got!r}, reference {value!r} ({refs})"


# contract 2.2 + DFME reference: the default pixel map is the reference's tanh in the victim's normalized
# space, i.e. pixels mean + std * tanh(a), clamped into [0, 1]: MNIST pixels lie in [0, mean + std].
def test_default_pixel_map_is_normalized_tanh():
    mnist = get_profile("MNIST")
    mean, std = mnist.mean[0], mnist.std[0]
    assert dfme.Params().pixel_map == "normalized_tanh" == PIXEL_MAPS[0]
    a = torch.linspace(-8, 8, 2001).view(1, 1, 1, -1)
    x = to_pixels(a, "normalized_tanh", mnist.mean, mnist.std)
    assert float(x.min()) == 0.0 and abs(float(x.max()) - (mean + std)) < 1e-6
    kept = x > 0  # where the [0, 1] rule does not clamp, the victim sees exactly the reference's tanh(a)
    assert torch.allclose(((x - mean) / std)[kept], torch.tanh(a)[kept], atol=1e-6)
    assert torch.equal(~kept, mean + std * torch.tanh(a) <= 0)  # only what falls below 0 is clamped (black)
    unit = to_pixels(a, "unit_tanh", mnist.mean, mnist.std)
    assert float(unit.min()) < 1e-6 and float(unit.max()) > 1 - 1e-6
    attack = make_attack(10**6, (10**6,), dataset="MNIST", params=dfme.Params(generator_width=8))
    state = EngineState(10**6, (10**6,), None, torch.device("cpu"))  # type: ignore[arg-type]
    batch = attack.propose(6, state)  # 3 samples with their probes
    assert float(batch.x.min()) >= 0 and float(batch.x.max()) <= mean + std + 1e-6
    assert float(batch.x.max()) > mean  # generated images are not all black


# contract 2.1: one generator per input profile, output in the profile's shape, pixels in [0, 1] for every map.
@pytest.mark.parametrize("pixel_map", PIXEL_MAPS)
@pytest.mark.parametrize("dataset", ["MNIST", "CIFAR10", "SewerML"])
def test_generator_output_shapes(dataset, pixel_map):
    p = get_profile(dataset)
    gen = make_generator(8, p.input_shape, ngf=4)
    with torch.no_grad():
        x = to_pixels(gen(torch.randn(2, 8)), pixel_map, p.mean, p.std)
    assert x.shape == (2, *p.input_shape)
    assert float(x.min()) >= 0 and float(x.max()) <= 1
    with pytest.raises(ValueError, match="unit_tanh"):
        to_pixels(x, "sigmoid", p.mean, p.std)


# DFME math: logits recovered from probabilities, and the forward-difference gradient estimate.
def test_logit_recovery_and_gradient_estimate():
    z = torch.randn(5, 10) * 4
    assert torch.allclose(dfme.recover_logits(torch.softmax(z, 1)), z - z.mean(1, keepdim=True), atol=1e-4)
    g = torch.Generator().manual_seed(0)
    w, a = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)
    u = torch.randn(1, 4000, 16, generator=g)
    u = u / u.norm(dim=2, keepdim=True)
    eps = 1e-3
    f = torch.cat([(a * w).sum(1, keepdim=True), ((a.unsqueeze(1) + eps * u) * w).sum(2)], dim=1)
    est = dfme.forward_difference_gradient(f, u, eps)
    assert torch.nn.functional.cosine_similarity(est, w).item() > 0.95
    assert 0.8 < (est.norm() / w.norm()).item() < 1.2  # the d scaling makes it unbiased


# DFME reference: G's backward signal is the reference's estimate for the loss -l1 (mean over classes):
# d/eps (f(a + eps u) - f(a)) u, mean over the m directions, divided by classes x batch
# (dfme/approximate_gradients.py:90-104), with the victim's logits recovered by the mean correction.
def test_generator_gradient_matches_reference_estimate():
    attack = make_attack(10_000, (10_000,))
    state = EngineState(10_000, (10_000,), None, torch.device("cpu"))  # type: ignore[arg-type]
    batch = attack.propose(G_COST, state)
    n, m, eps, k = 4, 2, attack.hp.grad_epsilon, SYNTH_CLASSES
    u, seen = attack.pending.u.clone(), []
    attack.pending.pre.register_hook(seen.append)
    probs = FrozenVictim(substitute(), "cpu").probs(batch.x)
    with torch.no_grad():
        logp = probs.log()
        loss = -(attack.student.eval()(batch.x) - (logp - logp.mean(1, keepdim=True))).abs().mean(1).view(n, m + 1)
    expected = ((loss[:, 1:] - loss[:, :1]) / eps).view(n, m, 1, 1, 1).mul(u).mul(u[0, 0].numel()).mean(1) / (k * n)
    attack.observe(batch, OracleOutput("soft_prob", probs), state)
    assert len(seen) == 1 and torch.allclose(seen[0], expected, rtol=1e-4, atol=1e-9)
    assert float(expected.abs().max()) > 0


# contract (errors): a diverging run raises DivergenceError, never a silent NaN metric.
def test_divergence_raises():
    attack = make_attack(600, (600,), lr_student=1e30)
    with pytest.raises(DivergenceError, match="dfme"):
        run(attack)


# contract 6.1 / 8 / 9 / 11.1: through the engine, the summary records the restriction and the
# §9 disclaimer, both tracks are scored at every checkpoint, and the budget is spent exactly.
def test_engine_run_records_metadata(make_cfg):
    import json

    from mebench.run import engine

    cfg = make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                   attack={"name": "dfme", "params": dict(TINY)},
                   budget={"max_budget": 301, "checkpoints": [101, 301]})
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["queries_used"] == 301
    assert summary["attack"]["output_modes"] == ["soft_prob"]
    assert "logits" in summary["attack"]["output_mode_restriction"]
    assert summary["attack"]["state_dependent_queries"] and "§9" in summary["disclaimer"]
    rows = {(r["checkpoint_B"], r["track"]) for r in summary["results"]}
    assert rows == {(101, "A"), (101, "B"), (301, "A"), (301, "B")}


# contract (errors): the engine records a DFME divergence in the cell's summary and re-raises it.
def test_engine_records_divergence(make_cfg, tmp_path, monkeypatch):
    import json

    from mebench.run import engine
    from mebench.attacks import dfme

    # a student loss that blows up (a rate of 1e30 did it before rates were bounded, issue 52)
    monkeypatch.setattr(dfme.F, "l1_loss", lambda a, b: (a - b).abs().mean() * float("inf"))
    cfg = make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                   attack={"name": "dfme", "params": TINY},
                   budget={"max_budget": 300, "checkpoints": [300]})
    with pytest.raises(DivergenceError):
        engine.run(cfg, progress=False)
    (summary_path,) = Path(cfg.run.output_dir).glob("*/*/seed_0/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("DivergenceError: dfme")
