"""Null controls of the ``data_free`` mode: ``untrained_generator`` (DFME's generator at its seeded
initialization, never trained) and ``smooth_noise`` (smooth Gaussian fields).

Neither reads the oracle's answers (``observe`` is the base class no-op), so their queries depend
on the run seed only; both report Track A only. Pages: ``docs/attacks/untrained_generator.md``,
``docs/attacks/smooth_noise.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from mebench.attacks import dfme
from mebench.attacks.base import Attack, AttackContext, TrainingCost, register_attack
from mebench.errors import ConfigError
from mebench.models.generators import seeded_generator, to_pixels
from mebench.types import QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

_DFME = dfme.Params()


class _NullControl(Attack):
    """Capabilities shared by the data-free null controls."""

    data_modes = frozenset({"data_free"})
    null_control_for = frozenset({"data_free"})
    has_track_b = False
    state_dependent_queries = False
    smoke_params = {"batch_size": 64}

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        return 0

    @classmethod
    def check_params(cls, params: Any, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        if not isinstance(params.batch_size, int) or params.batch_size < 1:
            raise ConfigError("attack.params.batch_size", params.batch_size, "must be a positive integer")

    def next_batch_size(self, state: "EngineState") -> int:
        return self.params.batch_size


@register_attack
class UntrainedGenerator(_NullControl):
    """DFME's generator, seeded like DFME's and never updated (a control for generator training)."""

    name = "untrained_generator"
    paper = "null control (mebench): DFME's generator at its initialization"

    @dataclass(frozen=True)
    class Params:
        #: Images per generator call; train-mode batch norm normalizes over it, as in DFME.
        batch_size: int = _DFME.batch_size
        nz: int = _DFME.nz
        generator_width: int = _DFME.generator_width
        pixel_map: str = _DFME.pixel_map
        #: Affine last batch norm: ``true`` gives MAZE's generator (``configs/benchmarks``' MAZE control).
        head_affine: bool = False

    @classmethod
    def check_params(cls, params: Any, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        super().check_params(params, max_budget, checkpoints)
        dfme.check_generator_params(params)

    @classmethod
    def training_cost(cls, params: Any, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """One generator forward per query, a third of a generator step each (``TrainingCost``)."""
        return TrainingCost(generator_examples=max_budget * (params.generator_width / 64) ** 2 / 3)

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        seed = dfme.draw_seed(ctx)
        p = self.params
        self.generator = seeded_generator(p.nz, ctx.input_shape, p.generator_width, seed, p.head_affine).to(ctx.device)
        self.generator.train().requires_grad_(False)  # DFME's sampling mode; weights never change
        self.rng = torch.Generator(device=ctx.device)
        self.rng.manual_seed(seed + 1)

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        z = torch.randn(k, self.params.nz, generator=self.rng, device=self.ctx.device)
        with torch.no_grad():
            pre = self.generator(z)
        x = to_pixels(pre, self.params.pixel_map, self.ctx.profile.mean, self.ctx.profile.std)
        return QueryBatch(x, {"source": self.name})


@register_attack
class SmoothNoise(_NullControl):
    """Smooth random images: coarse Gaussian noise, bilinearly upsampled and squashed into [0, 1]."""

    name = "smooth_noise"
    paper = "null control (mebench): smooth Gaussian noise"

    @dataclass(frozen=True)
    class Params:
        #: Side of the square noise field, per channel, before upsampling.
        field_size: int = 7
        #: Pixels are ``(tanh(gain * z) + 1) / 2``: larger gains push pixels toward 0 and 1.
        gain: float = 2.0
        #: Images per propose call (throughput only).
        batch_size: int = 1024

    @classmethod
    def check_params(cls, params: Any, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        super().check_params(params, max_budget, checkpoints)
        if not isinstance(params.field_size, int) or params.field_size < 1:
            raise ConfigError("attack.params.field_size", params.field_size, "must be a positive integer")
        if not params.gain > 0:
            raise ConfigError("attack.params.gain", params.gain, "must be > 0")

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        c, h, w = self.ctx.input_shape
        s = self.params.field_size
        z = torch.randn(k, c, s, s, generator=self.ctx.generator)
        z = F.interpolate(z, size=(h, w), mode="bilinear", align_corners=False)
        x = torch.tanh(z * self.params.gain).add(1.0).mul(0.5)
        return QueryBatch(x.to(self.ctx.device), {"source": self.name})
