"""What a defense cost on the attacker's own stream (issue 38, item 4).

``defense_utility`` measures a defense on the victim's test split; the attacker's queries are
another distribution (a surrogate pool, augmented copies), and a defense that singles out odd
inputs (Adaptive Misinformation) changes them far more. This probe watches every answered batch
of the oracle (a passive step at the end of the answer pipeline, after the defense) and compares
the defended answer with the undefended one (the reference pipeline, not charged to any budget):
two metrics, listed in the comment below. See docs/defenses/index.md.
"""
# - ``stream_l1``: mean over answered queries of the L1 distance ||p_defended - p_undefended||_1
#   (summed over classes; 0-2);
# - ``stream_label_change``: share of answered queries whose defended top-1 is not the undefended one.
#
# Both are cumulative at each checkpoint B (the first B answered queries) and go to
# ``measurements.csv`` (track ``-``) and ``summary.json`` ``defense.stream_utility``.

from __future__ import annotations

from typing import Any

import torch

from mebench.oracle import AnswerPipeline, AnswerTransform
from mebench.probes.base import Emit, Probe, measurement, register_probe


class StreamMeter(AnswerTransform):
    """A passive last step of the answer pipeline: changes nothing, sums the defense's changes."""

    name, space = "stream_meter", "probs"

    def __init__(self, undefended: AnswerPipeline) -> None:
        self.undefended = undefended
        self.n = 0
        self.l1 = 0.0
        self.changed = 0

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scores

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        base = self.undefended.probs(x).to(probs.device)
        self.n += int(x.shape[0])
        self.l1 += float((probs.double() - base.double()).abs().sum())
        self.changed += int((probs.argmax(dim=1) != base.argmax(dim=1)).sum())

    def describe(self) -> dict:
        return {"name": self.name, "space": self.space, "passive": True}


@register_probe("stream_utility")
class StreamUtility(Probe):
    """|Δp| and label changes on the queries the defense answered (see the module docstring)."""

    metrics = ("stream_l1", "stream_label_change")

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.meter: StreamMeter | None = None
        self.rows: list[dict[str, Any]] = []
        self.seed = 0

    @classmethod
    def applies(cls, plan: Any, params: Any) -> bool:
        return plan.defense.name != "none"

    def start(self, world: Any) -> None:
        self.seed = world.seed
        self.meter = StreamMeter(world.prep.answers)
        world.oracle.answers.transforms = (*world.oracle.answers.transforms, self.meter)

    def checkpoint(self, world: Any, budget: int, emit: Emit) -> None:
        m = self.meter
        if m is None or m.n == 0:
            return
        for metric, value in (("stream_l1", m.l1 / m.n), ("stream_label_change", m.changed / m.n)):
            self.rows.append(measurement(self.seed, budget, "-", self.name, metric, value))

    def measurements(self) -> list[dict[str, Any]]:
        return list(self.rows)

    def summary(self, world: Any) -> dict[str, Any]:
        m = self.meter
        if m is None or m.n == 0:
            return {}
        return {"defense": {"stream_utility": {"queries": m.n, "stream_l1": m.l1 / m.n,
                                               "stream_label_change": m.changed / m.n}}}
