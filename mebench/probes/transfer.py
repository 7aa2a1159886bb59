"""Transferability (``mebench.probes.transferability.transfer``): adversarial examples crafted on each checkpoint
substitute and on the references, over an ε curve, scored on the victim; rows in ``transfer.csv``,
and the transfer-relevant fidelity (``mebench.probes.transferability.fidelity``: off-manifold agreement, input-gradient
cosine) in ``fidelity.csv``.

A thin adapter: every number comes from ``TransferEvaluator``'s public API (``reference_rows``,
``rows``); this probe only decides when it is called and where its rows go.
See docs/transferability.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mebench.probes.base import Probe, Scored, register_probe
from mebench.probes.transferability.transfer import evaluator_for, write_records

if TYPE_CHECKING:
    from mebench.run.world import World


@dataclass(frozen=True)
class TransferParams:
    """``methods`` among ``mebench.probes.transferability.transfer.METHODS`` (none: not measured); ``images`` test images per
    row; ``eps`` the ε curve (empty: the dataset profile's ``transfer_eps_curve``); ``references``
    the models of the ``independent`` reference ensemble (0: none; ``mebench.probes.transferability.refcache``)."""

    methods: tuple[str, ...] = ()
    images: int = 500
    eps: tuple[float, ...] = ()
    references: int = 3


@register_probe("transfer")
class Transfer(Probe):
    """Transfer success of every scored substitute, crafted on the victim's test split (never the oracle)."""

    Params = TransferParams
    metrics = ("success_rate", "substitute_success_rate")
    runs_by_default = True

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.timings = {"transfer": 0.0}
        self.rows: list[dict[str, Any]] = []
        self.evaluator: Any = None

    @classmethod
    def check(cls, params: TransferParams, scope: Any) -> None:
        from mebench.errors import ConfigError
        from mebench.probes.transferability.transfer import METHODS

        if any(m not in METHODS for m in params.methods) or len(set(params.methods)) != len(params.methods):
            raise ConfigError("measure.transfer.methods", list(params.methods),
                              f"distinct methods among {', '.join(METHODS)}")
        if params.images <= 0:
            raise ConfigError("measure.transfer.images", params.images, "must be a positive number of test images")
        if any(not 0 < e <= 1 for e in params.eps) or len(set(params.eps)) != len(params.eps):
            raise ConfigError("measure.transfer.eps", list(params.eps), "distinct L∞ radii in (0, 1] (pixels in [0, 1])")
        if params.references < 0:
            raise ConfigError("measure.transfer.references", params.references, "must be 0 (none) or a positive count")

    @classmethod
    def applies(cls, plan: Any, params: TransferParams) -> bool:
        return bool(params.methods)

    def start(self, world: World) -> None:
        prep = world.prep  # the victim through the evaluation path: never the oracle, never the attack
        self.evaluator = evaluator_for(self.params, prep, world.seed)
        t0 = time.perf_counter()
        references = world.references(self.params.references)  # the cell's own ensemble
        self.rows += self.evaluator.reference_rows(world.seed, references)
        self.timings["transfer"] += time.perf_counter() - t0

    def substitute(self, world: World, scored: Scored) -> None:
        t0 = time.perf_counter()
        self.rows += self.evaluator.rows(scored.model, world.seed, scored.budget, scored.track)
        self.timings["transfer"] += time.perf_counter() - t0

    def summary(self, world: World) -> dict[str, Any]:
        return {"transfer": self.rows}

    def write(self, seed_dir: Path, final: bool) -> None:
        write_records(seed_dir, self.rows)
