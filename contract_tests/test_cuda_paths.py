"""Every attack runs end to end on CUDA on CIFAR-shaped images (contract §1.1, §13).

On a machine with a GPU, each attack with a Track B of its own (the list of
``test_track_b_test_split``, tiny presets) runs one seed through ``engine.run_seed`` with
``run.device: cuda`` on SYNTH32, a synthetic CIFAR-shaped world (3x32x32, 10 classes;
``mebench.testing``): the victim, the attack's models and both tracks on the GPU. Each run
must stop at its odd budget exactly, score finite metrics at every checkpoint, and hand Track B
a model whose weights live on the GPU. Without CUDA the module skips with its reason; the same
attacks run on the CPU in their own modules.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from mebench.metrics import METRIC_NAMES
from mebench.run.plan import resolve, site
from test_track_b_test_split import ATTACKS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA paths: no GPU on this machine (the same attacks run on the CPU elsewhere)")


@pytest.fixture(scope="module")
def cifar_victim(tmp_path_factory) -> str:
    from mebench.testing import synthetic_victim

    return str(synthetic_victim(tmp_path_factory.mktemp("v") / "synth32_victim.pt", dataset="SYNTH32"))


def cuda_config(make_cfg, victim: str, attack: dict[str, Any], other: dict[str, Any]):
    mode = attack.get("output_mode", "soft_prob")
    data_mode = other.get("dataset", {}).get("data_mode", "surrogate")
    dataset = {"name": "SYNTH32", "data_mode": data_mode, "seed_size": 30,
               "surrogate_name": "SYNTH32SUR" if data_mode == "surrogate" else None}
    return make_cfg(**{**other, "run": {"device": "cuda"}, "cache": {"enabled": False},
                       "victim": {"victim_id": "synth32_mlp", "checkpoint_ref": victim, "output_mode": mode},
                       "budget": {"max_budget": 301, "checkpoints": [97, 301]}, "dataset": dataset,
                       "attack": {"output_mode": mode, **attack}})


# contract 1.1 / 13: the same budget, checkpoints and metrics on CUDA as on the CPU
@pytest.mark.parametrize("attack,other", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_runs_on_cuda_with_cifar_shaped_images(make_cfg, cifar_victim, tmp_path, attack, other):
    from mebench.run import engine
    from mebench.config.validation import validate

    cfg = cuda_config(make_cfg, cifar_victim, attack, other)
    validate(cfg)
    prep = engine.prepare(resolve(cfg), site(cfg))
    devices: dict[int, set[str]] = {}
    real_make = engine.make_attack

    def make(*args: Any, **kwargs: Any) -> Any:
        made = real_make(*args, **kwargs)
        track_b_model = made.track_b_model

        def spy(state):
            model = track_b_model(state)
            devices[state.queries_used] = {p.device.type for p in model.parameters()}
            return model

        made.track_b_model = spy
        return made

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "make_attack", make)
        result = engine.run_seed(resolve(cfg, 0), site(cfg), prep, tmp_path / "run", progress=False)
    summary = result.summary
    assert summary["status"] == "complete" and summary["queries_used"] == 301
    assert devices == {97: {"cuda"}, 301: {"cuda"}}
    rows = [r for r in result.rows if r["track"] in ("A", "B")]
    assert sorted((r["track"], r["checkpoint_B"]) for r in rows) == [("A", 97), ("A", 301), ("B", 97), ("B", 301)]
    for r in rows:  # KL and L1 are empty (None) for hard_top1
        values = [r[k] for k in METRIC_NAMES if r[k] is not None]
        assert r["agreement"] is not None and all(math.isfinite(v) for v in values), r


# The graphed step (mebench.training.graphed; docs/guide/performance.md): on CUDA each shared loop
# captures its step and agrees with the eager loop (MEBENCH_CUDA_GRAPHS=0) within the stacked
# seeds' bound; the CPU tests (test_graphed_step.py) check the program itself bit for bit.
def _cuda_data(n: int, mode: str, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 28, 28, generator=g)
    y = torch.softmax(torch.randn(n, 10, generator=g), 1) if mode == "soft_prob" else torch.randint(0, 10, (n,), generator=g)
    return x.cuda(), y.cuda()


def _probe_logits(models):
    probe = torch.rand(64, 1, 28, 28, generator=torch.Generator().manual_seed(9)).cuda()
    with torch.no_grad():
        return torch.stack([m(probe) for m in models])


@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_track_a_step_is_graphed_and_agrees(mode, monkeypatch):
    from mebench.training.spec import OptimizerSpec
    from mebench.training.track_a import TrackASpec, TrackATrainer

    spec = TrackASpec("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,), 1234, 128, 0.2, OptimizerSpec(), mode)
    x, y = _cuda_data(1000, mode)
    graphed_tr = TrackATrainer(spec, "cuda")
    losses = torch.zeros(200, device="cuda")
    g_model = graphed_tr.train(x, y, losses=losses)
    assert graphed_tr.last_step == {"step": "graphed", "why": None}
    assert bool(torch.isfinite(losses).all()) and float(losses[-1]) < float(losses[0])
    monkeypatch.setenv("MEBENCH_CUDA_GRAPHS", "0")
    eager_tr = TrackATrainer(spec, "cuda")
    e_model = eager_tr.train(x, y)
    assert eager_tr.last_step["step"] == "eager"
    assert torch.allclose(_probe_logits([g_model]), _probe_logits([e_model]), atol=1e-3, rtol=1e-3)


def test_epoch_loop_is_graphed_and_agrees(monkeypatch):
    from mebench.models.registry import build_model
    from mebench.training import loop
    from mebench.training.losses import cross_entropy
    from mebench.training.spec import OptimizerSpec

    x, y = _cuda_data(300, "hard_top1")

    def trained():
        torch.manual_seed(0)
        model = build_model("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,)).cuda()
        info: dict = {}
        loop.train_epochs(model, x, y, loss_fn=cross_entropy, epochs=4, batch_size=64, optimizer=OptimizerSpec(),
                          generator=torch.Generator().manual_seed(1), lr_step=2, step_info=info)
        return model, info

    g_model, g_info = trained()
    assert g_info == {"step": "graphed", "why": None}
    monkeypatch.setenv("MEBENCH_CUDA_GRAPHS", "0")
    e_model, e_info = trained()
    assert e_info["step"] == "eager"
    assert torch.allclose(_probe_logits([g_model]), _probe_logits([e_model]), atol=1e-3, rtol=1e-3)


def test_stacked_seeds_are_graphed_and_agree():
    from mebench.training.spec import OptimizerSpec
    from mebench.training.track_a import TrackASpec, TrackATrainer, train_seeds_together

    spec = TrackASpec("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,), 1234, 128, 0.2, OptimizerSpec(), "soft_prob")
    tr = TrackATrainer(spec, "cuda")
    ds = [_cuda_data(1000, "soft_prob", seed=s) for s in (0, 1, 2)]
    together = train_seeds_together(tr, ds)
    assert tr.last_step == {"step": "graphed", "why": None}
    alone = []
    for x, y in ds:
        alone.append(tr.train(x, y))
    assert torch.allclose(_probe_logits(together), _probe_logits(alone), atol=1e-3, rtol=1e-3)
