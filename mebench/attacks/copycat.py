"""CopycatCNN (Correia-Silva et al., IJCNN 2018): non-problem-domain images labelled with the
victim's hard labels, and a copycat trained on them.

Reference code (jeiks/Stealing_DL_Models at 27e0346), defaults with their ``file:line`` and
deviations: ``docs/attacks/copycat.md``; a contract test checks ``CopycatParams``' defaults against
that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mebench.attacks.base import register_attack
from mebench.attacks.knockoff import RandomPoolWithRecipe


@dataclass(frozen=True)
class CopycatParams:
    """``attack.params`` of ``copycat``; the defaults are the reference procedure (cited in docs/attacks/copycat.md)."""

    batch_size: int = 32
    epochs: int = 10
    lr: float = 1e-4
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_step: Optional[int] = None
    lr_gamma: float = 0.1


@register_attack
class CopycatCNN(RandomPoolWithRecipe):
    """CopycatCNN: non-problem-domain images, hard labels, the copycat's training."""

    name = "copycat"
    paper = ("Correia-Silva et al., Copycat CNN: Stealing Knowledge by Persuading Confession with Random "
             "Non-Labeled Data, IJCNN 2018")
    data_modes = frozenset({"surrogate"})
    output_modes = frozenset({"hard_top1"})
    output_mode_reason = "CopycatCNN labels its images with the victim's top-1 class only"
    Params = CopycatParams
    smoke_params = {"epochs": 1, "batch_size": 32}


__all__ = ["CopycatCNN", "CopycatParams"]
