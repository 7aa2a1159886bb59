"""DFME: data-free model extraction with a generator and zeroth-order gradients.

Truong, Maini, Walls, Papernot, "Data-Free Model Extraction", CVPR 2021 (arXiv:2011.14779). Every
image sent to the oracle counts, the m perturbed probes included: one iteration costs
``batch_size * (generator_steps * (grad_m + 1) + student_steps)`` queries.

The procedure, the reference values (cake-lab/datafree-model-extraction at 525b76c) with their
``file:line``, the fixed behaviour and the deviations are documented once, in
``docs/attacks/dfme.md``; a contract test checks ``Params``' defaults against that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks.base import Attack, AttackContext, TrainingCost, register_attack
from mebench.errors import ConfigError, DivergenceError
from mebench.models.generators import PIXEL_MAPS, seeded_generator, to_pixels
from mebench.types import OracleOutput, QueryBatch

if TYPE_CHECKING:
    from mebench.state import EngineState

#: Probabilities below this are raised to it before ``log`` (float32 keeps 1e-30 exactly enough).
PROB_FLOOR = 1e-30


@dataclass(frozen=True)
class Params:
    """DFME hyperparameters; the defaults are the reference's (cited in docs/attacks/dfme.md)."""

    batch_size: int = 256
    grad_m: int = 1
    grad_epsilon: float = 1e-3
    generator_steps: int = 1
    student_steps: int = 5
    nz: int = 256
    generator_width: int = 64
    lr_student: float = 0.1
    lr_generator: float = 1e-4
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_gamma: float = 0.3
    lr_milestones: tuple[float, ...] = (0.1, 0.3, 0.5)
    #: ``normalized_tanh`` (reference) or ``unit_tanh``, see ``mebench.models.generators.to_pixels``.
    pixel_map: str = "normalized_tanh"


SAMPLE_MODES = ("eval", "train")
"""How DisGUIDE and Dual Students sample their queries: the generator in eval mode (both references)
or in train mode (batch-norm on each query batch's own statistics; a named variant)."""


def check_generator_params(params: Any) -> None:
    """Value rules shared by every attack that builds a DFME generator (``nz``, width, pixel map)."""
    for key in ("nz", "generator_width"):
        value = getattr(params, key)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"attack.params.{key}", value, "must be a positive integer")
    if params.pixel_map not in PIXEL_MAPS:
        raise ConfigError("attack.params.pixel_map", params.pixel_map, f"must be one of {', '.join(PIXEL_MAPS)}")
    mode = getattr(params, "sample_mode", "eval")
    if mode not in SAMPLE_MODES:
        raise ConfigError("attack.params.sample_mode", mode, f"must be one of {', '.join(SAMPLE_MODES)}")


def check_lr_schedule(params: Any) -> None:
    """``lr_gamma`` in (0, 1] and ``lr_milestones`` increasing fractions of the budget (DFME's step
    schedule, shared by the attacks built on its loop)."""
    if not 0 < params.lr_gamma <= 1:
        raise ConfigError("attack.params.lr_gamma", params.lr_gamma, "must be in (0, 1]")
    ms = tuple(params.lr_milestones)
    if any(not 0 < x < 1 for x in ms) or list(ms) != sorted(ms):
        raise ConfigError("attack.params.lr_milestones", list(ms), "must be increasing fractions of the budget in (0, 1)")


def draw_seed(ctx: AttackContext) -> int:
    """The one seed every random stream of a generator attack derives from (drawn from the run's)."""
    return int(torch.randint(0, 2**62, (1,), generator=ctx.generator))


def recover_logits(probs: torch.Tensor) -> torch.Tensor:
    """Victim logits up to a per-row constant: ``log p - mean(log p)`` (paper's mean correction)."""
    logp = probs.float().clamp_min(PROB_FLOOR).log()
    return logp - logp.mean(dim=1, keepdim=True)


def disagreement(student_logits: torch.Tensor, victim_logits: torch.Tensor) -> torch.Tensor:
    """Per-image l1 distance between logit vectors (mean over classes), the quantity G maximizes."""
    return (student_logits - victim_logits).abs().mean(dim=1)


