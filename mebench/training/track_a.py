"""Track A, the Standard From-scratch Protocol (contract §8).

For a checkpoint B: a fresh substitute initialised from ``substitute.init_seed`` (the same weights
at every checkpoint and for every run seed), a fresh optimizer and cosine LR schedule over
S(B) = ceil(c * B) steps at the profile's batch size (128 by default), no augmentation, KL loss for
``soft_prob`` and cross-entropy for ``hard_top1``, trained on D_B only. The batch order is seeded
with ``init_seed`` too, so on the CPU the same D_B always gives bit-identical weights and metrics.
See docs/contract.md (§8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from mebench.data.rowfile import RowsPrefix
from mebench.models.registry import build_model
from mebench.training.losses import loss_for
from mebench.training import fast as fast_options
from mebench.training import graphed
from mebench.training.loop import OptimizerSpec, steps_for_budget, train_steps
from mebench.training.spec import FastSpec


@dataclass(frozen=True)
class TrackASpec:
    """Everything Track A depends on besides D_B."""

    arch: str
    channels: int
    num_classes: int
    input_size: tuple[int, int]
    mean: Sequence[float]
    std: Sequence[float]
    init_seed: int
    batch_size: int
    steps_coeff_c: float
    optimizer: OptimizerSpec
    output_mode: str
    fast: FastSpec = FastSpec()

    @classmethod
    def from_config(cls, cfg, num_classes: int) -> "TrackASpec":
        s, v = cfg.substitute, cfg.victim
        return cls(s.arch, v.channels, num_classes, tuple(v.input_size), tuple(v.normalization.mean),
                   tuple(v.normalization.std), s.init_seed, s.trackA.batch_size, s.trackA.steps_coeff_c,
                   s.optimizer, cfg.attack.output_mode, s.trackA.fast)

    @classmethod
    def from_plan(cls, plan, num_classes: int) -> "TrackASpec":
        """The spec of a resolved plan (``mebench.run.plan``): the same fields ``from_config`` reads."""
        t, shape, norm = plan.track_a, tuple(plan.input_shape), plan.victim.normalization
        return cls(t.arch, shape[0], num_classes, shape[1:], tuple(norm["mean"]), tuple(norm["std"]), t.init_seed,
                   t.batch_size, t.steps_coeff_c, t.optimizer, plan.output_mode, t.fast if t.fast is not None else FastSpec())


class TrackATrainer:
    """Trains the Track A substitute for one checkpoint."""

    stackable = True  # its seeds can train as one stacked model (mebench.run.together; a test's stand-in is not)

    def __init__(self, spec: TrackASpec, device: torch.device | str) -> None:
        self.spec = spec
        self.device = torch.device(device)
        self.loss_fn = loss_for(spec.output_mode)
        self.last_step: dict = {}  # how the last training stepped (graphed or eager, and why)

    def steps(self, budget: int) -> int:
        return steps_for_budget(budget, self.spec.steps_coeff_c)

    def fresh_model(self) -> nn.Module:
        """The substitute at its fixed initialisation (built on CPU, so every device starts alike)."""
        s = self.spec
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s.init_seed)
            model = build_model(s.arch, s.channels, s.num_classes, s.input_size, s.mean, s.std)
        return model.to(self.device)

    def train(self, x: "torch.Tensor | RowsPrefix", y: Optional[torch.Tensor],
              on_step: Optional[Callable[[int], None]] = None,
              losses: Optional[torch.Tensor] = None) -> nn.Module:
        """A fresh model trained on D_B = (x, y) for S(len(x)) steps (``losses``: see ``train_steps``);
        ``x`` a ``RowsPrefix`` (``y`` None): D_B stays on disk and batches are read as needed."""
        fast = self.spec.fast
        model, finish = fast_options.for_training(self.fresh_model(), fast)
        g = torch.Generator().manual_seed(self.spec.init_seed)
        if not isinstance(x, RowsPrefix):
            x, y = x.to(self.device), y.to(self.device)
        self.last_step = {}
        model = train_steps(model, x, y, loss_fn=self.loss_fn,
                            steps=self.steps(len(x)), batch_size=self.spec.batch_size,
                            optimizer=self.spec.optimizer, generator=g, on_step=on_step, losses=losses,
                            transform=fast_options.input_layout(fast), step_info=self.last_step)
        return finish()


def train_seeds_together(trainer: TrackATrainer, datasets: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         on_step: Optional[Sequence[Optional[Callable[[int], None]]]] = None,
                         losses: Optional[Sequence[Optional[torch.Tensor]]] = None,
                         program: Optional[bool] = None) -> list[nn.Module]:
    """Track A for several seeds of one cell at once: one stacked model (``torch.func``).

    Every seed's substitute starts from the same weights (``init_seed``) and, since the D_B of a
    checkpoint have the same size B, draws the same batch indices from the same seeded
    generator; only the data differ. The S models' parameters are stacked along a new leading
    axis and the forward pass is ``vmap``-ed over (parameters, batch); the loss is the sum of the
    per-seed losses, so each model's gradient is its own, and SGD/Adam(W) with a cosine schedule
    act element-wise on the stacked tensors exactly as on S separate models. The result equals
    training the seeds one by one up to float rounding (the batched kernels sum in another order;
    ``contract_tests/test_track_a_batched.py`` bounds the difference). Models with batch norm are
    trained one by one (their running statistics are updated in place, which ``vmap`` does not
    batch), as are seeds whose D_B sizes differ and D_B read from disk (stacking them would load
    every seed's D_B into memory, ``mebench.data.rowfile``). ``on_step[s]`` and ``losses[s]`` (each may be
    ``None``) are seed s's step callback and per-step loss record, as in ``train_steps``.

    On CUDA the stacked step runs as a captured graph (``mebench.training.graphed``) unless
    ``graphed.why_eager`` says why not; ``program`` True/False forces the device program (run
    eagerly off CUDA: its tests) or the eager loop; ``trainer.last_step`` records which ran.
    """
    from torch.func import functional_call, stack_module_state

    sizes = {len(x) for x, _ in datasets}
    on_disk = any(isinstance(x, RowsPrefix) for x, _ in datasets)  # stacking would load every D_B
    models = [trainer.fresh_model() for _ in datasets]
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in models[0].modules())
    losses = list(losses) if losses is not None else [None] * len(datasets)
    calls = list(on_step) if on_step is not None else [None] * len(datasets)
    if len(datasets) < 2 or len(sizes) != 1 or has_bn or on_disk:
        return [trainer.train(x, y, on_step=c, losses=l) for (x, y), c, l in zip(datasets, calls, losses)]
    spec, dev = trainer.spec, trainer.device
    n = sizes.pop()
    steps = trainer.steps(n)
    params, buffers = stack_module_state(models)
    stacked = [p.detach().clone().requires_grad_(True) for p in params.values()]
    names = list(params)
    base = models[0].to("meta")

    def forward(p: tuple[torch.Tensor, ...], b: dict, xb: torch.Tensor) -> torch.Tensor:
        return functional_call(base, ({k: v for k, v in zip(names, p)}, b), (xb,))

    batched = torch.vmap(forward, in_dims=(0, 0, 0))
    xs = torch.stack([x.to(dev) for x, _ in datasets])
    ys = torch.stack([y.to(dev) for _, y in datasets])

    def loss_at(idx: torch.Tensor):
        out = batched(tuple(stacked), buffers, xs.index_select(1, idx))
        per_seed = [trainer.loss_fn(out[s], ys[s].index_select(0, idx)) for s in range(len(datasets))]
        return sum(per_seed), per_seed

    g = torch.Generator().manual_seed(spec.init_seed)
    why = graphed.why_eager(dev, spec.optimizer) if program is None else (None if program else "the eager loop was asked for")
    trainer.last_step = {"step": "eager", "why": why}
    if why is None:
        lrs = graphed.lr_values(spec.optimizer, steps, graphed.cosine_schedule(max(1, steps)))
        prog = graphed.StepProgram(stacked, loss_at, spec.optimizer, lrs, losses)
        graphed.run_blocks(prog, graphed.index_blocks(n, steps, spec.batch_size, g), steps,
                           capture=dev.type == "cuda", on_step=lambda step: [c(step) for c in calls if c is not None])
        trainer.last_step = {"step": prog.kind, "why": prog.capture_error}
    else:
        _train_stacked_eager(trainer, stacked, loss_at, steps, n, g, losses, calls)
    out_models = []
    for s in range(len(datasets)):
        m = trainer.fresh_model()
        with torch.no_grad():
            for name, p in zip(names, stacked):
                m.get_parameter(name).copy_(p[s])
        out_models.append(m.eval())
    return out_models


def _train_stacked_eager(trainer: TrackATrainer, stacked: list[torch.Tensor], loss_at: Callable, steps: int,
                         n: int, g: torch.Generator, losses: Sequence[Optional[torch.Tensor]],
                         calls: Sequence[Optional[Callable[[int], None]]]) -> None:
    """The stacked seeds' eager loop: ``torch.optim`` on the stacked parameters."""
    from mebench.errors import DivergenceError
    from mebench.training.loop import batch_indices, make_optimizer

    spec, dev = trainer.spec, trainer.device
    opt = make_optimizer(stacked, spec.optimizer)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
    finite = torch.ones((), dtype=torch.bool, device=dev)
    for step, idx in enumerate(batch_indices(n, steps, spec.batch_size, g), 1):
        loss, per_seed = loss_at(idx.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        finite &= torch.isfinite(loss.detach())
        for record, value in zip(losses, per_seed):
            if record is not None:
                record[step - 1] = value.detach()
        if step % 100 == 0 or step == steps:
            if not bool(finite):
                raise DivergenceError(f"training loss became NaN or infinite by step {step} of {steps}")
        for call in calls:
            if call is not None:
                call(step)
