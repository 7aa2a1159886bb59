"""Seeds trained together (§8 Track A): the stacked ``torch.func`` trainer gives each seed the
model that training it alone gives, up to float rounding; batch-norm models and unequal D_B sizes
fall back to one by one (then bit-identical)."""

from __future__ import annotations

import pytest
import torch

from mebench.testing import register_synthetic
from mebench.training.loop import OptimizerSpec
from mebench.training.track_a import TrackASpec, TrackATrainer, train_seeds_together

register_synthetic()

def trainer(arch: str, mode: str = "soft_prob") -> TrackATrainer:
    spec = TrackASpec(arch, 1, 4, (8, 8), (0.5,), (0.25,), 1234, 16, 0.2, OptimizerSpec(), mode)
    return TrackATrainer(spec, "cpu")


def data(n: int, seeds, mode: str = "soft_prob"):
    out = []
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        x = torch.rand(n, 1, 8, 8, generator=g)
        y = torch.softmax(torch.randn(n, 4, generator=g), 1) if mode == "soft_prob" else torch.randint(0, 4, (n,), generator=g)
        out.append((x, y))
    return out


def outputs(models, probe):
    with torch.no_grad():
        return torch.stack([m(probe) for m in models])


# Track A: 3 seeds together equal 3 seeds one by one (float tolerance), for both output modes.
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_together_equals_one_by_one(mode):
    tr, ds = trainer("tiny_mlp", mode), data(300, (0, 1, 2), mode)
    probe = torch.rand(32, 1, 8, 8, generator=torch.Generator().manual_seed(9))
    alone = outputs([tr.train(x, y) for x, y in ds], probe)
    together = outputs(train_seeds_together(tr, ds), probe)
    assert torch.allclose(alone, together, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(together[0], together[1])  # the seeds' D_B differ, so do their models


# unequal D_B sizes (different schedules) and a single seed are trained one by one: bit-identical.
def test_fallback_is_bit_identical():
    tr = trainer("tiny_mlp")
    ds = data(300, (0,)) + data(200, (1,))
    probe = torch.rand(8, 1, 8, 8)
    assert torch.equal(outputs([tr.train(x, y) for x, y in ds], probe), outputs(train_seeds_together(tr, ds), probe))
