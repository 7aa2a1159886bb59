"""Black-box Dissector: exact budgets at odd remainders with erased re-queries counted, which images
are re-asked (each answered original erased at most once, the box over the CAM's peak), the round
schedule, reproducibility, hard labels only, and the reference values.

Tiny synthetic pools (1x8x8 images) and a tiny convolutional net (Grad-CAM needs a convolution),
driven by the engine's own query loop through the real oracle and query store.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import dissector
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.errors import ConfigError
from mebench.testing import SpyNet, drive_attack

SHAPE, K = (1, 8, 8), 4
FAST = dict(epochs=2, batch_size=32, initial_budget=20, splits=(20, 40, 100), num_erasings=3)


def tiny() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, K))


def make_attack(budget: int = 1001, checkpoints: tuple[int, ...] = (997, 1001), seed: int = 0, **kw):
    p = dissector.DissectorParams(**{**FAST, **kw})
    dissector.Dissector.check_params(p, budget, checkpoints)
    images = (torch.rand((3000, *SHAPE), generator=torch.Generator().manual_seed(7)) * 255).to(torch.uint8)
    ctx = AttackContext(profile=get_profile("MNIST"), output_mode="hard_top1", num_classes=K, input_shape=SHAPE,
                        device=torch.device("cpu"), seed=seed, generator=torch.Generator().manual_seed(seed),
                        pool=Pool(images, "synthetic"), params=p, checkpoints=checkpoints, max_budget=budget,
                        make_substitute=tiny, data_mode="surrogate")
    return ATTACKS.get("dissector")(ctx)


def run(attack):
    torch.manual_seed(123)
    return drive_attack(attack, tiny(), SHAPE, K)


# contract 1.1: originals and erased re-queries are all counted; exact stop at a budget below the
# first round and at a checkpoint four queries before the end (odd remainders at ordinary budgets:
# test_attack_registry.py).
@pytest.mark.parametrize("budget,checkpoints", [(1001, (997, 1001)), (7, (7,))])
@pytest.mark.slow
def test_exact_budget_at_round_edges(budget, checkpoints):
    torch.manual_seed(123)
    spy = SpyNet(tiny())
    oracle, state, batches, models = drive_attack(make_attack(budget, checkpoints), spy, SHAPE, K)
    assert oracle.queries_used == spy.seen == len(state.store) == sum(len(b) for b in batches) == budget
    assert sorted(models) == list(checkpoints)


# the round schedule: the reference's splits below the budget plus every checkpoint; a quarter of each
# round after the first re-asks erased copies; each answered original is erased at most once; new
# originals are never asked twice.
@pytest.mark.slow
def test_rounds_and_erased_requeries():
    attack = make_attack(1001, (997, 1001))
    assert dissector.round_ends(attack.p, (997, 1001), 1001) == [20, 40, 100, 997, 1001]
    _, state, batches, _ = run(attack)
    idx = torch.cat([b.meta["pool_index"] for b in batches])
    orig = idx[idx >= 0]
    assert orig.unique().numel() == orig.numel()
    stored = state.store.prefix(1001)[0].flatten(1)[idx >= 0]  # the images asked, not only their indices
    assert stored.unique(dim=0).shape[0] == orig.numel()
    n_erased = int((idx < 0).sum())
    # rounds 20->40 and 40->100 erase 5 and 15; 100->997 wants 224 but only 60 answered originals
    # are left unerased (80 originals, 20 erased): the rest of that round is new originals
    # (attack.py:728-738); 997->1001 erases 1
    assert n_erased == 5 + 15 + 60 + 1
    assert len(attack.erased) == n_erased
    assert all(attack.original[i] >= 0 for i in attack.erased)


# CDE's box always covers the CAM's peak pixel and is filled with the dataset mean; random erasing
# keeps the rest of the image.
def test_erasing_covers_the_peak():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(50, *SHAPE, generator=g)
    peak = torch.randint(0, 8, (50, 2), generator=g)
    out = dissector.erase_boxes(x, 6, dissector.DissectorParams(), torch.tensor([0.5]), g, peak)
    assert out.shape == (50, 6, *SHAPE)
    at_peak = out[torch.arange(50), :, 0, peak[:, 0], peak[:, 1]]
    assert bool((at_peak == 0.5).all())
    changed = (out != x.unsqueeze(1)).flatten(2).float().mean(2)
    assert float(changed.max()) <= 0.5


# Grad-CAM maps are in [0, 1] with the input's spatial size.
def test_grad_cam_shape_and_range():
    cam = dissector.grad_cam(tiny(), torch.rand(5, *SHAPE))
    assert cam.shape == (5, 8, 8) and float(cam.min()) >= 0.0 and float(cam.max()) <= 1.0 + 1e-6


# contract 6.1 / 15.2: hard labels and a surrogate pool only; bad values fail with one line.
def test_capabilities_and_bad_params(make_cfg):
    from mebench.config.validation import validate

    meta = dissector.Dissector.describe()
    assert meta["output_modes"] == ["hard_top1"] and meta["data_modes"] == ["surrogate"] and meta["has_track_b"]
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(attack={"name": "dissector", "output_mode": "soft_prob"}), check_files=False)
    assert err.value.key == "attack.output_mode" and "\n" not in str(err.value)
    for key, bad in (("erase_rate", 1.5), ("splits", (10, 5)), ("erase_area_low", 0.5), ("epochs", 0)):
        with pytest.raises(ConfigError, match=key):
            dissector.Dissector.check_params(dissector.DissectorParams(**{key: bad}), 1000, (1000,))
