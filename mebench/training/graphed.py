"""A training step as one device program, replayed as a CUDA graph (docs/guide/performance.md).

LeNet-5 at batch 128 is launch-bound on a GPU: the eager loop (``train_steps``) spends its time
issuing ~100 small kernels a step from Python. Here everything that changes from one step to the
next lives in device tensors, so one step is a fixed sequence of kernels that CUDA can record once
and replay. On the CPU the program runs eagerly and gives the eager loop's weights bit for bit;
where a capture cannot be made the eager loop runs and ``why_eager`` says why (details below).
"""
# What lives in device tensors:
#
# - the batch's indices: a block of rows (``index_blocks``, the eager loop's permutations, drawn from
#   the same seeded generator) copied to the device once per block, a device counter picking the row;
# - the learning rate: every step's value, taken from the eager loop's own scheduler
#   (``lr_values``: ``CosineAnnealingLR`` or ``StepLR`` stepped on a throw-away optimizer), held as
#   a device tensor and read at the step counter;
# - SGD's update (momentum, weight decay, Nesterov) written with the same ``foreach`` operations as
#   ``torch.optim.SGD``; the momentum buffers start at zero, which gives SGD's first step exactly
#   (``0·m + g = g``); the update ``p - lr·d`` is ``addcmul_`` with the learning-rate tensor, which
#   rounds as SGD's ``add_(d, alpha=-lr)`` does;
# - the loss record and the finite-loss flag are written on the device, read every ``check_every``
#   steps as the eager loop does.
#
# On the CPU the program runs eagerly and gives the eager loop's weights bit for bit
# (``contract_tests/test_graphed_step.py``); that is how every part but the capture itself is tested.
# On CUDA, after ``WARM_STEPS`` real steps run eagerly (the warm-up CUDA graphs need), one step is
# captured and replayed for the rest. Where it cannot be (no GPU, D_B read from disk, an optimizer
# other than SGD, bfloat16 autocast, ``MEBENCH_CUDA_GRAPHS=0``, or a capture that fails, e.g. a model
# with data-dependent control flow) the eager loop runs; ``why_eager`` says why and the run records it
# (``summary.json``: ``track_a_step``).

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from mebench.training.spec import OptimizerSpec

#: Environment switch: ``0`` keeps every training on the eager loop.
GRAPHS_ENV = "MEBENCH_CUDA_GRAPHS"
#: Real steps run eagerly before a capture (CUDA graphs need warmed-up allocators and handles).
WARM_STEPS = 3


def why_eager(device: torch.device, optimizer: OptimizerSpec, *, on_disk: bool = False,
              autocast: bool = False) -> Optional[str]:
    """Why a training on ``device`` runs the eager loop, or ``None`` when its step can be graphed."""
    if device.type != "cuda":
        return f"{device.type}: CUDA graphs need a GPU"
    if os.environ.get(GRAPHS_ENV, "1").strip() == "0":
        return f"{GRAPHS_ENV}=0"
    if on_disk:
        return "D_B is read from disk batch by batch"
    if optimizer.name != "sgd":
        return f"optimizer {optimizer.name}: only SGD's update is written as a device program"
    if autocast:
        return "bfloat16 autocast (its weight cache cannot be captured)"
    return None


def why_eager_for(model: torch.nn.Module, x: Any, y: Optional[torch.Tensor], optimizer: OptimizerSpec) -> Optional[str]:
    """``why_eager`` for training ``model`` on ``(x, y)``: also eager when D_B is read from disk, the model
    runs under autocast, or the data are not on the model's device."""
    from mebench.data.rowfile import RowsPrefix

    device = next(model.parameters()).device
    why = why_eager(device, optimizer, on_disk=isinstance(x, RowsPrefix), autocast=not getattr(model, "graph_safe", True))
    if why is None and (x.device != device or y is None or y.device != device):
        why = "the data are not on the training device"
    return why


def index_blocks(n: int, steps: int, batch_size: int, generator: torch.Generator,
                 chunk_steps: int = 512) -> Iterator[torch.Tensor]:
    """Blocks of at most ``chunk_steps`` rows of ``batch_size`` indices, ``steps`` rows in all, from
    consecutive permutations of ``range(n)`` (``loop.batch_indices`` yields their rows)."""
    if n <= 0:
        raise ValueError("cannot train on an empty dataset")
    buf = torch.empty(0, dtype=torch.long)
    done = 0
    while done < steps:
        todo = min(chunk_steps, steps - done)
        need = todo * batch_size
        while buf.numel() < need:
            buf = torch.cat([buf, torch.randperm(n, generator=generator)])
        block, buf = buf[:need].view(todo, batch_size), buf[need:]
        yield block
        done += todo


