"""Track A's 2x2 max-pooling, bit-identical to ``nn.MaxPool2d(2)`` and faster on the CPU.

The CPU kernel of ``max_pool2d_with_indices`` takes about a quarter of LeNet-5's Track A step; this
module computes the same values and argmax positions with a few element-wise tensor operations and
hands the backward pass to PyTorch's own kernel with those indices, so every trained weight is
bit-identical (``contract_tests/test_track_a_fast.py``). Only Track A's training copy of the
substitute is changed, on the CPU; the tie rule, the ReLU move and the fallbacks are below.
See docs/guide/performance.md.
"""
# Profiling LeNet-5's Track A step (batch 128, one thread; ``docs/guide/performance.md``) shows
# the CPU kernel of ``max_pool2d_with_indices`` taking about a quarter of the step: 2.8 ms for the
# first pooling layer's 128x6x28x28 input, ~15x what a pass over that memory costs. This module
# computes the same values and the same argmax positions with a few element-wise tensor operations
# and hands the backward pass to PyTorch's own ``max_pool2d_with_indices_backward`` with those
# indices, so forward values, gradients and hence every trained weight are bit-identical
# (``contract_tests/test_track_a_fast.py``; the pinned ``metrics.csv`` digests are unchanged):
#
# - **ties**: PyTorch's kernel scans a window row by row and keeps the first maximum; here a row's
#   right element wins only if strictly greater, then the lower row only if strictly greater,
#   which selects the same (first) position;
# - **ReLU before the pooling** (LeNet-5's ``ReLU, MaxPool2d`` pairs) is moved after it: max and
#   ReLU commute, and the gradient reaches the same input position (a window whose maximum is
#   <= 0 passes no gradient either way), so the step pools before the (4x cheaper) ReLU.
#
# Only Track A's training copy of the substitute is changed (``mebench.training.fast``), on the CPU,
# and ``restore`` puts the original modules back before the model is scored or saved. Windows
# other than 2x2/stride 2/no padding, odd sizes, other devices and inputs that need no gradient
# use ``F.max_pool2d`` unchanged. A window holding a NaN gets the same (NaN) value but may send
# its gradient to another position; such a step's loss is NaN and Track A stops with
# ``DivergenceError`` either way.

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

__all__ = ["MaxPool2x2", "swap_in", "restore"]

_BASE: dict[tuple[int, int, str], torch.Tensor] = {}


def _window_base(h: int, w: int, device: torch.device) -> torch.Tensor:
    """Flat index (row * w + col) of each 2x2 window's top-left input position."""
    key = (h, w, str(device))
    if key not in _BASE:
        rows = torch.arange(h // 2, device=device).view(-1, 1) * (2 * w)
        _BASE[key] = rows + torch.arange(w // 2, device=device).view(1, -1) * 2
    return _BASE[key]


class _Pool2x2(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        n, c, h, w = x.shape
        pairs = x.unflatten(3, (w // 2, 2))
        left, right = pairs[..., 0], pairs[..., 1]
        right_wins = right > left                                   # first maximum of each row pair
        row_max = torch.maximum(left, right).unflatten(2, (h // 2, 2))
        top, bottom = row_max[:, :, :, 0], row_max[:, :, :, 1]
        bottom_wins = bottom > top                                  # then the first row
        out = torch.maximum(top, bottom)
        wins = right_wins.unflatten(2, (h // 2, 2))
        col = wins[:, :, :, 0] ^ (bottom_wins & (wins[:, :, :, 0] ^ wins[:, :, :, 1]))
        offset = bottom_wins.view(torch.uint8).to(torch.int32) * w + col.view(torch.uint8)
        idx = _window_base(h, w, x.device) + offset
        if not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            out = out.contiguous(memory_format=torch.channels_last)
            idx = idx.contiguous(memory_format=torch.channels_last)
        ctx.save_for_backward(x, idx)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x, idx = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)


class MaxPool2x2(nn.Module):
    """``nn.MaxPool2d(2)`` with the faster CPU training path above (same values and gradients)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and x.dim() == 4 and x.requires_grad and x.shape[2] % 2 == 0
                and x.shape[3] % 2 == 0 and x.is_floating_point() and not _vectorised_nhwc(x)):
            return _Pool2x2.apply(x)
        return F.max_pool2d(x, 2)


def _vectorised_nhwc(x: torch.Tensor) -> bool:
    """Channels-last input with 16 or more channels: PyTorch's kernel vectorises over channels and
    is the faster one there (measured: 0.45 ms against 0.66 ms for 128x16x10x10, one thread)."""
    return x.shape[1] >= 16 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _plain_2x2(m: nn.Module) -> bool:
    if type(m) is not nn.MaxPool2d:
        return False
    as_pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    return (as_pair(m.kernel_size) == (2, 2) and as_pair(m.stride) == (2, 2) and as_pair(m.padding) == (0, 0)
            and as_pair(m.dilation) == (1, 1) and not m.ceil_mode and not m.return_indices)


Swaps = list[tuple[nn.Sequential, list[nn.Module]]]


def swap_in(model: nn.Module) -> Swaps:
    """Replace, in place, every plain 2x2 ``nn.MaxPool2d`` inside an ``nn.Sequential`` of ``model``
    by ``MaxPool2x2`` (a ``ReLU`` right before it moves after it); what ``restore`` undoes."""
    swaps: Swaps = []
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        old = list(seq)
        if not any(_plain_2x2(m) for m in old):
            continue
        new: list[nn.Module] = []
        for m in old:
            if not _plain_2x2(m):
                new.append(m)
            elif new and type(new[-1]) is nn.ReLU:
                new.insert(len(new) - 1, MaxPool2x2())
            else:
                new.append(MaxPool2x2())
        _set_children(seq, new)
        swaps.append((seq, old))
    return swaps


def restore(swaps: Swaps) -> None:
    """Put back the modules ``swap_in`` replaced (parameters were never moved), in the train/eval
    mode their sequence is in now (training may have switched it while they were out)."""
    for seq, old in swaps:
        for m in old:
            m.train(seq.training)
        _set_children(seq, old)


def _set_children(seq: nn.Sequential, modules: list[nn.Module]) -> None:
    for key in list(seq._modules):
        del seq._modules[key]
    for i, m in enumerate(modules):
        seq.add_module(str(i), m)
