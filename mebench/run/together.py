"""Seeds together: the seeds of one run query in turn and train Track A as one stacked model.
See docs/guide/performance.md.
"""
# ``mebench run --seeds-together on`` (``engine.run(..., seeds_together=True)``) runs every seed of the
# run in its own thread, but only one at a time: a seed runs its query loop up to the next
# checkpoint B, hands its D_B to the group and passes the turn on; the last seed to arrive trains
# Track A for all of them at once (``mebench.training.track_a.train_seeds_together``, one
# ``vmap``-ed model) and each seed goes on scoring its own substitute. The global RNGs (Python,
# NumPy, torch) are saved and restored at every hand-over, so each seed draws exactly the numbers
# it draws when run alone; only Track A's summation order differs (bounded by
# ``contract_tests/test_track_a_batched.py``).
#
# Whether it pays depends on the device (``DEFAULT_ON``, from ``benchmarks/perf/test_seeds_together.py``,
# records in ``results/perf/``): on the CPU three stacked seeds were measured slower than three
# seeds one by one, so the default there is off. On CUDA the stacked seeds train as one captured graph
# (``mebench.training.graphed``); the default there turns on once the GPU check's committed record
# (``benchmarks/gpu/check.sh``, ``results/perf/gpu/``) shows them faster than one by one; until then it is off.

from __future__ import annotations

import random
import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from mebench.training.spec import SEEDS_TOGETHER_DEFAULT, seeds_together_default
from mebench.training.track_a import TrackATrainer, train_seeds_together

#: Per device type: whether stacking the seeds was measured faster than one by one (defined torch-free in
#: ``mebench.training.spec``, where the grid's plugin reads it).
DEFAULT_ON = SEEDS_TOGETHER_DEFAULT


def default_for(device: torch.device | str) -> bool:
    """Whether a run on ``device`` trains its seeds together unless told (``DEFAULT_ON``)."""
    return seeds_together_default(device)


class Aborted(RuntimeError):
    """Another seed of the group failed; this one stops at its next hand-over."""


class Lockstep:
    """Seeds taking turns (one thread runs at a time) and meeting at every Track A checkpoint."""

    def __init__(self, seeds: Sequence[int], base: TrackATrainer) -> None:
        self.order = list(seeds)
        self.base = base
        self.alive = set(self.order)
        self.turn = self.order[0]
        self.cv = threading.Condition()
        self.error: Optional[BaseException] = None
        self.pending: dict[int, tuple[torch.Tensor, torch.Tensor, Any, Any]] = {}
        self.results: dict[int, torch.nn.Module] = {}
        self.rng: dict[int, tuple[Any, Any, Any, Any]] = {}
        self.trainings = 0  # stacked trainings run (tests count them)

    def wait_turn(self, seed: int) -> None:
        """Block until it is ``seed``'s turn, then restore its RNG states."""
        with self.cv:
            self.cv.wait_for(lambda: self.turn == seed or self.error is not None)
            if self.error is not None:
                raise Aborted(f"seed {seed} stopped: another seed failed ({self.error!r})")
        if seed in self.rng:
            py, np_state, th, cuda = self.rng.pop(seed)
            random.setstate(py)
            np.random.set_state(np_state)
            torch.set_rng_state(th)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

    def pass_turn(self, seed: int, finished: bool = False) -> None:
        """Save ``seed``'s RNG states and hand the turn to the next living seed."""
        if not finished:
            cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
            self.rng[seed] = (random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)
        with self.cv:
            if finished:
                self.alive.discard(seed)
            i = self.order.index(seed)
            nxt = [s for s in self.order[i + 1:] + self.order[:i + 1] if s in self.alive]
            self.turn = nxt[0] if nxt else seed
            self.cv.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.cv:
            if self.error is None:
                self.error = error
            self.cv.notify_all()

    def train(self, seed: int, x: torch.Tensor, y: torch.Tensor, on_step: Any, losses: Any) -> torch.nn.Module:
        """``seed``'s Track A model for D_B = (x, y), trained with the other seeds' D_B of the same B."""
        self.pending[seed] = (x, y, on_step, losses)
        if set(self.pending) >= self.alive:
            self._train_all()
        else:
            self.pass_turn(seed)
            self.wait_turn(seed)
        return self.results.pop(seed)

    def _train_all(self) -> None:
        seeds = [s for s in self.order if s in self.pending]
        parts = [self.pending.pop(s) for s in seeds]
        models = train_seeds_together(self.base, [(p[0], p[1]) for p in parts], on_step=[p[2] for p in parts],
                                      losses=[p[3] for p in parts])
        self.trainings += 1
        self.results.update(zip(seeds, models))


class GroupTrainer(TrackATrainer):
    """One seed's Track A trainer inside a ``Lockstep`` group (what the Track A probe calls)."""

    def __init__(self, group: Lockstep, seed: int) -> None:
        super().__init__(group.base.spec, group.base.device)
        self.group, self.seed = group, seed

    def train(self, x: torch.Tensor, y: torch.Tensor, on_step: Optional[Callable[[int], None]] = None,
              losses: Optional[torch.Tensor] = None) -> torch.nn.Module:
        model = self.group.train(self.seed, x, y, on_step, losses)
        self.last_step = dict(self.group.base.last_step)
        return model

    def record(self) -> dict[str, Any]:
        """What ``summary.json`` says about it (``track_a_seeds_together``)."""
        return {"seeds": list(self.group.order)}


def run_together(seeds: Sequence[int], base: TrackATrainer, run_one: Callable[[int, TrackATrainer], Any]) -> list[Any]:
    """``run_one(seed, trainer)`` for every seed, in lockstep threads; results in ``seeds`` order.

    The first failure stops the other seeds at their next hand-over and is raised here.
    """
    group = Lockstep(seeds, base)
    out: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def body(seed: int) -> None:
        try:
            group.wait_turn(seed)
            out[seed] = run_one(seed, GroupTrainer(group, seed))
        except BaseException as e:  # noqa: BLE001  (handed to the caller below)
            errors[seed] = e
            group.fail(e)
        finally:
            group.pass_turn(seed, finished=True)

    threads = [threading.Thread(target=body, args=(s,), name=f"mebench-seed-{s}", daemon=True) for s in seeds]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException as e:
        group.fail(e)
        raise
    first = next((errors[s] for s in seeds if s in errors and not isinstance(errors[s], Aborted)), None)
    if first is not None or errors:
        raise first if first is not None else next(iter(errors.values()))
    return [out[s] for s in seeds]
