"""Track A's speed paths: the default one (bit-identical) and the opt-in ones (``FastSpec``).

The default trains the CPU substitute's 2x2 max-pooling through ``mebench.training.maxpool`` and
SGD with ``foreach=True``, bit-identical to the plain loop; ``channels_last`` and ``bf16`` are
opt-in and change results (each path and its measured speed is below). Everything here is a change
of layout, kernels or precision around ``train_steps``; the batch order, the loss and the
optimizer are untouched. Opt-in options are recorded in the plan. See docs/guide/performance.md.
"""
# Measured on a 2-core AMD EPYC (AVX-512, AVX512-BF16) at one torch thread
# (``benchmarks/perf/test_roofline.py``, records under ``results/perf/``; ``docs/guide/performance.md``):
#
# - **default, bit-identical**: on the CPU, the substitute's plain 2x2 max-pooling layers train
#   through ``mebench.training.maxpool`` (same values, same argmax, PyTorch's own backward
#   kernel; the ReLU before a pooling moves after it, which commutes exactly), and SGD uses
#   ``foreach=True`` (``mebench.training.loop.make_optimizer``; the same element-wise operations
#   in the same order as the per-parameter loop).
# - ``channels_last`` (opt-in): the substitute's weights and each batch in NHWC layout, so oneDNN
#   runs its blocked convolution kernels. It changes the summation order, hence the last bits of
#   every weight.
# - ``bf16`` (opt-in): the forward pass under ``torch.autocast`` with bfloat16 (convolutions and
#   matrix products in bfloat16 with fp32 accumulation; the loss, the gradients' parameters and
#   the optimizer stay fp32). On CPUs with AVX512-BF16 the convolutions run faster (ResNet-8's
#   3x3 convolutions 1.8x; LeNet-5's only together with channels_last); it changes results well
#   beyond rounding of the last bits, so its effect on the metrics is measured over 3 seeds on the
#   performance page.
# - ``torch.compile`` (inductor) of the substitute was measured slower than eager for LeNet-5 at
#   batch 128 on one CPU thread and is not offered.

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from mebench.training import maxpool
from mebench.training.spec import FAST_OPTIONS, FastSpec

__all__ = ["FAST_OPTIONS", "FastSpec", "for_training", "input_layout"]


class _Autocast(nn.Module):
    """``inner`` run under bfloat16 autocast, its logits handed back in fp32 (for the loss)."""

    graph_safe = False  # autocast's weight cache cannot be captured (mebench.training.graphed)

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = self.inner(x)
        return out.float()


def for_training(model: nn.Module, fast: FastSpec) -> tuple[nn.Module, Callable[[], nn.Module]]:
    """The module to train in place of ``model`` and a function that, after training, hands
    ``model`` back as built (plain modules, default layout), so scoring and the saved weights
    depend only on the trained values, not on how they were trained."""
    on_cpu = next(model.parameters()).device.type == "cpu"
    swaps = maxpool.swap_in(model) if on_cpu else []
    if fast.channels_last:
        model.to(memory_format=torch.channels_last)
    trained: nn.Module = _Autocast(model) if fast.bf16 else model

    def finish() -> nn.Module:
        maxpool.restore(swaps)
        if fast.channels_last:
            model.to(memory_format=torch.contiguous_format)
        return model

    return trained, finish


def input_layout(fast: FastSpec) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The per-batch layout change ``train_steps`` applies as its ``transform`` (``None``: none)."""
    if not fast.channels_last:
        return None

    def nhwc(xb: torch.Tensor) -> torch.Tensor:
        return xb.contiguous(memory_format=torch.channels_last) if xb.dim() == 4 else xb

    return nhwc
