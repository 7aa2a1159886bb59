"""Training health: flags a checkpoint whose number measures a failed training, not the queries.

On some query sets Track A's fixed recipe (contract §8) fails and the substitute ends as a constant
predictor. mebench keeps the number (the protocol is the protocol) and records, per checkpoint and
track, what tells the two apart: the flags **collapsed** and **diverged** go to ``summary.json``
(``health_flags``), the progress lines, the pytest cell and ``mebench report``; **restarted** comes
from an attack's own loop (all defined below). The thresholds are heuristics; they never change a metric.
See docs/guide/runs.md.
"""
# A Track A substitute is trained by one fixed recipe (contract §8) on whatever D_B an attack
# bought. On some query sets that recipe fails: SGD diverges and the substitute ends as a
# constant predictor, and the checkpoint then reports chance-level agreement that says nothing
# about what the queries teach. mebench keeps the number (the protocol is the protocol) and
# records, per checkpoint and track, what a reader needs to tell the two apart:
#
# * ``pred_top_share``: the share of the test split the substitute gives its most frequent
#   class, beside ``victim_top_share``, the victim's own (about 1/K on a balanced split);
# * for Track A, the mean training loss over the first, the best and the last window of
#   ``window`` steps (a tenth of the steps, at most 100), recorded on the device without a host
#   synchronisation per step.
#
# Two flags are raised, each a sentence in ``summary.json`` (``health_flags``), a warning in the
# run's progress lines and in the pytest cell, and a table in ``mebench report``:
#
# * **collapsed** (either track): ``pred_top_share >= COLLAPSE_SHARE`` while the victim's own
#   top share is below ``VICTIM_SHARE_MAX``: the substitute answers (almost) one class for
#   everything, the victim does not;
# * **diverged** (Track A): the last window's mean loss exceeds the best window's by a factor of
#   ``DIVERGE_FACTOR`` *and* by ``DIVERGE_MARGIN`` nats: the run learned, then lost it (a cosine
#   schedule ends at learning rate 0, so a healthy run ends near its best).
#
# The thresholds are heuristics, chosen so that the constant predictors seen on real grids are
# flagged and ordinary minibatch noise is not; they never change a metric.
#
# A third flag, **restarted**, comes from an attack's own loop rather than a checkpoint: a model
# the attack trained (a JBDA round model, a knockoff, ...) reached a NaN or infinite loss and was
# trained again from a fresh initialisation and batch order (``attack.divergence_restarts``,
# ``mebench.attacks.base.train_fresh``); ``summary.json`` keeps each one in ``attack_restarts``.

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # torch-free at import: the report reads restart_flag
    import torch

COLLAPSE_SHARE = 0.9
VICTIM_SHARE_MAX = 0.5
DIVERGE_FACTOR = 2.0
DIVERGE_MARGIN = 0.5
MAX_WINDOW = 100


class TrainingHealthWarning(UserWarning):
    """A checkpoint's training was flagged (the pytest cell warns with it; the metrics stand)."""


def top_class_share(logits: torch.Tensor) -> float:
    """The share of rows whose argmax is the most frequent argmax (1.0: a constant predictor)."""
    import torch

    pred = logits.argmax(dim=1)
    counts = torch.bincount(pred, minlength=int(logits.shape[1]))
    return float(counts.max().item()) / max(1, int(pred.numel()))


@dataclass(frozen=True)
class LossCurve:
    """Window means of one training run's per-step losses."""

    steps: int
    window: int
    first: float
    best: float
    last: float

    @classmethod
    def of(cls, losses: torch.Tensor) -> Optional["LossCurve"]:
        """From the per-step losses (any device); ``None`` for an empty run."""
        values = losses.detach().double().cpu().flatten()
        n = int(values.numel())
        if n == 0:
            return None
        w = max(1, min(MAX_WINDOW, n // 10))
        means = values[: n - n % w].view(-1, w).mean(dim=1)  # whole windows from the start
        last = float(values[n - w:].mean())  # the last w steps, whether or not they fill a window
        return cls(n, w, float(means[0]), min(float(means.min()), last), last)

    @property
    def diverged(self) -> bool:
        return self.last > DIVERGE_FACTOR * self.best and self.last - self.best > DIVERGE_MARGIN


def collapsed(pred_share: Optional[float], victim_share: Optional[float]) -> bool:
    """The collapse criterion on a checkpoint's top-class shares (``False`` when either is missing): what
    ``assess`` flags, and what a report reads back from a record's ``training_health``."""
    if pred_share is None or victim_share is None:
        return False
    return pred_share >= COLLAPSE_SHARE and victim_share < VICTIM_SHARE_MAX


def assess(track: str, budget: int, pred_share: float, victim_share: float,
           curve: Optional[LossCurve] = None) -> dict[str, Any]:
    """One checkpoint's health record: the measurements and the flags they raise (sentences)."""
    flags = []
    where = f"Track {track} B={budget:,}"
    if collapsed(pred_share, victim_share):
        flags.append(f"{where} collapsed: the substitute gives {pred_share:.1%} of the test split one class "
                     f"(the victim {victim_share:.1%}); its metrics measure a failed training, not the queries")
    if curve is not None and curve.diverged:
        flags.append(f"{where} diverged: its training loss ended at {curve.last:.3f} (mean of the last "
                     f"{curve.window} steps) after reaching {curve.best:.3f}")
    record: dict[str, Any] = {"track": track, "checkpoint_B": budget, "pred_top_share": pred_share,
                              "victim_top_share": victim_share, "flags": flags}
    if curve is not None:
        record.update(loss_window=curve.window, loss_first=curve.first, loss_best=curve.best, loss_last=curve.last)
    return record


def restart_flag(r: dict[str, Any]) -> str:
    """The health flag of one ``attack.divergence_restarts`` restart (``train_fresh``)."""
    return (f"attack model {r['model']} restarted: {r['error']} on {r['examples']} examples; trained again from a "
            f"fresh initialisation and batch order (restart {r['restart']} of at most {r['of']})")
