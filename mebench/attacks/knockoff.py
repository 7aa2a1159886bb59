"""Knockoff Nets (Orekondy, Schiele, Fritz, CVPR 2019): strategy ``random`` (the authors' released
procedure) and ``adaptive`` (a gradient bandit over the pool's classes, written from the paper's
section 4.1.2: the authors never released it).

The procedure, the reference code (tribhuvanesh/knockoffnets at b830985) with ``file:line`` for
every default, the named variants and the deviations are documented once, in
``docs/attacks/knockoff.md``; a contract test checks ``KnockoffParams``' defaults against that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import (Attack, AttackContext, TrainingCost, fresh_substitute, register_attack,
                                  train_fresh)
from mebench.attacks.random import PoolPermutation
from mebench.errors import ConfigError, DivergenceError
from mebench.training.losses import loss_for
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState


def check_recipe(p, key: str = "attack.params.") -> None:
    """Value rules shared by the epoch-based training recipes of pool attacks."""
    rules = [
        ("batch_size", p.batch_size >= 1, "must be >= 1"),
        ("epochs", p.epochs >= 1, "must be >= 1"),
        ("lr", p.lr > 0, "must be > 0"),
        ("momentum", 0 <= p.momentum < 1, "must be in [0, 1)"),
        ("weight_decay", p.weight_decay >= 0, "must be >= 0"),
        ("lr_step", p.lr_step is None or p.lr_step >= 1, "must be null or >= 1"),
        ("lr_gamma", 0 < p.lr_gamma <= 1, "must be in (0, 1]"),
    ]
    for name, ok, rule in rules:
        if not ok:
            raise ConfigError(key + name, getattr(p, name), rule)


class RandomPoolWithRecipe(Attack):
    """Random pool queries, then at every checkpoint a fresh substitute trained by the attack's
    own recipe (``Params``: batch_size, epochs, lr, momentum, weight_decay, lr_step, lr_gamma)."""

    has_track_b = True

    @classmethod
    def check_params(cls, params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        check_recipe(params)

    @classmethod
    def training_cost(cls, params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """A fresh model, ``epochs`` epochs on D_B, at every checkpoint."""
        return TrainingCost(params.epochs * sum(checkpoints))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ValueError(f"{self.name} needs an image pool")
        self.sampler = PoolPermutation(ctx.pool, ctx.generator)
        self._model: Optional[nn.Module] = None
        self._model_n = -1

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        return self.sampler.take(k, self.ctx.device)

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        if len(output) != len(batch):
            raise ValueError(f"oracle answered {len(output)} of {len(batch)} images")

    def track_b_model(self, state: "EngineState") -> nn.Module:
        n = state.queries_used
        if self._model_n != n:
            p = self.params
            x, y = state.labelled(n)
            self._model = train_fresh(self.ctx, x, y, f"{self.name}-{n}", epochs=p.epochs, lr=p.lr,
                                      momentum=p.momentum, weight_decay=p.weight_decay, batch_size=p.batch_size,
                                      lr_step=p.lr_step, lr_gamma=p.lr_gamma)
            self._model_n = n
        assert self._model is not None
        return self._model


STRATEGIES = ("random", "adaptive")
REWARDS = ("all", "cert", "div", "loss")


@dataclass(frozen=True)
class KnockoffParams:
    """``attack.params`` of ``knockoff``; the defaults are the reference procedure (cited in docs/attacks/knockoff.md)."""

    batch_size: int = 64
    epochs: int = 100
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    lr_step: Optional[int] = 60
    lr_gamma: float = 0.1
    strategy: str = "random"
    #: adaptive only: the reward (paper section 4.1.2), images per bandit step, diversity window
    reward: str = "all"
    step_batch: int = 8
    diversity_window: int = 100


class AdaptiveSampler:
    """The adaptive strategy's gradient bandit over the pool's labels (docs/attacks/knockoff.md)."""

    def __init__(self, labels: torch.Tensor, generator: torch.Generator, reward: str, window: int) -> None:
        self.labels = labels.to("cpu", torch.long)
        self.classes = torch.unique(self.labels)
        self.generator = generator
        self.reward, self.window = reward, window
        # per class: a seeded random order of its images, handed out without repeats
        self.queues = [torch.nonzero(self.labels == c).flatten()[torch.randperm(int((self.labels == c).sum()),
                                                                               generator=generator)]
                       for c in self.classes.tolist()]
        self.used = [0] * len(self.classes)
        self.left = torch.tensor([len(q) > 0 for q in self.queues])  # classes with images left
        self.H = torch.zeros(len(self.classes), dtype=torch.float64)
        self.N = torch.zeros(len(self.classes), dtype=torch.float64)
        self.mean_reward, self.t = 0.0, 0
        self.loss_lo, self.loss_hi = float("inf"), float("-inf")
        self.recent: Optional[torch.Tensor] = None  # the last `window` answers, a ring buffer
        self.recent_n = 0

    def policy(self) -> torch.Tensor:
        """π = softmax(H − max H) over the classes with images left."""
        left = self.left
        if not bool(left.any()):
            raise RuntimeError(f"pool exhausted: all {len(self.labels)} images queried")
        h = self.H.masked_fill(~left, float("-inf"))
        return torch.softmax(h - h[left].max(), dim=0)

    def draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``k`` pool indices and the arm (class position) each came from, one policy draw per image."""
        idx, arms = [], []
        for _ in range(k):
            a = int(torch.multinomial(self.policy(), 1, generator=self.generator))
            idx.append(int(self.queues[a][self.used[a]]))
            self.used[a] += 1
            if self.used[a] == len(self.queues[a]):
                self.left[a] = False
            arms.append(a)
        return torch.tensor(idx, dtype=torch.long), torch.tensor(arms, dtype=torch.long)

    def rewards(self, y: torch.Tensor, knockoff_logits: torch.Tensor) -> torch.Tensor:
        """Per-image rewards in [0, 1] for answers ``y`` (probabilities, or one-hot labels)."""
        y = y.double()
        top2 = y.topk(2, dim=1).values
        cert = top2[:, 0] - top2[:, 1]
        if self.recent is None:
            self.recent = torch.zeros(self.window, y.shape[1], dtype=torch.float64)
        # the window slides query by query: answer i is compared with the `window` answers before it
        hist = torch.cat([self.recent.roll(-self.recent_n, 0), y])  # oldest first, then this batch
        csum = torch.cat([torch.zeros(1, y.shape[1], dtype=torch.float64), hist.cumsum(0)])
        ends = torch.arange(self.window, self.window + len(y))
        starts = (ends - self.window).clamp_min(0)
        filled = torch.clamp(self.recent_n + torch.arange(len(y)), max=self.window).to(torch.float64)
        ref = (csum[ends] - csum[starts]) / filled.clamp_min(1).unsqueeze(1)
        div = (y - ref).clamp_min(0).sum(1)
        for row in y:  # at most step_batch rows into the ring buffer
            self.recent[self.recent_n % self.window] = row
            self.recent_n += 1
        loss = -(y * F.log_softmax(knockoff_logits.double(), dim=1)).sum(1)
        self.loss_lo, self.loss_hi = min(self.loss_lo, float(loss.min())), max(self.loss_hi, float(loss.max()))
        span = self.loss_hi - self.loss_lo
        loss01 = (loss - self.loss_lo) / span if span > 0 else torch.zeros_like(loss)
        parts = {"cert": cert, "div": div, "loss": loss01}
        r = torch.stack(list(parts.values())).mean(0) if self.reward == "all" else parts[self.reward]
        if not bool(torch.isfinite(r).all()):
            raise DivergenceError(f"knockoff adaptive: reward is not finite ({r.tolist()})")
        return r

    def update(self, arms: torch.Tensor, rewards: torch.Tensor) -> None:
        """The gradient-bandit update, one answered image after another."""
        for a, r in zip(arms.tolist(), rewards.tolist()):
            pi = self.policy()
            self.t += 1
            self.N[a] += 1
            self.mean_reward += (r - self.mean_reward) / self.t
            step = (r - self.mean_reward) / float(self.N[a])
            one_hot = torch.zeros_like(self.H)
            one_hot[a] = 1.0
            self.H += step * (one_hot - pi)


