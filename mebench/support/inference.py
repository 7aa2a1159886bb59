"""Batched inference over a large tensor (the test split, a pool): the one chunking loop."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

#: Images per forward pass when scoring a whole split.
CHUNK = 2048


@torch.no_grad()
def chunked(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, device: torch.device | str,
            batch_size: int = CHUNK) -> torch.Tensor:
    """``fn`` over ``x`` in batches on ``device``; uint8 images become floats in [0, 1] first."""
    out = []
    for i in range(0, int(x.shape[0]), batch_size):
        xb = x[i : i + batch_size].to(device)
        out.append(fn(xb.float().div_(255.0) if xb.dtype == torch.uint8 else xb))
    return torch.cat(out) if out else torch.empty(0, device=device)


@torch.no_grad()
def eval_logits(model: nn.Module, x: torch.Tensor, batch_size: int = CHUNK) -> torch.Tensor:
    """Logits of ``model`` on ``x`` in eval mode, on the model's device (its train/eval mode is restored)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return chunked(lambda xb: model(xb).float(), x, device, batch_size)
    finally:
        model.train(was_training)
