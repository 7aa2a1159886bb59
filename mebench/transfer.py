"""Transferability: do adversarial examples crafted on the stolen substitute fool the victim?

For a checkpoint substitute (Track A or B), untargeted L∞ adversarial examples are crafted on
the substitute (FGSM; PGD with a fixed number of steps, a step size and a random start) for a
fixed, seeded subset of the victim's test split restricted to images the victim classifies
correctly, and scored on the victim:

- ``success_rate``: the share of those images the victim misclassifies (transfer success);
- ``substitute_success_rate``: the share the substitute itself misclassifies (white-box), among
  the ``substitute_n_images`` images it classifies as the victim does before the attack (an
  image the substitute already gets wrong is no success of the attack; counting it let a
  substitute that agrees with the victim on few images score near 1).

Every rate is independent of which rows ran before it (contract §10): the image subset has its
own generator (``generator(seed, "transfer")`` in the engine), and PGD's random starts come from
a generator seeded per (run seed, ``checkpoint_B``, track, method) (``pgd_generator``), so the
rows may be evaluated in any order, resumed or skipped without changing a number.

Two reference rows per method place the numbers (``checkpoint_B`` 0): the attack crafted on
the victim itself (track ``victim``, the white-box upper bound) and on a model of the
substitute's architecture trained on the victim's own training data with its true labels
(track ``independent``, ``mebench.engine.independent_model``).

ε, the PGD steps and step size come from the dataset profile (``transfer_eps``,
``pgd_steps``, ``pgd_alpha``) and are written with every row. The victim is reached through
this evaluation path, never through the oracle: nothing here is charged to the budget and the
attack never sees it. Rows go to ``transfer.csv`` (long format), so ``metrics.csv`` keeps
exactly the contract's columns. Carlini–Wagner L2 is not implemented yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.inference import chunked
from mebench.seeding import derive_seed
from mebench.victims.wrapper import FrozenVictim

METHODS: tuple[str, ...] = ("fgsm", "pgd")
#: Columns of transfer.csv.
TRANSFER_COLUMNS: tuple[str, ...] = (
    "seed", "checkpoint_B", "track", "method", "eps", "steps", "alpha", "n_images",
    "success_rate", "substitute_success_rate", "substitute_n_images", "seconds",
)


def _input_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), y)
    (grad,) = torch.autograd.grad(loss, x)
    return grad


def fgsm(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """One step of ε·sign(∇ₓ CE(model(x), y)), clipped to the pixel range [0, 1]."""
    return (x + eps * _input_grad(model, x, y).sign()).clamp(0.0, 1.0).detach()


def pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int, alpha: float,
        generator: torch.Generator) -> torch.Tensor:
    """L∞ PGD: a uniform random start in the ε-ball, ``steps`` steps of α·sign(∇), each projected
    back into the ε-ball around ``x`` and into [0, 1]."""
    start = (torch.rand(x.shape, generator=generator, device=generator.device) * 2 - 1).to(x.device) * eps
    adv = (x + start).clamp(0.0, 1.0)
    for _ in range(steps):
        adv = adv + alpha * _input_grad(model, adv, y).sign()
        adv = torch.min(torch.max(adv, x - eps), x + eps).clamp(0.0, 1.0).detach()
    return adv


def pgd_generator(seed: int, budget: int, track: str, method: str,
                  device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of one row's PGD starts, on ``device``: seeded from a stable hash of (run
    seed, ``checkpoint_B``, track, method) alone, so a row's rate never depends on the rows
    evaluated before it (a shared stream made it depend on their order and number)."""
    g = torch.Generator(device=torch.device(device))
    return g.manual_seed(derive_seed(seed, f"transfer/pgd-start/B{budget}/{track}/{method}"))


@dataclass(frozen=True)
class TransferSettings:
    """What the profile fixes: ε, PGD steps and step size; and how many test images to use."""

    eps: float
    pgd_steps: int
    pgd_alpha: float
    n_images: int = 1000
    batch_size: int = 500


