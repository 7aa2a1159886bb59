"""Track A's speed options (contract §8 Track A, §15.2 config errors): the default stays
bit-identical to the per-parameter SGD loop it replaced; ``substitute.trackA.fast`` options are
opt-in, validated, recorded in the plan, and change the model only by float rounding."""

from __future__ import annotations

import pytest
import torch

import mebench.models  # noqa: F401  (registers lenet5)
from mebench.config import parse_config
from mebench.run.plan import resolve
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import deep_update
from mebench.training import maxpool
from mebench.training.loop import OptimizerSpec, make_optimizer
from mebench.training.spec import FastSpec
from mebench.training.track_a import TrackASpec, TrackATrainer


def lenet_trainer(fast: FastSpec = FastSpec()) -> TrackATrainer:
    spec = TrackASpec("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,), 1234, 32, 0.2, OptimizerSpec(),
                      "soft_prob", fast)
    return TrackATrainer(spec, "cpu")


def mnist_like(n: int = 96):
    g = torch.Generator().manual_seed(3)
    return torch.rand(n, 1, 28, 28, generator=g), torch.softmax(torch.randn(n, 10, generator=g), 1)


# contract §15.2: one ConfigError naming key, value and rule, for a wrong type and an unknown option.
@pytest.mark.parametrize("fast,key,words", [
    ({"channels_last": "yes"}, "substitute.trackA.fast.channels_last", "must be true or false"),
    ({"compile": True}, "substitute.trackA.fast.compile", "valid: channels_last"),
])
def test_fast_options_are_validated(synth_cfg_dict, fast, key, words):
    with pytest.raises(ConfigError) as e:
        parse_config(deep_update(synth_cfg_dict, {"substitute": {"trackA": {"fast": fast}}}))
    assert e.value.key == key and words in str(e.value) and f"'{key}'" in str(e.value)


# issue 35 plan: an option that changes numbers is part of the plan; the default plan (and its
# hash, hence --resume of earlier records) is unchanged by the options' existence.
def test_fast_options_are_recorded_in_the_plan(make_cfg):
    default, fast = resolve(make_cfg()), resolve(make_cfg(substitute={"trackA": {"fast": {"channels_last": True}}}))
    assert "fast" not in default.to_dict()["track_a"]
    assert resolve(make_cfg(substitute={"trackA": {"fast": {"channels_last": False}}})).hash == default.hash
    assert fast.to_dict()["track_a"]["fast"] == {"channels_last": True, "bf16": False}
    assert fast.hash != default.hash


# contract §8: the default optimizer (multi-tensor SGD) is bit-identical to the per-parameter loop
# every earlier result was trained with, on a convolutional substitute.
def test_default_sgd_is_bit_identical_to_the_per_parameter_loop():
    x, y = mnist_like(64)
    spec = OptimizerSpec()
    weights = []
    for make in (lambda p: make_optimizer(p, spec),
                 lambda p: torch.optim.SGD(p, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay,
                                           foreach=False)):
        torch.manual_seed(0)
        model = build_model("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,))
        opt = make(model.parameters())
        for i in range(4):
            loss = torch.nn.functional.kl_div(model(x[16 * i:16 * (i + 1)]).log_softmax(1), y[16 * i:16 * (i + 1)],
                                              reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))
    assert isinstance(make_optimizer(torch.nn.Linear(2, 2).parameters(), spec), torch.optim.SGD)


# §8: channels_last trains the same model up to float rounding, and hands it back in the default
# layout (scoring and the saved weights do not depend on how it was trained).
def test_channels_last_changes_only_rounding():
    x, y = mnist_like()
    plain = lenet_trainer().train(x, y)
    fast = lenet_trainer(FastSpec(channels_last=True)).train(x, y)
    pairs = list(zip(plain.parameters(), fast.parameters()))
    assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-3) for a, b in pairs)
    assert all(b.is_contiguous() for _, b in pairs)
    assert any(not torch.equal(a, b) for a, b in pairs)  # the option does run: other kernels, other rounding
    probe = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.allclose(plain(probe), fast(probe), atol=1e-3)


