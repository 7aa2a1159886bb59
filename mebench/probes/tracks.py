"""Track A and Track B (contract §8): the two substitutes scored at every checkpoint B.

Track A trains a fresh substitute with the fixed recipe on D_B, the first B records of the query
log; Track B asks the attack for its own substitute (if it keeps one). Each hands its scored
model to the engine's ``emit``, which writes the ``metrics.csv`` row (contract §16.2 columns) and
lets the other probes (health, transferability) measure it.
See docs/contract.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch
from tqdm.auto import tqdm

from mebench.run import artifacts
from mebench.probes.base import Emit, Probe, Scored, register_probe
from mebench.support.progress import Ticker, interval_of
from mebench.support.runinfo import peak_rss_mib
from mebench.training.health import LossCurve
from mebench.types import CheckpointResult

if TYPE_CHECKING:
    from mebench.run.world import World


@register_probe("track_b")
class TrackB(Probe):
    """The attack's own substitute at B, scored as it is (never retrained); none for attacks without one.

    Two timings: ``attack_model``, the seconds the attack spent producing its substitute when asked
    (most attacks train it then: Knockoff Nets' and JBDA's models, QEDG's and SwiftThief's last
    phase), which is the attack's own work (the cost estimate's ``attack`` phase); and ``track_b``,
    the seconds spent scoring it (the estimate's ``track_b``). The metrics row's seconds are both."""

    metrics = ("agreement", "acc_gt", "kl_mean", "l1_mean")
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"attack_model": 0.0, "track_b": 0.0}

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        if not type(world.attack).has_track_b:
            return
        t0 = time.perf_counter()
        model = world.attack.track_b_model(world.state)
        t1 = time.perf_counter()
        self.timings["attack_model"] += t1 - t0
        if model is None:
            return
        metrics, share = world.prep.evaluator.score(model)
        t2 = time.perf_counter()
        self.timings["track_b"] += t2 - t1
        emit(Scored("B", budget, model, CheckpointResult(world.seed, budget, "B", metrics, t2 - t0), share))


@register_probe("track_a")
class TrackA(Probe):
    """A fresh substitute trained on D_B by the fixed recipe (§8); the last one is saved as
    ``final_substitute.ckpt``."""

    metrics = ("agreement", "acc_gt", "kl_mean", "l1_mean")
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"track_a": 0.0}
        self.steps: dict[int, int] = {}
        self.step_kinds: dict[int, dict] = {}
        self.peak_rss: dict[int, float] = {}
        self.final_model: Optional[torch.nn.Module] = None
        self.trainer: Any = None

    def start(self, world: World) -> None:
        self.trainer = world.track_a_trainer()

    def checkpoint(self, world: World, budget: int, emit: Emit) -> None:
        t0 = time.perf_counter()
        device = world.prep.device
        x, y = world.state.store.for_training(budget, device)
        steps = self.trainer.steps(budget)
        ticker = Ticker(world.say, f"Track A B={budget:,}", steps, "steps", interval=interval_of(world.say))
        with tqdm(total=steps, desc=f"seed {world.seed} Track A B={budget}", unit="step",
                  disable=not world.progress or None, leave=False) as bar:
            def on_step(_: int) -> None:
                bar.update()
                ticker.update()

            losses = torch.zeros(steps, dtype=torch.float32, device=device)
            model = self.trainer.train(x, y, on_step=on_step, losses=losses)
        self.steps[budget] = ticker.done  # recorded once trained: an interrupted training lists nothing
        self.step_kinds[budget] = dict(getattr(self.trainer, "last_step", None) or {})
        self.peak_rss[budget] = peak_rss_mib()
        metrics, share = world.prep.evaluator.score(model)
        self.final_model = model
        dt = time.perf_counter() - t0
        ticker.close(f"agreement {metrics.agreement:.4f}, acc {metrics.acc_gt:.4f}")
        self.timings["track_a"] += dt
        emit(Scored("A", budget, model, CheckpointResult(world.seed, budget, "A", metrics, dt), share,
                    LossCurve.of(losses[:ticker.done])))

    def summary(self, world: World) -> dict[str, Any]:
        out: dict[str, Any] = {"track_a_steps": {str(k): v for k, v in self.steps.items()},
                               "peak_rss_mib": {str(k): v for k, v in self.peak_rss.items()},
                               "track_a_step": {str(k): v for k, v in self.step_kinds.items()}}
        if hasattr(self.trainer, "record"):  # trained with its sibling seeds (mebench.run.together)
            out["track_a_seeds_together"] = self.trainer.record()
        return out

    def write(self, seed_dir: Path, final: bool) -> None:
        if final and self.final_model is not None:
            artifacts.atomic_save_torch({k: v.cpu() for k, v in self.final_model.state_dict().items()},
                                        seed_dir / "final_substitute.ckpt")
