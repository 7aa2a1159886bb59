"""Model registry: ``@register_model(name)`` factories taking the input shape and class count.

Every model built through ``build_model`` takes pixel-space input in ``[0, 1]``
and applies the victim profile's normalization itself (contract §5: the
substitute's preprocessing matches the victim), so attacks, the oracle and the
trainers all speak one input convention. See docs/architecture.md.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from mebench.registry import Registry

ModelFactory = Callable[[int, int, tuple[int, int]], nn.Module]
MODELS: Registry[ModelFactory] = Registry("model", "mebench.models")


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: ``@register_model("lenet5")`` on ``f(channels, num_classes, input_size)``."""
    return MODELS.register(name)


class Normalized(nn.Module):
    """``net((x - mean) / std)``: a model that takes ``[0, 1]`` pixels."""

    def __init__(self, net: nn.Module, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.net = net
        c = len(mean)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, c, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def build_model(
    arch: str,
    channels: int,
    num_classes: int,
    input_size: tuple[int, int],
    mean: Sequence[float],
    std: Sequence[float],
) -> Normalized:
    """A fresh ``arch`` (weights from torch's global RNG) wrapped with normalization."""
    net = MODELS.get(arch)(channels, num_classes, tuple(input_size))  # type: ignore[arg-type]
    return Normalized(net, mean, std)
