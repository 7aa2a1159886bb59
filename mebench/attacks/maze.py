"""MAZE: data-free model stealing with zeroth-order gradient estimation.

Kariyappa, Prakash, Qureshi, "MAZE: Data-Free Model Stealing Attack Using Zeroth-Order Gradient
Estimation", CVPR 2021 (arXiv:2005.03161); reference code github.com/sanjaykariyappa/MAZE at d202ace.
A generator G maps noise to images; the clone learns the victim's probabilities with KL(victim ||
clone); G ascends that divergence along a zeroth-order estimate of its gradient (``ndirs`` random
directions a sample, every probe a query); a replay buffer gives the clone steps that cost no query.
The procedure, every default with its ``file:line`` (checked by the contract tests) and the
deviations with their measured effect: docs/attacks/maze.md.
"""
# The reference in detail (d202ace holds the code of 0bb05d0; ``file:line`` in that tree). One
# iteration (src/attacks/maze.py:110-225):
#
# 1. ``iter_gen`` generator steps: a batch of B samples, each sent with its ``ndirs`` probes
#    (B·(1 + ndirs) queries, src/attacks/attack_utils.py:213-237), one SGD step of G; the
#    directions are random unit vectors on the sphere, in G's pre-tanh output space;
# 2. ``iter_clone`` clone steps: the first reuses the last generator step's base batch and its
#    answers (maze.py:149, no new query), the others query B fresh generator images (maze.py:150-155);
# 3. ``iter_exp`` replay steps on shuffled batches of the buffer, which keeps the last clone batch
#    of every iteration with its answers (maze.py:196-222).
#
# So an iteration costs ``B·((iter_clone − 1) + (1 + ndirs)·iter_gen)`` queries (maze.py:39-41),
# every probe counted. The reference re-sends the reused base batch to the victim without counting
# it (maze.py:155); here its answers are kept from the generator step, so the victim sees every
# image once and the count is exact.
#
# Per data set (``Attack.dataset_defaults``): the authors publish one command, for FashionMNIST
# (README.md:17: ``--model_clone=wres22 --budget=5e6 --lr_clone=0.1 --lr_gen=1e-3 --iter_clone=5
# --iter_exp=10``); it differs from the argparse defaults only in ``lr_gen``. Every other data
# set (MNIST among them) gets the argparse defaults. The named CPU variant ``maze_fast`` changes only
# the clone (``clone_arch: lenet5``); a WRN-22 clone does not fit a CPU grid cell. The clone is
# ``clone_arch`` with the victim's normalization; Track A keeps the grid's ``substitute.arch``.
#
# Fixed as in the reference: cosine annealing of both learning rates to 0 over the run's iterations
# (maze.py:55-57, 266-271; here over ``ceil(max_budget / cost per iteration)``); the generator's loss
# is −KL(victim || clone) per sample, summed over classes (attack_utils.py:105-111), its estimate
# ``(d / ndirs) Σ_j (L(a + μ u_j) − L(a)) / μ · u_j`` divided by B (attack_utils.py:233-237) and
# back-propagated through G (attack_utils.py:252); the clone stays in train mode for the probes
# (maze.py:36); the replay buffer is unbounded and replays whole batches only (maze.py:204-213).
# The reference's white-box diagnostics (attack_utils.py:238-250, the victim's true gradient for a
# logged cosine) are not part of the attack and are left out. MAZE-PD (``alpha_gan > 0``) is not
# offered.

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import Attack, AttackContext, TrainingCost, check_param_ranges, register_attack
from mebench.attacks.dfme import check_generator_params, draw_seed, sphere_probes
from mebench.errors import ConfigError, DivergenceError
from mebench.models import MODELS, Normalized
from mebench.models.generators import seeded_generator, to_pixels
from mebench.registry import unknown_name_message
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

PROB_FLOOR = 1e-30

#: The authors' per-data-set commands where they differ from the ``Params`` defaults (the
#: argparse defaults): github.com/sanjaykariyappa/MAZE @ d202ace, README.md:17 (FashionMNIST).
DATASET_PRESETS: dict[str, dict[str, Any]] = {"FashionMNIST": {"lr_gen": 1e-3}}


@dataclass(frozen=True)
class Params:
    """MAZE hyperparameters; the defaults are the reference's (module docstring)."""

    batch_size: int = 128
    ndirs: int = 10
    mu: float = 1e-3
    iter_gen: int = 1
    iter_clone: int = 5
    iter_exp: int = 10
    latent_dim: int = 100
    generator_width: int = 64
    lr_clone: float = 0.1
    lr_gen: float = 1e-4
    clone_arch: str = "wrn22_2"
    momentum: float = 0.9
    weight_decay: float = 5e-4
    pixel_map: str = "unit_tanh"

    @property
    def nz(self) -> int:  # the name check_generator_params reads
        return self.latent_dim


