"""Null controls of the data_free mode: blind to the oracle, exact budget, reproducible, valid pixels.

Every registered attack that declares itself a null control of ``data_free`` is tested
(parametrized from the registry). Runs on the synthetic SYNTH world of ``mebench.testing``,
driven by the engine's own query loop (``mebench.run.engine.collect``) through real oracles.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext, dfme
from mebench.config.validation import validate
from mebench.data.cache import QueryStore
from mebench.data.profiles import get_profile
from mebench.run.engine import collect
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.oracle import Oracle
from mebench.state import EngineState
from mebench.testing import register_synthetic
from mebench.types import OUTPUT_MODES, OracleOutput
from mebench.victims.wrapper import FrozenVictim

register_synthetic()
CONTROLS = [n for n in ATTACKS.names() if ATTACKS.get(n).null_control_for
            and "data_free" in ATTACKS.get(n).data_modes]


def net(dataset: str = "SYNTH") -> nn.Module:
    p = get_profile(dataset)
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def make_control(name: str, budget: int, checkpoints: tuple[int, ...], seed: int = 0,
                 output_mode: str = "soft_prob", dataset: str = "SYNTH", **params: Any):
    cls = ATTACKS.get(name)
    p = cls.Params(**params)
    cls.check_params(p, budget, checkpoints)
    profile = get_profile(dataset)
    ctx = AttackContext(profile=profile, output_mode=output_mode, num_classes=profile.num_classes,
                        input_shape=profile.input_shape, device=torch.device("cpu"), seed=seed,
                        generator=torch.Generator().manual_seed(seed), pool=None, params=p,
                        checkpoints=checkpoints, max_budget=budget, make_substitute=lambda: net(dataset))
    return cls(ctx)


class Spy(nn.Module):
    """Counts the images that reach the wrapped network's forward pass."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.seen = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += int(x.shape[0])
        return self.inner(x)


class LyingOracle(Oracle):
    """Counts like the real oracle but answers at random: random probabilities or random labels."""

    def query(self, x: torch.Tensor) -> OracleOutput:
        out = super().query(x)
        g = torch.Generator().manual_seed(self.queries_used)
        if out.kind == "soft_prob":
            return OracleOutput(out.kind, torch.softmax(5 * torch.randn(out.y.shape, generator=g), dim=1))
        return OracleOutput(out.kind, torch.randint(0, 4, out.y.shape, generator=g))


