"""CopycatCNN (Correia-Silva, Berriel, Badue, de Souza, Oliveira-Santos, "Copycat CNN: Stealing
Knowledge by Persuading Confession with Random Non-Labeled Data", IJCNN 2018): random
non-problem-domain images labelled with the victim's hard labels, and a copycat trained on them.

Reference code: the authors' PyTorch framework, github.com/jeiks/Stealing_DL_Models at 27e0346,
``Framework/copycat/train.py`` (the images of the non-problem-domain list labelled by the
oracle's top-1 class, ``Framework/copycat/label_data.py``). The defaults of ``CopycatParams``
are these values, one ``- field = default  (source)`` per line:

- batch_size = 32  (Framework/copycat/train.py:37)
- epochs = 10  (Framework/copycat/train.py:38)
- lr = 0.0001  (Framework/copycat/train.py:50)
- momentum = 0.9  (Framework/copycat/train.py:50)
- weight_decay = 0.0  (Framework/copycat/train.py:50: no weight decay)
- lr_step = None  (Framework/copycat/train.py:50: a constant learning rate)
- lr_gamma = 0.1  (Framework/copycat/train.py:50: unused, no schedule)

Only ``hard_top1`` (the attack's premise is labels, never probabilities) and only ``surrogate``
mode (the images come from outside the victim's problem domain). Track B is the copycat: at every
checkpoint a fresh substitute trained by the recipe above with cross-entropy on the first B
labels. Deviations: the batches are reshuffled every epoch (the reference's ``DataLoader`` keeps
the image list's order, train.py:47); the substitute is mebench's ``substitute.arch`` trained
from scratch (the paper fine-tunes an ImageNet-pretrained VGG-16, which no MNIST-sized victim
calls for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mebench.attacks.base import register_attack
from mebench.attacks.knockoff import RandomPoolWithRecipe


@dataclass(frozen=True)
class CopycatParams:
    """``attack.params`` of ``copycat``; the defaults are the reference procedure (module docstring)."""

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


__all__ = ["CopycatCNN", "CopycatParams"]
