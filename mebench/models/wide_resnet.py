"""WRN-22-2: the wide residual network MAZE's authors use as their clone (``--model_clone=wres22``).

Zagoruyko and Komodakis, "Wide Residual Networks", BMVC 2016, at depth 22 and widening factor 2,
as MAZE's reference code builds it (github.com/sanjaykariyappa/MAZE @ d202ace, our own code written
from it; the layers with ``file:line`` in that tree, and what is adapted, are below). About 1.1 M
parameters: too slow for the CPU cells of the grid. See docs/attacks/maze.md (WRN-22-2 and the CPU
variant).
"""
# Zagoruyko and Komodakis, "Wide Residual Networks", BMVC 2016, at depth 22 and widening factor 2,
# as MAZE's reference code builds it (github.com/sanjaykariyappa/MAZE @ d202ace, our own code
# written from it, ``file:line`` in that tree):
#
# - depth 22, widen factor 2, no dropout (``src/models/models.py:82-95``): three stages of
#   (22 − 4) / 6 = 3 pre-activation basic blocks with 32, 64 and 128 channels after a 3x3 stem of
#   16 channels; the second and third stages halve the resolution (``src/models/wresnet.py:92-112``);
# - a block normalizes and activates its input (BN-ReLU), then conv3x3-BN-ReLU-conv3x3; where the
#   width or stride changes, a 1x1 convolution of the *activated* input is the shortcut, otherwise
#   the raw input is (``wresnet.py:45-54``);
# - BN-ReLU, 8x8 average pooling and one linear layer at the end (``wresnet.py:114-139``);
# - convolutions drawn from N(0, 2 / (k·k·out_channels)), batch norms at weight 1 and bias 0, the
#   linear layer's bias 0 (``wresnet.py:119-127``);
# - 28x28 inputs (MNIST, FashionMNIST) are first resized to 32x32 by bilinear interpolation
#   (``align_corners=False``), with ``in_channels=1`` (``models.py:83-91``, ``wresnet.py:96-101``).
#
# Adapted: the final pooling is adaptive (global average), which equals the reference's 8x8 pooling
# on the 32x32 inputs it sees; any input size other than 32x32 is resized to 32x32, so the network
# sees what the reference's does for MNIST-sized images. About 1.1 M parameters: too slow for the
# CPU cells of the grid (see ``docs/attacks/maze.md`` for the CPU variant).

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mebench.models.registry import register_model

#: The reference's resolution: smaller inputs are resized to it (models.py:83-91).
WRN_INPUT_SIZE = (32, 32)


class PreActBlock(nn.Module):
    """BN-ReLU, conv3x3 (stride), BN-ReLU, conv3x3, plus the shortcut (wresnet.py:17-54)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.project = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.conv1(a))))
        # a width or stride change projects the activated input; otherwise the raw input is added
        return out + (x if self.project is None else self.project(a))


class WideResNet(nn.Module):
    """A CIFAR-style wide residual network of ``depth`` (6n + 4) and widening factor ``widen``."""

    def __init__(self, depth: int, widen: int, channels: int, num_classes: int,
                 input_size: tuple[int, int]) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"wide resnet depth must be 6n + 4, got {depth}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.resize = tuple(input_size) != WRN_INPUT_SIZE
        self.stem = nn.Conv2d(channels, widths[0], 3, padding=1, bias=False)
        blocks = []
        for stage, stride in zip(range(3), (1, 2, 2)):
            for i in range(n):
                blocks.append(PreActBlock(widths[stage] if i == 0 else widths[stage + 1], widths[stage + 1],
                                          stride if i == 0 else 1))
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(widths[3])
        self.fc = nn.Linear(widths[3], num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """The reference's initialization (wresnet.py:119-127); the linear weight keeps torch's."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0.0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1.0)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.resize:
            x = F.interpolate(x, size=WRN_INPUT_SIZE, mode="bilinear", align_corners=False)
        out = F.relu(self.bn(self.blocks(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))


@register_model("wrn22_2")
def wrn22_2(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    """WRN-22-2, MAZE's ``wres22`` clone (models.py:82-95)."""
    return WideResNet(22, 2, channels, num_classes, input_size)