class Unreadable:
    """An oracle output that fails on any look at it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the control read the oracle's answer ({name})")

    def __len__(self) -> int:
        raise AssertionError("the control read the oracle's answer (len)")


def run(attack, oracle_cls: type = Oracle, victim: nn.Module | None = None):
    """Drive ``attack`` through the engine loop; returns the oracle, the state, the spy and the batches."""
    torch.manual_seed(123)
    spy = Spy(victim if victim is not None else net())
    budget, cps, shape = attack.ctx.max_budget, attack.ctx.checkpoints, attack.ctx.input_shape
    oracle = oracle_cls(FrozenVictim(spy, "cpu"), attack.ctx.output_mode, budget, shape)
    state = EngineState(budget, cps, QueryStore(budget, shape, attack.ctx.output_mode, attack.ctx.num_classes),
                        torch.device("cpu"))
    batches: list = []
    observe = attack.observe
    attack.observe = lambda b, o, s: (batches.append(b), observe(b, o, s))
    collect(attack, oracle, state, lambda b: None)
    return oracle, state, spy, batches


def test_both_controls_are_registered():
    # contract 6 / 14.2: the data_free null controls are plugins found through the registry
    assert {"untrained_generator", "smooth_noise"} <= set(CONTROLS)


# contract 9 / 14.2: a null control never looks at the oracle's answers. With the real victim, another
# victim and an oracle that answers at random, the proposed queries are bit-identical; observe can be
# handed an answer that fails when read.
@pytest.mark.parametrize("output_mode", OUTPUT_MODES)
@pytest.mark.parametrize("name", CONTROLS)
def test_queries_ignore_the_answers(name, output_mode):
    xs = []
    for oracle_cls, seed in ((Oracle, 0), (Oracle, 1), (LyingOracle, 0)):
        torch.manual_seed(seed)
        attack = make_control(name, 701, (300, 701), output_mode=output_mode, batch_size=64)  # 12 rounds
        _, state, _, batches = run(attack, oracle_cls, victim=net())
        xs.append((state.store.prefix(701)[0], [len(b) for b in batches]))
    assert all(torch.equal(xs[0][0], x) and xs[0][1] == sizes for x, sizes in xs[1:])
    attack = make_control(name, 100, (100,), output_mode=output_mode)
    state = EngineState(100, (100,), None, torch.device("cpu"))  # type: ignore[arg-type]
    batch = attack.propose(10, state)
    attack.observe(batch, Unreadable(), state)  # type: ignore[arg-type]
    assert attack.track_b_model(state) is None  # contract 8: Track A only


# contract 1.1 / 14.2: every image is counted, propose returns exactly k images, the run stops exactly at
# a budget below one batch and a checkpoint of 1 (odd remainders at ordinary budgets:
# test_attack_registry.py); contract 14.1: pixels in [0, 1], of the victim's shape, not constant.
@pytest.mark.parametrize("budget,checkpoints", [(7, (1, 7))])
@pytest.mark.parametrize("name", CONTROLS)
def test_exact_budget_and_valid_pixels(name, budget, checkpoints):
    oracle, state, spy, batches = run(make_control(name, budget, checkpoints))
    assert spy.seen == oracle.queries_used == len(state.store) == sum(len(b) for b in batches) == budget
    x = state.store.prefix(budget)[0]
    assert x.shape == (budget, *get_profile("SYNTH").input_shape)
    assert float(x.min()) >= 0 and float(x.max()) <= 1 and float(x.std()) > 0.01


# contract 6.1: capabilities are data, recorded in run metadata; both output modes, data_free only.
@pytest.mark.parametrize("name", CONTROLS)
def test_capabilities(name, make_cfg):
    meta = ATTACKS.get(name).describe()
    assert meta["null_control_for"] == ["data_free"] and meta["data_modes"] == ["data_free"]
    assert meta["output_modes"] == sorted(OUTPUT_MODES) and not meta["has_track_b"]
    free = {"data_mode": "data_free", "surrogate_name": None}
    for mode in OUTPUT_MODES:
        validate(make_cfg(dataset=free, victim={"output_mode": mode},
                          attack={"name": name, "output_mode": mode, "params": {}}))
    with pytest.raises(ConfigError, match="data_free"):
        validate(make_cfg(attack={"name": name, "params": {}}))  # surrogate mode
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(dataset=free, attack={"name": name, "params": {"batch_size": 0}}))
    assert err.value.key == "attack.params.batch_size"


# contract 8 / 11.1: through the engine, a control is scored on Track A only and spends the budget exactly.
@pytest.mark.parametrize("name", CONTROLS)
def test_engine_run_track_a_only(name, make_cfg):
    from mebench.run import engine

    cfg = make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                   attack={"name": name, "params": {}}, budget={"max_budget": 301, "checkpoints": [101, 301]})
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["queries_used"] == 301
    assert {(r["checkpoint_B"], r["track"]) for r in summary["results"]} == {(101, "A"), (301, "A")}
    assert summary["attack"]["null_control_for"] == ["data_free"]


# untrained_generator is DFME at step 0: for the same seed, its generator has DFME's initial weights and
# its first images are DFME's first student images (same noise stream, train-mode batch norm, pixel map).
@pytest.mark.parametrize("pixel_map", ["normalized_tanh", "unit_tanh"])
def test_untrained_generator_is_dfme_before_training(pixel_map):
    shared = dict(nz=16, generator_width=4, pixel_map=pixel_map)
    control = make_control("untrained_generator", 1000, (1000,), seed=3, dataset="MNIST", **shared)
    params = dfme.Params(grad_m=1, **shared)
    profile = get_profile("MNIST")
    ctx = AttackContext(profile=profile, output_mode="soft_prob", num_classes=10, input_shape=profile.input_shape,
                        device=torch.device("cpu"), seed=3, generator=torch.Generator().manual_seed(3), pool=None,
                        params=params, checkpoints=(1000,), max_budget=1000, make_substitute=lambda: net("MNIST"))
    attack = dfme.DFME(ctx)
    a, b = control.generator.state_dict(), attack.generator.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state = EngineState(1000, (1000,), None, torch.device("cpu"))  # type: ignore[arg-type]
    first = attack.propose(1, state)  # k < m + 1: a student sample, the generator phase stays due
    assert first.meta["phase"] == "student"
    assert torch.equal(control.propose(1, state).x, first.x)
    before = {k: v.clone() for k, v in control.generator.named_parameters()}
    run(control, victim=net("MNIST"))
    assert all(torch.equal(before[k], v) for k, v in control.generator.named_parameters())  # never updated


# smooth_noise: the field size sets the smoothness (a field as large as the image is pixel noise),
# and the gain pushes pixels toward 0 and 1.
def test_smooth_noise_field_and_gain():
    def images(**params):
        attack = make_control("smooth_noise", 256, (256,), dataset="MNIST", **params)
        return attack.propose(256, EngineState(256, (256,), None, torch.device("cpu")))  # type: ignore[arg-type]

    def roughness(x):
        return float((x[..., 1:] - x[..., :-1]).abs().mean())

    smooth, rough = images().x, images(field_size=28).x
    assert smooth.shape == rough.shape == (256, 1, 28, 28)
    assert roughness(smooth) < 0.4 * roughness(rough)
    saturated = images(gain=20.0).x
    assert float(((saturated < 0.05) | (saturated > 0.95)).float().mean()) > 0.8
    assert float(((smooth < 0.05) | (smooth > 0.95)).float().mean()) < 0.5
    with pytest.raises(ConfigError):
        make_control("smooth_noise", 10, (10,), field_size=0)
