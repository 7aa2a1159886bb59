"""SwiftThief's contrastive phase (Lee et al., IJCAI 2024): the substitute's feature extractor trained
with SimSiam heads on self-supervised, soft-supervised and representation-sharpness losses.

Written from the reference JEONGHYUN-LEE/MS-SwiftThief at a766aab (``file:line`` below are in that
tree). Nothing here sees the victim: the phase reads the answers already stored for queried images.
See docs/attacks/swiftthief.md for the values and the deviations.
"""
# One phase (``contrastive_phase``) trains the substitute's feature extractor together with SimSiam
# heads on three losses (contrastive_learning/main_sup_soft.py:165-213):
#
# - **self-supervised**: SimSiam's symmetric negative cosine between two augmented views of
#   *unqueried* pool images (criterion.py:5-28);
# - **soft-supervised**: for queried images, every pair of views is pulled together in proportion to
#   the cosine of the victim's answers, weighted by both answers' confidence (1 - normalised entropy)
#   (criterion.py:52-82);
# - **representation sharpness**: SimSiam between an FGSM-perturbed view and the other view, each
#   image weighted by a class-balanced cost of its victim label (criterion.py:85-139), times 0.01.

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mebench.errors import DivergenceError


class FeatureTap:
    """The input of a model's last ``nn.Linear`` (its penultimate features): SwiftThief's backbone is
    the substitute without its classifier (model_factory.py:67-69). The hook that reads it is
    registered for one call only, so the model (and any copy of it) carries no hook otherwise."""

    def __init__(self, model: nn.Module) -> None:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError("SwiftThief needs a substitute whose classifier is a final nn.Linear")
        self.model, self.head, self.dim = model, linears[-1], linears[-1].in_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out: list[torch.Tensor] = []
        handle = self.head.register_forward_pre_hook(lambda _m, inputs: out.append(inputs[0]))
        try:
            self.model(x)
        finally:
            handle.remove()
        return out[0]


class SimSiamHeads(nn.Module):
    """Projector (2 layers, last BN without affine) and predictor (bottleneck of dim/4), as
    model_factory.py:5-56 (``num_layers=2``: layer1 then layer3) and :71-79."""

    def __init__(self, in_dim: int, dim: int) -> None:
        super().__init__()
        self.projector = nn.Sequential(nn.Linear(in_dim, dim), nn.BatchNorm1d(dim), nn.ReLU(),
                                       nn.Linear(dim, dim), nn.BatchNorm1d(dim, affine=False))
        hidden = max(1, dim // 4)
        self.predictor = nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                       nn.Linear(hidden, dim))


def encode(tap: FeatureTap, heads: SimSiamHeads, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, p)`` of one view batch (each view is encoded on its own, so BN sees one view at a time)."""
    z = heads.projector(tap(x))
    return z, heads.predictor(z)


def neg_cosine(p: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """``-cos(p, stopgrad(z))`` averaged over the batch (optionally weighted per row)."""
    c = F.cosine_similarity(p, z.detach(), dim=1)
    return -(c if weight is None else c * weight).mean()


def simsiam_loss(v1: tuple[torch.Tensor, torch.Tensor], v2: tuple[torch.Tensor, torch.Tensor],
                 weight: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric SimSiam loss of two views ``(z, p)`` (criterion.py:19-28, 125-139 with ``weight``)."""
    return 0.5 * neg_cosine(v1[1], v2[0], weight) + 0.5 * neg_cosine(v2[1], v1[0], weight)


