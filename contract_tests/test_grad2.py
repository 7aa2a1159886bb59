"""GRAD² (contract §1.2 answers stay probability vectors, §4.2 determinism, §15.2 config errors): what
it promises beyond the shared defense contract of test_defenses.py, which runs over every registered
defense (budget accounting, Track A on the defended answers, the utility record)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mebench.config.validation import validate
from mebench.defenses import DEFENDER_SEED, DefenseContext, make_defense
from mebench.defenses.grad2 import Grad2, batch_gradient, class_gradients, random_crop, redirect
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import _images
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)
TINY = dict(epochs=2.0, schedule_epochs=10.0, lr=1.0, augment=False)
"""A fit of a fraction of a second: crops of padding 4 would wipe out 8x8 images."""


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval()


@functools.lru_cache(maxsize=None)
def _context() -> DefenseContext:
    """One context, so ``Grad2.fit`` fits each parameter set once for the module (its per-victim cache)."""
    return DefenseContext(victim=FrozenVictim(_model(0), "cpu"), num_classes=4, input_shape=SHAPE,
                          device=torch.device("cpu"), train_split=lambda: _images("SYNTH", True),
                          make_model=lambda arch=None: build_model(arch or "tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)))


def _lp_optimum(y: np.ndarray, g: np.ndarray, eps: float) -> float:
    """min g·y' over the simplex within L1 distance eps of y, as a dense LP solved on its own."""
    from scipy.optimize import linprog

    k = y.size
    rows, rhs = [], []
    for j in range(k):  # z_j >= |y'_j - y_j|
        for sign in (1.0, -1.0):
            e = np.zeros(2 * k)
            e[j], e[k + j] = sign, -1.0
            rows.append(e), rhs.append(sign * y[j])
    rows.append(np.concatenate([np.zeros(k), np.ones(k)])), rhs.append(eps)
    res = linprog(np.concatenate([g, np.zeros(k)]), A_ub=np.array(rows), b_ub=rhs,
                  A_eq=[np.concatenate([np.ones(k), np.zeros(k)])], b_eq=[1.0],
                  bounds=[(0, 1)] * k + [(0, None)] * k, method="highs")
    assert res.status == 0
    return float(res.fun)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.floats(0.0, 2.0), st.integers(0, 2**31 - 1))
def test_redirect_is_the_optimum_of_the_reference_lp_inside_the_ball(k, eps, seed):
    # the reference's greedy per-row algorithm (defenses.py:347-372) solves this LP exactly
    gen = torch.Generator().manual_seed(seed)
    y = torch.softmax(4 * torch.randn(6, k, generator=gen, dtype=torch.float64), 1)
    g = torch.randn(6, k, generator=gen, dtype=torch.float64)
    out = redirect(y, g, eps)
    assert bool((out >= 0).all()) and torch.allclose(out.sum(1), torch.ones(6, dtype=out.dtype))
    assert bool(((out - y).abs().sum(1) <= eps + 1e-9).all())
    for i in range(6):
        assert float((g[i] * out[i]).sum()) == pytest.approx(_lp_optimum(y[i].numpy(), g[i].numpy(), eps), abs=1e-6)


def test_redirect_moves_mass_from_the_largest_gradient_onto_the_smallest():
    y = torch.tensor([[0.70, 0.20, 0.10], [0.05, 0.90, 0.05]], dtype=torch.float64)
    g = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, -1.0]], dtype=torch.float64)
    out = redirect(y, g, 0.4)  # 0.2 moves: class 0 gives to class 1; class 1 gives to class 2
    assert torch.allclose(out, torch.tensor([[0.50, 0.40, 0.10], [0.05, 0.70, 0.25]], dtype=torch.float64))
    full = redirect(y, g, 2.0)  # at most 1 - y_c can arrive: everything lands on the receiver
    assert torch.allclose(full, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64), atol=1e-12)
    assert torch.allclose(redirect(y, g, 0.0), y)


