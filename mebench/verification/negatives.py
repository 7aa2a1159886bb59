"""Negative models for verification: models the owner knows were not derived from the victim.

Each is trained from a fresh seeded initialisation on a seeded random subset of images and their
**ground-truth** labels; this module never receives a victim, an oracle or an answer, so no
negative ever sees a victim answer (``contract_tests/test_verification.py`` checks it). Which
images to use is the caller's choice and matters: dataset inference asks whether a model learned
from the owner's *private* split, so its negatives must be trained on data disjoint from that split
(the public points); the other methods ask about the victim's function and accept either.
See docs/verification/index.md.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from mebench.training.loop import OptimizerSpec, train_steps


def train_negative(make_model: Callable[[], nn.Module], images: torch.Tensor, labels: torch.Tensor, seed: int,
                   steps: int = 500, batch_size: int = 128, fraction: float = 0.8, lr: float = 3e-3) -> nn.Module:
    """One negative: ``make_model()`` initialised from ``seed``, trained for ``steps`` Adam steps on a
    seeded ``fraction`` of ``(images, labels)`` (float pixels in [0, 1], ground-truth labels)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(images), generator=g)[:max(1, round(fraction * len(images)))]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make_model()
    return train_steps(model, images[keep], labels[keep].long(), loss_fn=nn.functional.cross_entropy, steps=steps,
                       batch_size=batch_size, optimizer=OptimizerSpec("adam", lr=lr, weight_decay=0.0), generator=g)


def train_negatives(make_model: Callable[[], nn.Module], images: torch.Tensor, labels: torch.Tensor, count: int,
                    seed: int = 0, **kwargs) -> list[nn.Module]:
    """``count`` negatives (``train_negative``), seeds ``seed``, ``seed + 1``, ...: one population of
    models the owner did not steal from itself. Rates need at least 100 (1 % FPR) or 1,000 (0.1 %)."""
    return [train_negative(make_model, images, labels, seed + i, **kwargs) for i in range(count)]
