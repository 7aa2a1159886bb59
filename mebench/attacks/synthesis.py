"""Shared machinery of the round-based synthesis attacks IDEAL and QEDG (``mebench.attacks.ideal``,
``mebench.attacks.qedg``).

Both references run the same round: a small generator trained against the *substitute* (never the
victim), its best batch quantized to 8 bits and sent to the victim once, the substitute trained on
every image labelled so far; every image the victim sees is a training image, charged once. The
subclass supplies the synthesis loss, the view the substitute sees, the selection and the
substitute's training on the labelled pool. See docs/attacks/ideal.md and docs/attacks/qedg.md.
"""
# Both references run the same round (SonyResearch/IDEAL@45bf95c ``ideal.py:78-110``,
# GaozhengPei/QEDG@f2869f4 ``main.py:42-74``): re-initialize a small generator, train it for
# ``g_steps`` Adam steps on a fixed noise batch so that the *substitute* (never the victim) classifies
# its images as drawn target classes, keep the batch of the lowest loss, quantize it to 8 bits (the
# references write PNGs), send (a selection of) it to the victim once, and train the substitute on
# every image labelled so far. The generator never sees the victim, so no query is spent on
# generator training: every image the victim sees is a training image, charged once.

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import nn

from mebench.attacks.base import Attack, AttackContext
from mebench.attacks.dfme import draw_seed
from mebench.errors import ConfigError, DivergenceError
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState


class SynthGenerator(nn.Module):
    """The references' ``Generator_2`` layout (IDEAL ``nets.py:416-443``, QEDG ``nets.py:182-209``):
    a linear projection to ``2*ngf`` maps of ``H/4 x W/4``, batch norm, two blocks of nearest 2x
    upsampling + 3x3 convolution (no bias) + batch norm (+ LeakyReLU 0.2), a 3x3 convolution to the
    image channels and a sigmoid, so its output is pixels in ``[0, 1]``."""

    def __init__(self, nz: int, shape: tuple[int, int, int], ngf: int) -> None:
        super().__init__()
        c, h, w = shape
        if h % 4 or w % 4:
            raise ConfigError("victim.input_size", [h, w], "the synthesis generator needs sides divisible by 4")
        self.init_size = (h // 4, w // 4)
        self.project = nn.Linear(nz, 2 * ngf * self.init_size[0] * self.init_size[1])
        self.body = nn.Sequential(
            nn.BatchNorm2d(2 * ngf), nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * ngf, 2 * ngf, 3, padding=1, bias=False), nn.BatchNorm2d(2 * ngf), nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * ngf, ngf, 3, padding=1, bias=False), nn.BatchNorm2d(ngf), nn.LeakyReLU(0.2),
            nn.Conv2d(ngf, c, 3, padding=1), nn.Sigmoid())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.project(z)
        return self.body(out.view(out.shape[0], -1, *self.init_size))


