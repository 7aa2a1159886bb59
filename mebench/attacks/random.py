"""Random baseline (contract §6): uniform sampling without replacement from the attacker pool.

- ``surrogate`` mode: the pool is the surrogate dataset's train split. Images
  are drawn uniformly without replacement, so no image is queried twice. A
  budget larger than the pool cannot be met without repeats; config validation
  rejects it before any work starts (``Attack.required_pool_size``).
- ``seed`` mode: the pool is grown from the seed images by seeded random
  augmentation (``mebench.data.augment``), so every query is a new image.

Random has no training loop of its own, so it reports Track A only. See docs/attacks/random.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mebench.attacks.base import Attack, register_attack
from mebench.errors import ConfigError
from mebench.types import QueryBatch


class PoolPermutation:
    """A seeded random order of a pool, handed out ``k`` images at a time, never one twice."""

    def __init__(self, pool, generator: torch.Generator) -> None:
        self.pool = pool
        self.order = torch.randperm(len(pool), generator=generator)
        self.pos = 0

    def take(self, k: int, device: torch.device) -> QueryBatch:
        idx = self.order[self.pos : self.pos + k]
        if idx.numel() != k:
            raise RuntimeError(f"pool exhausted: {len(self.pool)} images, asked for {self.pos + k}")
        self.pos += k
        return QueryBatch(self.pool.get(idx, device), {"pool_index": idx})


@register_attack
class RandomAttack(Attack):
    """Uniform random selection from the pool (the baseline every attack must beat)."""

    name = "random"
    paper = "baseline (contract §6)"
    data_modes = frozenset({"seed", "surrogate"})
    null_control_for = frozenset({"seed", "surrogate"})
    smoke_params = {"batch_size": 64}

    @dataclass(frozen=True)
    class Params:
        #: Images per propose call (throughput only; results do not depend on it).
        batch_size: int = 1000

    @classmethod
    def check_params(cls, params, max_budget, checkpoints) -> None:
        if params.batch_size <= 0:
            raise ConfigError("attack.params.batch_size", params.batch_size, "must be positive")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        assert ctx.pool is not None
        self.sampler = PoolPermutation(ctx.pool, ctx.generator)

    def next_batch_size(self, state) -> int:
        return self.params.batch_size

    def propose(self, k, state) -> QueryBatch:
        return self.sampler.take(k, self.ctx.device)
