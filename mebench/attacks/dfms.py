"""DFMS and DFMS-HL (Sanyal, Addepalli, Babu, CVPR 2022): model stealing with a GAN pretrained on a
proxy distribution (the attacker's surrogate pool, never the victim's data).

The six stages, the reference code (val-iisc/Hard-Label-Model-Stealing at d2e3010) with the source
of every default, the named CPU variants and the deviations are documented once, in
``docs/attacks/dfms.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import (Attack, AttackContext, TrainingCost, check_param_ranges, fresh_substitute,
                                  register_attack, train_fresh)
from mebench.attacks.dfme import draw_seed
from mebench.data.augment import auto_augment, crop_flip
from mebench.errors import ConfigError, DivergenceError
from mebench.models.generators import seeded_generator, to_pixels
from mebench.support.seeding import derive_seed
from mebench.training.losses import loss_for
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.data.pools import Pool
    from mebench.state import EngineState


@dataclass(frozen=True)
class Params:
    """DFMS hyperparameters; the defaults are the reference's (cited in docs/attacks/dfms.md)."""

    batch_size: int = 64
    latent_dim: int = 100
    generator_width: int = 64
    disc_width: int = 64
    gan_epochs: int = 200
    divgan_epochs: int = 100
    gan_lr: float = 2e-4
    gan_beta1: float = 0.5
    div_weight_divgan: float = 10.0
    div_weight: float = 500.0
    init_fraction: float = 0.00625
    proxy_ratio: float = 0.5
    clone_epochs: int = 200
    gan_pool_size: Optional[int] = None
    clone_lr: float = 0.1
    clone_batch_size: int = 128
    student_lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4