def correct_subset(victim: FrozenVictim, x: torch.Tensor, y: torch.Tensor, n: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` test images in a seeded random order, among those the victim classifies correctly."""
    pred = chunked(victim.logits, x, victim.device).argmax(dim=1).to(y.device)
    correct = torch.nonzero(pred == y).flatten()
    pick = correct[torch.randperm(correct.numel(), generator=generator)[:n].to(correct.device)]
    images = x[pick]
    images = images.float().div(255.0) if images.dtype == torch.uint8 else images.float()
    return images, y[pick]


class TransferEvaluator:
    """Transfer success of checkpoint substitutes against the victim (evaluation path, no oracle)."""

    def __init__(self, victim: FrozenVictim, test_x: torch.Tensor, test_y: torch.Tensor,
                 settings: TransferSettings, methods: tuple[str, ...], subset_generator: torch.Generator) -> None:
        """``subset_generator`` draws the image subset and nothing else; PGD's starts come from
        ``pgd_generator`` per row, so no row consumes randomness another row sees."""
        self.victim, self.settings, self.methods = victim, settings, tuple(methods)
        self.x, self.y = correct_subset(victim, test_x, test_y, settings.n_images, subset_generator)
        self.x, self.y = self.x.to(victim.device), self.y.to(victim.device)

    def reference_rows(self, seed: int, independent: Optional[nn.Module] = None) -> list[dict[str, Any]]:
        """The two references (``checkpoint_B`` 0): the attacks crafted on the victim itself (track
        ``victim``, the white-box upper bound) and on ``independent``, a model of the substitute's
        architecture trained on the victim's own training data (track ``independent``)."""
        rows = self.rows(self.victim.model, seed, 0, "victim")
        return rows + (self.rows(independent, seed, 0, "independent") if independent is not None else [])

    def rows(self, model: nn.Module, seed: int, budget: int, track: str) -> list[dict[str, Any]]:
        """One row per method for one checkpoint substitute."""
        was = model.training
        model.eval()
        out = []
        try:
            for method in self.methods:
                out.append(self._row(model, method, seed, budget, track))
        finally:
            model.train(was)
        return out

    def _row(self, model: nn.Module, method: str, seed: int, budget: int, track: str) -> dict[str, Any]:
        s = self.settings
        craft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
        if method == "fgsm":
            craft, steps, alpha = (lambda xb, yb: fgsm(model, xb, yb, s.eps)), 1, s.eps
        else:
            g = pgd_generator(seed, budget, track, method, self.x.device)  # this row's own starts
            craft = lambda xb, yb: pgd(model, xb, yb, s.eps, s.pgd_steps, s.pgd_alpha, g)  # noqa: E731
            steps, alpha = s.pgd_steps, s.pgd_alpha
        t0 = time.perf_counter()
        fooled_victim, fooled_self, agreed = self._score(model, craft)
        n = int(self.x.shape[0])
        return {"seed": seed, "checkpoint_B": budget, "track": track, "method": method, "eps": s.eps,
                "steps": steps, "alpha": alpha, "n_images": n,
                "success_rate": fooled_victim / n if n else None,
                "substitute_success_rate": fooled_self / agreed if agreed else None,
                "substitute_n_images": agreed, "seconds": time.perf_counter() - t0}

    def _score(self, model: nn.Module, craft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
               ) -> tuple[int, int, int]:
        """(images the victim misclassifies after the attack; among the images the substitute
        classified as the victim does before it, those it misclassifies after; their number)."""
        fooled_victim = fooled_self = agreed = 0
        for i in range(0, int(self.x.shape[0]), self.settings.batch_size):
            xb, yb = self.x[i:i + self.settings.batch_size], self.y[i:i + self.settings.batch_size]
            adv = craft(xb, yb)
            with torch.no_grad():
                same = model(xb).argmax(dim=1) == yb  # yb is the victim's (correct) answer
                fooled_victim += int((self.victim.logits(adv).argmax(dim=1) != yb).sum())
                fooled_self += int(((model(adv).argmax(dim=1) != yb) & same).sum())
                agreed += int(same.sum())
        return fooled_victim, fooled_self, agreed


def settings_for(profile: Any, n_images: Optional[int] = None) -> TransferSettings:
    """The profile's transfer settings (``transfer_eps``, ``pgd_steps``, ``pgd_alpha``)."""
    base = TransferSettings(profile.transfer_eps, profile.pgd_steps, profile.pgd_alpha)
    return base if n_images is None else TransferSettings(base.eps, base.pgd_steps, base.pgd_alpha, n_images)
