"""Negative models for verification: models the owner knows were not derived from the victim.

Each is trained from a fresh seeded initialisation on a seeded random subset of images and their
**ground-truth** labels; this module never receives a victim, an oracle or an answer, so no
negative ever sees a victim answer (``contract_tests/test_verification.py`` checks it). Which
images to use is the caller's choice and matters: dataset inference asks whether a model learned
from the owner's *private* split, so its negatives must be trained on data disjoint from that split
and from the public points it is scored on. ``split_public`` halves the test split for that
(``population`` trains on the second half). See docs/verification/index.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from mebench.support import cachedir, fitcache
from mebench.support.seeding import derive_seed
from mebench.training.loop import OptimizerSpec, train_steps

#: The cache kind of a trained negative (``mebench.support.cachedir``).
KIND = "negative"
#: Bumped when the training below changes, so old cache entries are not read.
RECIPE_VERSION = 1


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


def split_public(images: torch.Tensor, labels: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor],
                                                                        tuple[torch.Tensor, torch.Tensor]]:
    """The test split in two halves: the owner's public points (first half) and the images the negative
    population learns from (second half), so no negative has seen a point it is scored on."""
    half = len(images) // 2
    return (images[:half], labels[:half]), (images[half:], labels[half:])


def fingerprint(*tensors: torch.Tensor) -> str:
    """A digest of tensors (shape, dtype and bytes): what a cache entry was computed from."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(repr((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class Population:
    """How the owner's negatives are made: ``count`` models, architectures in turn from ``archs``, each
    from its own seed (derived from ``seed``), ``steps`` Adam steps on 80 % of the negatives' images."""

    count: int = 100
    archs: tuple[str, ...] = ("lenet5",)
    steps: int = 500
    seed: int = 0

    def member(self, i: int) -> tuple[str, int]:
        """The architecture and initialisation seed of negative ``i``."""
        return self.archs[i % len(self.archs)], derive_seed(self.seed, f"negative/{i}") % (2**31)


def population(pop: Population, make_model: Callable[[str], nn.Module], images: torch.Tensor,
               labels: torch.Tensor) -> tuple[list[nn.Module], list[Path]]:
    """The ``pop.count`` negatives trained on ``(images, labels)`` (float pixels, ground truth) and the
    path of each one's cache entry (its name is the key's digest). Each is read from the machine-wide
    cache when there, else trained once and stored (``fitcache.load_or_fit``): a set of runs shares one
    population."""
    data = fingerprint(images, labels)
    models, paths = [], []
    for i in range(pop.count):
        arch, seed = pop.member(i)
        key = {"recipe": RECIPE_VERSION, "arch": arch, "seed": seed, "steps": pop.steps, "data": data,
               "torch": torch.__version__, "threads": torch.get_num_threads()}
        path = cachedir.entry_path(KIND, key, ".pt")
        model, _ = fitcache.load_or_fit(path, key, lambda a=arch: make_model(a),
                                        lambda a=arch, s=seed: train_negative(lambda: make_model(a), images, labels, s,
                                                                              steps=pop.steps))
        models.append(model.eval())
        paths.append(path)
    return models, paths