def init_set_size(p: Params, max_budget: int) -> int:
    """Images in each of the two initial sets (at most half the budget each)."""
    return min(max(1, math.ceil(p.init_fraction * max_budget)), max(1, max_budget // 2))


def proxy_count(p: Params, n_init: int) -> int:
    return int(round(p.proxy_ratio * n_init))


def diversity_loss(logits: torch.Tensor) -> torch.Tensor:
    """Σ_j ᾱ_j log ᾱ_j with ᾱ the batch-mean softmax (TG:444-451): minimal when the batch covers all classes."""
    mean = F.softmax(logits, dim=1).mean(dim=0)
    return (mean * mean.clamp_min(1e-12).log()).sum()


class Discriminator(nn.Module):
    """DCGAN discriminator for ``(C, H, W)`` images in [-1, 1]: one logit per image."""

    def __init__(self, shape: tuple[int, int, int], ndf: int = 64) -> None:
        super().__init__()
        c, h, w = shape
        layers: list[nn.Module] = [nn.Conv2d(c, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
        width, size = ndf, (h // 2, w // 2)
        while min(size) >= 4 and len(layers) < 8:  # 28 -> 14 -> 7 -> 3, 32 -> 16 -> 8 -> 4 -> 2, 8 -> 4 -> 2
            layers += [nn.Conv2d(width, 2 * width, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * width),
                       nn.LeakyReLU(0.2, inplace=True)]
            width, size = 2 * width, (size[0] // 2, size[1] // 2)
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width * size[0] * size[1], 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1)).squeeze(1)


def dcgan_init(module: nn.Module) -> None:
    """DCGAN initialisation (DC:201-207): convolutions N(0, 0.02), batch norm weight N(1, 0.02), bias 0."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d) and m.affine:
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)


@register_attack
class DFMS(Attack):
    """DFMS with soft labels (``dfms``); :class:`DFMSHL` is the hard-label attack of the paper.

    The two initial sets are proposed as they are due (several engine batches when a
    checkpoint falls inside one); the GAN stages run before the first and between the sets,
    spending no query; then every engine batch is one attack iteration of ``batch_size``
    images (fewer where a checkpoint or the budget's end is near).
    """

    name = "dfms"
    paper = "Sanyal, Addepalli, Babu, Towards Data-Free Model Stealing in a Hard Label Setting, CVPR 2022"
    data_modes = frozenset({"surrogate"})
    output_modes = frozenset({"soft_prob"})
    output_mode_reason = "dfms learns the victim's probabilities; its hard-label attack is dfms_hl"
    state_dependent_queries = True
    has_track_b = True
    Params = Params
    smoke_params = {"batch_size": 8, "latent_dim": 8, "generator_width": 4, "disc_width": 4, "gan_epochs": 1,
                    "divgan_epochs": 1, "clone_epochs": 2, "clone_batch_size": 16, "init_fraction": 0.05,
                    "gan_pool_size": 100}

    @classmethod
    def check_params(cls, params: Params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        check_param_ranges(params, ints={**dict.fromkeys(("batch_size", "latent_dim", "generator_width", "disc_width",
                                                             "clone_batch_size"), 1),
                                         **dict.fromkeys(("gan_epochs", "divgan_epochs", "clone_epochs"), 0)},
                           positive=("gan_lr", "clone_lr", "student_lr"), unit=("gan_beta1", "momentum"),
                           nonnegative=("div_weight", "div_weight_divgan", "weight_decay"))
        if not 0 < params.init_fraction <= 0.5:
            raise ConfigError("attack.params.init_fraction", params.init_fraction,
                              "must be in (0, 0.5]: two initial sets share at most the whole budget")
        if params.gan_pool_size is not None and (not isinstance(params.gan_pool_size, int) or params.gan_pool_size < 2):
            raise ConfigError("attack.params.gan_pool_size", params.gan_pool_size,
                              "must be an integer >= 2 (pool images the GAN learns from), or null for the whole pool")
        if not 0 <= params.proxy_ratio <= 1:
            raise ConfigError("attack.params.proxy_ratio", params.proxy_ratio, "must be in [0, 1]")

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        """Both initial sets' proxy images, all distinct; the discriminator's real batches reuse the pool."""
        return max(2 * proxy_count(params, init_set_size(params, max_budget)), 1)

    #: Pool size the estimate assumes when ``gan_pool_size`` is null (the whole pool).
    ESTIMATE_POOL = 60_000

    @classmethod
    def training_cost(cls, params: Any, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """Two clones (``clone_epochs`` on an initial set each), the GAN's ``gan_epochs`` +
        ``divgan_epochs`` over its pool, and the attack loop: each query after the two initial sets
        is one image of a generator-and-discriminator step (its clone step, diversity pass and
        augmentation are counted inside that unit, ``mebench.harness.cost.SECONDS_PER_GAN_EXAMPLE``)."""
        pool = params.gan_pool_size or cls.ESTIMATE_POOL
        width = (max(params.generator_width, params.disc_width) / 32) ** 2
        n_init = init_set_size(params, max_budget)
        loop = max(0, max_budget - 2 * n_init)
        return TrainingCost(2 * params.clone_epochs * n_init,
                            width * ((params.gan_epochs + params.divgan_epochs) * pool + loop))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        if ctx.pool is None:
            raise ConfigError("dataset.data_mode", ctx.data_mode, f"{self.name} needs the surrogate pool as its proxy data")
        self.hp: Params = ctx.params
        self.pool: "Pool" = ctx.pool
        self.device = ctx.device
        seed = draw_seed(ctx)
        self.rng = torch.Generator().manual_seed(seed + 1)             # latent codes, proxy draws (CPU)
        self.aug_rng = torch.Generator().manual_seed(seed + 2)         # AutoAugment and crop/flip
        self.generator = seeded_generator(self.hp.latent_dim, ctx.input_shape, self.hp.generator_width, seed,
                                          head_affine=True).to(self.device)
        self.clone = fresh_substitute(ctx, "dfms-clone-0")
        self.loss = loss_for(ctx.output_mode)
        self.n_init = init_set_size(self.hp, ctx.max_budget)
        self.n_proxy = proxy_count(self.hp, self.n_init)
        order = torch.randperm(len(self.pool), generator=self.rng)
        self.proxy_index = order[: 2 * self.n_proxy]   # the initial sets' pool images, never reused
        gan_n = len(self.pool) if self.hp.gan_pool_size is None else min(self.hp.gan_pool_size, len(self.pool))
        self.gan_index = torch.randperm(len(self.pool), generator=self.rng)[:gan_n].sort().values  # the GAN's proxy
        self.proxy_used: list[torch.Tensor] = []       # every pool index sent to the victim or to D
        self.stage = 0                                  # 0, 1: initial sets; 2: the attack loop
        self.queue: Optional[torch.Tensor] = None       # images of the current initial set not yet sent
        self.answers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.pending: Optional[tuple[QueryBatch, Optional[torch.Tensor]]] = None
        self.iterations = max(1, math.ceil((ctx.max_budget - 2 * self.n_init) / self.hp.batch_size))
        self.iteration = 0
        self.disc: Optional[Discriminator] = None
        self.opt_g = self.opt_d = self.opt_c = None

    # -- helpers ------------------------------------------------------------------------
    def _pixels(self, pre: torch.Tensor) -> torch.Tensor:
        return to_pixels(pre, "unit_tanh", self.ctx.profile.mean, self.ctx.profile.std)

    def _sample(self, n: int, grad: bool = False) -> torch.Tensor:
        z = torch.randn(n, self.hp.latent_dim, generator=self.rng).to(self.device)
        self.generator.train()
        with torch.set_grad_enabled(grad):
            return self._pixels(self.generator(z))

    def _real(self, n: int) -> torch.Tensor:
        idx = self.gan_index[torch.randint(len(self.gan_index), (n,), generator=self.rng)]
        self.proxy_used.append(idx)
        return self.pool.get(idx, self.device)

    def _new_gan(self) -> None:
        d = Discriminator(self.ctx.input_shape, self.hp.disc_width)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.ctx.seed, f"dfms-disc-{self.stage}"))
            dcgan_init(d)
        self.disc = d.to(self.device)
        betas = (self.hp.gan_beta1, 0.999)
        self.opt_d = torch.optim.Adam(self.disc.parameters(), lr=self.hp.gan_lr, betas=betas)
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hp.gan_lr, betas=betas)

    def _gan_step(self, real: torch.Tensor, fake: torch.Tensor, div: float, clone: Optional[nn.Module],
                  d_first: bool = True) -> None:
        """One discriminator and one generator step (BCE, plus the diversity term on ``clone``): the
        discriminator first in the GAN stages (DC:287-371, TG:403-499), last in the attack loop
        (TGC:642-754)."""
        if d_first:
            self._d_step(real, fake)
        assert self.opt_g is not None and self.disc is not None
        g_loss = F.binary_cross_entropy_with_logits(self.disc(fake * 2 - 1), torch.ones(len(fake), device=self.device))
        if clone is not None and div > 0:  # the clone is frozen: the diversity loss moves the generator only
            clone.requires_grad_(False)
            try:
                g_loss = g_loss + div * diversity_loss(clone(fake))
            finally:
                clone.requires_grad_(True)
        self.opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        self.opt_g.step()
        if not d_first:
            self._d_step(real, fake)
        if not bool(torch.isfinite(g_loss)):
            raise DivergenceError(f"{self.name}: generator loss is NaN/inf (stage {self.stage})")

    def _d_step(self, real: torch.Tensor, fake: torch.Tensor) -> None:
        assert self.disc is not None and self.opt_d is not None
        ones = torch.ones(len(real), device=self.device)
        zeros = torch.zeros(len(fake), device=self.device)
        d_loss = (F.binary_cross_entropy_with_logits(self.disc(real * 2 - 1), ones)
                  + F.binary_cross_entropy_with_logits(self.disc(fake.detach() * 2 - 1), zeros))
        self.opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        self.opt_d.step()
        if not bool(torch.isfinite(d_loss)):
            raise DivergenceError(f"{self.name}: discriminator loss is NaN/inf (stage {self.stage})")

    def _train_gan(self, epochs: int, div: float, clone: Optional[nn.Module]) -> None:
        """``epochs`` passes over the GAN's proxy images in batches of ``batch_size`` (stages 1 and 4; no query)."""
        self._new_gan()
        if clone is not None:
            clone.eval()
        b = self.hp.batch_size
        for _ in range(epochs):
            for pos in torch.randperm(len(self.gan_index), generator=self.rng).split(b):
                if len(pos) < 2:
                    continue
                idx = self.gan_index[pos]
                self.proxy_used.append(idx)
                self._gan_step(self.pool.get(idx, self.device), self._sample(len(idx), grad=True), div, clone)

    def _train_clone(self, x: torch.Tensor, y: torch.Tensor, tag: str) -> nn.Module:
        """A clone from scratch: SGD, cosine over ``clone_epochs`` epochs, pad-crop and flip (TS)."""
        if len(x) < 2:  # nothing to train on without breaking batch-norm clones
            return fresh_substitute(self.ctx, tag)
        hp = self.hp
        return train_fresh(self.ctx, x, y, tag, epochs=hp.clone_epochs, lr=hp.clone_lr, momentum=hp.momentum,
                           weight_decay=hp.weight_decay, batch_size=hp.clone_batch_size, cosine=True,
                           loss_fn=self.loss, min_batch=2,  # a one-image step would break batch-norm clones
                           transform=lambda b: crop_flip(b, 4, self.aug_gen(b.device)))

    def aug_gen(self, device: torch.device) -> Optional[torch.Generator]:
        """The augmentation generator where crop_flip draws (CPU runs only; CUDA uses the seeded global RNG)."""
        return self.aug_rng if device.type == "cpu" else None

    # -- stages -------------------------------------------------------------------------
    def _start_initial_set(self) -> None:
        proxy = self.proxy_index[self.stage * self.n_proxy:(self.stage + 1) * self.n_proxy]
        self.proxy_used.append(proxy)
        parts = [self.pool.get(proxy, self.device)] if len(proxy) else []
        if self.n_init - len(proxy) > 0:
            parts.append(self._sample(self.n_init - len(proxy)))
        self.queue = torch.cat(parts) if len(parts) > 1 else parts[0]
        self.answers = []

    def _finish_initial_set(self) -> None:
        x = torch.cat([a for a, _ in self.answers])
        y = torch.cat([b for _, b in self.answers])
        self.clone = self._train_clone(x, y, f"dfms-clone-{self.stage + 1}")
        self.stage += 1
        self.queue = None
        if self.stage == 1:  # stage 4: DivGAN against the frozen first clone, then the second set
            self._train_gan(self.hp.divgan_epochs, self.hp.div_weight_divgan, self.clone)
            self._start_initial_set()
        else:  # the attack loop: a fresh discriminator, the clone's own optimizer
            self._new_gan()
            self.opt_c = torch.optim.SGD(self.clone.parameters(), lr=self.hp.student_lr, momentum=self.hp.momentum,
                                         weight_decay=self.hp.weight_decay)

    def next_batch_size(self, state: "EngineState") -> int:
        if self.stage < 2:
            left = self.n_init if self.queue is None else len(self.queue)
            return max(1, min(left, state.budget_left))
        return max(1, min(self.hp.batch_size, state.budget_left))

    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if k < 1:
            raise ValueError(f"{self.name}: propose needs k >= 1 images, got {k}")
        if self.pending is not None:
            raise RuntimeError(f"{self.name}: propose called twice without observe")
        if self.stage == 0 and self.queue is None:
            self._train_gan(self.hp.gan_epochs, 0.0, None)  # stage 1: the DCGAN on the proxy pool
            self._start_initial_set()
        if self.stage < 2:
            assert self.queue is not None
            x, self.queue = self.queue[:k], self.queue[k:]
            if len(x) < k:  # the initial set is shorter than the engine offered: fill with GAN images
                x = torch.cat([x, self._sample(k - len(x))])
            batch = QueryBatch(x.detach(), {"phase": f"initial_set_{self.stage + 1}"})
            self.pending = (batch, None)
            return batch
        fake = self._sample(k, grad=True)
        x = auto_augment(fake, self.aug_rng).to(self.device)  # the victim labels an augmented copy
        if not bool(torch.isfinite(fake).all()):
            raise DivergenceError(f"{self.name}: the generator produced NaN/inf images at iteration {self.iteration}")
        batch = QueryBatch(x, {"phase": "attack", "iteration": self.iteration})
        self.pending = (batch, fake)
        return batch

    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending[0]:
            raise RuntimeError(f"{self.name}: observe must answer the batch of the last propose")
        if output.kind != self.ctx.output_mode:
            raise ConfigError("victim.output_mode", output.kind, self.output_mode_reason)
        y = output.y.to(self.device)
        x = batch.x.to(self.device)
        if self.stage < 2:
            self.answers.append((x, y))
            if self.queue is not None and len(self.queue) == 0:
                self._finish_initial_set()
            return
        fake = pending[1]
        assert fake is not None and self.opt_c is not None
        self._set_student_lr()
        if len(x) >= 2:  # one clone step on the victim-labelled augmented copy (TGC:547-562)
            self.clone.train()
            loss = self.loss(self.clone(x), y)
            if not bool(torch.isfinite(loss)):
                raise DivergenceError(f"{self.name}: clone loss is NaN/inf at iteration {self.iteration}")
            self.opt_c.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_c.step()
            self.clone.eval()
            self._gan_step(self._real(len(fake)), fake, self.hp.div_weight, self.clone, d_first=False)
        self.iteration += 1

    def _set_student_lr(self) -> None:
        assert self.opt_c is not None
        factor = 0.5 * (1.0 + math.cos(math.pi * min(self.iteration, self.iterations) / self.iterations))
        for group in self.opt_c.param_groups:
            group["lr"] = self.hp.student_lr * factor

    # -- Track B ------------------------------------------------------------------------
    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The current clone in eval mode (the native loop's model, contract §8)."""
        if not all(bool(torch.isfinite(p).all()) for p in self.clone.parameters()):
            raise DivergenceError(f"{self.name}: clone weights are NaN/inf at {state.queries_used} queries")
        return self.clone.eval()


@register_attack
class DFMSHL(DFMS):
    """DFMS-HL: the same stages on the victim's top-1 labels only (cross-entropy); refused for soft_prob."""

    name = "dfms_hl"
    output_modes = frozenset({"hard_top1"})
    output_mode_reason = "DFMS-HL is the hard-label attack: it reads the victim's top-1 label only"


__all__ = ["DFMS", "DFMSHL", "Discriminator", "Params", "diversity_loss", "init_set_size"]
