"""``example_noise``: a complete, minimal mebench attack in a module of its own.

It queries images of uniform noise in [0, 1], the simplest data-free query set.
Copy this module to start your own attack: everything mebench needs is here.

How it is found: ``pyproject.toml`` declares this module (``mebench_example.attack``) in the
entry-point group ``mebench.attacks``. The first time mebench looks up an attack name (config
validation, ``mebench list attacks``, the pytest grid), it imports every module
of that group; importing this one runs ``@register_attack`` below, which adds
``ExampleNoise`` to the registry under its ``name``.

What the engine does with it (``mebench/attacks/base.py``)::

    k = min(attack.next_batch_size(state), images left before the next checkpoint)
    batch = attack.propose(k, state)      # exactly k images in [0, 1]
    output = oracle.query(batch.x)        # the oracle counts: 1 image = 1 query
    attack.observe(batch, output, state)  # optional: learn from the answers

The attack never touches the victim or the budget itself, so the budget is
spent exactly: the engine stops at ``budget.max_budget`` and, at every
checkpoint B, Track A trains a fresh substitute on the first B queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mebench.attacks.base import Attack, register_attack
from mebench.errors import ConfigError
from mebench.types import QueryBatch

__all__ = ["ExampleNoise"]


@register_attack
class ExampleNoise(Attack):
    """Uniform noise in [0, 1], drawn from the run's seeded generator (reproducible per seed)."""

    #: The name configs write in ``attack.name``; also the attack's part of grid cell ids.
    #: Names are unique: registering a name that exists (a built-in's, say) raises.
    name = "example_noise"
    #: Where the method comes from (recorded in run metadata).
    paper = "example (mebench examples/)"
    #: Data modes it supports (``seed``, ``surrogate``, ``data_free``). Config validation
    #: rejects the others, and the grid never generates a cell for them. A data-free attack
    #: gets no image pool (``self.ctx.pool is None``).
    data_modes = frozenset({"data_free"})
    # ``output_modes`` is left at the default (every mode): noise does not read the answers.
    #: Parameters that run in seconds on tiny data: mebench's registry-driven contract tests
    #: (budget, reproducibility, what the queries depend on) run every installed attack with them.
    smoke_params = {"batch_size": 64}

    @dataclass(frozen=True)
    class Params:
        """Built from ``attack.params``; unknown keys and wrong types are config errors naming the key."""

        #: Images per ``propose`` call (throughput only: the queried images do not depend on it).
        batch_size: int = 256

    @classmethod
    def check_params(cls, params, max_budget, checkpoints) -> None:
        """Value rules, checked at config validation, before any work starts."""
        if params.batch_size <= 0:
            raise ConfigError("attack.params.batch_size", params.batch_size, "must be positive")

    @classmethod
    def required_pool_size(cls, params, max_budget) -> int:
        """Images the attacker pool must hold: none, the attack makes its own."""
        return 0

    def next_batch_size(self, state) -> int:
        """How many images the attack would like to send next; the engine clips it at the next checkpoint."""
        return self.params.batch_size

    def propose(self, k, state) -> QueryBatch:
        """Exactly ``k`` images of shape ``self.ctx.input_shape`` (C, H, W), pixels in [0, 1].

        Every random draw uses ``self.ctx.generator`` (seeded from the run seed), so a
        run is reproducible. The second argument of ``QueryBatch`` is metadata
        that comes back to ``observe`` with the batch (none here).
        """
        x = torch.rand((k, *self.ctx.input_shape), generator=self.ctx.generator)
        return QueryBatch(x.to(self.ctx.device), {})
