"""Measured step times of this machine, for the cost estimate (``mebench.harness.cost``).

A fixed table of step times was wrong by an order of magnitude as soon as the box had other work,
more threads or another CPU, so the estimate asks this module for step times per architecture,
measured here at the cells' thread count and cached on disk, so each machine measures once (what is
measured, the cache key and the load correction are below). Numbers here size estimates, never
results. See docs/guide/grid.md.
"""
# A fixed table of step times was wrong by an order of magnitude as soon as the box had other
# work, more threads or another CPU. So the estimate asks this module for three numbers per
# architecture, measured here, at the torch thread count the cells will use:
#
# - ``train_step_s``: one SGD step (forward, backward, update) at batch 128 in train mode (Track A's step;
#   an attack's own training step; a PGD step costs about ``train_step_s / 128`` an image);
# - ``forward_image_s``: one image through the model in eval mode without gradients, at batch 256
#   (victim queries, evaluation on the test split, detection streams);
# - for ``arch = "generator"``, a DFME/MAZE generator (``nz`` 256, width 64) forward and backward, per image.
#
# A probe runs a few warm-up steps, then times up to ``TRAIN_STEPS`` steps or ``PROBE_SECONDS`` seconds,
# whichever comes first (a WRN-22-2 step on one CPU thread takes seconds). The result is cached on disk
# (``mebench.support.cachedir``, kind ``calibration``) under a key of the probe version, architecture, input
# shape, class count, thread count, device, torch version and CPU model, so each machine measures once.
# The measurement includes whatever load the machine had then; the entry records that 1-minute load
# average, and ``load_factor`` rescales the times to the load at estimate time (a CPU shared by L
# runnable processes on c cores gives each about c / max(c, L) of itself). Delete the cache folder to
# measure again. Numbers here size estimates, never results.
from __future__ import annotations

import json
import os
import platform
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

from mebench.support.cachedir import entry_path

PROBE_VERSION = 1
TRAIN_BATCH = 128
FORWARD_BATCH = 256
TRAIN_STEPS = 20
PROBE_SECONDS = 1.5
GENERATOR = "generator"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``: part of the cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_key(arch: str, input_shape: tuple[int, ...], num_classes: int, threads: int, device: str) -> dict[str, Any]:
    """What a measured step time depends on (the cache key)."""
    import torch

    return {"probe_version": PROBE_VERSION, "arch": arch, "input_shape": list(input_shape),
            "num_classes": int(num_classes), "threads": int(threads), "device": str(device),
            "torch": torch.__version__, "cpu": cpu_model()}


@contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _timed(step: Any, warmup: int, steps: int, budget_s: float) -> float:
    """Mean seconds of ``step()`` after ``warmup`` calls: ``steps`` calls or ``budget_s`` seconds (at least 2)."""
    for _ in range(warmup):
        step()
    t0, n = time.perf_counter(), 0
    while n < steps and (n < 2 or time.perf_counter() - t0 < budget_s):
        step()
        n += 1
    return (time.perf_counter() - t0) / n


def _build(arch: str, input_shape: tuple[int, ...], num_classes: int) -> Any:
    if arch == GENERATOR:
        from mebench.models.generators import make_generator

        return make_generator(256, tuple(input_shape), 64)
    from mebench.models import MODELS

    return MODELS.get(arch)(input_shape[0], num_classes, tuple(input_shape[1:]))


def measure(arch: str, input_shape: tuple[int, ...], num_classes: int, device: str = "cpu") -> dict[str, float]:
    """Measure ``train_step_s`` and ``forward_image_s`` of ``arch`` now (seeded inputs; seconds)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _build(arch, input_shape, num_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if arch == GENERATOR:
        x = torch.randn(TRAIN_BATCH, 256, generator=g).to(device)
        xf = torch.randn(FORWARD_BATCH, 256, generator=g).to(device)
        loss_of = lambda: model(x).square().mean()  # noqa: E731 - a generator's step: forward + backward
    else:
        x = torch.rand(TRAIN_BATCH, *input_shape, generator=g).to(device)
        xf = torch.rand(FORWARD_BATCH, *input_shape, generator=g).to(device)
        y = torch.randint(0, num_classes, (TRAIN_BATCH,), generator=g).to(device)
        loss_of = lambda: F.cross_entropy(model(x), y)  # noqa: E731

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()

    def forward() -> None:
        with torch.no_grad():
            model(xf)

    model.train()
    step = _timed(train, 2, TRAIN_STEPS, PROBE_SECONDS)
    model.eval()
    fwd = _timed(forward, 1, TRAIN_STEPS, PROBE_SECONDS / 2) / FORWARD_BATCH
    return {"train_step_s": step, "forward_image_s": fwd}


def step_times(arch: str, input_shape: tuple[int, ...], num_classes: int, threads: int,
               device: str = "cpu", refresh: bool = False) -> dict[str, Any]:
    """The cached probe of ``arch`` at ``threads`` (measured and stored when absent or ``refresh``):
    ``train_step_s``, ``forward_image_s``, ``measured_at`` (UTC ISO date), ``path`` (the cache file)."""
    from mebench.run import artifacts

    key = probe_key(arch, input_shape, num_classes, threads, device)
    path = entry_path("calibration", key, ".json")
    entry = _read(path, key) if not refresh else None
    if entry is None:
        with _threads(threads):
            times = measure(arch, input_shape, num_classes, device)
        entry = {"key": key, **times, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "load": load_now()}
        path.parent.mkdir(parents=True, exist_ok=True)
        artifacts.atomic_write_json(path, entry)
    return {**entry, "path": str(path)}


def load_now() -> Optional[float]:
    """The machine's 1-minute load average (``None`` where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def load_factor(measured_at_load: Optional[float], load: Optional[float], cpus: int) -> float:
    """How much slower a step is now than when it was measured, from the load averages: a busy CPU gives
    each runnable process about ``cpus / max(cpus, load)`` of itself, so times scale by
    ``max(cpus, load) / max(cpus, measured_at_load)`` (1 when either load is unknown)."""
    if measured_at_load is None or load is None:
        return 1.0
    return max(cpus, load) / max(cpus, measured_at_load)


def _read(path: Path, key: dict[str, Any]) -> Optional[dict[str, Any]]:
    """A stored entry whose key equals ``key`` and whose times are positive numbers, else ``None``."""
    try:
        entry = json.loads(path.read_text())
        ok = entry.get("key") == key and all(float(entry[k]) > 0 for k in ("train_step_s", "forward_image_s"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return entry if ok else None
