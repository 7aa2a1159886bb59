"""``example_confidence``: a complete, minimal mebench measurement probe, one module.

It measures how confident every scored substitute is on the victim's test split (the mean
top-class probability) next to the victim's own confidence there, at every checkpoint and
for each track. Copy this module to start your own probe: everything mebench needs is here.

How it is found: ``pyproject.toml`` declares this module in the entry-point group
``mebench.probes``. The first time mebench looks up a probe (config validation, resolving a
run's plan), it imports every module of that group; importing this one runs ``@register_probe``
below. A run measures it only when its config names it, ``measure: {example_confidence: {}}``
(``Probe.runs_by_default`` is False); the plan then records it with its parameters, defaults
filled in.

What the engine tells a probe (``mebench/probes/base.py``): ``start`` before the first query,
``checkpoint`` at every B, ``substitute`` for every substitute Track A or B scored there,
``finish`` after the last query. Its ``measurements()`` become rows of ``measurements.csv``
(``seed, checkpoint_B, track, probe, metric, value``) and ``summary()`` a section of
``summary.json``. It reaches the victim's answers through the evaluation path only, never the
oracle, so nothing is charged and ``metrics.csv`` is the same with and without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mebench.errors import ConfigError
from mebench.probes import Probe, Scored, measurement, register_probe

__all__ = ["ExampleConfidence"]


@dataclass(frozen=True)
class ConfidenceParams:
    """``top_k``: the confidence is the summed probability of the substitute's ``top_k`` classes."""

    top_k: int = 1


@register_probe("example_confidence")
class ExampleConfidence(Probe):
    """Mean top-k probability of each scored substitute and of the victim on the test split."""

    Params = ConfidenceParams
    metrics = ("substitute_confidence", "victim_confidence")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.rows: list[dict[str, Any]] = []

    @classmethod
    def check(cls, params: ConfidenceParams, scope: Any) -> None:
        if params.top_k < 1:
            raise ConfigError("measure.example_confidence.top_k", params.top_k, "must be at least 1")

    def substitute(self, world: Any, scored: Scored) -> None:
        evaluator = world.prep.evaluator  # the test split and the victim's probabilities on it
        probs = torch.softmax(evaluator.logits(scored.model).float(), dim=1)
        k = self.params.top_k
        for metric, p in (("substitute_confidence", probs), ("victim_confidence", evaluator.victim_probs.float())):
            value = float(p.topk(k, dim=1).values.sum(dim=1).mean())
            self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, metric, value))

    def measurements(self) -> list[dict[str, Any]]:
        return self.rows
