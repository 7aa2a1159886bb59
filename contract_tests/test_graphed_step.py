"""Track A's graph-ready step (§8 Track A; ``mebench.training.graphed``).

On a GPU the Track A step (and the shared loops attacks train with) runs as a captured CUDA graph:
batch indices fed from a device block, learning rates held on the device, SGD's update written as
device operations. Everything but the capture is checked here on the CPU, where the same program
runs eagerly: it must give the eager loop's weights *bit for bit* (same batches, same learning
rates, same rounding), for every registered architecture, both output modes, and the optimizer
settings the configs use. The capture itself is exercised in ``test_cuda_paths.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from mebench.errors import DivergenceError
from mebench.models.registry import MODELS, build_model
from mebench.testing import register_synthetic
from mebench.training import graphed, loop
from mebench.training.losses import loss_for
from mebench.training.spec import OptimizerSpec
from mebench.training.track_a import TrackASpec, TrackATrainer, train_seeds_together

register_synthetic()

SGD = OptimizerSpec()


def make(arch: str, channels: int = 1, size: int = 8, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(arch, channels, 4, (size, size), (0.5,) * channels, (0.25,) * channels)


def data(n: int, mode: str, channels: int = 1, size: int = 8, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, channels, size, size, generator=g)
    y = torch.softmax(torch.randn(n, 4, generator=g), 1) if mode == "soft_prob" else torch.randint(0, 4, (n,), generator=g)
    return x, y


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in model.state_dict().values()]


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(u, v) for u, v in zip(weights(a), weights(b)))


def both_steps(arch, mode, opt, *, n=70, steps=23, bs=16, cosine=True, schedule_steps=None, channels=1, size=8):
    x, y = data(n, mode, channels, size)
    kw = dict(loss_fn=loss_for(mode), steps=steps, batch_size=bs, optimizer=opt, cosine=cosine,
              schedule_steps=schedule_steps)
    eager, prog = make(arch, channels, size), make(arch, channels, size)
    le, lp = torch.zeros(steps), torch.zeros(steps)
    info: dict = {}
    torch.manual_seed(7)  # dropout draws from the global stream
    loop.train_steps(eager, x, y, generator=torch.Generator().manual_seed(3), losses=le, step_info=info, **kw)
    torch.manual_seed(7)
    program = graphed.train_steps(prog, x, y, generator=torch.Generator().manual_seed(3), losses=lp, **kw)
    return eager, prog, le, lp, info, program


# the step program, run eagerly, is the eager loop bit for bit: weights and every step's loss.
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
@pytest.mark.parametrize("opt", [SGD, OptimizerSpec(momentum=0.0, weight_decay=0.0),
                                 OptimizerSpec(lr=0.05, momentum=0.5, weight_decay=1e-3, nesterov=True)],
                         ids=["default", "plain", "nesterov"])
def test_program_is_the_eager_loop_bit_for_bit(mode, opt):
    eager, prog, le, lp, info, program = both_steps("lenet5" if mode == "soft_prob" else "tiny_mlp", mode, opt,
                                                    size=28 if mode == "soft_prob" else 8)
    assert same(eager, prog)
    assert torch.equal(le, lp)
    assert info == {"step": "eager", "why": "cpu: CUDA graphs need a GPU"}
    assert program.kind == "eager" and int(program.step_t) == 23


# every registered architecture (batch norm and 32x32 inputs included), constant rate and an
# early-stopped cosine schedule, more steps than one index block.
@pytest.mark.parametrize("arch", [a for a in MODELS.names() if a != "lenet5"])  # lenet5: above
def test_every_architecture(arch):
    eager, prog, le, lp, *_ = both_steps(arch, "soft_prob", SGD, n=20, steps=3, bs=8, channels=3, size=32,
                                         schedule_steps=10)
    assert same(eager, prog) and torch.equal(le, lp)


def test_many_blocks_and_constant_rate():
    x, y = data(50, "hard_top1")
    kw = dict(loss_fn=loss_for("hard_top1"), steps=1100, batch_size=8, optimizer=SGD, cosine=False)
    eager, prog = make("tiny_mlp"), make("tiny_mlp")
    loop.train_steps(eager, x, y, generator=torch.Generator().manual_seed(5), **kw)
    graphed.train_steps(prog, x, y, generator=torch.Generator().manual_seed(5), **kw)
    assert same(eager, prog)


# learning rates: exactly the scheduler's, per step and per epoch.
def test_learning_rates_are_the_schedulers():
    lrs = graphed.lr_values(SGD, 7, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7))
    ref = [SGD.lr * (1 + math.cos(math.pi * k / 7)) / 2 for k in range(7)]
    assert lrs[0] == SGD.lr and all(abs(a - b) < 1e-12 for a, b in zip(lrs, ref))
    per_epoch = graphed.lr_values(SGD, 6, lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.1), [3, 3])
    assert per_epoch[:3] == [SGD.lr] * 3 and per_epoch[3:] == [SGD.lr] * 3
    stepped = graphed.lr_values(SGD, 9, lambda o: torch.optim.lr_scheduler.StepLR(o, 1, 0.5), [3, 3, 3])
    assert stepped == [0.1] * 3 + [0.05] * 3 + [0.025] * 3
    assert graphed.lr_values(SGD, 4) == [0.1] * 4


# epoch loops (train_fresh's): the last, smaller batch, min_batch and step decay, bit for bit.
@pytest.mark.parametrize("n,min_batch,lr_step,cosine", [(70, 1, 2, False), (70, 7, None, True), (64, 1, None, False)])
def test_epoch_program_is_the_eager_loop(n, min_batch, lr_step, cosine):
    x, y = data(n, "hard_top1")
    kw = dict(loss_fn=loss_for("hard_top1"), epochs=5, batch_size=16, optimizer=SGD, lr_step=lr_step,
              cosine=cosine, min_batch=min_batch)
    eager, prog = make("tiny_mlp"), make("tiny_mlp")
    loop.train_epochs(eager, x, y, generator=torch.Generator().manual_seed(2), **kw)
    graphed.train_epochs(prog, x, y, generator=torch.Generator().manual_seed(2), **kw)
    assert same(eager, prog)


# the stacked seeds' program equals their eager stacked loop bit for bit (Track A together).
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_stacked_program_is_the_stacked_loop(mode):
    spec = TrackASpec("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,), 1234, 16, 0.2, SGD, mode)
    tr = TrackATrainer(spec, "cpu")
    ds = [data(300, mode, seed=s) for s in (0, 1, 2)]
    rec_e = [torch.zeros(tr.steps(300)) for _ in ds]
    rec_p = [torch.zeros(tr.steps(300)) for _ in ds]
    eager = train_seeds_together(tr, ds, losses=rec_e, program=False)
    assert tr.last_step["step"] == "eager"
    prog = train_seeds_together(tr, ds, losses=rec_p, program=True)
    assert all(same(a, b) for a, b in zip(eager, prog))
    assert all(torch.equal(a, b) for a, b in zip(rec_e, rec_p))
    auto = train_seeds_together(tr, ds)  # on the CPU: the eager loop, and it says why
    assert tr.last_step == {"step": "eager", "why": "cpu: CUDA graphs need a GPU"}
    assert all(same(a, b) for a, b in zip(eager, auto))


# a diverging program stops as the eager loop does, with its message.
def test_program_divergence_is_reported():
    x, y = data(40, "hard_top1")
    x[3] = float("nan")
    with pytest.raises(DivergenceError, match=r"by step \d+ of 30"):
        graphed.train_steps(make("tiny_mlp"), x, y, loss_fn=loss_for("hard_top1"), steps=30, batch_size=8,
                            optimizer=SGD, generator=torch.Generator().manual_seed(0))


# why a training stays on the eager loop, one reason each.
def test_why_eager():
    cuda = torch.device("cuda")
    assert graphed.why_eager(cuda, SGD) is None
    assert "GPU" in graphed.why_eager(torch.device("cpu"), SGD)
    assert "adam" in graphed.why_eager(cuda, OptimizerSpec(name="adam"))
    assert "disk" in graphed.why_eager(cuda, SGD, on_disk=True)
    assert "autocast" in graphed.why_eager(cuda, SGD, autocast=True)


def test_switch_off(monkeypatch):
    monkeypatch.setenv(graphed.GRAPHS_ENV, "0")
    assert graphed.why_eager(torch.device("cuda"), SGD) == f"{graphed.GRAPHS_ENV}=0"


# a Track A run records how each checkpoint's step ran (summary.json: track_a_step).
def test_track_a_records_its_step(make_cfg):
    import json

    from mebench.run import engine

    cfg = make_cfg(attack={"name": "random"}, budget={"max_budget": 60, "checkpoints": [30, 60]})
    result = engine.run(cfg, progress=False)
    summary = json.loads((result.directory / "seed_0" / "summary.json").read_text())
    assert summary["track_a_step"] == {"30": {"step": "eager", "why": "cpu: CUDA graphs need a GPU"},
                                       "60": {"step": "eager", "why": "cpu: CUDA graphs need a GPU"}}
