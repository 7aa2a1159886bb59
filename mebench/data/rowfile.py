"""Fixed-shape arrays kept in a file, read a few rows at a time, so host memory stays flat in B.

A 1M-query store or seed pool may not sit in the process's memory, and a numpy memmap does not keep
memory flat, so :class:`RowFile` writes with ``os.pwrite`` and reads with ``os.pread``: nothing of
the file is ever mapped into the process (the measurements behind that choice are below). The
bytes read are the bytes written, so training from a :class:`RowFile` is bit-identical to training
from the same rows in memory. See docs/guide/scale.md.
"""
# A 1M-query MNIST store is 3.1 GB of float32 images and a 1M-image seed pool 0.8 GB of uint8;
# neither may sit in the process's memory (issue: a 1M cell's peak RSS at most 1.2x a 100k cell's).
# A numpy memmap alone does not keep memory flat: every page a mapping has touched counts in the
# process's resident set until the mapping is dropped, and Track A touches every row of D_B many
# times over. So :class:`RowFile`
#
# - writes with ``os.pwrite`` (nothing mapped while a store fills),
# - reads contiguous ranges with ``os.pread`` (a copy of just those rows), and
# - gathers scattered rows (a training batch) with one ``pread`` a row into one buffer: nothing of
#   the file is ever mapped into the process. A memmap gather is not flat: the kernel maps whole
#   page-cache folios on a fault (measured here: 200 random 128-row batches of a 0.9 GB file left
#   0.9 GB resident), and handing pages back after every batch still peaks at up to ~2 MB a row.
#   The reads cost ~0.5 ms a 128-row batch (~4 us a row) against ~10 ms a LeNet-5 step.
#
# The bytes read are the bytes written, so a model trained from a :class:`RowFile` is bit-identical
# to one trained from the same rows in memory (``contract_tests/test_memory_flat.py``).

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import torch

class RowFile:
    """``shape[0]`` rows of ``shape[1:]`` ``dtype`` values in a file (``path``), or in an anonymous
    temporary file the operating system deletes when the process ends, however it ends (``None``)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype | type, path: Optional[Path] = None) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.np_dtype = np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.np_dtype.itemsize
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self._file = open(self.path, "w+b")
        else:
            self._file = tempfile.TemporaryFile(prefix="mebench-rows-")
        self._file.truncate(self.shape[0] * self.row_bytes)  # sparse: no disk used until written
        self._fd = self._file.fileno()

    # torch-like surface, so a Pool can hold a RowFile where it holds a tensor
    @property
    def dtype(self) -> torch.dtype:
        return torch.from_numpy(np.empty(0, dtype=self.np_dtype)).dtype

    def dim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def write(self, start: int, values: np.ndarray) -> None:
        """Rows ``start .. start + len(values)`` (the values' shape past the first axis must match)."""
        values = np.ascontiguousarray(values, dtype=self.np_dtype)
        if tuple(values.shape[1:]) != self.shape[1:] or start < 0 or start + values.shape[0] > self.shape[0]:
            raise ValueError(f"rows {start}..{start + values.shape[0]} of shape {values.shape[1:]} do not fit "
                             f"a row file of shape {self.shape}")
        view, off = memoryview(values).cast("B"), start * self.row_bytes
        while len(view):
            done = os.pwrite(self._fd, view, off)
            view, off = view[done:], off + done

    def read(self, start: int, stop: int) -> torch.Tensor:
        """A copy of rows ``start .. stop`` as a CPU tensor."""
        n = max(0, stop - start)
        buf = bytearray(n * self.row_bytes)
        view, off = memoryview(buf), start * self.row_bytes
        while len(view):
            got = os.preadv(self._fd, [view], off)
            if got == 0:
                raise EOFError(f"row file ended at byte {off} of {(start + n) * self.row_bytes}")
            view, off = view[got:], off + got
        return torch.from_numpy(np.frombuffer(buf, dtype=self.np_dtype).reshape(n, *self.shape[1:]))

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """A copy of the rows at ``index`` (any order, repeats allowed) as a CPU tensor."""
        rows = index.to("cpu", torch.long).tolist()
        if rows and (min(rows) < 0 or max(rows) >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        rb = self.row_bytes
        buf = bytearray(len(rows) * rb)
        view = memoryview(buf)
        for j, r in enumerate(rows):  # I/O, not arithmetic: one positioned read a row
            if os.preadv(self._fd, [view[j * rb : (j + 1) * rb]], r * rb) != rb:
                raise EOFError(f"row {r} lies past the end of the row file")
        return torch.from_numpy(np.frombuffer(buf, dtype=self.np_dtype).reshape(len(rows), *self.shape[1:]))

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        if dim != 0:
            raise ValueError("a row file selects rows only (dim 0)")
        return self.take(index)

    def __getitem__(self, key: slice) -> torch.Tensor:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a row file is sliced by contiguous ranges only; use take() for scattered rows")
        start, stop, _ = key.indices(self.shape[0])
        return self.read(start, stop)

    def close(self) -> None:
        """Close the file (idempotent); an anonymous file is deleted with it."""
        if not self._file.closed:
            self._file.close()


class RowsPrefix:
    """The first ``n`` rows of an image file and of its answer file: D_B read lazily (Track A)."""

    def __init__(self, x: RowFile, y: RowFile, n: int) -> None:
        self.x, self.y, self.n = x, y, n
        self.shape = (n, *x.shape[1:])

    def __len__(self) -> int:
        return self.n

    def take(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x.take(index), self.y.take(index)
