"""Cost of one DFME iteration (pytest-benchmark).

One case = one full iteration of the native loop with the dataset preset: a
generator phase (batch * (m + 1) probe images, zeroth-order gradient, Adam
step) and n_S student phases, each answered by a LeNet-5 victim, exactly as the
engine drives it (propose -> victim -> observe). ``extra_info`` records the
queries per iteration, so queries/second = queries / mean time. Runs on CUDA
when available.

    pytest benchmarks/perf/test_dfme_perf.py --benchmark-only
"""

from __future__ import annotations

import pytest
import torch

import mebench.models.lenet  # noqa: F401  (registers lenet5)
from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks.dfme import Params
from mebench.data.profiles import get_profile
from mebench.models.registry import build_model
from mebench.state import EngineState
from mebench.types import OracleOutput

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def lenet(profile) -> torch.nn.Module:
    return build_model("lenet5", profile.channels, profile.num_classes, profile.input_size, profile.mean, profile.std)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dataset", ["MNIST", "CIFAR10"])
def test_dfme_iteration(benchmark, dataset: str, device: str) -> None:
    profile, dev = get_profile(dataset), torch.device(device)
    torch.manual_seed(0)
    victim = lenet(profile).to(dev).eval()
    budget = 10**9
    ctx = AttackContext(profile=profile, output_mode="soft_prob", num_classes=profile.num_classes,
                        input_shape=profile.input_shape, device=dev, seed=0,
                        generator=torch.Generator().manual_seed(0), pool=None, params=Params(),
                        checkpoints=(budget,), max_budget=budget, make_substitute=lambda: lenet(profile))
    attack = ATTACKS.get("dfme")(ctx)
    state = EngineState(budget, (budget,), None, dev)  # type: ignore[arg-type]
    hp = Params()
    phases = hp.generator_steps + hp.student_steps

    def iteration() -> None:
        for _ in range(phases):
            batch = attack.propose(attack.next_batch_size(state), state)
            with torch.no_grad():
                out = OracleOutput("soft_prob", torch.softmax(victim(batch.x), dim=1))
            state.queries_used += len(batch)
            attack.observe(batch, out, state)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    benchmark.extra_info["queries_per_iteration"] = hp.batch_size * (hp.grad_m * hp.generator_steps
                                                                     + phases)
    benchmark.pedantic(iteration, rounds=3, warmup_rounds=1)