@register_attack
class KnockoffNets(RandomPoolWithRecipe):
    """Knockoff Nets: a natural-image transfer set (random, or chosen by the adaptive bandit) and
    the knockoff's training."""

    name = "knockoff"
    paper = "Orekondy, Schiele, Fritz, Knockoff Nets: Stealing Functionality of Black-Box Models, CVPR 2019"
    data_modes = frozenset({"seed", "surrogate"})
    Params = KnockoffParams
    smoke_params = {"epochs": 1, "batch_size": 32}

    @classmethod
    def queries_depend_on_state(cls, params) -> bool:
        """The adaptive bandit picks each class from the answers so far (§9); random does not."""
        return params.strategy == "adaptive"

    @classmethod
    def training_cost(cls, params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """The recipe's models, plus the adaptive strategy's online knockoff (a step over every answer)."""
        cost = super().training_cost(params, checkpoints, max_budget)
        online = max_budget if params.strategy == "adaptive" else 0
        return TrainingCost(cost.substitute_examples + online, cost.gan_examples)

    @classmethod
    def check_params(cls, params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        super().check_params(params, max_budget, checkpoints)
        if params.strategy not in STRATEGIES:
            raise ConfigError("attack.params.strategy", params.strategy, f"must be one of {', '.join(STRATEGIES)}")
        if params.reward not in REWARDS:
            raise ConfigError("attack.params.reward", params.reward, f"must be one of {', '.join(REWARDS)}")
        for key in ("step_batch", "diversity_window"):
            if not isinstance(getattr(params, key), int) or getattr(params, key) < 1:
                raise ConfigError(f"attack.params.{key}", getattr(params, key), "must be a positive integer")

    @classmethod
    def check_modes(cls, params, data_mode: str, output_mode: str) -> None:
        if params.strategy == "adaptive" and data_mode != "surrogate":
            raise ConfigError("attack.params.strategy", "adaptive", "needs a labelled pool: data mode surrogate "
                              "(the bandit's arms are the surrogate dataset's classes; an augmented seed set has none)")

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.adaptive: Optional[AdaptiveSampler] = None
        if self.params.strategy == "adaptive":
            if ctx.pool is None or ctx.pool.labels is None:
                raise ConfigError("attack.params.strategy", "adaptive", "needs a pool with its own class labels")
            p = self.params
            self.adaptive = AdaptiveSampler(ctx.pool.labels, ctx.generator, p.reward, p.diversity_window)
            self.online = fresh_substitute(ctx, "knockoff-online")
            self.online_opt = torch.optim.SGD(self.online.parameters(), lr=p.lr, momentum=p.momentum,
                                              weight_decay=p.weight_decay)
            self.loss_fn = loss_for(ctx.output_mode)

    def next_batch_size(self, state: "EngineState") -> int:
        return self.params.step_batch if self.adaptive else 1024

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if self.adaptive is None:
            return super().propose(k, state)
        idx, arms = self.adaptive.draw(k)
        return QueryBatch(self.ctx.pool.get(idx, self.ctx.device), {"pool_index": idx, "arm": arms})

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        super().observe(batch, output, state)
        if self.adaptive is None:
            return
        x = batch.x.to(self.ctx.device)
        y = output.y.to(self.ctx.device)
        target = y.float() if output.kind == "soft_prob" else F.one_hot(y.long(), self.ctx.num_classes).float()
        self.online.eval()
        with torch.no_grad():
            logits = self.online(x)
        self.adaptive.update(batch.meta["arm"], self.adaptive.rewards(target.cpu(), logits.cpu()))
        self.online.train()
        loss = self.loss_fn(self.online(x), y)
        self.online_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.online_opt.step()


__all__ = ["AdaptiveSampler", "KnockoffNets", "KnockoffParams", "RandomPoolWithRecipe", "check_recipe"]
