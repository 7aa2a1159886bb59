"""MAD, Prediction Poisoning (Orekondy, Schiele, Fritz, ICLR 2020, section 4; reference code
tribhuvanesh/prediction-poisoning at 1ddff8b, ``defenses/victim/bb_mad.py``).

Each answer y becomes ỹ = (1 − α) y + α y*, the vertex (or, for MAD-argmax, the label-preserving
uniform distribution) y* that turns an attacker's gradient furthest from the true answer's, with
α = min(1, ε / ||y − y*||_p). The objective, why it is computed exactly from the surrogate's
probabilities, and the reference's choices are documented once, in ``docs/defenses/mad.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
import itertools
from typing import Any

import torch

from mebench.defenses.base import DEFENDER_SEED, Defense, DefenseContext, DefenseCost, register_defense
from mebench.errors import ConfigError

YDISTS = ("l1", "l2")


@register_defense
class Mad(Defense):
    name, space = "mad", "probs"
    paper = "Orekondy, Schiele, Fritz, ICLR 2020 (Prediction Poisoning)"
    fits = True

    @dataclass(frozen=True)
    class Params:
        epsilon: float = 1.0
        ydist: str = "l1"
        argmax: bool = False

    @classmethod
    def cost(cls, params: Any, train_size: int) -> DefenseCost:
        """One more forward per answer: the surrogate whose gradient the perturbation follows."""
        return DefenseCost(answer_forwards=1.0)

    @classmethod
    def modes(cls, params: Any) -> frozenset[str]:
        return frozenset({"soft_prob"}) if params.argmax else cls.output_modes

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not params.epsilon >= 0:
            raise ConfigError("defense.params.epsilon", params.epsilon, "must be >= 0")
        if params.ydist not in YDISTS:
            raise ConfigError("defense.params.ydist", params.ydist, f"must be one of {list(YDISTS)}")
        if params.argmax and output_mode == "hard_top1":
            raise ConfigError("defense.params.argmax", params.argmax, "MAD-argmax keeps every top-1 label, so a "
                              "hard_top1 answer would be the undefended one; use soft_prob")

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        """The defender's surrogate of the attacker's model: randomly initialised, frozen."""
        torch.manual_seed(DEFENDER_SEED)
        model = ctx.make_model().eval()
        for p in model.parameters():
            p.requires_grad_(False)
        return model

    def surrogate_probs(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(self.state(x).double(), dim=1)

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = scores.double()
        p = self.surrogate_probs(x.to(scores.device))
        if self.params.argmax:
            ystar = _argmax_keeping_target(p, y)
        else:
            ystar = _best_target(p, y, torch.eye(y.shape[1], dtype=y.dtype, device=y.device)[None])
        gap = (y - ystar).abs().sum(1) if self.params.ydist == "l1" else (y - ystar).norm(dim=1)
        alpha = (self.params.epsilon / (gap + 1e-7)).clamp(0.0, 1.0)[:, None]
        out = ((1 - alpha) * y + alpha * ystar).clamp_min(0.0)
        return (out / out.sum(dim=1, keepdim=True)).to(scores.dtype)


def angular_objective(p: torch.Tensor, y: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """MAD's objective for every candidate ``targets[n, c]`` (shape ``[N, C, K]``): the squared
    distance between the unit directions (p - target) and (p - y), i.e. Gᵀ· up to the factor h."""
    a = p - y
    a = a / a.norm(dim=1, keepdim=True).clamp_min(1e-30)
    v = p[:, None, :] - targets
    v = v / v.norm(dim=2, keepdim=True).clamp_min(1e-30)
    return (v - a[:, None, :]).pow(2).sum(dim=2)


def _best_target(p: torch.Tensor, y: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """The candidate with the largest objective per row (first on ties); candidates ``[1 or N, C, K]``."""
    targets = candidates.expand(y.shape[0], -1, -1)
    best = angular_objective(p, y, targets).argmax(dim=1)
    return targets[torch.arange(y.shape[0]), best]


def _argmax_keeping_target(p: torch.Tensor, y: torch.Tensor, exact_up_to: int = 10) -> torch.Tensor:
    """MAD-argmax's y*: the best uniform distribution over a class set that holds the top class
    (which is weighted up by 1e-5). Every such set for K <= ``exact_up_to`` (the reference's
    ``oracle_argmax_preserving``); beyond, its greedy search (``..._approx``): grow the set from the
    top class one class at a time, adding the class that maximises the objective, and keep the
    best set seen."""
    n, k = y.shape
    top = y.argmax(dim=1)
    lift = 1e-5 * torch.nn.functional.one_hot(top, k).to(y.dtype)

    def normalised(masks: torch.Tensor) -> torch.Tensor:  # [N, C, K] 0/1 masks -> target distributions
        masks = masks + lift[:, None, :]
        return masks / masks.sum(dim=2, keepdim=True)

    rows = torch.arange(n, device=y.device)
    if k <= exact_up_to:
        subsets = torch.tensor(list(itertools.product((0.0, 1.0), repeat=k - 1)), dtype=y.dtype, device=y.device)
        masks = torch.ones(n, subsets.shape[0], k, dtype=y.dtype, device=y.device)
        others = torch.ones(n, k, dtype=torch.bool, device=y.device)
        others[rows, top] = False  # the K-1 other classes of each row, in index order
        masks[others[:, None, :].expand_as(masks)] = subsets.repeat(n, 1).flatten()
        return _best_target(p, y, normalised(masks))
    fixed = torch.nn.functional.one_hot(top, k).to(y.dtype)
    best, best_val = None, torch.full((n,), -1.0, dtype=y.dtype, device=y.device)
    for _ in range(k - 1):
        grown = fixed[:, None, :] + torch.eye(k, dtype=y.dtype, device=y.device)[None]  # add class j
        targets = normalised(grown.clamp(max=1.0))
        val = angular_objective(p, y, targets).masked_fill(fixed > 0, float("-inf"))
        j = val.argmax(dim=1)
        v = val[rows, j]
        chosen = targets[rows, j]
        better = v > best_val
        best = chosen if best is None else torch.where(better[:, None], chosen, best)
        best_val = torch.maximum(best_val, v)
        fixed = fixed.clone()
        fixed[rows, j] = 1.0
    return best