def pooled_input(channels_last: bool, dtype: torch.dtype) -> torch.Tensor:
    """ReLU'd noise (many zero ties) with positive ties placed in both rows of a window."""
    x = torch.randn(4, 3, 8, 12, generator=torch.Generator().manual_seed(7)).relu()
    x[0, 0, 0, :2] = 1.5          # tie inside the top row
    x[0, 0, 1, 0] = 1.5           # and in the bottom row of the same window
    x[1, 2, 2:4, 4:6] = 0.75      # a window of four equal maxima
    x = x.to(dtype)
    return (x.contiguous(memory_format=torch.channels_last) if channels_last else x).requires_grad_(True)


# §8 Track A default (bit-reproducible): the fast 2x2 pooling gives PyTorch's values, argmax
# (first maximum on ties) and gradients bit for bit, in both layouts and in bf16.
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_max_pool_equals_max_pool2d(channels_last, dtype):
    x = pooled_input(channels_last, dtype)
    grad_out = torch.randn(4, 3, 4, 6, generator=torch.Generator().manual_seed(8)).to(dtype)
    ref = torch.nn.functional.max_pool2d(x, 2)
    got = maxpool.MaxPool2x2()(x)
    (g_ref,) = torch.autograd.grad(ref, x, grad_out)
    (g_got,) = torch.autograd.grad(got, x, grad_out)
    assert torch.equal(ref, got) and torch.equal(g_ref, g_got) and g_got[0, 0, 0, 0] != 0 and g_got[0, 0, 0, 1] == 0
    assert got.stride() == ref.stride() and g_got.stride() == g_ref.stride()


# §8: the default Track A trains the same weights with and without the swap, and hands back the
# substitute as it was built (same module types, same state_dict keys).
def test_default_track_a_is_bit_identical_without_the_fast_pooling(monkeypatch):
    x, y = mnist_like()
    fast = lenet_trainer().train(x, y)
    built = lenet_trainer().fresh_model()
    assert [type(m) for m in fast.modules()] == [type(m) for m in built.modules()]
    assert list(fast.state_dict()) == list(built.state_dict())
    assert not any(m.training for m in fast.modules())  # restored modules in eval mode like the rest
    swapped = maxpool.swap_in(built)
    assert sum(isinstance(m, maxpool.MaxPool2x2) for m in built.modules()) == 2 and len(swapped) == 1
    monkeypatch.setattr(maxpool, "swap_in", lambda model: [])
    plain = lenet_trainer().train(x, y)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), fast.parameters()))


# contract §8, §10: an attack's own models (train_epochs on the CPU) train through the same faster pooling,
# bit-identical to the plain loop, and come back with the modules they were built with.
def test_attack_training_is_bit_identical_without_the_fast_pooling(monkeypatch):
    from mebench.training.loop import train_epochs

    def trained(seen: list) -> torch.nn.Module:
        torch.manual_seed(0)
        model = build_model("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,))
        x, y = mnist_like(300)
        loss = lambda out, t: torch.nn.functional.kl_div(torch.log_softmax(out, 1), t, reduction="batchmean")  # noqa: E731
        seen.append([type(m) for m in model.modules()])
        return train_epochs(model, x, y, loss_fn=loss, epochs=2, batch_size=64, optimizer=OptimizerSpec(),
                            generator=torch.Generator().manual_seed(1))

    real, during = maxpool.swap_in, []

    def spy(model):
        swaps = real(model)
        during.append(sum(isinstance(m, maxpool.MaxPool2x2) for m in model.modules()))
        return swaps

    monkeypatch.setattr(maxpool, "swap_in", spy)
    built: list = []
    fast = trained(built)
    assert during == [2] and [type(m) for m in fast.modules()] == built[0]  # swapped while training, then put back
    monkeypatch.setattr(maxpool, "swap_in", lambda model: [])
    plain = trained([])
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), fast.parameters()))


# §8 opt-in: bf16 autocast trains a nearby model (not the same bits) and hands back fp32 weights.
def test_bf16_changes_the_model_within_bounds():
    x, y = mnist_like()
    plain = lenet_trainer().train(x, y)
    half = lenet_trainer(FastSpec(bf16=True)).train(x, y)
    pairs = list(zip(plain.parameters(), half.parameters()))
    assert all(b.dtype == torch.float32 for _, b in pairs)
    assert any(not torch.equal(a, b) for a, b in pairs)
    assert all(torch.allclose(a, b, atol=0.05) for a, b in pairs)
    assert type(half).__name__ == type(plain).__name__