@pytest.mark.parametrize("target", ["all_ones", "min_ip"])
def test_class_gradients_are_the_reference_double_backprop(target):
    # the reference differentiates <G^T y~, t> w.r.t. y~ by double backprop (defenses.py:312-338)
    model = _model(1)
    x = torch.rand(5, *SHAPE, generator=torch.Generator().manual_seed(2))
    y = torch.softmax(model(x), 1).detach()
    params = list(model.parameters())
    t = ([-torch.ones_like(p) for p in params] if target == "all_ones"
         else list(batch_gradient(model, x, y).values()))
    y_var = y.clone().requires_grad_(True)
    grads = torch.autograd.grad((y_var * torch.log_softmax(model(x), 1)).sum(1).mean(), params, create_graph=True)
    expected = torch.autograd.grad(sum((a * b).sum() for a, b in zip(grads, t)), y_var)[0]
    direction = dict(zip([n for n, _ in model.named_parameters()], t))
    got = class_gradients(model, x, direction) / x.shape[0]
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-7 * float(expected.abs().max()))


def _grad2(**params) -> Grad2:
    p = Grad2.Params(**{**TINY, **params})
    return make_defense("grad2", p, torch.Generator().manual_seed(0), Grad2.fit(p, _context()))


def test_grad2_fits_a_surrogate_of_the_victim_deterministically():
    # contract 4.2: the defender's surrogate is seeded (DEFENDER_SEED), so every run meets the same one
    p = Grad2.Params(**TINY)
    a, b = Grad2._fit(p, _context()), Grad2._fit(p, _context())
    assert all(torch.equal(u, v) for u, v in zip(a.state_dict().values(), b.state_dict().values()))
    x = _images("SYNTH", False)[0].float().div(255.0)
    victim = _context().victim.logits(x).argmax(1)
    agree = float((a(x).argmax(1) == victim).float().mean())
    torch.manual_seed(DEFENDER_SEED)
    init = float((_context().make_model()(x).argmax(1) == victim).float().mean())  # before the fit
    assert agree > 0.65 and agree > init + 0.3  # distilled from the victim's posteriors
    assert a.fit_record == {"surrogate_data": "victim", "images": 4000}


@pytest.mark.parametrize("target", ["all_ones", "min_ip"])
def test_grad2_answers_inside_the_ball_reproducibly_and_by_its_batches(target):
    d = _grad2(target=target, epsilon=0.6, query_batch=16)
    x = torch.rand(48, *SHAPE, generator=torch.Generator().manual_seed(5))
    y = _context().victim.probs(x)
    out = d.apply(y, x)
    assert torch.equal(out, d.apply(y.clone(), x.clone()))  # contract 4.2: the same batch, the same answers
    assert bool(((out - y).abs().sum(1) <= 0.6 + 1e-5).all()) and bool(((out - y).abs().sum(1) > 0.1).all())
    assert torch.allclose(out.sum(1), torch.ones(48)) and bool((out >= 0).all())
    # all_ones answers each row alone; min_ip's G^T y is its chunk's (query_batch rows)
    split = torch.cat([d.apply(y[a:a + 16], x[a:a + 16]) for a in (0, 16, 32)])
    assert torch.allclose(out, split, atol=1e-6)
    if target == "all_ones":
        ones = torch.cat([d.apply(y[i:i + 1], x[i:i + 1]) for i in range(48)])
        assert torch.allclose(out, ones, atol=1e-6)
    assert d.describe()["surrogate"]["surrogate_data"] == "victim"


def test_random_crop_shifts_each_image_within_the_padding():
    x = torch.arange(2 * 16, dtype=torch.float32).reshape(2, 1, 4, 4) + 1
    out = random_crop(x, 1, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    for i in range(2):  # each crop is a shifted window of the zero-padded image
        padded = torch.nn.functional.pad(x[i], (1, 1, 1, 1))
        assert any(torch.equal(out[i], padded[:, r:r + 4, c:c + 4]) for r in range(3) for c in range(3))


def test_grad2_settings_are_refused_before_any_work(make_cfg):
    # contract 15.2: hard labels would drop the redirected probabilities; a named dataset needs the victim's shape
    cfg = make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"}, defense={"name": "grad2"})
    with pytest.raises(ConfigError, match="hard_top1 answer does not carry") as e:
        validate(cfg, check_files=False)
    assert e.value.key == "defense.name"
    with pytest.raises(ConfigError, match="'victim' or a registered dataset") as e:
        validate(make_cfg(defense={"name": "grad2", "params": {"surrogate_data": "NOPE"}}), check_files=False)
    assert e.value.key == "defense.params.surrogate_data" and e.value.value == "NOPE"
    assert Grad2.Params() == Grad2.Params(0.5, "all_ones", 32, "victim", 10.0, 50.0, 128, 0.1, True)