def iteration_cost(p: Params) -> int:
    """Queries of one full iteration (maze.py:39-41)."""
    return p.batch_size * ((p.iter_clone - 1) + (1 + p.ndirs) * p.iter_gen)


def make_clone(ctx: AttackContext, arch: str, seed: int) -> nn.Module:
    """A fresh ``arch`` clone, initialised from ``seed`` without touching the global RNG stream, that
    takes ``[0, 1]`` pixels with the victim's normalization inside, as the substitute does (the
    normalization is read from one, so it is the engine's, whatever the profile says)."""
    with torch.random.fork_rng(devices=[]):
        ref = ctx.make_substitute()
        torch.manual_seed(seed)
        net = MODELS.get(arch)(ctx.input_shape[0], ctx.num_classes, tuple(ctx.input_shape[1:]))
    if isinstance(ref, Normalized):
        return Normalized(net, ref.mean.flatten().tolist(), ref.std.flatten().tolist())
    return Normalized(net, ctx.profile.mean, ctx.profile.std)


def kl_per_sample(victim_probs: torch.Tensor, clone_logits: torch.Tensor) -> torch.Tensor:
    """KL(victim || clone) of each row, summed over classes (0·log 0 = 0)."""
    p = victim_probs.float()
    logp = p.clamp_min(PROB_FLOOR).log()
    return (p * (logp - F.log_softmax(clone_logits, dim=1))).sum(dim=1)