def lr_values(optimizer: OptimizerSpec, steps: int, make_scheduler: Optional[Callable] = None,
              steps_per_sched: Optional[Sequence[int]] = None) -> list[float]:
    """The learning rate of each of ``steps`` steps as the eager loop sets it: ``make_scheduler(opt)``
    (``None``: constant) is stepped after every step, or, with ``steps_per_sched`` (epochs), after
    each group of that many steps."""
    if make_scheduler is None:
        return [optimizer.lr] * steps
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=optimizer.lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": no update happens here
        sched = make_scheduler(opt)
        out: list[float] = []
        groups = steps_per_sched if steps_per_sched is not None else [1] * steps
        for count in groups:
            out.extend([opt.param_groups[0]["lr"]] * count)
            sched.step()
    return out[:steps]


def cosine_schedule(t_max: int) -> Callable:
    """``lr_values``' scheduler factory for the eager loops' cosine annealing over ``t_max`` steps."""
    return lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max)


class StepProgram:
    """SGD on ``params`` as a device program: ``loss_at(idx)`` gives the step's loss (a scalar) for the
    batch of row indices ``idx`` and its parts; ``records[i]`` (a tensor of one entry per step, or
    ``None``) receives part ``i`` at each step."""

    def __init__(self, params: Sequence[torch.Tensor], loss_at: Callable[[torch.Tensor], tuple[torch.Tensor, Sequence[torch.Tensor]]],
                 optimizer: OptimizerSpec, lrs: Sequence[float],
                 records: Sequence[Optional[torch.Tensor]] = ()) -> None:
        if optimizer.name != "sgd":
            raise ValueError(f"StepProgram runs SGD only, not {optimizer.name!r}")
        self.params = list(params)
        self.loss_at = loss_at
        self.spec = optimizer
        dev = self.params[0].device
        dtype = self.params[0].dtype
        self.device = dev
        self.neg_lrs = torch.tensor([-lr for lr in lrs], dtype=dtype, device=dev)
        self.bufs = [torch.zeros_like(p) for p in self.params] if optimizer.momentum else []
        self.records = list(records)
        self.step_t = torch.zeros(1, dtype=torch.long, device=dev)  # global step (0-based)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)     # row of the index block
        self.block = torch.zeros(0, 0, dtype=torch.long, device=dev)
        self.finite = torch.ones((), dtype=torch.bool, device=dev)
        self.graph: Optional["torch.cuda.CUDAGraph"] = None
        self.capture_error: Optional[str] = None
        self.side: Optional["torch.cuda.Stream"] = None
        self.warm = 0

    # -- the step -------------------------------------------------------------------------------
    def _step_on(self, idx: torch.Tensor) -> None:
        loss, parts = self.loss_at(idx)
        grads = list(torch.autograd.grad(loss, self.params))
        s = self.spec
        if s.weight_decay != 0:
            grads = list(torch._foreach_add(grads, self.params, alpha=s.weight_decay))
        if s.momentum != 0:
            torch._foreach_mul_(self.bufs, s.momentum)
            torch._foreach_add_(self.bufs, grads, alpha=1.0)
            if s.nesterov:
                torch._foreach_add_(grads, self.bufs, alpha=s.momentum)
            else:
                grads = self.bufs
        neg_lr = self.neg_lrs.index_select(0, self.step_t)
        with torch.no_grad():
            for p, d in zip(self.params, grads):
                p.addcmul_(d, neg_lr)
            self.finite &= torch.isfinite(loss.detach())
            for record, part in zip(self.records, parts):
                if record is not None:
                    record.index_copy_(0, self.step_t, part.detach().reshape(1).to(record.dtype))
            self.step_t += 1

    def _block_step(self) -> None:
        idx = self.block.index_select(0, self.pos).view(-1)
        self._step_on(idx)
        with torch.no_grad():
            self.pos += 1

    # -- driving it -----------------------------------------------------------------------------
    def load_block(self, block: torch.Tensor) -> None:
        """Make ``block`` (rows of indices) the one the next steps read, from its first row."""
        block = block.to(self.device, non_blocking=True)
        if self.block.shape != block.shape:
            if self.graph is not None and self.block.shape[1:] == block.shape[1:] and len(block) < len(self.block):
                self.block[:len(block)].copy_(block)  # the captured step reads the static buffer
            else:
                self.block = block.clone()
        else:
            self.block.copy_(block)
        self.pos.zero_()

    def step(self, capture: bool) -> None:
        """One step on the loaded block's next row: replayed once captured; with ``capture`` (CUDA),
        the first ``WARM_STEPS`` run eagerly on a side stream, then one step is captured (recorded,
        not run: the next call replays it)."""
        if self.graph is not None:
            self.graph.replay()
            return
        if not capture or self.capture_error is not None:
            self._block_step()
            return
        current = torch.cuda.current_stream(self.device)
        if self.side is None:
            self.side = torch.cuda.Stream(self.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            self._block_step()
        self.warm += 1
        if self.warm >= WARM_STEPS:
            self._capture()
        current.wait_stream(self.side)

    def step_on(self, idx: torch.Tensor) -> None:
        """One eager step on the indices ``idx`` (an odd-sized batch, e.g. an epoch's last)."""
        self._step_on(idx.to(self.device))

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.side):
                self._block_step()
        except Exception as e:  # noqa: BLE001  (any capture failure: the eager program goes on)
            text = str(e).strip().splitlines()
            self.capture_error = f"{type(e).__name__}: {text[0] if text else ''}"[:200]
            torch.cuda.synchronize(self.device)
            return
        self.graph = graph

    @property
    def kind(self) -> str:
        return "graphed" if self.graph is not None else "eager"

    def check_finite(self) -> bool:
        return bool(self.finite)


