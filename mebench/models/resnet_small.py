"""ResNet-8: a small residual network for 28x28 and 32x32 inputs that trains on a CPU in minutes.

The CIFAR ResNet layout of He et al. (CVPR 2016, section 4.2) with n = 1: a 3x3
stem with 16 channels, three stages of one basic block each (16, 32, 64
channels; the second and third halve the resolution), global average pooling
and one linear layer. It serves as a victim whose architecture differs from
the LeNet-5 substitute (cross-architecture cells). See docs/guide/victims.md.
"""

from __future__ import annotations

import torch
from torch import nn

from mebench.models.registry import register_model


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


@register_model("resnet8")
def resnet8(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    """CIFAR-style ResNet-8 (16-32-64 channels, one block per stage)."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes),
    )