class ReplayBuffer:
    """Queried images and their answers, appended in place (capacity doubles: no copy per iteration)."""

    def __init__(self) -> None:
        self.x: Optional[torch.Tensor] = None
        self.y: Optional[torch.Tensor] = None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        k = len(x)
        if self.x is None or self.n + k > len(self.x):
            cap = max(2 * (len(self.x) if self.x is not None else 0), self.n + k)
            nx, ny = x.new_empty(cap, *x.shape[1:]), y.new_empty(cap, *y.shape[1:])
            if self.x is not None:
                nx[: self.n], ny[: self.n] = self.x[: self.n], self.y[: self.n]
            self.x, self.y = nx, ny
        self.x[self.n : self.n + k], self.y[self.n : self.n + k] = x.detach(), y.detach()
        self.n += k

    def view(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.x is not None and self.y is not None
        return self.x[: self.n], self.y[: self.n]


@dataclass
class _Pending:
    batch: QueryBatch
    kind: str  # "generator" or "clone"
    n_gen: int = 0
    pre: Optional[torch.Tensor] = None
    u: Optional[torch.Tensor] = None


@register_attack
class MAZE(Attack):
    """MAZE: generator and clone, zeroth-order generator gradients on the KL divergence, replay.

    Each query-spending phase is one ``propose``/``observe`` pair: a generator step
    (``batch_size·(1 + ndirs)`` images) or a clone step (``batch_size`` images). The clone step
    that reuses the generator's base batch and the replay steps spend nothing and run inside
    ``observe``. When the engine offers fewer images (a checkpoint or the budget's end is near), a
    generator step uses ``k // (1 + ndirs)`` samples and gives the rest to a clone step, or, if
    ``k < 1 + ndirs``, becomes a clone step and stays due: every image offered is spent.
    """

    name = "maze"
    paper = "Kariyappa, Prakash, Qureshi, MAZE, CVPR 2021 (arXiv:2005.03161)"
    data_modes = frozenset({"data_free"})
    output_modes = frozenset({"soft_prob"})
    output_mode_reason = ("MAZE's clone and generator losses are KL divergences to the victim's "
                          "probabilities; a zeroth-order estimate on top-1 labels is zero almost everywhere")
    state_dependent_queries = True
    has_track_b = True
    Params = Params
    smoke_params = {"batch_size": 4, "ndirs": 2, "latent_dim": 8, "generator_width": 4, "iter_clone": 3, "iter_exp": 2,
                    "clone_arch": "tiny_mlp"}

    @classmethod
    def check_params(cls, params: Params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        check_param_ranges(params, ints={"batch_size": 1, "ndirs": 1, "iter_gen": 1, "iter_clone": 1, "iter_exp": 0})
        check_generator_params(params)
        check_param_ranges(params, positive=("mu", "lr_clone", "lr_gen"), unit=("momentum",),
                           nonnegative=("weight_decay",))
        if params.clone_arch not in MODELS:
            raise ConfigError("attack.params.clone_arch", params.clone_arch,
                              unknown_name_message("model", str(params.clone_arch), MODELS.names()))

    @classmethod
    def dataset_defaults(cls, dataset: str) -> dict[str, Any]:
        """The authors' command for ``dataset`` (``DATASET_PRESETS``), else nothing."""
        return dict(DATASET_PRESETS.get(dataset, {}))

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        return 0

    @classmethod
    def training_cost(cls, params: Params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """The query loop's own work on the clone architecture (a WRN-22-2 step costs ~100 LeNet-5 steps),
        per iteration (``iteration_cost`` queries): the clone's forward on the ``bs * (1 + ndirs)``
        probes of each generator step, one clone step on the base batch, ``iter_clone - 1`` on fresh
        batches and ``iter_exp`` replay steps (all of ``bs`` images), one generator forward-backward
        of ``bs`` per generator step and ``(iter_clone - 1) * bs`` generator forwards."""
        p, bs = params, params.batch_size
        n = max_budget / iteration_cost(p)
        width = (p.generator_width / 64) ** 2
        return TrainingCost(substitute_examples=round(n * bs * (1 + (p.iter_clone - 1) + p.iter_exp)),
                            forward_examples=n * bs * (1 + p.ndirs) * p.iter_gen,
                            generator_examples=n * width * bs * (p.iter_gen + (p.iter_clone - 1) / 3),
                            model_arch=p.clone_arch)

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.hp: Params = ctx.params
        self.device = ctx.device
        seed = draw_seed(ctx)  # as DFME and untrained_generator: same seed, same initial generator
        self.generator = seeded_generator(self.hp.latent_dim, ctx.input_shape, self.hp.generator_width, seed,
                                          head_affine=True).to(self.device)
        self.clone = make_clone(ctx, self.hp.clone_arch, seed + 2).to(self.device)
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(seed + 1)
        self.replay_rng = torch.Generator().manual_seed(seed + 3)
        hp = self.hp
        self.opt_c = torch.optim.SGD(self.clone.parameters(), lr=hp.lr_clone, momentum=hp.momentum,
                                     weight_decay=hp.weight_decay)
        self.opt_g = torch.optim.SGD(self.generator.parameters(), lr=hp.lr_gen, momentum=hp.momentum,
                                     weight_decay=hp.weight_decay)
        self.iterations = max(1, math.ceil(ctx.max_budget / iteration_cost(hp)))
        self.iteration = 0
        self.gen_done = 0      # generator steps done in this iteration
        self.clone_done = 0    # query-spending clone steps done in this iteration
        self.last_base: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # reused by clone step 0
        self.last_clone: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        self.replay = ReplayBuffer()
        self.pending: Optional[_Pending] = None
        self._set_learning_rates()

    # -- schedule -----------------------------------------------------------------------
    def _set_learning_rates(self) -> None:
        factor = 0.5 * (1.0 + math.cos(math.pi * min(self.iteration, self.iterations) / self.iterations))
        for opt, base in ((self.opt_c, self.hp.lr_clone), (self.opt_g, self.hp.lr_gen)):
            for group in opt.param_groups:
                group["lr"] = base * factor

    def _phase_cost(self) -> int:
        if self.gen_done < self.hp.iter_gen:
            return self.hp.batch_size * (1 + self.hp.ndirs)
        return self.hp.batch_size

    def next_batch_size(self, state: "EngineState") -> int:
        return max(1, min(self._phase_cost(), state.budget_left))

    # -- propose ------------------------------------------------------------------------
    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if k < 1:
            raise ValueError(f"maze: propose needs k >= 1 images, got {k}")
        if self.pending is not None:
            raise RuntimeError("maze: propose called twice without observe")
        m = self.hp.ndirs
        want_gen = self.gen_done < self.hp.iter_gen
        n_gen = k // (m + 1) if want_gen and k >= m + 1 else 0
        parts, pre, u = [], None, None
        if n_gen:
            pre, u, probes = self._generator_probes(n_gen)
            parts.append(probes)
        if k - n_gen * (m + 1):
            parts.append(self._sample_images(k - n_gen * (m + 1)))
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        if not bool(torch.isfinite(x).all()):
            raise DivergenceError(f"maze: the generator produced NaN/inf images at iteration {self.iteration}")
        kind = "generator" if n_gen else "clone"
        batch = QueryBatch(x, {"phase": kind, "iteration": self.iteration, "generator_samples": n_gen, "ndirs": m})
        self.pending = _Pending(batch, kind, n_gen, pre, u)
        return batch

    def _sample_images(self, n: int) -> torch.Tensor:
        z = torch.randn(n, self.hp.latent_dim, generator=self.rng, device=self.device)
        self.generator.train()
        with torch.no_grad():
            return self._to_pixels(self.generator(z))

    def _to_pixels(self, pre: torch.Tensor) -> torch.Tensor:
        return to_pixels(pre, self.hp.pixel_map, self.ctx.profile.mean, self.ctx.profile.std)

    def _generator_probes(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pre-tanh outputs (with graph), unit directions and the ``n·(1 + ndirs)`` probe images
        (per sample: the base image, then its perturbed copies; attack_utils.py:222-231)."""
        z = torch.randn(n, self.hp.latent_dim, generator=self.rng, device=self.device)
        self.generator.train()
        pre = self.generator(z)
        u, points = sphere_probes(pre, self.hp.ndirs, self.hp.mu, self.rng)
        with torch.no_grad():
            probes = self._to_pixels(points)
        return pre, u, probes

    # -- observe ------------------------------------------------------------------------
    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending.batch:
            raise RuntimeError("maze: observe must answer the batch of the last propose")
        if output.kind != "soft_prob":
            raise ConfigError("victim.output_mode", output.kind, self.output_mode_reason)
        y = output.y.to(self.device).float()
        x = batch.x.to(self.device)
        head = pending.n_gen * (self.hp.ndirs + 1)
        if pending.n_gen:
            self._generator_step(pending, x[:head], y[:head])
            base = slice(0, head, self.hp.ndirs + 1)
            self.last_base = (x[base], y[base])
            self.gen_done += 1
            if self.gen_done == self.hp.iter_gen:  # clone step 0 reuses the base batch (maze.py:149)
                self._clone_step(*self.last_base)
                self.last_clone = self.last_base
                self._end_iteration_if_done()
        if len(batch) - head >= 1:
            rest = (x[head:], y[head:])
            if len(batch) - head >= 2:  # a one-image step would break batch-norm clones
                self._clone_step(*rest)
            self.last_clone = rest
            if not pending.n_gen and self.gen_done < self.hp.iter_gen:
                return  # a generator step too small for one sample: it stays due
            if not pending.n_gen:
                self.clone_done += 1
                self._end_iteration_if_done()

    def _end_iteration_if_done(self) -> None:
        if self.gen_done < self.hp.iter_gen or self.clone_done < self.hp.iter_clone - 1:
            return
        if self.last_clone is not None:
            self.replay.add(*self.last_clone)
        self._replay()
        self.iteration += 1
        self.gen_done = self.clone_done = 0
        self.last_clone = None
        self._set_learning_rates()

    def _generator_step(self, pending: _Pending, x: torch.Tensor, y: torch.Tensor) -> None:
        """One SGD step of G on the estimated gradient of −KL(victim || clone) (attack_utils.py:213-252)."""
        n, m = pending.n_gen, self.hp.ndirs
        self.clone.train()
        with torch.no_grad():
            loss = -kl_per_sample(y, self.clone(x)).view(n, m + 1)
            d = pending.u[0, 0].numel()
            diff = (loss[:, 1:] - loss[:, :1]) / self.hp.mu
            grad = diff.view(n, m, *([1] * (pending.u.dim() - 2))).mul(pending.u).sum(dim=1).mul(d / m) / n
        if not (bool(torch.isfinite(loss).all()) and bool(torch.isfinite(grad).all())):
            raise DivergenceError(f"maze: generator loss or gradient estimate is NaN/inf at iteration {self.iteration}")
        self.opt_g.zero_grad(set_to_none=True)
        pending.pre.backward(grad)
        self.opt_g.step()
        self.last_generator_loss = float(loss[:, 0].mean())

    def _clone_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One SGD step of C on KL(victim || clone), batch mean (attack_utils.py:123-129)."""
        self.clone.train()
        loss = kl_per_sample(y, self.clone(x)).mean()
        if not bool(torch.isfinite(loss)):
            raise DivergenceError(f"maze: clone KL loss is {float(loss.detach())} at iteration {self.iteration} "
                                  f"(lr_clone={self.hp.lr_clone})")
        self.opt_c.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_c.step()
        self.last_clone_loss = float(loss.detach())

    def _replay(self) -> None:
        """``iter_exp`` clone steps on whole shuffled batches of the buffer, cycling over the first
        shuffled pass when the buffer holds fewer (maze.py:204-220); no query."""
        b = self.hp.batch_size
        full = len(self.replay) // b
        if full == 0 or self.hp.iter_exp == 0:
            return
        xs, ys = self.replay.view()
        order = torch.randperm(len(xs), generator=self.replay_rng).to(xs.device)
        for i in range(self.hp.iter_exp):
            idx = order[(i % full) * b:(i % full + 1) * b]
            self._clone_step(xs[idx], ys[idx])

    # -- Track B ------------------------------------------------------------------------
    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The current clone in eval mode (the native loop's model, contract §8)."""
        if not all(bool(torch.isfinite(p).all()) for p in self.clone.parameters()):
            raise DivergenceError(f"maze: clone weights are NaN/inf at {state.queries_used} queries")
        return self.clone.eval()


__all__ = ["DATASET_PRESETS", "MAZE", "Params", "iteration_cost", "kl_per_sample", "make_clone"]