def _divergence(where: str) -> Exception:
    from mebench.errors import DivergenceError

    return DivergenceError(f"training loss became NaN or infinite {where}")


def run_blocks(program: StepProgram, blocks: Iterator[torch.Tensor], steps: int, *, capture: bool,
               check_every: int = 100, on_step: Optional[Callable[[int], None]] = None) -> None:
    """``steps`` steps of ``program`` over the rows of ``blocks``, the finite-loss flag read every
    ``check_every`` steps and at the last (as ``loop.train_steps`` does)."""
    step = 0
    for block in blocks:
        program.load_block(block)
        for _ in range(len(block)):
            program.step(capture)
            step += 1
            if (step % check_every == 0 or step == steps) and not program.check_finite():
                raise _divergence(f"by step {step} of {steps}")
            if on_step is not None:
                on_step(step)
    note_uncaptured(program, capture)


def note_uncaptured(program: StepProgram, capture: bool) -> None:
    """Say why a program asked to capture ran eagerly throughout (too few steps to warm up)."""
    if capture and program.graph is None and program.capture_error is None:
        program.capture_error = f"{int(program.step_t)} steps: not more than the {WARM_STEPS} warm-up steps"


def model_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable,
               transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
    """``loss_at`` for one model trained on (x, y), both on the model's device."""
    def loss_at(idx: torch.Tensor):
        xb = x.index_select(0, idx)
        if transform is not None:
            xb = transform(xb)
        loss = loss_fn(model(xb), y.index_select(0, idx))
        return loss, (loss,)

    return loss_at


def trainable(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def train_steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, loss_fn: Callable, steps: int,
                batch_size: int, optimizer: OptimizerSpec, generator: torch.Generator, cosine: bool = True,
                schedule_steps: Optional[int] = None, transform: Optional[Callable] = None,
                losses: Optional[torch.Tensor] = None, on_step: Optional[Callable[[int], None]] = None,
                check_every: int = 100, capture: bool = True) -> StepProgram:
    """``loop.train_steps`` as a device program (captured on CUDA when ``capture``); the model is
    trained in place. Returns the program (its ``kind`` and ``capture_error`` say how it ran)."""
    t_max = max(1, steps, schedule_steps or 0)
    lrs = lr_values(optimizer, steps, cosine_schedule(t_max) if cosine else None)
    model.train()
    program = StepProgram(trainable(model), model_loss(model, x, y, loss_fn, transform), optimizer, lrs, [losses])
    run_blocks(program, index_blocks(len(x), steps, batch_size, generator), steps,
               capture=capture and x.device.type == "cuda", check_every=check_every, on_step=on_step)
    model.eval()
    return program


def train_epochs(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, loss_fn: Callable, epochs: int,
                 batch_size: int, optimizer: OptimizerSpec, generator: torch.Generator,
                 lr_step: Optional[int] = None, lr_gamma: float = 0.1, cosine: bool = False,
                 transform: Optional[Callable] = None, min_batch: int = 1, capture: bool = True) -> StepProgram:
    """``loop.train_epochs`` as a device program: each epoch's full batches replay the captured step,
    its last, smaller batch (if kept) runs eagerly with the same update."""
    n = int(x.shape[0])
    full, rest = divmod(n, batch_size)
    keep_rest = bool(rest) and rest >= min_batch  # the eager loop skips a last batch below min_batch
    per_epoch = full + keep_rest
    if cosine:
        make = cosine_schedule(max(1, epochs))
    elif lr_step:
        make = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=lr_step, gamma=lr_gamma)  # noqa: E731
    else:
        make = None
    lrs = lr_values(optimizer, per_epoch * epochs, make, [per_epoch] * epochs)
    model.train()
    program = StepProgram(trainable(model), model_loss(model, x, y, loss_fn, transform), optimizer, lrs)
    capture = capture and x.device.type == "cuda" and full > 0
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(n, generator=generator).to(x.device)
        if full:
            program.load_block(perm[:full * batch_size].view(full, batch_size))
            for _ in range(full):
                program.step(capture)
        if keep_rest:
            program.step_on(perm[full * batch_size:])
        if not program.check_finite():
            raise _divergence(f"in epoch {epoch} of {epochs}")
    note_uncaptured(program, capture)
    model.eval()
    return program
