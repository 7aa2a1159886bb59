"""Dataset profiles (contract §2, §3.2, §8).

A profile is the single source of truth about a victim dataset: input shape,
class count, normalization, which surrogates fit it, split sizes (so pool
capacity is checked before any data is read) and the Track A rules that a
profile may override (batch size 128 and c = 0.2 unless stated here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mebench.registry import Registry


@dataclass(frozen=True)
class DatasetProfile:
    """Shape, classes, normalization and Track A rules of one dataset."""

    name: str
    channels: int
    input_size: tuple[int, int]
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_size: int
    test_size: int
    surrogates: tuple[str, ...] = ()
    victim_dataset: bool = False
    track_a_batch_size: int = 128
    steps_coeff_c: float = 0.2
    notes: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.channels, self.input_size[0], self.input_size[1])

    def as_metadata(self) -> dict[str, object]:
        return {
            "name": self.name,
            "input_size": list(self.input_size),
            "channels": self.channels,
            "num_classes": self.num_classes,
            "normalization": {"mean": list(self.mean), "std": list(self.std)},
            "track_a_batch_size": self.track_a_batch_size,
            "steps_coeff_c": self.steps_coeff_c,
        }


PROFILES: Registry[DatasetProfile] = Registry("dataset", "mebench.datasets")


def register_profile(profile: DatasetProfile) -> DatasetProfile:
    """Add a profile (victim or surrogate dataset); duplicate names raise."""
    PROFILES.register(profile.name)(profile)
    return profile


def get_profile(name: str) -> DatasetProfile:
    return PROFILES.get(name)


_MNIST_NORM = ((0.1307,), (0.3081,))
#: Mean and std of the FashionMNIST train split's pixels in [0, 1].
_FASHIONMNIST_NORM = ((0.2860,), (0.3530,))
_CIFAR_NORM = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
_IMAGENET_NORM = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

MNIST = register_profile(DatasetProfile(
    "MNIST", 1, (28, 28), 10, *_MNIST_NORM, train_size=60000, test_size=10000,
    surrogates=("FashionMNIST", "EMNIST", "KMNIST"), victim_dataset=True,
))
CIFAR10 = register_profile(DatasetProfile(
    "CIFAR10", 3, (32, 32), 10, *_CIFAR_NORM, train_size=50000, test_size=10000,
    surrogates=("SVHN", "GTSRB"), victim_dataset=True,
))
SEWERML = register_profile(DatasetProfile(
    "SewerML", 3, (224, 224), 2, *_IMAGENET_NORM, train_size=0, test_size=0,
    surrogates=(), victim_dataset=True, track_a_batch_size=128,
    notes="Read from a local folder (see mebench.data.datasets); sizes come from the files.",
))
# FashionMNIST is a victim dataset (with its own normalization) and MNIST's surrogate; MNIST is
# its surrogate in turn (the same 28x28x1 shape, §3.2).
FASHIONMNIST = register_profile(DatasetProfile(
    "FashionMNIST", 1, (28, 28), 10, *_FASHIONMNIST_NORM, train_size=60000, test_size=10000,
    surrogates=("MNIST", "KMNIST", "EMNIST"), victim_dataset=True,
))
# Surrogate-only datasets: the shape must match the victim they serve (§3.2).
EMNIST = register_profile(DatasetProfile(
    "EMNIST", 1, (28, 28), 47, *_MNIST_NORM, train_size=112800, test_size=18800,
    notes="split 'balanced'; images are transposed on load to MNIST orientation"))
KMNIST = register_profile(DatasetProfile(
    "KMNIST", 1, (28, 28), 10, *_MNIST_NORM, train_size=60000, test_size=10000))
SVHN = register_profile(DatasetProfile(
    "SVHN", 3, (32, 32), 10, *_CIFAR_NORM, train_size=73257, test_size=26032))
GTSRB = register_profile(DatasetProfile(
    "GTSRB", 3, (32, 32), 43, *_CIFAR_NORM, train_size=26640, test_size=12630,
    notes="resized to 32x32 on load"))