def reset_generator(model: nn.Module, g: torch.Generator) -> None:
    """The references' ``reset_model`` (IDEAL ``utils.py:315-323``, QEDG ``utils.py:204-212``), drawn
    from ``g``: convolution and linear weights N(0, 0.02) with zero bias, batch-norm scales N(1, 0.02)
    with zero shift; the batch-norm running statistics restart too."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.normal_(m.weight, 0.0, 0.02, generator=g)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02, generator=g)
            nn.init.zeros_(m.bias)
            m.reset_running_stats()


def quantize(x: torch.Tensor) -> torch.Tensor:
    """8-bit pixels as the references store them: ``uint8(clamp(x, 0, 1) * 255)`` truncates
    (IDEAL ``utils.py:363``, QEDG ``utils.py:219``), read back as ``/ 255``."""
    return x.detach().clamp(0.0, 1.0).mul(255.0).floor().div(255.0)


class SynthesisAttack(Attack):
    """A round: synthesize a batch on the substitute (no query), select, query each image once,
    train the substitute on the labelled pool. ``Params`` must hold ``batch_size``, ``nz``,
    ``generator_width``, ``g_steps``, ``lr_g``, ``lr``, ``momentum`` and ``weight_decay``."""

    data_modes = frozenset({"data_free"})
    output_modes = frozenset({"hard_top1"})
    state_dependent_queries = True
    has_track_b = True
    #: Adam betas of the generator (IDEAL ``ideal.py:91``; QEDG keeps Adam's defaults, ``main.py:51``).
    GEN_BETAS: tuple[float, float] = (0.9, 0.999)

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        return 0

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.hp = ctx.params
        self.device = ctx.device
        seed = draw_seed(ctx)
        self.rng = torch.Generator().manual_seed(seed + 1)  # noise, targets, augmentation, batch order
        self.init_rng = torch.Generator().manual_seed(seed + 3)  # each round's generator re-initialization
        self.generator = SynthGenerator(self.hp.nz, ctx.input_shape, self.hp.generator_width).to(self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 2)
            self.student = ctx.make_substitute().to(self.device)
        self.opt_s = torch.optim.SGD(self.student.parameters(), lr=self.hp.lr, momentum=self.hp.momentum,
                                     weight_decay=self.hp.weight_decay)
        self.pool_x: list[torch.Tensor] = []
        self.pool_y: list[torch.Tensor] = []
        self.queue: Optional[torch.Tensor] = None
        self.pending: Optional[QueryBatch] = None
        self.round = 0
        self.syntheses = 0  # generator runs (a round whose selection came back empty runs it again)
        self.fallback_rounds = 0  # rounds whose selection came back empty too often (sent unselected)

    # -- hooks --------------------------------------------------------------------------
    def _student_view(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(images kept if this step is the best, images the substitute sees)."""
        raise NotImplementedError

    def _synthesis_loss(self, fed: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _targets(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def _select(self, x: torch.Tensor) -> torch.Tensor:
        """The round's images to send to the victim (default: all of them)."""
        return x

    def _fit_pool(self) -> None:
        """Train ``self.student`` on the labelled pool (after each round)."""
        raise NotImplementedError

    # -- the round ----------------------------------------------------------------------
    def _synthesize(self) -> torch.Tensor:
        """One round's batch: ``g_steps`` Adam steps of a re-initialized generator on fixed noise,
        the images of the lowest loss, quantized (no query)."""
        hp = self.hp
        self.syntheses += 1
        reset_generator(self.generator, self.init_rng)
        self.generator.train()
        opt = torch.optim.Adam(self.generator.parameters(), lr=hp.lr_g, betas=self.GEN_BETAS)
        z = torch.randn(hp.batch_size, hp.nz, generator=self.rng).to(self.device)
        targets = self._targets(hp.batch_size).to(self.device)
        self.student.eval().requires_grad_(False)
        best, best_loss = None, float("inf")
        try:
            for _ in range(hp.g_steps):
                kept, fed = self._student_view(self.generator(z))
                loss = self._synthesis_loss(fed, self.student(fed), targets)
                if not bool(torch.isfinite(loss)):
                    raise DivergenceError(f"{self.name}: synthesis loss is NaN/inf in round {self.round}")
                if best is None or float(loss.detach()) < best_loss:
                    best, best_loss = kept.detach(), float(loss.detach())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        finally:
            self.student.requires_grad_(True)
        assert best is not None
        return quantize(best)

    def _new_round(self) -> torch.Tensor:
        """A round's selected images; a round whose selection is empty is synthesized again, at most
        ``max_empty_rounds`` times (QEDG), then sent unselected."""
        tries = int(getattr(self.hp, "max_empty_rounds", 0))
        for _ in range(tries + 1):
            images = self._synthesize()
            chosen = self._select(images)
            if len(chosen):
                return chosen
        self.fallback_rounds += 1
        return images

    def _ensure_round(self) -> torch.Tensor:
        """The current round's images not yet sent, synthesizing a round when none is open (so
        ``next_batch_size`` can say how many a selecting attack will send)."""
        if self.queue is None:
            self.queue = self._new_round()
        return self.queue

    def next_batch_size(self, state: "EngineState") -> int:
        return max(1, min(len(self._ensure_round()), state.budget_left))

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if k < 1:
            raise ValueError(f"{self.name}: propose needs k >= 1 images, got {k}")
        if self.pending is not None:
            raise RuntimeError(f"{self.name}: propose called twice without observe")
        queue = self._ensure_round()
        while len(queue) < k:  # asked for more than the round holds: the next round joins this one
            queue = torch.cat([queue, self._new_round()])
        self.queue = queue[k:]
        self.pending = QueryBatch(queue[:k], {"round": self.round})
        return self.pending

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending:
            raise RuntimeError(f"{self.name}: observe must answer the batch of the last propose")
        if output.kind != "hard_top1":
            raise ConfigError("victim.output_mode", output.kind, self.output_mode_reason)
        self.pool_x.append(batch.x.detach().to(self.device))
        self.pool_y.append(output.y.to(self.device))
        assert self.queue is not None
        if len(self.queue) == 0 or state.budget_left == 0:  # a round cut by the budget's end still trains
            self._close_round()

    def _close_round(self) -> None:
        self._fit_pool()
        self.queue = None
        self.round += 1

    def run_stats(self) -> dict[str, int]:
        """Rounds closed (each a training of the substitute on the whole pool), generator runs, and
        rounds sent unselected: with selection they depend on the substitute, not on the parameters."""
        return {"rounds": self.round, "syntheses": self.syntheses, "fallback_rounds": self.fallback_rounds}

    def pool(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every labelled image and its label, in query order."""
        return torch.cat(self.pool_x), torch.cat(self.pool_y)

    def _check_student(self, model: nn.Module, queries: int) -> nn.Module:
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            raise DivergenceError(f"{self.name}: substitute weights are NaN/inf at {queries} queries")
        return model.eval()

    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The substitute as trained so far (contract §8)."""
        return self._check_student(self.student, state.queries_used)


def check_common(params: Any) -> None:
    """Value rules every synthesis attack's ``Params`` share."""
    from mebench.attacks.base import check_param_ranges

    check_param_ranges(params, ints={"batch_size": 1, "nz": 1, "generator_width": 1, "g_steps": 1},
                       positive=("lr_g", "lr"), unit=("momentum",), nonnegative=("weight_decay",))


__all__ = ["SynthGenerator", "SynthesisAttack", "check_common", "quantize", "reset_generator"]
