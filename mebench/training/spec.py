"""The optimizer's config section (``substitute.optimizer``), apart from the training loop.

The run config's types (``mebench.config``) hold an ``OptimizerSpec``; keeping it in this
torch-free module lets a config be read and checked, and its mistakes reported, before torch
is imported (``mebench.training.loop`` re-exports both names and builds the optimizer).
See docs/guide/configs.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizerSpec:
    """Optimizer and its hyperparameters (``substitute.optimizer`` in the config)."""

    name: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False


OPTIMIZER_NAMES = ("sgd", "adam", "adamw")


@dataclass(frozen=True)
class FastSpec:
    """Opt-in speed options of Track A (``substitute.trackA.fast``; ``mebench.training.fast``).

    Each option changes the floating-point summation order, so a run that sets one gives
    (slightly) different weights and metrics than the default, which stays bit-reproducible.
    ``channels_last``: the substitute's weights and every batch in NHWC layout (oneDNN's faster
    convolution kernels on the CPU). ``bf16``: the forward pass under bfloat16 autocast (fp32
    loss, gradients and optimizer); changes the metrics beyond rounding, measured on the
    performance page.
    """

    channels_last: bool = False
    bf16: bool = False

    @property
    def any(self) -> bool:
        """Whether any option is on (the default plan records none)."""
        return self.channels_last or self.bf16


FAST_OPTIONS = ("channels_last", "bf16")


#: ``--seeds-together auto`` per device type: whether stacking the seeds was measured faster than one
#: by one. CPU: measured slower (results/perf/bench/seeds_together.json); CUDA: no committed record yet
#: (benchmarks/gpu/check.sh). Torch-free, so the pytest plugin reads it without importing torch.
SEEDS_TOGETHER_DEFAULT: dict[str, bool] = {"cpu": False, "cuda": False}


def seeds_together_default(device: object) -> bool:
    """Whether a run on ``device`` (``cpu``, ``cuda``, ``cuda:1``, a ``torch.device``) trains its seeds together
    unless told."""
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    return SEEDS_TOGETHER_DEFAULT.get(kind, False)
