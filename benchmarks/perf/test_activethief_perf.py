"""Cost of one ActiveThief round: a selection step over large pools and a training epoch (pytest-benchmark).

Selection case = one round's selection: score the unlabelled pool with the
substitute and pick ``k`` images with the strategy. Synthetic uint8 MNIST-shaped
pools of 10k and 100k images, a tiny random substitute and 1,000 labelled
images (the k-center initial centers). DFAL runs the authors' DeepFool (the
defaults: 20 steps on the softmax over all classes) and, as ``fast``, the
``-fast`` configs' one (logits, top 3 classes, exit at the flip).
Training case = one epoch of the authors' training regime (Adam, batch 150,
validation macro-F1 after the epoch) for LeNet-5 on 8,000 + 2,000 images; a
paper round takes at least ``patience + 1`` = 101 such epochs.
Runs on CUDA when available.

    pytest benchmarks/perf/test_activethief_perf.py --benchmark-only
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks.activethief import ActiveThiefParams, fit_substitute
from mebench.data.cache import QueryStore
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.models.registry import build_model
from mebench.state import EngineState

SHAPE, K, LABELLED, ROUND = (1, 28, 28), 10, 1000, 1000
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FAST_DEEPFOOL = dict(dfal_space="logits", dfal_early_stop=True, dfal_step="boundary", dfal_classes=3,
                     dfal_overshoot=0.02)


def tiny_substitute() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, K))


def selection_step(strategy: str, pool_size: int, device: str, **options):
    """A callable doing one selection, with the attack at the start of an active round."""
    dev = torch.device(device)
    images = torch.randint(0, 256, (pool_size, *SHAPE), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(pool_size))
    params = ActiveThiefParams(strategy=strategy, dfal_prefilter=4 * ROUND, **options)
    budget = LABELLED + ROUND
    model = tiny_substitute().to(dev).eval()
    ctx = AttackContext(profile=get_profile("MNIST"), output_mode="soft_prob", num_classes=K,
                        input_shape=SHAPE, device=dev, seed=0, generator=torch.Generator().manual_seed(0),
                        pool=Pool(images, "synthetic"), params=params, checkpoints=(budget,),
                        max_budget=budget, make_substitute=tiny_substitute)
    attack = ATTACKS.get("activethief")(ctx)
    attack._substitute = lambda state: model  # the round's substitute is already trained
    labelled = torch.arange(LABELLED)
    x_lab = images[:LABELLED].float().div(255).to(dev)
    with torch.no_grad():
        attack._centers = torch.softmax(model(x_lab), dim=1)  # cached with the trained model
    store = QueryStore(budget, SHAPE, "soft_prob", K)
    store.append(x_lab, torch.full((LABELLED, K), 1.0 / K))
    attack.used[labelled] = True
    attack.is_val[:] = False
    state = EngineState(budget, (budget,), store, dev, queries_used=LABELLED)
    unused = torch.nonzero(~attack.used).squeeze(1)

    def step() -> torch.Tensor:
        picked = attack._select(ROUND, unused, state)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return picked

    return step


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pool_size", [10_000, 100_000], ids=["pool10k", "pool100k"])
@pytest.mark.parametrize("strategy,options", [
    ("uncertainty", {}), ("k_center", {}), ("dfal", {}), ("dfal_k_center", {}),
    ("dfal", FAST_DEEPFOOL), ("dfal_k_center", FAST_DEEPFOOL),
], ids=["uncertainty", "k_center", "dfal", "dfal_k_center", "dfal-fast", "dfal_k_center-fast"])
def test_selection_step(benchmark, strategy, options, pool_size, device):
    step = selection_step(strategy, pool_size, device, **options)
    picked = benchmark.pedantic(step, rounds=2 if pool_size <= 10_000 else 1, iterations=1, warmup_rounds=0)
    assert picked.numel() == ROUND and picked.unique().numel() == ROUND
    assert bool((picked >= LABELLED).all())  # labelled images are never selected again


@pytest.mark.parametrize("device", DEVICES)
def test_paper_training_epoch(benchmark, device):
    dev = torch.device(device)
    g = torch.Generator().manual_seed(0)
    x = torch.rand((10_000, *SHAPE), generator=g).to(dev)
    y = torch.softmax(3 * torch.randn(10_000, K, generator=g), dim=1).to(dev)
    params = ActiveThiefParams(max_epochs=1)
    torch.manual_seed(0)
    model = build_model("lenet5", 1, K, (28, 28), [0.1307], [0.3081]).to(dev)
    before = [t.detach().clone() for t in model.parameters()]

    def epoch() -> torch.nn.Module:
        out = fit_substitute(model, (x[:8000], y[:8000]), (x[8000:], y[8000:]), params, "soft_prob", K,
                             torch.Generator().manual_seed(0))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return out

    trained = benchmark.pedantic(epoch, rounds=2, iterations=1, warmup_rounds=0)
    assert any(not torch.equal(a, b) for a, b in zip(before, trained.parameters()))
