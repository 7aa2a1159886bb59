"""``example_npz``: a complete, minimal mebench victim format in a module of its own.

A multi-layer perceptron stored as NumPy arrays (``w0, b0, w1, b1, ...`` in one ``.npz`` file,
``y = W x + b`` per layer, ReLU between layers), the way a model trained in another framework
can be handed over without pickles. mebench reads it, applies ``victim.normalization`` (unless
``victim.normalizes: true``), probes it on a batch of the dataset's input shape and puts it behind
the same frozen, budgeted oracle as every other victim.

How it is found: ``pyproject.toml`` declares this module in the entry-point group
``mebench.victim_formats``; on the first lookup of a format name mebench imports it, and
``@register_format`` adds the class under its ``name``. In a config::

    victim: {format: example_npz, checkpoint_ref: path/to/victim.npz}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import torch
from torch import nn

from mebench.errors import VictimLoadError
from mebench.victims.registry import VictimFormat, register_format

__all__ = ["ExampleNpz", "write_npz"]


@register_format
class ExampleNpz(VictimFormat):
    """An MLP as NumPy arrays in an ``.npz`` file (``w0, b0, w1, b1, ...``)."""

    name = "example_npz"
    #: ``checkpoint_ref`` is a file: resolved from the config's folder, checked and hashed.
    reads_file = True
    # ``layouts`` stays {"nchw"}; ``whole_victim`` stays False (victim.outputs/normalizes apply).

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple[nn.Module, dict[str, Any]]:
        """The MLP as the file gives it, and what identifies the file (its SHA-256)."""
        from mebench.victims.formats import sha256_of

        try:
            with np.load(v.checkpoint_ref, allow_pickle=False) as arrays:
                layers = [(arrays[f"w{i}"], arrays[f"b{i}"]) for i in range(len(arrays.files) // 2)]
        except (OSError, ValueError, KeyError) as e:
            raise VictimLoadError(v.checkpoint_ref, f"is not an example_npz file ({type(e).__name__})") from None
        modules: list[nn.Module] = [nn.Flatten()]
        for i, (w, b) in enumerate(layers):
            linear = nn.Linear(w.shape[1], w.shape[0])
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(w))
                linear.bias.copy_(torch.from_numpy(b))
            modules += [linear] if i == len(layers) - 1 else [linear, nn.ReLU()]
        return nn.Sequential(*modules), {"checkpoint_sha256": sha256_of(v.checkpoint_ref)}

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        """The mebench test victim (an MLP) written as an ``.npz``: mebench's registry-driven contract
        tests check that it answers like the checkpoint."""
        from mebench.victims.formats import checkpoint_network

        return {"format": cls.name, "checkpoint_ref": str(write_npz(checkpoint_network(checkpoint), folder / "v.npz"))}


def write_npz(mlp: nn.Module, path: Path) -> Path:
    """Write the ``nn.Linear`` layers of ``mlp`` (in order) as an ``example_npz`` file."""
    linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    arrays = {}
    for i, m in enumerate(linears):
        arrays[f"w{i}"] = m.weight.detach().cpu().numpy()
        arrays[f"b{i}"] = m.bias.detach().cpu().numpy()
    np.savez(path, **arrays)
    return path