def forward_difference_gradient(f: torch.Tensor, u: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Zeroth-order gradient of ``f`` at each base point.

    ``f`` is ``[n, m + 1]`` (column 0: the base point, column j: base + eps * u_j)
    and ``u`` is ``[n, m, *shape]`` of unit directions. Returns ``[n, *shape]``:
    ``d / m * sum_j (f_j - f_0) / eps * u_j`` with ``d`` the input dimension.
    """
    n, m = u.shape[0], u.shape[1]
    d = u[0, 0].numel()
    diff = (f[:, 1:] - f[:, :1]) / epsilon
    return diff.view(n, m, *([1] * (u.dim() - 2))).mul(u).mean(dim=1).mul(d)


def sphere_probes(pre: torch.Tensor, m: int, eps: float, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``m`` random unit directions per sample (uniform on the sphere of the sample's shape) and the
    probe points, laid out per sample: the base point, then its ``m`` copies at ``eps`` along them
    (``[n * (m + 1), *shape]``, no graph). DFME and MAZE estimate their generator gradients here."""
    n = pre.shape[0]
    u = torch.randn(n, m, *pre.shape[1:], generator=rng, device=pre.device)
    u = u / u.flatten(2).norm(dim=2).clamp_min(1e-12).view(n, m, *([1] * (pre.dim() - 1)))
    with torch.no_grad():
        base = pre.detach().unsqueeze(1)
        points = torch.cat([base, base + eps * u], dim=1).flatten(0, 1)
    return u, points


@dataclass
class _Pending:
    """What ``propose`` handed out and ``observe`` needs to learn from its answer."""

    batch: QueryBatch
    generator_phase: bool
    n_gen: int  # generator samples (each with m perturbed copies) at the head of the batch
    pre: Optional[torch.Tensor] = None  # [n_gen, C, H, W] pre-activations, with graph
    u: Optional[torch.Tensor] = None  # [n_gen, m, C, H, W] unit directions


@register_attack
class DFME(Attack):
    """Data-free extraction: generator vs. student with zeroth-order generator gradients.

    One iteration is ``generator_steps`` generator phases (``batch_size`` samples, each
    sent with its ``grad_m`` probes) then ``student_steps`` student phases; each phase is
    one ``propose``/``observe`` pair and ``next_batch_size`` is its cost. When the engine
    offers fewer images (a checkpoint is near), a generator phase uses ``k // (m + 1)``
    samples and gives the rest to a student step, or, if ``k < m + 1``, becomes a student
    step and stays due: every call makes progress and none overdraws the budget.
    """

    name = "dfme"
    paper = "Truong et al., Data-Free Model Extraction, CVPR 2021 (arXiv:2011.14779)"
    data_modes = frozenset({"data_free"})
    output_modes = frozenset({"soft_prob"})
    output_mode_reason = ("DFME recovers the victim's logits from its probabilities (log, then "
                          "mean-centering) for its l1 losses; a top-1 label carries no logits")
    state_dependent_queries = True
    has_track_b = True
    Params = Params
    smoke_params = {"batch_size": 4, "grad_m": 2, "nz": 8, "generator_width": 4, "student_steps": 3}

    @classmethod
    def check_params(cls, params: Params, max_budget: int, checkpoints: tuple[int, ...]) -> None:
        for key in ("batch_size", "grad_m", "generator_steps", "student_steps"):
            value = getattr(params, key)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"attack.params.{key}", value, "must be a positive integer")
        check_generator_params(params)
        for key in ("grad_epsilon", "lr_student", "lr_generator"):
            value = getattr(params, key)
            if not value > 0:
                raise ConfigError(f"attack.params.{key}", value, "must be > 0")
        if not 0 <= params.momentum < 1:
            raise ConfigError("attack.params.momentum", params.momentum, "must be in [0, 1)")
        if params.weight_decay < 0:
            raise ConfigError("attack.params.weight_decay", params.weight_decay, "must be >= 0")
        check_lr_schedule(params)

    @classmethod
    def required_pool_size(cls, params: Any, max_budget: int) -> int:
        return 0

    @classmethod
    def training_cost(cls, params: Params, checkpoints: tuple[int, ...], max_budget: int) -> TrainingCost:
        """The query loop's own work, per iteration of ``bs * (m + 1) + student_steps * bs`` queries (one
        generator step): the student's forward on the ``bs * (m + 1)`` probes, ``student_steps`` student
        steps of ``bs`` images, one generator forward-backward of ``bs`` and ``student_steps * bs``
        generator forwards (the students' images)."""
        p, bs = params, params.batch_size
        per_iter = bs * (p.grad_m + 1) * p.generator_steps + p.student_steps * bs
        n = max_budget / per_iter
        width = (p.generator_width / 64) ** 2
        return TrainingCost(substitute_examples=round(n * p.student_steps * bs),
                            forward_examples=n * bs * (p.grad_m + 1) * p.generator_steps,
                            generator_examples=n * width * (bs * p.generator_steps + p.student_steps * bs / 3))

    def __init__(self, ctx: AttackContext) -> None:
        super().__init__(ctx)
        self.hp: Params = ctx.params
        self.device = ctx.device
        seed = draw_seed(ctx)
        self.generator = seeded_generator(self.hp.nz, ctx.input_shape, self.hp.generator_width, seed).to(self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 2)
            self.student = ctx.make_substitute().to(self.device)
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(seed + 1)
        self.opt_s = torch.optim.SGD(self.student.parameters(), lr=self.hp.lr_student,
                                     momentum=self.hp.momentum, weight_decay=self.hp.weight_decay)
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hp.lr_generator)
        self.phase = 0  # index in the iteration: [0, n_G) generator phases, then student phases
        self.iteration = 0
        self.pending: Optional[_Pending] = None
        self.last_student_loss = float("nan")
        self.last_generator_loss = float("nan")

    # -- schedule -----------------------------------------------------------------------
    @property
    def _in_generator_phase(self) -> bool:
        return self.phase < self.hp.generator_steps

    def _phase_cost(self) -> int:
        if self._in_generator_phase:
            return self.hp.batch_size * (self.hp.grad_m + 1)
        return self.hp.batch_size

    def next_batch_size(self, state: "EngineState") -> int:
        return max(1, min(self._phase_cost(), state.budget_left))

    def _advance(self) -> None:
        self.phase += 1
        if self.phase == self.hp.generator_steps + self.hp.student_steps:
            self.phase = 0
            self.iteration += 1

    def _set_learning_rates(self, state: "EngineState") -> None:
        progress = state.queries_used / max(1, state.max_budget)
        factor = self.hp.lr_gamma ** sum(progress >= x for x in self.hp.lr_milestones)
        for opt, base in ((self.opt_s, self.hp.lr_student), (self.opt_g, self.hp.lr_generator)):
            for group in opt.param_groups:
                group["lr"] = base * factor

    # -- propose ------------------------------------------------------------------------
    def propose(self, k: int, state: "EngineState") -> QueryBatch:
        if k < 1:
            raise ValueError(f"dfme: propose needs k >= 1 images, got {k}")
        if self.pending is not None:
            raise RuntimeError("dfme: propose called twice without observe")
        self._set_learning_rates(state)
        m = self.hp.grad_m
        generator_phase = self._in_generator_phase and k >= m + 1
        n_gen = k // (m + 1) if generator_phase else 0
        parts, pre, u = [], None, None
        if n_gen:
            pre, u, probes = self._generator_probes(n_gen)
            parts.append(probes)
        if k - n_gen * (m + 1):
            parts.append(self._sample_images(k - n_gen * (m + 1)))
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        if not bool(torch.isfinite(x).all()):
            raise DivergenceError(f"dfme: the generator produced NaN/inf images at iteration {self.iteration}")
        meta = {"phase": "generator" if generator_phase else "student", "iteration": self.iteration,
                "generator_samples": n_gen, "grad_m": m}
        batch = QueryBatch(x, meta)
        self.pending = _Pending(batch, self._in_generator_phase, n_gen, pre, u)
        return batch

    def _sample_images(self, n: int) -> torch.Tensor:
        """``n`` fresh generator images in pixel space (no graph: student training data)."""
        z = torch.randn(n, self.hp.nz, generator=self.rng, device=self.device)
        self.generator.train()
        with torch.no_grad():
            return self._to_pixels(self.generator(z))

    def _to_pixels(self, pre: torch.Tensor) -> torch.Tensor:
        return to_pixels(pre, self.hp.pixel_map, self.ctx.profile.mean, self.ctx.profile.std)

    def _generator_probes(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pre-activations (with graph), unit directions and the ``n * (m + 1)`` probe images.

        Probe images are laid out per sample: the base image, then its m perturbed copies.
        """
        z = torch.randn(n, self.hp.nz, generator=self.rng, device=self.device)
        self.generator.train()
        pre = self.generator(z)
        u, points = sphere_probes(pre, self.hp.grad_m, self.hp.grad_epsilon, self.rng)
        with torch.no_grad():
            probes = self._to_pixels(points)
        return pre, u, probes

    # -- observe ------------------------------------------------------------------------
    def observe(self, batch: QueryBatch, output: OracleOutput, state: "EngineState") -> None:
        pending, self.pending = self.pending, None
        if pending is None or batch is not pending.batch:
            raise RuntimeError("dfme: observe must answer the batch of the last propose")
        if output.kind != "soft_prob":
            raise ConfigError("victim.output_mode", output.kind, self.output_mode_reason)
        target = recover_logits(output.y.to(self.device))
        head = pending.n_gen * (self.hp.grad_m + 1)
        if pending.n_gen:
            self._generator_step(pending, batch.x[:head], target[:head])
        if len(batch) - head >= 2:  # a one-image step would break batch-norm students
            self._student_step(batch.x[head:].to(self.device), target[head:])
        if pending.n_gen or not pending.generator_phase:
            self._advance()

    def _generator_step(self, pending: _Pending, x: torch.Tensor, target: torch.Tensor) -> None:
        """One Adam step of G ascending the estimated disagreement, scaled as in the reference.

        The reference's estimate is that of the batch-mean disagreement divided by the
        number of classes (dfme/approximate_gradients.py:104); Adam is nearly blind to the scale.
        """
        n, m = pending.n_gen, self.hp.grad_m
        self.student.eval()
        with torch.no_grad():
            f = disagreement(self.student(x.to(self.device)), target).view(n, m + 1)
            grad = forward_difference_gradient(f, pending.u, self.hp.grad_epsilon)
        if not (bool(torch.isfinite(f).all()) and bool(torch.isfinite(grad).all())):
            raise DivergenceError(f"dfme: generator loss or gradient estimate is NaN/inf "
                                  f"at iteration {self.iteration}")
        self.opt_g.zero_grad(set_to_none=True)
        pending.pre.backward(-grad / (n * target.shape[1]))  # ascend the disagreement
        self.opt_g.step()
        self.last_generator_loss = float(f[:, 0].mean())

    def _student_step(self, x: torch.Tensor, target: torch.Tensor) -> None:
        """One SGD step of S on the l1 distance to the recovered victim logits."""
        self.student.train()
        loss = F.l1_loss(self.student(x), target)
        if not bool(torch.isfinite(loss)):
            raise DivergenceError(f"dfme: student l1 loss is {float(loss.detach())} at iteration {self.iteration} "
                                  f"(lr_student={self.hp.lr_student})")
        self.opt_s.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_s.step()
        self.last_student_loss = float(loss.detach())

    # -- Track B ------------------------------------------------------------------------
    def track_b_model(self, state: "EngineState") -> Optional[nn.Module]:
        """The current student in eval mode (the native online loop's model, contract §8)."""
        if not all(bool(torch.isfinite(p).all()) for p in self.student.parameters()):
            raise DivergenceError(f"dfme: student weights are NaN/inf at {state.queries_used} queries")
        return self.student.eval()
