"""Output-perturbation defenses: they change what an answer says, never how many queries it costs.

``none``, ``temperature``, ``top1``, ``topk``, ``rounding``, ``gaussian_noise`` and
``reverse_sigmoid`` (papers and formulas below). Every transform returns rows that are probability
vectors (non-negative, summing to 1). See docs/defenses/index.md and each defense's page there.
"""
# - ``none``: the victim's answer unchanged.
# - ``temperature``: softmax at temperature T (the ``tempered`` oracle profile, §1.2); the
#   metrics compare with the tempered victim (``reference``).
# - ``top1``, ``topk``, ``rounding``: Tramèr, Zhang, Juels, Reiter, Ristenpart, "Stealing
#   Machine Learning Models via Prediction APIs", USENIX Security 2016, section 8
#   ("Extraction Countermeasures"): return only the class label, only the k largest
#   probabilities, or probabilities rounded to a number of decimals.
# - ``gaussian_noise``: Gaussian noise of standard deviation sigma added to the probabilities,
#   clipped at 0 and renormalised (a baseline perturbation; seeded from the run seed).
# - ``reverse_sigmoid``: Lee, Edraki, Qi, "Defending Against NN Model Stealing Attacks Using
#   Deceptive Perturbations", IEEE S&P Workshops 2019: y' = alpha (y - beta (s(gamma s^-1(y)) - 1/2)),
#   with s the sigmoid, s^-1 the logit, probabilities clipped to [1e-9, 1 - 1e-9] before the
#   logit and the result clipped at 0 and renormalised (alpha).

from __future__ import annotations

from dataclasses import dataclass

import torch

from mebench.defenses.base import Defense, register_defense
from mebench.errors import ConfigError


def _renormalise(p: torch.Tensor) -> torch.Tensor:
    """Clip at 0 and scale rows to sum 1; a row that became all zeros falls back to uniform."""
    p = p.clamp_min(0.0)
    total = p.sum(dim=1, keepdim=True)
    uniform = torch.full_like(p, 1.0 / p.shape[1])
    return torch.where(total > 0, p / total.clamp_min(torch.finfo(p.dtype).tiny), uniform)


@register_defense
class NoDefense(Defense):
    name, space, paper = "none", "probs", "no defense"

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores


@register_defense
class Temperature(Defense):
    name, space, reference, paper = "temperature", "logits", True, "oracle profile 'tempered' (contract §1.2)"

    @dataclass(frozen=True)
    class Params:
        temperature: float = 1.0

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not params.temperature > 0:
            raise ConfigError("defense.params.temperature", params.temperature, "must be > 0")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores / self.params.temperature


@register_defense
class Top1(Defense):
    name, space, paper = "top1", "probs", "Tramèr et al., USENIX Security 2016, section 8"
    output_modes = frozenset({"soft_prob"})
    modes_reason = "answers the label alone, which a {mode} oracle already does (the cell would repeat 'none')"

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(scores.argmax(dim=1), scores.shape[1]).to(scores.dtype)


@register_defense
class TopK(Defense):
    name, space, paper = "topk", "probs", "Tramèr et al., USENIX Security 2016, section 8"
    output_modes = frozenset({"soft_prob"})

    @dataclass(frozen=True)
    class Params:
        k: int = 1

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if params.k < 1:
            raise ConfigError("defense.params.k", params.k, "must be at least 1")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        k = min(self.params.k, scores.shape[1])
        keep = torch.zeros_like(scores).scatter_(1, scores.topk(k, dim=1).indices, 1.0)
        return _renormalise(scores * keep)


@register_defense
class Rounding(Defense):
    name, space, paper = "rounding", "probs", "Tramèr et al., USENIX Security 2016, section 8"
    output_modes = frozenset({"soft_prob"})

    @dataclass(frozen=True)
    class Params:
        decimals: int = 2

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if params.decimals < 0:
            raise ConfigError("defense.params.decimals", params.decimals, "must be >= 0")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return _renormalise(torch.round(scores, decimals=self.params.decimals))


@register_defense
class GaussianNoise(Defense):
    name, space, paper = "gaussian_noise", "probs", "baseline: Gaussian noise on the probabilities"
    output_modes = frozenset({"soft_prob"})

    @dataclass(frozen=True)
    class Params:
        sigma: float = 0.01

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not params.sigma >= 0:
            raise ConfigError("defense.params.sigma", params.sigma, "must be >= 0")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(scores.shape, generator=self.generator, dtype=scores.dtype).to(scores.device)
        return _renormalise(scores + self.params.sigma * noise)


@register_defense
class ReverseSigmoid(Defense):
    name, space, paper = "reverse_sigmoid", "probs", "Lee, Edraki, Qi, IEEE S&P Workshops 2019"
    output_modes = frozenset({"soft_prob"})

    @dataclass(frozen=True)
    class Params:
        beta: float = 1.0
        gamma: float = 0.1

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        if not params.beta >= 0:
            raise ConfigError("defense.params.beta", params.beta, "must be >= 0")
        if not params.gamma > 0:
            raise ConfigError("defense.params.gamma", params.gamma, "must be > 0")

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        p = scores.clamp(1e-9, 1 - 1e-9)
        r = self.params.beta * (torch.sigmoid(self.params.gamma * torch.logit(p)) - 0.5)
        return _renormalise(scores - r)
