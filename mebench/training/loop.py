"""A plain, fast step-based training loop shared by Track A and attacks' native loops.

Data stay as tensors (on the training device when they fit); a step indexes a
batch out of them: no DataLoader, no per-sample Python. Batches come from
back-to-back random permutations of the data (every example once per epoch),
drawn from an explicit ``torch.Generator`` so the order is reproducible.
See docs/guide/performance.md.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from mebench.data.rowfile import RowsPrefix
from mebench.errors import DivergenceError
from mebench.training import graphed, maxpool
from mebench.training.spec import OPTIMIZER_NAMES, OptimizerSpec  # noqa: F401  (defined torch-free; re-exported)

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_optimizer(params, spec: OptimizerSpec) -> torch.optim.Optimizer:
    """A fresh optimizer (no state carried over: contract §8 reset rule).

    SGD updates all parameters with one multi-tensor (``foreach``) kernel per operation: the same
    element-wise operations in the same order as the per-parameter loop, so bit-identical
    (no slower on the CPU) (``mebench.training.fast``; ``contract_tests/test_track_a_fast.py``).
    """
    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum,
                               weight_decay=spec.weight_decay, nesterov=spec.nesterov, foreach=True)
    if spec.name == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    if spec.name == "adamw":
        return torch.optim.AdamW(params, lr=spec.lr, weight_decay=spec.weight_decay)
    raise ValueError(f"unknown optimizer {spec.name!r}; valid: {', '.join(OPTIMIZER_NAMES)}")


def batch_indices(n: int, steps: int, batch_size: int, generator: torch.Generator,
                  chunk_steps: int = 512) -> Iterator[torch.Tensor]:
    """Yield ``steps`` index batches of ``batch_size`` from consecutive permutations of ``range(n)``.

    Permutations are concatenated, so a batch may straddle two epochs; when
    ``n < batch_size`` indices repeat within a batch. Generated in chunks so
    memory stays flat for millions of steps.
    """
    for block in graphed.index_blocks(n, steps, batch_size, generator, chunk_steps):
        yield from block


def train_steps(
    model: nn.Module,
    x: "torch.Tensor | RowsPrefix",
    y: Optional[torch.Tensor],
    *,
    loss_fn: LossFn,
    steps: int,
    batch_size: int,
    optimizer: OptimizerSpec,
    generator: torch.Generator,
    cosine: bool = True,
    check_every: int = 100,
    on_step: Optional[Callable[[int], None]] = None,
    transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    losses: Optional[torch.Tensor] = None,
    schedule_steps: Optional[int] = None,
    step_info: Optional[dict] = None,
) -> nn.Module:
    """Train ``model`` for ``steps`` steps on ``(x, y)`` with a fresh optimizer and schedule.

    ``x``/``y`` may live on the CPU (batches are moved) or on the model's device
    (fast path); ``x`` may also be a ``RowsPrefix`` (D_B left on disk, ``y`` then ``None``),
    whose batches are read as they are needed, so memory stays flat in B. ``transform`` (e.g.
    augmentation for victim recipes; Track A, which never augments (§5), uses it only for a
    memory-layout change, ``mebench.training.fast``) is applied to each input batch. ``losses``, a float tensor of ``steps``
    entries on the model's device, receives each step's loss (a device copy, no host
    synchronisation; ``mebench.training.health`` reads it). ``schedule_steps`` (at least ``steps``)
    is the cosine schedule's length when training stops early on it (default: ``steps``). Raises
    ``DivergenceError`` if the loss becomes NaN or infinite.

    On CUDA the step runs as a captured CUDA graph (``mebench.training.graphed``: the same batches,
    learning rates and update) unless ``graphed.why_eager`` gives a reason not to; ``step_info``
    (a dict) receives ``step`` (``graphed`` or ``eager``) and ``why`` (the reason, or ``None``).
    """
    device = next(model.parameters()).device
    why = graphed.why_eager_for(model, x, y, optimizer)
    if why is None:
        program = graphed.train_steps(model, x, y, loss_fn=loss_fn, steps=steps, batch_size=batch_size,
                                      optimizer=optimizer, generator=generator, cosine=cosine,
                                      schedule_steps=schedule_steps, transform=transform, losses=losses,
                                      on_step=on_step, check_every=check_every)
        _tell(step_info, program.kind, program.capture_error)
        return model
    _tell(step_info, "eager", why)
    opt = make_optimizer(model.parameters(), optimizer)
    t_max = max(1, steps, schedule_steps or 0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max) if cosine else None
    model.train()
    finite = torch.ones((), dtype=torch.bool, device=device)
    for step, idx in enumerate(batch_indices(len(x), steps, batch_size, generator), 1):
        xb, yb = _batch(x, y, idx, device)
        if transform is not None:
            xb = transform(xb)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        finite &= torch.isfinite(loss.detach())
        if losses is not None:
            losses[step - 1] = loss.detach()
        if step % check_every == 0 or step == steps:
            if not bool(finite):
                raise DivergenceError(f"training loss became NaN or infinite by step {step} of {steps}")
        if on_step is not None:
            on_step(step)
    model.eval()
    return model


def _batch(x: "torch.Tensor | RowsPrefix", y: Optional[torch.Tensor], idx: torch.Tensor,
           device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows ``idx`` of (x, y) on ``device``; ``x`` a ``RowsPrefix`` reads them from disk (y unused)."""
    if isinstance(x, RowsPrefix):
        xb, yb = x.take(idx)
        return xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
    idx_d = idx.to(x.device) if x.device != idx.device else idx
    return (x.index_select(0, idx_d).to(device, non_blocking=True),
            y.index_select(0, idx_d).to(device, non_blocking=True))


