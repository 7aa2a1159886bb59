"""``example_noise``: a complete, minimal mebench attack in its own package.

It queries images of uniform noise, the simplest data-free query set. Copy this
file to start your own attack: everything mebench needs is here.

- ``name`` is what configs write in ``attack.name`` (and grid ids show);
- ``data_modes`` / ``output_modes`` are read by config validation and by the
  grid, which never generates a cell the attack does not support;
- ``Params`` is built from ``attack.params`` (unknown keys and wrong types are
  config errors that name the key);
- the engine calls ``next_batch_size`` and ``propose(k, state)``, sends the
  ``k`` images to the oracle (1 image = 1 query, counted there), records the
  answers and calls ``observe``; Track A (a fresh substitute trained on the
  first B queries) scores the query set at every checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mebench.attacks.base import Attack, register_attack
from mebench.errors import ConfigError
from mebench.types import QueryBatch


@register_attack
class ExampleNoise(Attack):
    """Uniform noise in [0, 1], drawn from the attack's seeded generator (reproducible per seed)."""

    name = "example_noise"
    paper = "example (mebench examples/)"
    data_modes = frozenset({"data_free"})

    @dataclass(frozen=True)
    class Params:
        #: Images per propose call (throughput only).
        batch_size: int = 256

    @classmethod
    def check_params(cls, params, max_budget, checkpoints) -> None:
        if params.batch_size <= 0:
            raise ConfigError("attack.params.batch_size", params.batch_size, "must be positive")

    def next_batch_size(self, state) -> int:
        return self.params.batch_size  # the engine clips it at the next checkpoint

    def propose(self, k, state) -> QueryBatch:
        x = torch.rand((k, *self.ctx.input_shape), generator=self.ctx.generator)
        return QueryBatch(x.to(self.ctx.device), {})
