"""Dataset inference (Maini, Yaghini, Papernot, ICLR 2021; cleverhans-lab/dataset-inference): a model
that learned from the owner's private training split sits farther from its decision boundary on
those points than on public ones; a one-sided t-test of that gap is the evidence.

The margin is the label-only "Blind Walk" (attacks.py:129-173); ``prepare`` fixes points and
directions and fits the owner's regressor on the victim's margins, ``score`` returns ``-log10 p`` of
Welch's one-sided t-test on the suspect's. See docs/verification/dataset_inference.md (every deviation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from scipy.stats import ttest_ind
from torch import nn

from mebench.errors import ConfigError
from mebench.support.inference import chunked
from mebench.verification.base import OwnerData, Suspect, Verifier, params_key, register_verifier

Labeller = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class InferenceKey:
    """The owner's key: the held-out private and public points (images, labels), the seed of their
    walk directions, the standardisation of the distances and the fitted regressor."""

    private: tuple[torch.Tensor, torch.Tensor]
    public: tuple[torch.Tensor, torch.Tensor]
    seed: int
    mean: float
    std: float
    regressor: nn.Module


def blind_walk(labels: Labeller, x: torch.Tensor, y: torch.Tensor, walks: int, steps: int, noise: float,
               seed: int) -> torch.Tensor:
    """``[len(x), walks]`` L-inf distances: walk ``j`` of point ``i`` tries ``k * u`` for ``k = 1..steps``
    (``u`` uniform in ``[-noise, noise]``, clipped so the image stays in [0, 1]) and stops at the first
    ``k`` whose label is not ``y[i]``; a walk that never leaves takes ``steps + 1``. Every step is
    sent for every walk, so ``labels`` sees exactly ``len(x) * walks * steps`` images."""
    g = torch.Generator().manual_seed(seed)
    base = (torch.rand((len(x), walks, *x.shape[1:]), generator=g) * 2 - 1) * noise
    xs = x.unsqueeze(1).expand_as(base)
    first = torch.full((len(x), walks), steps + 1, dtype=torch.long)
    for k in range(steps, 0, -1):  # the smallest k that leaves the label wins
        moved = (xs + k * base).clamp(0, 1)
        left = labels(moved.reshape(-1, *x.shape[1:])).view(len(x), walks) != y.unsqueeze(1)
        first[left] = k
    delta = (xs + first.view(len(x), walks, *([1] * (x.dim() - 1))) * base).clamp(0, 1) - xs
    return delta.flatten(2).abs().amax(dim=2)


def fit_regressor(features: torch.Tensor, public: torch.Tensor, seed: int, epochs: int, lr: float) -> nn.Module:
    """The reference's regressor (CIFAR10_rand.ipynb cells 10-12): Linear(walks, 100), ReLU,
    Linear(100, 1), Tanh, trained full-batch by SGD to rate public points (+1) above private (-1)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(features.shape[1], 100), nn.ReLU(), nn.Linear(100, 1), nn.Tanh())
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sign = 2 * public.float() - 1
    for _ in range(epochs):
        opt.zero_grad()
        loss = -(sign * model(features).squeeze(-1)).mean()
        loss.backward()
        opt.step()
    return model.eval().requires_grad_(False)


@register_verifier
class DatasetInference(Verifier):
    """``-log10 p``: the suspect's margins tell the owner's private points from public ones."""

    name, suspect_output = "dataset_inference", "label"
    paper = "Maini, Yaghini, Papernot, ICLR 2021 (dataset inference)"
    reference = "cleverhans-lab/dataset-inference@24baf461"

    @dataclass(frozen=True)
    class Params:
        points: int = 50          # held-out private and public points scored per suspect (each)
        fit_points: int = 100     # private and public points the regressor is fitted on (each)
        walks: int = 10           # generate_features.py:73 (10 random starts)
        steps: int = 50           # attacks.py:137
        noise: float = 0.005      # attacks.py:137 (uni, the L-inf walk's step)
        epochs: int = 1000        # CIFAR10_rand.ipynb cell 12
        lr: float = 0.1           # CIFAR10_rand.ipynb cell 11

    @classmethod
    def check_params(cls, params: Any) -> None:
        for field in ("points", "fit_points", "walks", "steps", "epochs"):
            if getattr(params, field) < 2:
                raise ConfigError(params_key(cls.name, field), getattr(params, field), "must be at least 2")
        if not 0 < params.noise <= 1:
            raise ConfigError(params_key(cls.name, "noise"), params.noise, "must lie in (0, 1] (pixels are in [0, 1])")
        if not params.lr > 0:
            raise ConfigError(params_key(cls.name, "lr"), params.lr, "must be > 0")

    def _walk(self, labels: Labeller, x: torch.Tensor, y: torch.Tensor, seed: int) -> torch.Tensor:
        p = self.params
        return blind_walk(labels, x, y, p.walks, p.steps, p.noise, seed)

    def prepare(self, victim: Any, owner: OwnerData, generator: torch.Generator, defense: Any = None) -> InferenceKey:
        p = self.params
        n = p.fit_points + p.points
        if len(owner.train_x) < n or len(owner.public_x) < n:
            raise ValueError(f"dataset_inference needs {n} private and {n} public points "
                             f"(fit_points + points), got {len(owner.train_x)} and {len(owner.public_x)}")
        pick_private = torch.randperm(len(owner.train_x), generator=generator)[:n]
        pick_public = torch.randperm(len(owner.public_x), generator=generator)[:n]
        seed = int(torch.randint(2**31 - 1, (), generator=generator))
        x = torch.cat([owner.train_x[pick_private[:p.fit_points]], owner.public_x[pick_public[:p.fit_points]]])
        y = torch.cat([owner.train_y[pick_private[:p.fit_points]], owner.public_y[pick_public[:p.fit_points]]])
        dist = self._walk(lambda xb: chunked(victim.logits, xb, victim.device).argmax(1).cpu(), x, y, seed + 1)
        mean, std = float(dist[:p.fit_points].mean()), float(dist[:p.fit_points].std()) or 1.0
        is_public = torch.arange(len(x)) >= p.fit_points
        regressor = fit_regressor((dist - mean) / std, is_public, seed, p.epochs, p.lr)
        held = (owner.train_x[pick_private[p.fit_points:]], owner.train_y[pick_private[p.fit_points:]])
        public = (owner.public_x[pick_public[p.fit_points:]], owner.public_y[pick_public[p.fit_points:]])
        return InferenceKey(held, public, seed, mean, std, regressor)

    @classmethod
    def planned_images(cls, params: Any, public: int) -> tuple[int, int]:
        walk = params.walks * params.steps  # one label per step of each walk
        return 2 * params.points * walk, 2 * params.fit_points * walk

    def suspect_queries(self, state: InferenceKey) -> int:
        return (len(state.private[0]) + len(state.public[0])) * self.params.walks * self.params.steps

    def score(self, state: InferenceKey, suspect: Suspect) -> float:
        x = torch.cat([state.private[0], state.public[0]])
        y = torch.cat([state.private[1], state.public[1]])
        dist = self._walk(suspect.labels, x, y, state.seed + 2)
        with torch.no_grad():
            rated = state.regressor((dist - state.mean) / state.std).squeeze(-1).double().numpy()
        k = len(state.private[0])
        p_value = ttest_ind(rated[k:], rated[:k], alternative="greater", equal_var=False).pvalue
        return -math.log10(max(float(p_value), 1e-300)) if math.isfinite(p_value) else 0.0
