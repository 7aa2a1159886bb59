"""Attacker image pools for the ``surrogate`` and ``seed`` data modes (contract §3).

A pool is a uint8 tensor ``[N, C, H, W]`` kept on the CPU (1 byte per pixel, so
a 1M-image MNIST pool is 0.8 GB), or for a large augmented seed pool a ``RowFile``
on disk with the same bytes; ``get`` returns float ``[0, 1]`` images on a device. Pool-based attacks select indices and never re-query one.
See docs/guide/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from mebench.data.rowfile import RowFile


@dataclass(frozen=True)
class Pool:
    """A fixed set of candidate query images."""

    images: "torch.Tensor | RowFile"  # uint8 [N, C, H, W], CPU or on disk
    source: str
    #: The pool's own class labels (int64 [N]) when the attacker's pool comes labelled, as a
    #: surrogate dataset does (its classes, not the victim's); ``None`` for an augmented seed set.
    labels: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError(f"pool images must be uint8 [N, C, H, W], got {self.images.dtype} {tuple(self.images.shape)}")
        if self.labels is not None and tuple(self.labels.shape) != (self.images.shape[0],):
            raise ValueError(f"pool labels must be [N] for {self.images.shape[0]} images, got {tuple(self.labels.shape)}")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def get(self, index: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
        """Images at ``index`` as float32 in ``[0, 1]`` on ``device``."""
        x = self.images.index_select(0, index.to("cpu", torch.long))
        return x.to(device, non_blocking=True).float().div_(255.0)

    def iter_chunks(self, chunk: int, device: torch.device | str = "cpu"):
        """Yield ``(start, images)`` over the whole pool in chunks (for scoring a large pool)."""
        for s in range(0, len(self), chunk):
            yield s, self.images[s : s + chunk].to(device).float().div_(255.0)
