"""LeNet-5 (LeCun et al., 1998), a small CIFAR CNN and a two-layer perceptron for CPU-trainable models."""

from __future__ import annotations

from torch import nn

from mebench.models.registry import register_model


@register_model("lenet5")
def lenet5(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    """LeNet-5 with ReLU and max-pooling; 28x28 inputs are padded to 32x32 by the first conv."""
    pad = 2 if input_size[0] == 28 else 0
    h = (input_size[0] + 2 * pad - 4) // 2
    h = (h - 4) // 2
    return nn.Sequential(
        nn.Conv2d(channels, 6, 5, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * h * h, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes),
    )


@register_model("simple_cnn")
def simple_cnn(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    """Three conv blocks (32-64-128) with batch norm; ~75-80 % on CIFAR-10 in a few CPU epochs."""

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.MaxPool2d(2),
        ]

    return nn.Sequential(
        *block(channels, 32), *block(32, 64), *block(64, 128),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(128, num_classes),
    )


@register_model("mlp")
def mlp(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
    """A two-hidden-layer perceptron (256-128) on the flattened image: a cheap architecture unlike the
    convolutional victims, for negatives and cross-architecture substitutes on MNIST-sized data."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(channels * input_size[0] * input_size[1], 256), nn.ReLU(),
        nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, num_classes),
    )
