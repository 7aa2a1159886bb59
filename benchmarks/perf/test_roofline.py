"""How close mebench's hot paths come to what this machine can compute (pytest-benchmark).

For Track A's LeNet-5 and ResNet-8 SGD steps at batch 128 on MNIST-shaped input, at one torch
thread and at the thread count in use: the time per step of mebench's Track A trainer (as it
is, as it was before the multi-tensor SGD and fast-pooling defaults = ``before``, and with the
opt-in ``channels_last`` and ``bf16`` options) and of a bare PyTorch loop, in the same run; the FLOPs of one step's forward
and backward pass (``torch.utils.flop_counter.FlopCounterMode``: matmuls and convolutions, the
work a roofline counts); the achieved GFLOP/s; and the machine's measured peak at the same
thread count, measured right after each case with the same timer (a 1024^3 fp32 matmul and a
64-channel 3x3 convolution, best of several runs): ``roofline_fraction`` = achieved / matmul
peak. On a CPU shared with other work, time the cases by CPU time
(``--benchmark-timer=time.process_time``): at one thread it is the step's cost on a core of its
own, however busy the machine is. ``MEBENCH_PERF_THREADS=1`` limits the thread counts to one. The same for the victim's answers to 1,000
images (the oracle and a bare forward pass) and, per registered attack, one smoke run (257
queries on SYNTH, ``mebench.testing.smoke_run``) with its FLOPs per query.

Everything lands in ``extra_info`` (``--benchmark-json``; ``studies/perf/summarize.py`` reads
it). Track A's ``torch.compile`` (inductor) is measured only with ``MEBENCH_PERF_COMPILE=1``
(its compilation takes a minute on a busy CPU).

    pytest benchmarks/perf/test_roofline.py --benchmark-only --benchmark-json=out.json
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import mebench.models  # noqa: F401  (registers architectures)
from mebench.models.registry import build_model
from mebench.training import loop, maxpool
from mebench.training.loop import OptimizerSpec
from mebench.training.spec import FastSpec
from mebench.training.track_a import TrackASpec, TrackATrainer

BATCH, SHAPE = 128, (1, 28, 28)
STEPS = {"lenet5": 30, "resnet8": 6}
ROUNDS = {"lenet5": 7, "resnet8": 3}
THREADS = [int(t) for t in os.environ.get("MEBENCH_PERF_THREADS", "").split(",") if t] or sorted({1, torch.get_num_threads()})
VARIANTS = ["bare", "before", "mebench", "channels_last", "bf16", "channels_last+bf16"] + (
    ["compile"] if os.environ.get("MEBENCH_PERF_COMPILE") else [])


def flops_of(fn: Callable[[], Any]) -> int:
    """Floating-point operations ``fn`` runs, as ``FlopCounterMode`` counts them."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def best_seconds(fn: Callable[[], Any], repeats: int, timer: Callable[[], float]) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = timer()
        fn()
        best = min(best, timer() - t0)
    return best


def peaks(timer: Callable[[], float]) -> dict[str, float]:
    """The measured fp32 peak (GFLOP/s) of a large matmul and a large convolution, now."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(1024, 1024, generator=g), torch.rand(1024, 1024, generator=g)
    x, w = torch.rand(32, 64, 32, 32, generator=g), torch.rand(64, 64, 3, 3, generator=g)
    mm = 2 * 1024 ** 3 / best_seconds(lambda: a @ b, 5, timer)
    conv_flops = flops_of(lambda: F.conv2d(x, w, padding=1))
    conv = conv_flops / best_seconds(lambda: F.conv2d(x, w, padding=1), 3, timer)
    return {"peak_matmul_gflops": mm / 1e9, "peak_conv_gflops": conv / 1e9}


@pytest.fixture
def timer(request) -> Callable[[], float]:
    """The benchmark's own timer (``--benchmark-timer``, e.g. ``time.process_time``), so peaks and
    cases are timed alike."""
    import importlib

    chosen = request.config.getoption("benchmark_timer")
    if callable(chosen):
        return chosen
    module, _, name = str(chosen).rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.fixture(params=THREADS, ids=lambda t: f"threads{t}")
def threads(request):
    saved = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(saved)


def fresh(arch: str) -> torch.nn.Module:
    torch.manual_seed(1234)
    return build_model(arch, 1, 10, (28, 28), (0.1307,), (0.3081,))


def data(n: int = 2048):
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, *SHAPE, generator=g), torch.softmax(torch.randn(n, 10, generator=g), 1)


def step_flops(arch: str) -> int:
    """FLOPs of one Track A step's forward and backward pass at batch 128."""
    model, (x, y) = fresh(arch).train(), data(BATCH)

    def step():
        F.kl_div(F.log_softmax(model(x), 1), y, reduction="batchmean").backward()

    return flops_of(step)


