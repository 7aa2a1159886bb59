"""Track A on a GPU: mebench's step against a bare PyTorch loop, eager and as a CUDA graph, in the
same run (pytest-benchmark; ``benchmarks/gpu/check.sh`` runs it and keeps the JSON).

LeNet-5, MNIST-shaped D_B of B = 10,000 already on the device, S(B) = 2,000 steps at batch 128,
KL loss, SGD (momentum 0.9, weight decay 5e-4, cosine schedule). Every case stores
``ms_per_seed_step`` in ``extra_info`` (``studies/perf/summarize.py`` makes the table):

- ``bare_eager`` / ``bare_graphed``: a hand-written loop, and the same step captured once as a CUDA
  graph (the reference figures of what the card does);
- ``mebench`` / ``mebench_eager``: ``TrackATrainer.train`` as Track A runs it (graphed), and with
  ``MEBENCH_CUDA_GRAPHS=0``;
- ``train_fresh`` / ``train_fresh_eager``: ``loop.train_epochs``, the attacks' shared epoch loop;
- ``together_<S>`` / ``together_<S>_eager``: S seeds stacked (``train_seeds_together``), time per
  seed-step;
- ``oracle`` / ``bare_forward``: 1,000 images answered by the oracle and by the victim's bare
  forward and softmax.

    pytest benchmarks/perf/test_gpu_step_perf.py --benchmark-only --benchmark-json=gpu_step.json
"""

from __future__ import annotations

import os

import pytest
import torch

from mebench.models.registry import build_model
from mebench.training import loop
from mebench.training.losses import kl_to_victim
from mebench.training.spec import OptimizerSpec
from mebench.training.track_a import TrackASpec, TrackATrainer, train_seeds_together

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU step timings: no GPU on this machine")

B, BS = 10_000, 128
STEPS = B // 5
OPT = OptimizerSpec()
SPEC = TrackASpec("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,), 1234, BS, 0.2, OPT, "soft_prob")


def d_b(seed: int, n: int = B):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 1, 28, 28, generator=g).cuda(), torch.softmax(torch.randn(n, 10, generator=g), 1).cuda())


def lenet() -> torch.nn.Module:
    torch.manual_seed(1234)
    return build_model("lenet5", 1, 10, (28, 28), (0.1307,), (0.3081,)).cuda()


def timed(benchmark, case: str, fn, per: int, seeds: int = 1, rounds: int = 3):
    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    out = benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=1)
    mean = benchmark.stats.stats.mean
    benchmark.extra_info.update(kind="gpu_step", case=case, seeds=seeds, steps=per,
                                ms_per_seed_step=1e3 * mean / (per * seeds), seconds=mean,
                                device_name=torch.cuda.get_device_name(), torch=torch.__version__)
    return out


def bare(graphed: bool):
    x, y = d_b(0)
    model = lenet()
    opt = torch.optim.SGD(model.parameters(), lr=OPT.lr, momentum=OPT.momentum, weight_decay=OPT.weight_decay,
                          foreach=True)
    idx = torch.randint(0, B, (STEPS, BS), device="cuda")
    if not graphed:
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)

        def train():
            for i in range(STEPS):
                loss = kl_to_victim(model(x[idx[i]]), y[idx[i]])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        return train
    # the documented whole-step capture (a constant rate: the bare figure of one replayed step)
    static = idx[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            opt.zero_grad(set_to_none=True)
            kl_to_victim(model(x[static]), y[static]).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = kl_to_victim(model(x[static]), y[static])
        loss.backward()
        opt.step()

    def train():
        for i in range(STEPS):
            static.copy_(idx[i])
            graph.replay()
    return train


@pytest.mark.parametrize("case", ["bare_eager", "bare_graphed"])
def test_bare(benchmark, case):
    timed(benchmark, case, bare(case == "bare_graphed"), STEPS)


@pytest.mark.parametrize("case", ["mebench", "mebench_eager"])
def test_track_a(benchmark, case, monkeypatch):
    if case.endswith("eager"):
        monkeypatch.setenv("MEBENCH_CUDA_GRAPHS", "0")
    trainer, (x, y) = TrackATrainer(SPEC, "cuda"), d_b(0)
    timed(benchmark, case, lambda: trainer.train(x, y), STEPS)
    assert trainer.last_step["step"] == ("eager" if case.endswith("eager") else "graphed"), trainer.last_step


@pytest.mark.parametrize("case", ["train_fresh", "train_fresh_eager"])
def test_train_fresh(benchmark, case, monkeypatch):
    if case.endswith("eager"):
        monkeypatch.setenv("MEBENCH_CUDA_GRAPHS", "0")
    x, y = d_b(0)
    info: dict = {}
    epochs = 26  # 26 epochs of 79 batches (78 full + one of 16) = 2,054 steps

    def train():
        return loop.train_epochs(lenet(), x, y, loss_fn=kl_to_victim, epochs=epochs, batch_size=BS, optimizer=OPT,
                                 generator=torch.Generator().manual_seed(0), lr_step=10, step_info=info)
    timed(benchmark, case, train, epochs * -(-B // BS))
    assert info["step"] == ("eager" if case.endswith("eager") else "graphed"), info


@pytest.mark.parametrize("seeds", [3, 32])
@pytest.mark.parametrize("graphed", [True, False], ids=["graphed", "eager"])
def test_together(benchmark, seeds, graphed):
    trainer = TrackATrainer(SPEC, "cuda")
    data = [d_b(s) for s in range(seeds)]
    timed(benchmark, f"together_{seeds}" + ("" if graphed else "_eager"),
          lambda: train_seeds_together(trainer, data, program=None if graphed else False), STEPS, seeds,
          rounds=2 if seeds > 3 else 3)
    assert trainer.last_step["step"] == ("graphed" if graphed else "eager"), trainer.last_step


@pytest.mark.parametrize("case", ["oracle", "bare_forward"])
def test_oracle(benchmark, case):
    from mebench.oracle import Oracle
    from mebench.victims.wrapper import FrozenVictim

    victim = FrozenVictim(lenet().eval(), device="cuda")
    xs = torch.rand(1000, 1, 28, 28, device="cuda")
    oracle = Oracle(victim, "soft_prob", 10**9, (1, 28, 28))
    model = victim.model
    reps = 200

    def answer():
        for _ in range(reps):
            if case == "oracle":
                oracle.query(xs)
            else:
                with torch.no_grad():
                    torch.softmax(model(xs), dim=1)
    timed(benchmark, case, answer, reps)


def test_environment_is_recorded(benchmark):
    """One row naming the card, torch and CUDA (the record's header)."""
    benchmark.extra_info.update(kind="gpu_env", device_name=torch.cuda.get_device_name(), torch=torch.__version__,
                                cuda=torch.version.cuda, graphs_env=os.environ.get("MEBENCH_CUDA_GRAPHS", ""))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
