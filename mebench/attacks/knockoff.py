"""Knockoff Nets (Orekondy, Schiele, Fritz, "Knockoff Nets: Stealing Functionality of Black-Box
Models", CVPR 2019), strategy ``random``: images drawn uniformly without replacement from the
attacker's natural-image pool P_A, labelled by the victim, and a knockoff trained on them.

Reference code: github.com/tribhuvanesh/knockoffnets at b830985; ``file:line`` below is in that
tree. The transfer set is built by ``knockoff/adversary/transfer.py`` (``RandomAdversary``:
uniform draws without replacement from the pool, transfer.py:62-64) and the knockoff trained by
``knockoff/adversary/train.py`` with ``knockoff/utils/model.py`` (``train_model``). The defaults
of ``KnockoffParams`` are these values, one ``- field = default  (source)`` per line:

- batch_size = 64  (adversary/train.py:108)
- epochs = 100  (adversary/train.py:110)
- lr = 0.01  (adversary/train.py:112)
- momentum = 0.5  (adversary/train.py:114, 129: optimizer sgdm)
- weight_decay = 0.0  (utils/model.py:88: SGD with momentum and no weight decay)
- lr_step = 60  (adversary/train.py:120, utils/model.py:196)
- lr_gamma = 0.1  (adversary/train.py:122)

Track B is that knockoff: at every checkpoint B a fresh substitute trained for ``epochs`` epochs
on the first B answers with the soft cross-entropy (``soft_prob``; mebench's KL has its
gradient) or cross-entropy on the labels (``hard_top1``, the reference's ``--argmaxed``,
adversary/train.py:128). Prediction Poisoning's Table 1 (the reproduction in mebench's README)
trained for 50 epochs (prediction-poisoning README.md:171): a named variant, not the default.
Deviations: the last epoch's model is kept (``train_model`` also tracks the best test accuracy,
which a mebench attack never reads, §8); every checkpoint trains a fresh model (the reference
builds one model before its loop over ``--budgets`` and keeps training it from budget to budget,
adversary/train.py:176-197, so its largest budget's knockoff has also seen every smaller one's
epochs). The ``adaptive`` strategy (a gradient bandit over the
pool's label hierarchy) was never released by the authors and is not offered yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from torch import nn

from mebench.attacks.base import Attack, AttackContext, register_attack, train_fresh
from mebench.attacks.random import PoolPermutation
from mebench.errors import ConfigError
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


@dataclass(frozen=True)
class KnockoffParams:
    """``attack.params`` of ``knockoff``; the defaults are the reference procedure (module docstring)."""

    batch_size: int = 64
    epochs: int = 100
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    lr_step: Optional[int] = 60
    lr_gamma: float = 0.1


@register_attack
class KnockoffNets(RandomPoolWithRecipe):
    """Knockoff Nets, random strategy: a random natural-image transfer set and the knockoff's training."""

    name = "knockoff"
    paper = "Orekondy, Schiele, Fritz, Knockoff Nets: Stealing Functionality of Black-Box Models, CVPR 2019"
    data_modes = frozenset({"seed", "surrogate"})
    Params = KnockoffParams


__all__ = ["KnockoffNets", "KnockoffParams", "RandomPoolWithRecipe", "check_recipe"]
