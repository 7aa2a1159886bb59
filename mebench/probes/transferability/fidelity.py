"""Transfer-relevant fidelity: how a substitute behaves where adversarial examples land.

Test agreement says how often a substitute answers as the victim does on test images; it does
not predict transfer (issue 44's audit of MNIST substitutes found no positive rank correlation
between them, and a strong one with the two measurements below). An L∞ perturbation of 0.2–0.3
moves an image well off the data manifold, so the measurements beside agreement look there, per
checkpoint substitute:
See docs/transferability.md.
"""
# - ``agreement_uniform_noise``: agreement with the victim's top-1 on images of i.i.d. uniform
#   pixels in [0, 1];
# - ``agreement_untrained_generator``: the same on the images of DFME's generator at a seeded
#   initialization, never trained. This is the null control of the ``data_free`` mode
#   (``untrained_generator``), and it is used as the off-manifold control for every data mode:
#   the pool modes' null control (``random``) queries pool images, which are on a data manifold,
#   so they would not measure the behaviour off it;
# - ``grad_cosine``: the mean over the transfer subset's test images (those the victim classifies
#   correctly) of the cosine between the substitute's and the victim's input gradients of the
#   cross-entropy at the victim's label, the direction FGSM and PGD follow.
#
# Every image set is drawn once per run seed from its own generator (``generator(seed,
# "fidelity/...")``), so a value does not depend on which rows ran before it. The victim is
# reached through the evaluation path, never the oracle: nothing is charged to the budget. Rows
# are long format (``fidelity.csv``, ``FIDELITY_COLUMNS``), one per (checkpoint, track, measure).

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.support.seeding import derive_seed, generator

FIDELITY_COLUMNS: tuple[str, ...] = ("seed", "checkpoint_B", "track", "member", "measure", "value", "n_images")
MEASURES: tuple[str, ...] = ("agreement_uniform_noise", "agreement_untrained_generator", "grad_cosine")
#: Images of each off-manifold set; the victim's answers on them are computed once per seed.
N_OFF_MANIFOLD = 1000


def input_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∇ₓ of the cross-entropy at label ``y``: the direction FGSM and PGD follow, and what
    ``grad_cosine`` compares (``mebench.probes.transferability.transfer`` imports it from here)."""
    x = x.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), y)
    (grad,) = torch.autograd.grad(loss, x)
    return grad


def uniform_noise(n: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """``n`` images of i.i.d. uniform pixels in [0, 1], from the run seed's own stream."""
    return torch.rand((n, *shape), generator=generator(seed, "fidelity/uniform"))


def untrained_generator_images(n: int, shape: tuple[int, int, int], seed: int,
                               mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """``n`` images of DFME's generator at a seeded initialization (its default width, latent size,
    pixel map and train-mode batch norm over batches of its default size), never trained."""
    from mebench.attacks.dfme import Params
    from mebench.models.generators import seeded_generator, to_pixels

    p = Params()
    gen = seeded_generator(p.nz, shape, p.generator_width, derive_seed(seed, "fidelity/generator")).train()
    z = torch.randn(n, p.nz, generator=generator(seed, "fidelity/generator-z"))
    with torch.no_grad():
        pre = torch.cat([gen(z[i:i + p.batch_size]) for i in range(0, n, p.batch_size)])
    return to_pixels(pre, p.pixel_map, mean, std)


def input_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """∇ₓ CE(model(x), y) per image, flattened to ``[N, D]`` (batched; the model's mode is kept)."""
    return torch.cat([input_grad(model, x[i:i + batch_size], y[i:i + batch_size]).flatten(1)
                      for i in range(0, int(x.shape[0]), batch_size)])


def top1(model: nn.Module, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i:i + batch_size]).argmax(1) for i in range(0, int(x.shape[0]), batch_size)])


def mean_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean per-row cosine of two ``[N, D]`` gradient matrices (a zero gradient counts 0).

    A substitute trained to confidence on top-1 labels can have input gradients near 1e-20, whose
    squares underflow in float32, so a cosine taken as it is leaves [-1, 1] (tens of thousands were
    measured). The cosine does not depend on a row's scale: each row is divided by its largest
    |entry| and the cosine taken in float64."""
    if not a.shape[0]:
        return float("nan")

    def unit_max(m: torch.Tensor) -> torch.Tensor:
        m = m.detach().double().flatten(1)
        return m / m.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)

    return float(F.cosine_similarity(unit_max(a), unit_max(b), dim=1).mean())


class FidelityEvaluator:
    """Off-manifold agreement and input-gradient cosine of substitutes with one victim.

    ``victim`` is the victim network (a module mapping pixels in [0, 1] to logits), ``x``/``y``
    the test images and the victim's labels on them (the transfer subset), ``off`` the named
    off-manifold image sets (``default_sets``)."""

    def __init__(self, victim: nn.Module, x: torch.Tensor, y: torch.Tensor, off: dict[str, torch.Tensor]) -> None:
        self.victim, self.x, self.y = victim, x, y
        device = x.device
        self.off = {name: images.to(device) for name, images in off.items()}
        was = victim.training
        victim.eval()
        try:
            self.victim_top1 = {name: top1(victim, images) for name, images in self.off.items()}
            self.victim_grads = input_grads(victim, x, y)
        finally:
            victim.train(was)

    @classmethod
    def default_sets(cls, shape: tuple[int, int, int], seed: int, mean: tuple[float, ...],
                     std: tuple[float, ...], n: int = N_OFF_MANIFOLD) -> dict[str, torch.Tensor]:
        """The two off-manifold sets of the module docstring, drawn from the run seed."""
        return {"uniform_noise": uniform_noise(n, shape, seed),
                "untrained_generator": untrained_generator_images(n, shape, seed, mean, std)}

    def values(self, model: nn.Module) -> dict[str, float]:
        """{measure: value} for one model (evaluated in eval mode; its mode is restored)."""
        was = model.training
        model.eval()
        try:
            out = {f"agreement_{name}": float((top1(model, images) == self.victim_top1[name]).double().mean())
                   for name, images in self.off.items()}
            out["grad_cosine"] = mean_cosine(input_grads(model, self.x, self.y), self.victim_grads)
        finally:
            model.train(was)
        return out

    def rows(self, model: nn.Module, seed: int, budget: int, track: str,
             member: Optional[int] = None) -> list[dict[str, Any]]:
        """One long-format row per measure (``FIDELITY_COLUMNS``)."""
        sizes = {f"agreement_{k}": int(v.shape[0]) for k, v in self.off.items()}
        return [{"seed": seed, "checkpoint_B": budget, "track": track, "member": member, "measure": k,
                 "value": v, "n_images": sizes.get(k, int(self.x.shape[0]))} for k, v in self.values(model).items()]
