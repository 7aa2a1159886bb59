"""Per-epoch snapshots of a victim's weights, written beside its checkpoint.

A recipe with ``snapshots: true`` keeps the victim's weights after each epoch, so Adaptive
Misinformation's ``oe_labels: joint`` option (``mebench.defenses.misinformation``) can label its OE
batches with the victim's state at the matching point of its training, as the reference does (see
below). ``PATH.snapshots.pt`` holds plain tensors, lists and strings only (``weights_only=True``),
one state dict per completed epoch. See docs/guide/victims.md.
"""
# Adaptive Misinformation's reference trains the victim and the misinformation model in one loop and
# labels each outlier-exposure batch with the victim's *current* top class
# (sanjaykariyappa/adaptive_misinformation @ c2a3e1b, ``admis/utils/model.py:117-133``). A recipe
# with ``snapshots: true`` keeps the victim's weights after each epoch, so the defense's
# ``oe_labels: joint`` option (``mebench.defenses.misinformation``) can label its OE batches with the
# victim's state at the matching point of its training instead of the final, frozen victim's.
#
# The file ``PATH.snapshots.pt`` holds plain tensors, lists and strings only (read with
# ``torch.load(weights_only=True)``): ``{"format", "arch", "epochs", "steps", "state_dicts"}``, one
# state dict per completed epoch, the last one equal to the checkpoint's weights.

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

SNAPSHOT_FORMAT = "mebench-victim-snapshots-v1"


def snapshot_path(checkpoint: str | Path) -> Path:
    """``victims/NAME.pt`` -> ``victims/NAME.snapshots.pt``."""
    p = Path(checkpoint)
    return p.with_name(p.stem + ".snapshots.pt")


def epoch_end_steps(n: int, batch_size: int, steps: int) -> list[int]:
    """The 1-based step after which each epoch ends: ceil(k · n / batch_size), k = 1, 2, ...; a last,
    partial epoch ends at ``steps``."""
    ends = [math.ceil(k * n / batch_size) for k in range(1, math.ceil(steps * batch_size / n) + 1)]
    return sorted({min(e, steps) for e in ends})


class EpochSnapshots:
    """An ``on_step`` callback keeping a CPU copy of ``net``'s weights at every epoch end."""

    def __init__(self, net: torch.nn.Module, n: int, batch_size: int, steps: int) -> None:
        self.net, self.ends = net, epoch_end_steps(n, batch_size, steps)
        self.taken: list[tuple[int, dict[str, torch.Tensor]]] = []

    def __call__(self, step: int) -> None:
        if step in self.ends:
            self.taken.append((step, {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}))

    def save(self, path: Path, arch: str) -> dict[str, Any]:
        """Write the snapshots atomically; returns what the victim's metadata records about them."""
        from mebench.run.artifacts import atomic_save_torch
        from mebench.victims.load import sha256_file

        payload = {"format": SNAPSHOT_FORMAT, "arch": arch, "epochs": list(range(1, len(self.taken) + 1)),
                   "steps": [s for s, _ in self.taken], "state_dicts": [sd for _, sd in self.taken]}
        atomic_save_torch(payload, path)
        return {"path": str(path), "count": len(self.taken), "steps": payload["steps"],
                "sha256": sha256_file(path)}


def load_snapshots(path: Path) -> dict[str, Any]:
    """Read a snapshot file (weights only); a missing or foreign file raises ``ValueError`` naming it."""
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != SNAPSHOT_FORMAT or not payload.get("state_dicts"):
        raise ValueError(f"{path} is not a mebench victim snapshot file ({SNAPSHOT_FORMAT})")
    return payload
