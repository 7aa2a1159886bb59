"""Small containers passed between the engine, the oracle and attacks (contract §13)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional

if TYPE_CHECKING:  # annotations only: the mode names below are read by config checks that import no torch
    import torch

from mebench.metricspec import OUTPUT_MODES  # noqa: F401  (defined torch-free, for the report)

OutputMode = Literal["soft_prob", "hard_top1"]

DATA_MODES: tuple[str, ...] = ("seed", "surrogate", "data_free")
TRACKS: tuple[str, ...] = ("A", "B")


@dataclass(frozen=True)
class QueryBatch:
    """Images an attack wants the victim to label (contract §13.1).

    ``x`` is a float tensor ``[k, C, H, W]`` in pixel space ``[0, 1]``; the
    oracle applies the victim's normalization. ``meta`` holds per-batch or
    per-image information (e.g. ``{"pool_index": LongTensor[k]}``).
    """

    x: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class OracleOutput:
    """What the victim returned (contract §13.2).

    ``kind`` is ``soft_prob`` (``y`` float ``[k, K]``, rows sum to 1) or
    ``hard_top1`` (``y`` int64 ``[k]``).
    """

    kind: str
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class Metrics:
    """Scores of one substitute on the full test split (contract §1.3).

    ``kl_mean`` and ``l1_mean`` are ``None`` for ``hard_top1`` runs.
    """

    acc_gt: float
    agreement: float
    kl_mean: Optional[float] = None
    l1_mean: Optional[float] = None

    def as_dict(self) -> dict[str, Optional[float]]:
        return {
            "acc_gt": self.acc_gt,
            "agreement": self.agreement,
            "kl_mean": self.kl_mean,
            "l1_mean": self.l1_mean,
        }


@dataclass(frozen=True)
class CheckpointResult:
    """One row of metrics.csv: a track scored at a budget checkpoint (§16.2)."""

    seed: int
    checkpoint_B: int
    track: str
    metrics: Metrics
    seconds: float = 0.0
