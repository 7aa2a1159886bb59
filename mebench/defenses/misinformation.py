"""Adaptive Misinformation: Kariyappa, Qureshi, "Defending Against Model Stealing Attacks with
Adaptive Misinformation", CVPR 2020, section 4.

The defended answer mixes the victim's probabilities y with a misinformation model's ŷ:

    ỹ = (1 - α) y + α ŷ,   α = 1 / (1 + exp(ν (max_i y_i - τ)))

so a query the out-of-distribution detector calls in-distribution (maximum softmax
probability above τ) gets the victim's answer, and one it calls out-of-distribution gets
misinformation. The misinformation model has the victim's architecture and is trained on the
victim's training split to put as little probability as possible on the true class, with the
loss -log(1 - ŷ_y) (section 4.2).

Deviation from the paper (listed in the README): the paper's victims are trained with Outlier
Exposure so that their maximum softmax probability separates in- from out-of-distribution
inputs better; mebench's victims are its standard recipes, and the detector is their plain
maximum softmax probability (Hendrycks & Gimpel's baseline score, the paper's detector
without the OE fine-tuning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mebench.defenses.base import DEFENDER_SEED, DefenseContext, Defense, register_defense
from mebench.errors import ConfigError
from mebench.seeding import generator
from mebench.training.loop import OptimizerSpec, train_steps


def misinformation_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of -log(1 - p_y): small when the model gives the true class little probability."""
    # log(1 - p_y) = log(sum_{k != y} p_k), computed without cancellation
    others = torch.log_softmax(logits, dim=1).scatter(1, labels[:, None], float("-inf"))
    return -torch.logsumexp(others, dim=1).mean()


@register_defense
class AdaptiveMisinformation(Defense):
    name, space = "adaptive_misinformation", "probs"
    paper = "Kariyappa, Qureshi, CVPR 2020"
    fits = True
    output_modes = frozenset({"soft_prob", "hard_top1"})  # misinformation can change the top-1 label too

    @dataclass(frozen=True)
    class Params:
        tau: float = 0.9         # OOD threshold on the maximum softmax probability
        nu: float = 1000.0       # sharpness of the switch
        epochs: float = 2.0      # training of the misinformation model (passes over the victim's train split)
        batch_size: int = 128
        lr: float = 0.01

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not 0.0 <= params.tau <= 1.0:
            raise ConfigError("defense.params.tau", params.tau, "must be in [0, 1] (a maximum softmax probability)")
        if not params.nu > 0:
            raise ConfigError("defense.params.nu", params.nu, "must be > 0")
        if not params.epochs > 0:
            raise ConfigError("defense.params.epochs", params.epochs, "must be > 0")
        if params.batch_size < 1:
            raise ConfigError("defense.params.batch_size", params.batch_size, "must be at least 1")
        if not params.lr > 0:
            raise ConfigError("defense.params.lr", params.lr, "must be > 0")

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        """The misinformation model: the victim's architecture trained with ``misinformation_loss``."""
        x, y = ctx.train_split()
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
        torch.manual_seed(DEFENDER_SEED)
        model = ctx.make_model()
        steps = max(1, round(params.epochs * x.shape[0] / params.batch_size))
        train_steps(model, x.to(ctx.device), y.to(ctx.device), loss_fn=misinformation_loss, steps=steps,
                    batch_size=params.batch_size, optimizer=OptimizerSpec("sgd", params.lr, 0.9, 5e-4),
                    generator=generator(DEFENDER_SEED, cls.name))
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()

    def alpha(self, probs: torch.Tensor) -> torch.Tensor:
        """The weight of misinformation per row: ~0 in distribution, ~1 out of it."""
        return torch.sigmoid(-self.params.nu * (probs.max(dim=1).values - self.params.tau))

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            mis = torch.softmax(self.state(x.to(scores.device)), dim=1)
        a = self.alpha(scores)[:, None]
        out = (1 - a) * scores + a * mis
        return out / out.sum(dim=1, keepdim=True)
