"""The query store: every queried image and its oracle output, in query order (§7, §11.2).

D_B is ``prefix(B)``. With caching enabled the store is a pair of row files
(``mebench.data.rowfile``) in a run-scoped temporary folder (``<seed dir>/.query_cache``),
so host memory does not grow with B: ``rows(B)`` hands Track A a lazy D_B it gathers
batch by batch. Otherwise it is preallocated host arrays.
``QueryStore.cleanup`` deletes the folder; the engine calls it in a ``finally``
block, so the cache goes away on success, on error and on Ctrl-C. See docs/guide/scale.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from mebench.data.rowfile import RowFile, RowsPrefix


#: D_B larger than this is not copied into memory for Track A (an on-disk store only): 256 MiB
#: is about 85k MNIST or 21k CIFAR-10 queries, so 100k and 1M cells both read from disk.
STREAM_BYTES = 256 << 20


class QueryStore:
    """Append-only store of ``(x, y)`` with capacity ``max_budget``."""

    def __init__(self, capacity: int, x_shape: tuple[int, ...], output_mode: str, num_classes: int,
                 directory: Optional[Path] = None) -> None:
        self.capacity = capacity
        self.output_mode = output_mode
        self.directory = Path(directory) if directory is not None else None
        self._n = 0
        y_shape = (capacity, num_classes) if output_mode == "soft_prob" else (capacity,)
        y_dtype = np.float32 if output_mode == "soft_prob" else np.int64
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=False)
            try:
                self._x = RowFile((capacity, *x_shape), np.float32, self.directory / "x.f32")
                self._y = RowFile(y_shape, y_dtype, self.directory / "y.bin")
            except BaseException:  # also Ctrl-C between mkdir and the memmaps
                shutil.rmtree(self.directory, ignore_errors=True)
                raise
        else:
            self._x = np.empty((capacity, *x_shape), dtype=np.float32)
            self._y = np.empty(y_shape, dtype=y_dtype)

    @property
    def on_disk(self) -> bool:
        return self.directory is not None

    def __len__(self) -> int:
        return self._n

    def append(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Store a batch right after the oracle answered it (x float [0, 1], y probs or labels)."""
        k = int(x.shape[0])
        if self._n + k > self.capacity:
            raise ValueError(f"query store is full ({self.capacity}); cannot add {k}")
        xs, ys = x.detach().to("cpu", torch.float32).numpy(), y.detach().cpu().numpy()
        if self.on_disk:
            self._x.write(self._n, xs)
            self._y.write(self._n, ys)
        else:
            self._x[self._n : self._n + k] = xs
            self._y[self._n : self._n + k] = ys
        self._n += k

    def prefix(self, n: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """D_n: copies of the first ``n`` images and outputs, as tensors on ``device``."""
        x, y = self.rows_between(0, n)
        return x.to(device), y.to(device)

    def rows_between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of records ``start .. stop`` on the CPU (a chunk of the log, for audits)."""
        if stop > self._n:
            raise ValueError(f"only {self._n} queries stored, asked for {stop}")
        if self.on_disk:
            return self._x.read(start, stop), self._y.read(start, stop)
        return torch.from_numpy(np.array(self._x[start:stop])), torch.from_numpy(np.array(self._y[start:stop]))

    def nbytes(self, n: int) -> int:
        """Bytes of D_n (images and outputs)."""
        if self.on_disk:
            return n * (self._x.row_bytes + self._y.row_bytes)
        return n * (self._x[0:1].nbytes + self._y[0:1].nbytes)

    def for_training(self, n: int, device: torch.device | str = "cpu"
                     ) -> "tuple[torch.Tensor, torch.Tensor] | tuple[RowsPrefix, None]":
        """D_n for a training loop: copied into memory up to ``STREAM_BYTES``, else left on disk
        (``rows(n), None``) and read a batch at a time. Same bytes either way, same model."""
        if self.on_disk and self.nbytes(n) > STREAM_BYTES:
            return self.rows(n), None
        return self.prefix(n, device)

    def rows(self, n: int) -> RowsPrefix:
        """D_n left on disk, read a batch at a time (an on-disk store only)."""
        if not self.on_disk:
            raise ValueError("rows() reads an on-disk store; an in-memory store hands out prefix()")
        if n > self._n:
            raise ValueError(f"only {self._n} queries stored, asked for {n}")
        return RowsPrefix(self._x, self._y, n)

    def cleanup(self) -> None:
        """Drop the memmaps and delete the cache folder (idempotent)."""
        for rows in (self._x, self._y):
            if isinstance(rows, RowFile):
                rows.close()
        self._x = self._y = None  # type: ignore[assignment]
        if self.directory is not None and self.directory.exists():
            shutil.rmtree(self.directory, ignore_errors=True)