def _tell(step_info: Optional[dict], step: str, why: Optional[str]) -> None:
    """Say in ``step_info`` (when given) how a training stepped and why (``train_steps``)."""
    if step_info is not None:
        step_info.update(step=step, why=why)


def steps_for_budget(budget: int, c: float) -> int:
    """S(B) = ceil(c * B) (contract §8), computed exactly for decimal c like 0.2."""
    from fractions import Fraction

    return math.ceil(Fraction(str(c)) * budget)


def train_epochs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    loss_fn: LossFn,
    epochs: int,
    batch_size: int,
    optimizer: OptimizerSpec,
    generator: torch.Generator,
    lr_step: Optional[int] = None,
    lr_gamma: float = 0.1,
    cosine: bool = False,
    transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    min_batch: int = 1,
    step_info: Optional[dict] = None,
) -> nn.Module:
    """Epoch-based training as most attack papers' code does it: each epoch one random
    permutation of ``(x, y)`` in batches of ``batch_size`` (the last one smaller), a fresh
    optimizer, and the learning rate multiplied by ``lr_gamma`` every ``lr_step`` epochs
    (``torch.optim.lr_scheduler.StepLR``; ``None``: constant) or, with ``cosine``, annealed
    over the epochs (``CosineAnnealingLR``, stepped per epoch). ``transform`` (augmentation)
    is applied to each input batch; batches smaller than ``min_batch`` are skipped (2 keeps a
    one-image batch away from batch norm). The data should already be on the model's device.
    Raises ``DivergenceError`` on a NaN/inf loss (checked per epoch). On CUDA the full batches
    replay a captured step as in ``train_steps`` (``step_info`` likewise).
    """
    n = int(x.shape[0])
    if n <= 0:
        raise ValueError("cannot train on an empty dataset")
    if cosine and lr_step:
        raise ValueError("train_epochs: choose a step decay (lr_step) or cosine annealing, not both")
    why = graphed.why_eager_for(model, x, y, optimizer)
    if why is None and (n < batch_size or batch_size < min_batch):  # min_batch above the batch: none is kept
        why = "no full batch to capture"
    if why is None:
        program = graphed.train_epochs(model, x, y, loss_fn=loss_fn, epochs=epochs, batch_size=batch_size,
                                       optimizer=optimizer, generator=generator, lr_step=lr_step,
                                       lr_gamma=lr_gamma, cosine=cosine, transform=transform, min_batch=min_batch)
        _tell(step_info, program.kind, program.capture_error)
        return model
    _tell(step_info, "eager", why)
    opt = make_optimizer(model.parameters(), optimizer)
    if cosine:
        sched: Optional[torch.optim.lr_scheduler.LRScheduler] = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs))
    else:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=lr_step, gamma=lr_gamma) if lr_step else None
    model.train()
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    # on the CPU, the model's 2x2 max-pooling trains through Track A's bit-identical faster path
    # (mebench.training.maxpool: same values, same argmax, PyTorch's backward kernel), put back after
    swaps = maxpool.swap_in(model) if x.device.type == "cpu" else []
    try:
        for epoch in range(1, epochs + 1):
            for idx in torch.randperm(n, generator=generator).to(x.device).split(batch_size):
                if len(idx) < min_batch:
                    continue
                inputs = x[idx] if transform is None else transform(x[idx])
                loss = loss_fn(model(inputs), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                finite &= torch.isfinite(loss.detach())
            if not bool(finite):
                raise DivergenceError(f"training loss became NaN or infinite in epoch {epoch} of {epochs}")
            if sched is not None:
                sched.step()
    finally:
        maxpool.restore(swaps)
    model.eval()
    return model
