"""Benign traffic for scoring detectors at a low false-positive rate.

A detector's false-positive rate at 0.1 % needs thousands of benign clients: with n benign streams
the smallest rate that can be told apart from zero is 1/n. :func:`traffic` draws ``streams``
clients, each from its own seed, from **test splits only**, so no benign stream holds an attacker's
query (:func:`overlap` checks it). See docs/defenses/detection_benchmark.md.
"""
# A detector's false-positive rate at 0.1 % needs thousands of benign clients: with n benign streams
# the smallest rate that can be told apart from zero is 1/n. :func:`traffic` draws ``streams``
# clients, each from its own seed (``derive_seed(seed, "benign_traffic:<k>")``), so stream k is the
# same whatever the number of streams drawn around it:
#
# - a length, uniform in [``min_length``, ``max_length``];
# - a kind of user: ``in`` (the victim's own test split only), ``ood`` (one other dataset's test
#   split only, picked uniformly among ``sources[1:]``) or ``mixed`` (each query from the victim's
#   test split with a probability drawn uniformly in [0.2, 0.8], else from one other dataset's),
#   with shares ``in_share``, ``ood_share`` and the rest;
# - which images, in which order: a seeded permutation of each source's split (no image repeats
#   within a stream until the whole split has been sent).
#
# Benign clients send **test splits only**: the victim's and other datasets' (``sources``; on a data
# root holding more datasets of the victim's shape, e.g. KMNIST, each is a source). An attack's
# queries come from its pool (a training split or images it made), and Track B's contract keeps
# attacks off the test split, so no benign stream holds an attacker's query; :func:`overlap`
# checks this on the images themselves (byte-equal rows), and the detection benchmark records it.

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from mebench.errors import ConfigError
from mebench.support.seeding import derive_seed

USER_KINDS = ("in", "ood", "mixed")
MIXED_SHARE = (0.2, 0.8)
"""A mixed user's share of in-distribution queries is drawn uniformly in this range."""


@dataclass(frozen=True)
class TrafficParams:
    """How many benign clients, how long, and what kind (see the module docstring)."""

    streams: int = 2000
    min_length: int = 250
    max_length: int = 1000
    in_share: float = 0.5
    ood_share: float = 0.25

    def check(self, n_sources: int) -> None:
        """One error naming key, value and rule for a value out of range (before any work)."""
        key = "benign_traffic."
        if self.streams < 1:
            raise ConfigError(key + "streams", self.streams, "must be a positive number of streams")
        if not 1 <= self.min_length <= self.max_length:
            raise ConfigError(key + "min_length", self.min_length, f"must be in [1, max_length = {self.max_length}]")
        for name in ("in_share", "ood_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(key + name, getattr(self, name), "must be a share in [0, 1]")
        if self.in_share + self.ood_share > 1.0 + 1e-12:
            raise ConfigError(key + "ood_share", self.ood_share,
                              f"in_share + ood_share must be at most 1 (in_share = {self.in_share})")
        if n_sources < 2 and self.in_share < 1.0:
            raise ConfigError(key + "in_share", self.in_share,
                              "must be 1 when no other dataset's test split is available (no out-of-distribution user)")


@dataclass(frozen=True)
class BenignStream:
    """One client: which source (index into ``sources``) and which image of it, query by query."""

    index: int
    user: str
    source: np.ndarray   # int, per query
    image: np.ndarray    # int, per query: the row of that source's split

    def __len__(self) -> int:
        return int(self.source.shape[0])

    def images(self, splits: Sequence[torch.Tensor]) -> torch.Tensor:
        """The stream's images, gathered from the sources' splits (in the order of ``sources``)."""
        out = splits[0].new_empty((len(self), *splits[0].shape[1:]))
        for s in np.unique(self.source):
            at = np.nonzero(self.source == s)[0]
            out[torch.from_numpy(at)] = splits[int(s)][torch.from_numpy(self.image[at])]
        return out


def stream(k: int, sizes: Sequence[int], params: TrafficParams, seed: int) -> BenignStream:
    """Benign stream ``k`` over sources of ``sizes`` images (source 0: the victim's test split)."""
    rng = np.random.default_rng(derive_seed(seed, f"benign_traffic:{k}"))
    length = int(rng.integers(params.min_length, params.max_length + 1))
    u, other = rng.random(), 1 + int(rng.integers(0, max(1, len(sizes) - 1)))
    if u < params.in_share or len(sizes) < 2:
        user, source = "in", np.zeros(length, dtype=np.int64)
    elif u < params.in_share + params.ood_share:
        user, source = "ood", np.full(length, other, dtype=np.int64)
    else:
        p_in = rng.uniform(*MIXED_SHARE)
        user, source = "mixed", np.where(rng.random(length) < p_in, 0, other).astype(np.int64)
    image = np.empty(length, dtype=np.int64)
    for s in np.unique(source):
        at = np.nonzero(source == s)[0]
        n = sizes[int(s)]
        order = np.concatenate([rng.permutation(n) for _ in range(-(-at.size // n))])
        image[at] = order[:at.size]
    return BenignStream(k, user, source, image)


def traffic(sizes: Sequence[int], params: TrafficParams, seed: int) -> Iterator[BenignStream]:
    """``params.streams`` benign clients over sources of ``sizes`` images, each from its own seed."""
    params.check(len(sizes))
    for k in range(params.streams):
        yield stream(k, sizes, params, seed)


def row_hashes(images: torch.Tensor) -> set[bytes]:
    """A digest per image of the bytes it would be answered on (uint8, or float in [0, 1] as uint8)."""
    return set(_ordered_hashes(images))


def overlap(benign: torch.Tensor, attack_queries: torch.Tensor) -> int:
    """How many of ``benign``'s images equal an attacker's query, pixel for pixel (0 when disjoint)."""
    seen = row_hashes(attack_queries)
    return sum(h in seen for h in _ordered_hashes(benign))


def _ordered_hashes(images: torch.Tensor) -> list[bytes]:
    x = images if images.dtype == torch.uint8 else (images.clamp(0, 1) * 255).round().to(torch.uint8)
    flat = x.reshape(x.shape[0], -1).contiguous().numpy()
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in flat]
