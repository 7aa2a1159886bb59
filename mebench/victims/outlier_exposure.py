"""Outlier Exposure for victim recipes (Hendrycks, Mazeika, Dietterich, ICLR 2019).

A recipe with ``outlier_source`` set trains its victim on in-distribution batches with cross-entropy
*plus* ``oe_lambda`` times a uniform-target loss on an equally large batch of outliers (from
``mebench.defenses.outliers``), the victim Adaptive Misinformation's reference defends (citations
below). See docs/guide/victims.md and docs/defenses/adaptive_misinformation.md.
"""
# A recipe with ``outlier_source`` set trains its victim on in-distribution batches with
# cross-entropy *plus* ``oe_lambda`` times a uniform-target loss on an equally large batch of
# outliers, so the victim learns low maximum softmax probabilities out of distribution. This is the
# victim Adaptive Misinformation's reference defends: sanjaykariyappa/adaptive_misinformation @
# c2a3e1b, ``admis/utils/model.py:121`` (``loss_OE = CXE_unif(outputs_all[batch:])``), ``:146``
# (``loss = loss_clean + oe_lamb * loss_OE``) and ``README.md:18`` (``--oe_lamb 1 -doe KMNIST``).
# Its maximum softmax probability is then a better out-of-distribution score for the defense's
# threshold τ (docs/defenses/adaptive_misinformation.md, "Deviations from the reference").
#
# The outlier set comes from ``mebench.defenses.outliers`` (a synthetic source, or a registered
# dataset that is not the victim's own); like the reference's OE loader, outlier batches are taken
# in order and restart when the set is exhausted (``admis/utils/model.py:111-115``).

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from mebench.defenses.outliers import NO_OUTLIERS, OUTLIER_SEED, SYNTHETIC_SOURCES
from mebench.errors import DivergenceError
from mebench.training.loop import OptimizerSpec, batch_indices, make_optimizer


def uniform_target_loss(logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy from the uniform distribution to softmax(logits).

    The reference's ``CXE_unif`` (``admis/utils/model.py:31-34``): -(mean_k z_k - logsumexp z),
    which equals -mean_k log softmax(z)_k; smallest when every class gets 1/K."""
    return -torch.log_softmax(logits, dim=1).mean(dim=1).mean()


def train_steps_oe(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, x_oe: torch.Tensor, *,
                   steps: int, batch_size: int, optimizer: OptimizerSpec, generator: torch.Generator,
                   oe_lambda: float, on_step: Optional[Callable[[int], None]] = None) -> torch.nn.Module:
    """``train_steps`` (cosine schedule, back-to-back permutations) with one OE batch per step.

    ``x`` is float in [0, 1], ``x_oe`` uint8, both on the model's device. One forward pass over
    the concatenated batch, as the reference does (``admis/utils/model.py:117-121``)."""
    opt = make_optimizer(model.parameters(), optimizer)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
    oe_next = torch.arange(batch_size, device=x.device)
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    model.train()
    for step, idx in enumerate(batch_indices(int(x.shape[0]), steps, batch_size, generator), 1):
        idx = idx.to(x.device)
        xo = x_oe.index_select(0, oe_next % x_oe.shape[0]).float().div_(255.0)
        oe_next = oe_next + batch_size
        logits = model(torch.cat([x.index_select(0, idx), xo]))
        b = idx.numel()
        loss = F.cross_entropy(logits[:b], y.index_select(0, idx)) + oe_lambda * uniform_target_loss(logits[b:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        finite &= torch.isfinite(loss.detach())
        if on_step is not None:
            on_step(step)
    if not bool(finite):
        raise DivergenceError("the outlier-exposure victim's loss became NaN or infinite")
    return model.eval()


def oe_record(source: str, oe_lambda: float, x_oe: Optional[torch.Tensor]) -> Optional[dict[str, Any]]:
    """What the victim's metadata records about its outlier set (``None`` for a plain victim)."""
    if source == NO_OUTLIERS:
        return None
    record: dict[str, Any] = {"source": source, "lambda": oe_lambda, "loss": "uniform_target",
                              "kind": "synthetic" if source in SYNTHETIC_SOURCES else "dataset",
                              "size": None if x_oe is None else int(x_oe.shape[0])}
    if source in SYNTHETIC_SOURCES:
        record["seed"] = OUTLIER_SEED
    return record


def steps_for(epochs: float, n: int, batch_size: int) -> int:
    """The recipe's number of steps: ceil(epochs · n / batch_size), as for a plain victim."""
    return math.ceil(epochs * n / batch_size)
