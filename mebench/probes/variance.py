"""The init-variance probe: how much Track A's fixed initialization moves each metric.
See docs/transferability.md.
"""
# Track A starts every checkpoint and every run seed from the same weights
# (``substitute.init_seed``, contract §8), so the spread over run seeds leaves the initialization
# out, while on a fixed query set the init alone can move transfer success widely (issue 44). With ``measure.init_variance.inits: k`` the largest checkpoint's D_B is used
# again to train Track A from ``k`` other initializations: the weights come from ``init_seeds``
# (derived from ``init_seed``, the same for every run seed, never the fixed init nor the victim
# recipe's seed) while the batch order stays Track A's, so only the initialization varies. Each
# model is scored like Track A (agreement, accuracy, KL and L1 for soft labels) and, when
# transferability is measured, by the same transfer and fidelity rows. Rows go to
# ``init_variance.csv`` (long format, ``INIT_VARIANCE_COLUMNS``); the contract's fixed init stays the
# one headline numbers use.

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

import torch
from torch import nn

from mebench.support.seeding import derive_seed
from mebench.training.track_a import TrackATrainer

INIT_VARIANCE_COLUMNS: tuple[str, ...] = ("seed", "checkpoint_B", "init", "init_seed", "metric", "value")


def init_seeds(base_seed: int, k: int, avoid: Iterable[Optional[int]] = ()) -> list[int]:
    """``k`` distinct init seeds derived from ``base_seed``, none equal to ``base_seed`` or ``avoid``."""
    banned = {base_seed, *[a for a in avoid if a is not None]}
    out: list[int] = []
    i = 0
    while len(out) < k:
        s = derive_seed(base_seed, f"init-variance/{i}") % (2**31)
        i += 1
        if s not in banned and s not in out:
            out.append(s)
    return out


class InitOnlyTrainer(TrackATrainer):
    """Track A's trainer with the weights drawn from ``weights_seed``; the batch order stays the
    base spec's (seeded by its ``init_seed``), so only the initialization differs."""

    def __init__(self, base: TrackATrainer, weights_seed: int) -> None:
        super().__init__(base.spec, base.device)
        self.weights_seed = weights_seed

    def fresh_model(self) -> nn.Module:
        saved, self.spec = self.spec, dataclasses.replace(self.spec, init_seed=self.weights_seed)
        try:
            return super().fresh_model()
        finally:
            self.spec = saved


def model_metrics(model: nn.Module, evaluator: Any, transfer: Any, seed: int, budget: int) -> dict[str, float]:
    """{metric: value} of one model: the §1.3 metrics (``evaluator.score``), then, with a transfer
    evaluator, ``<method>@<eps>`` success rates and the fidelity measures."""
    metrics, _ = evaluator.score(model)
    out = {k: float(v) for k, v in metrics.as_dict().items() if v is not None}
    if transfer is not None:
        for r in transfer.rows(model, seed, budget, "A_init"):
            if "method" in r and r["success_rate"] is not None:
                out[f"{r['method']}@{r['eps']:g}"] = float(r["success_rate"])
            elif "measure" in r:
                out[r["measure"]] = float(r["value"])
    return out


def measure(trainer: TrackATrainer, x: torch.Tensor, y: torch.Tensor, evaluator: Any, seed: int, k: int,
            transfer: Any = None, avoid: Iterable[Optional[int]] = (),
            on_model: Optional[Callable[[int], None]] = None) -> list[dict[str, Any]]:
    """Train Track A on D_B = (x, y) from ``k`` other initializations and score each one;
    long-format rows (``INIT_VARIANCE_COLUMNS``). ``avoid`` holds seeds never to use (the victim's)."""
    rows: list[dict[str, Any]] = []
    budget = int(x.shape[0])
    for i, s in enumerate(init_seeds(trainer.spec.init_seed, k, avoid)):
        model = InitOnlyTrainer(trainer, s).train(x, y)
        for metric, value in model_metrics(model, evaluator, transfer, seed, budget).items():
            rows.append({"seed": seed, "checkpoint_B": budget, "init": i, "init_seed": s, "metric": metric,
                         "value": value})
        if on_model is not None:
            on_model(i)
    return rows
