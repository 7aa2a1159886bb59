"""The victim as the oracle sees it: frozen, in ``eval()``, answering under ``no_grad`` (§4.1).

Eval mode is *enforced* on every call, not trusted: if anything switched the
model (or one of its submodules) back to training mode, the call puts it back
in eval mode before the forward pass, so dropout is off and batch-norm running
statistics never change. See docs/contract.md.
"""

from __future__ import annotations

import torch
from torch import nn



class FrozenVictim:
    """Pixel-space ``[0, 1]`` in, logits or softmax probabilities out (answer transforms: ``mebench.oracle``)."""

    def __init__(self, model: nn.Module, device: torch.device | str) -> None:
        self.model = model.to(device)
        self.model.eval()
        self.model.requires_grad_(False)
        self.device = torch.device(device)
        self._modules = list(self.model.modules())

    def _ensure_eval(self) -> None:
        if any(m.training for m in self._modules):
            self.model.eval()

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        self._ensure_eval()
        return self.model(x.to(self.device, torch.float32, non_blocking=True))

    @torch.no_grad()
    def probs(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(x), dim=1)