def bare_loop(arch: str, x: torch.Tensor, y: torch.Tensor, steps: int) -> Callable[[], Any]:
    """Track A's recipe written out in plain PyTorch (no mebench code in the step)."""
    def run():
        model = fresh(arch).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=True)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1234))
        for s in range(steps):
            idx = perm[s * BATCH:(s + 1) * BATCH]
            loss = F.kl_div(F.log_softmax(model(x[idx]), 1), y[idx], reduction="batchmean")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        return model
    return run


def per_parameter_sgd(params, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """mebench's optimizer before the multi-tensor default (the A side of the A/B)."""
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay,
                           nesterov=spec.nesterov, foreach=False)


def mebench_loop(arch: str, variant: str, x: torch.Tensor, y: torch.Tensor, steps: int, monkeypatch) -> Callable[[], Any]:
    options = variant.split("+")
    fast = FastSpec(channels_last="channels_last" in options, bf16="bf16" in options)
    spec = TrackASpec(arch, 1, 10, (28, 28), (0.1307,), (0.3081,), 1234, BATCH, 0.2, OptimizerSpec(), "soft_prob", fast)
    trainer = TrackATrainer(spec, "cpu")
    trainer.steps = lambda budget: steps  # type: ignore[method-assign]
    if variant == "before":
        monkeypatch.setattr(loop, "make_optimizer", per_parameter_sgd)
        monkeypatch.setattr(maxpool, "swap_in", lambda model: [])
    if variant == "compile":
        plain = trainer.fresh_model
        trainer.fresh_model = lambda: torch.compile(plain())  # type: ignore[method-assign]
        trainer.train(x[:BATCH * 2], y[:BATCH * 2])  # compiles once, outside the timing
    return lambda: trainer.train(x, y)


def record(benchmark, timer, flops: float, seconds: float, threads: int, **info: Any) -> None:
    peak = peaks(timer)
    gflops = flops / seconds / 1e9
    benchmark.extra_info.update(info, threads=threads, timer=getattr(timer, "__name__", str(timer)), flops=flops, seconds=seconds,
                                gflops=gflops, **peak,
                                roofline_fraction=gflops / peak["peak_matmul_gflops"],
                                conv_roof_fraction=gflops / peak["peak_conv_gflops"])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ["lenet5", "resnet8"])
def test_track_a_step(benchmark, arch, variant, threads, timer, monkeypatch):
    steps = STEPS[arch]
    x, y = data(steps * BATCH)
    run = bare_loop(arch, x, y, steps) if variant == "bare" else mebench_loop(arch, variant, x, y, steps, monkeypatch)
    benchmark.pedantic(run, rounds=ROUNDS[arch], warmup_rounds=1)
    per_step = benchmark.stats.stats.min / steps
    record(benchmark, timer, step_flops(arch), per_step, threads, kind="track_a_step", arch=arch, variant=variant,
           batch=BATCH, steps=steps, ms_per_step=1e3 * per_step)


@pytest.mark.parametrize("variant", ["bare", "mebench"])
def test_victim_answers_1000(benchmark, variant, threads, timer):
    from mebench.oracle import Oracle
    from mebench.victims.wrapper import FrozenVictim

    net = fresh("lenet5").eval()
    queries = torch.rand(1000, *SHAPE, generator=torch.Generator().manual_seed(0))
    if variant == "bare":
        def run():
            with torch.no_grad():
                return torch.softmax(net(queries), 1)
    else:
        oracle = Oracle(FrozenVictim(net, "cpu"), "soft_prob", 10 ** 12, SHAPE)

        def run():
            return oracle.query(queries)
    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    seconds = benchmark.stats.stats.min
    with torch.no_grad():
        flops = flops_of(lambda: net(queries))
    record(benchmark, timer, flops, seconds, threads, kind="victim_answers", arch="lenet5", variant=variant,
           images=1000, images_per_second=1000 / seconds)


def attack_names() -> list[str]:
    from mebench.attacks import ATTACKS

    return sorted(ATTACKS.names())


@pytest.mark.parametrize("name", attack_names())
def test_attack_smoke_run(benchmark, name, timer):
    """One smoke run of each registered attack at one thread: seconds and FLOPs per query."""
    from mebench.testing import SMOKE_BUDGET, smoke_run, synthetic_victim_net

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        victim = synthetic_victim_net(steps=100)
        t0 = time.perf_counter()
        try:
            flops = float(flops_of(lambda: smoke_run(name, victim)))
        except RuntimeError:  # FlopCounterMode cannot follow autograd.grad on a leaf (JBDA's input gradients)
            flops = float("nan")
        counted = time.perf_counter() - t0
        benchmark.pedantic(lambda: smoke_run(name, victim), rounds=1, warmup_rounds=0)
        seconds = benchmark.stats.stats.min
        record(benchmark, timer, flops, seconds, 1, kind="attack_smoke_run", attack=name, queries=SMOKE_BUDGET,
               ms_per_query=1e3 * seconds / SMOKE_BUDGET, flops_per_query=flops / SMOKE_BUDGET,
               seconds_while_counting=counted)
    finally:
        torch.set_num_threads(saved)
