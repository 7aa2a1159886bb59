"""Datasets (contract §2, §3.2, §8): one registration holds everything about a dataset.

A :class:`DatasetProfile` is the single source of truth about a dataset: input
shape, class count, normalization, split sizes (so pool capacity is checked
before any data is read), the Track A rules a profile may override (batch size
128 and c = 0.2 unless stated), how to read it (``reader``), the files it needs
and whether torchvision can download it. A surrogate declares the victim
datasets it serves (``serves``), so a plugin adds one without editing the
victim's profile. ``register_dataset`` adds a profile; the built-in ones are in
``mebench.data.builtin``. See docs/extending/dataset.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from mebench.registry import Registry

if TYPE_CHECKING:  # annotations only: profiles are read by config checks that import no torch
    import torch

Split = tuple["torch.Tensor", "torch.Tensor"]
#: ``reader(root, train, download) -> (uint8 images [N, C, H, W], int64 labels [N])``.
Reader = Callable[[Path, bool, bool], Split]


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
    victim_dataset: bool = False
    serves: tuple[str, ...] = ()
    track_a_batch_size: int = 128
    steps_coeff_c: float = 0.2
    notes: str = ""
    #: Transferability (``mebench.probes.transferability.transfer``): L∞ ε, PGD steps and step size (MNIST-like defaults:
    #: 0.3, 40 steps of 0.01, as in the MNIST adversarial-robustness literature).
    transfer_eps: float = 0.3
    pgd_steps: int = 40
    pgd_alpha: float = 0.01
    #: The ε of the success-vs-ε curve (PGD's step size scales with ε from ``pgd_alpha`` at
    #: ``transfer_eps``) and the one a leaderboard shows: 0.3 sits at the ceiling on MNIST.
    transfer_eps_curve: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
    transfer_headline_eps: float = 0.2
    reader: Optional[Reader] = field(default=None, compare=False, repr=False)
    files: tuple[str, ...] = ()
    downloadable: bool = False
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.channels, self.input_size[0], self.input_size[1])

    @property
    def surrogates(self) -> tuple[str, ...]:
        """The registered datasets that serve this victim dataset as surrogates, in registration order."""
        return tuple(p.name for p in PROFILES.values() if self.name in p.serves)

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


def register_dataset(profile: DatasetProfile) -> DatasetProfile:
    """Add a dataset (victim or surrogate) with its reader; duplicate names raise.

    A surrogate's shape must match every victim dataset it ``serves`` (§3.2).
    """
    if profile.reader is None:
        raise ValueError(f"dataset '{profile.name}' needs a reader(root, train, download) to be registered")
    for victim in profile.serves:
        if victim in PROFILES and PROFILES.get(victim).input_shape != profile.input_shape:
            raise ValueError(f"dataset '{profile.name}' {profile.input_shape} cannot serve '{victim}' "
                             f"{PROFILES.get(victim).input_shape}: surrogates have the victim's shape (§3.2)")
    PROFILES.register(profile.name)(profile)
    return profile


def get_profile(name: str) -> DatasetProfile:
    return PROFILES.get(name)
