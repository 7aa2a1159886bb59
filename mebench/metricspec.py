"""The table of reported metrics (contract §1.3), torch-free.

Moved here from :mod:`mebench.metrics` (which re-exports every name) so that readers of results
(``mebench report``, :mod:`mebench.run.artifacts`' CSV schema) need no torch: the metrics are computed
in :mod:`mebench.metrics`, but what they are called, which way is better and how seeds combine is
plain data. See docs/extending/probe.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The oracle's output modes (contract §3); :mod:`mebench.types` re-exports it.
OUTPUT_MODES: tuple[str, ...] = ("soft_prob", "hard_top1")


@dataclass(frozen=True)
class MetricSpec:
    """One reported metric: every writer, the report, the plots and the cell checks read this table.

    - ``title``: human name (plot titles, table headings); ``note``: a line printed under every
      table that shows it, for names that could be misread;
    - ``higher_is_better``: the direction of gains, rankings and arrows;
    - ``output_modes``: the runs that have it (others record ``None``);
    - ``bounds``: the range a sound value lies in (checked on every grid cell);
    - ``aggregate``: how seeds combine (``mean_std``: mean and sample std, ddof = 1).
    """

    name: str
    title: str
    higher_is_better: bool
    output_modes: tuple[str, ...] = OUTPUT_MODES
    bounds: tuple[float, float] = (0.0, 1.0)
    note: str = ""
    aggregate: str = "mean_std"

    @property
    def heading(self) -> str:
        """``l1_mean — L1 (MAE over classes) ↓``: the column name and what it measures."""
        return f"{self.name} — {self.title} {'↑' if self.higher_is_better else '↓'}"


#: The metrics of contract §1.3, in column order. Adding a metric: one entry here, its value in ``Metrics``.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("acc_gt", "test accuracy (GT)", True),
    MetricSpec("agreement", "agreement with victim", True),
    MetricSpec("kl_mean", "KL(victim ‖ substitute)", False, ("soft_prob",), (-1e-12, math.inf)),
    MetricSpec("l1_mean", "L1 (MAE over classes)", False, ("soft_prob",), (0.0, 1.0),
               note="l1_mean = mean |p_v − p_s| over test examples and classes (L1 distance / K); "
                    "not a paper's L1 distance"),
)
#: A summary metric of the report: normalised area under agreement vs log10(budget).
AGREEMENT_AUC = MetricSpec("agreement_auc", "agreement AUC (log-budget)", True)
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
_BY_NAME = {m.name: m for m in (*METRICS, AGREEMENT_AUC)}


def metric_spec(name: str) -> MetricSpec:
    """The table entry of ``name`` (a §1.3 metric or ``agreement_auc``)."""
    return _BY_NAME[name]
