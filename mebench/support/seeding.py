"""Seeding every RNG from the run seed (contract §10)."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global RNG and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one purpose (``"pool"``, ``"attack"``) of a run seed."""
    h = hashlib.sha256(f"{seed}:{tag}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, tag: str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``derive_seed(seed, tag)``."""
    return torch.Generator().manual_seed(derive_seed(seed, tag))