def soft_supervised_loss(p: torch.Tensor, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """criterion.py:52-82: mean over the non-zero entries of ``-<p_i, z_j> w_ij`` (i != j), with
    ``w_ij = (1 - H_i/log K)(1 - H_j/log K) cos(t_i, t_j)``; ``0 log 0 = 0`` in the entropy."""
    k = targets.shape[1]
    dot = -F.normalize(p, dim=1) @ F.normalize(z.detach(), dim=1).T
    conf = 1 - (-torch.xlogy(targets, targets).sum(dim=1)) / math.log(k)
    agree = F.normalize(targets, dim=1) @ F.normalize(targets, dim=1).T
    w = torch.outer(conf, conf) * agree * (1 - torch.eye(len(targets), device=targets.device))
    sel = dot * w
    nonzero = sel != 0
    return sel[nonzero].mean() if bool(nonzero.any()) else sel.sum() * 0


def class_balanced_costs(counts: torch.Tensor, beta: float) -> torch.Tensor:
    """Effective-number costs ``(1-β)/(1-β^(n+1))``, normalised to sum 1 (swiftthief.py:92-95)."""
    costs = (1 - beta) / (1 - beta ** (counts.double() + 1.0))
    return (costs / costs.sum()).float()


def fgsm_view(tap: FeatureTap, heads: SimSiamHeads, x1: torch.Tensor, x2: torch.Tensor,
              step: torch.Tensor) -> torch.Tensor:
    """``x1`` moved one signed-gradient step up the SimSiam loss between the views, in eval mode
    (criterion.py:85-117); ``step`` is per channel in pixels (eps times the normalisation std)."""
    modes = [(m, m.training) for m in (tap.model, heads)]
    for m, _ in modes:
        m.eval()
    x1 = x1.detach().requires_grad_(True)
    loss = simsiam_loss(encode(tap, heads, x1), encode(tap, heads, x2))
    (grad,) = torch.autograd.grad(loss, x1)
    for m, was in modes:
        m.train(was)
    return (x1 + step * grad.sign()).detach()


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g)


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """One batched SimSiam view (main_sup_soft.py:38-48, 100-112): random resized crop (area
    0.2-1, aspect 3/4-4/3, back to the input size), horizontal flip (p 0.5), colour jitter
    (brightness, contrast, saturation 0.4; p 0.8) and grayscale (p 0.2), each image its own draw."""
    n, c, h, w = x.shape
    area, ratio = _uniform(n, 0.2, 1.0, g), torch.exp(_uniform(n, math.log(3 / 4), math.log(4 / 3), g))
    sw, sh = (area * ratio).sqrt().clamp(max=1.0), (area / ratio).sqrt().clamp(max=1.0)
    cx, cy = (2 * torch.rand(n, generator=g) - 1) * (1 - sw), (2 * torch.rand(n, generator=g) - 1) * (1 - sh)
    flip = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sw * flip, cx, sh, cy
    grid = F.affine_grid(theta.to(x.device), [n, c, h, w], align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    jitter = (torch.rand(n, generator=g) < 0.8).view(n, 1, 1, 1).to(x.device)
    b, k, s = (_uniform(n, 0.6, 1.4, g).view(n, 1, 1, 1).to(x.device) for _ in range(3))
    j = (out * b).clamp(0, 1)
    j = ((j - _gray(j).mean(dim=(1, 2, 3), keepdim=True)) * k + _gray(j).mean(dim=(1, 2, 3), keepdim=True)).clamp(0, 1)
    if c == 3:
        j = (_gray(j) + (j - _gray(j)) * s).clamp(0, 1)
    out = torch.where(jitter, j, out)
    if c == 3:
        gray = (torch.rand(n, generator=g) < 0.2).view(n, 1, 1, 1).to(x.device)
        out = torch.where(gray, _gray(out).expand_as(out), out)
    return out


def _gray(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma (torchvision's rgb_to_grayscale); a one-channel image is its own gray."""
    if x.shape[1] == 1:
        return x
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def cosine_lr(base: float, epoch: int, period: int) -> float:
    """main_sup_soft.py:226-233: ``base * (1 + cos(pi * epoch / period)) / 2``."""
    return base * 0.5 * (1.0 + math.cos(math.pi * epoch / period))


def contrastive_phase(tap: FeatureTap, heads: SimSiamHeads, load: Callable[[torch.Tensor], torch.Tensor],
                      unlabeled: torch.Tensor, x_q: torch.Tensor, t_q: torch.Tensor, costs: torch.Tensor,
                      step: torch.Tensor, *, epochs: int, epoch_offset: int, p, g: torch.Generator) -> None:
    """One contrastive phase (main_sup_soft.py:36-150, train :153-223): ``epochs`` epochs over the
    pool indices ``unlabeled`` (batches of ``p.cl_batch_size``, last partial batch dropped), each
    step paired with a batch of queried images ``x_q`` (answers ``t_q`` as probabilities),
    cycled from a fresh shuffle every epoch. A new SGD each phase; cosine learning rate."""
    params = [q for m in (tap.model, heads) for q in m.parameters()]
    opt = torch.optim.SGD(params, lr=p.cl_lr, momentum=p.momentum, weight_decay=p.weight_decay)
    labels = t_q.argmax(dim=1)
    finite = torch.ones((), dtype=torch.bool)
    for epoch in range(1, epochs + 1):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(p.cl_lr, epoch_offset + epoch, p.cl_lr_period)
        order = unlabeled[torch.randperm(len(unlabeled), generator=g)]
        steps = len(order) // p.cl_batch_size
        lab = _cycle(torch.randperm(len(x_q), generator=g).split(p.cl_labeled_batch_size), steps)
        for i in range(steps):
            xu = load(order[i * p.cl_batch_size:(i + 1) * p.cl_batch_size])
            loss = _step_loss(tap, heads, xu, x_q[lab[i]], t_q[lab[i]], costs[labels[lab[i]]], step, p, g)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            finite &= torch.isfinite(loss.detach()).cpu()
    if not bool(finite):
        raise DivergenceError("SwiftThief contrastive loss became NaN or infinite")


def _cycle(batches: Sequence[torch.Tensor], steps: int) -> list[torch.Tensor]:
    """``steps`` batches cycling through ``batches``; a last batch of one image joins the one before
    (batch norm needs two), a lone image is taken twice (its two views still differ)."""
    batches = list(batches)
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches[-2:] = [torch.cat(batches[-2:])]
    if len(batches) == 1 and len(batches[0]) == 1:
        batches = [batches[0].repeat(2)]
    return [batches[i % len(batches)] for i in range(steps)] if batches else []


def _step_loss(tap: FeatureTap, heads: SimSiamHeads, xu: torch.Tensor, xq: torch.Tensor, tq: torch.Tensor,
               cost: torch.Tensor, step: torch.Tensor, p, g: torch.Generator) -> torch.Tensor:
    """loss1 + loss2 + sharpness_weight * loss3 of one step (main_sup_soft.py:165-209)."""
    u1, u2, q1, q2 = augment(xu, g), augment(xu, g), augment(xq, g), augment(xq, g)
    adv = fgsm_view(tap, heads, q1, q2, step)
    tap.model.train()
    heads.train()
    loss1 = simsiam_loss(encode(tap, heads, u1), encode(tap, heads, u2))
    (z1, p1), (z2, p2) = encode(tap, heads, q1), encode(tap, heads, q2)
    loss2 = soft_supervised_loss(torch.cat([p1, p2]), torch.cat([z1, z2]), torch.cat([tq, tq]))
    loss3 = simsiam_loss(encode(tap, heads, adv), encode(tap, heads, q2), cost)
    return loss1 + loss2 + p.sharpness_weight * loss3
