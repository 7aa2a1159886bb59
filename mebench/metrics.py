"""Fidelity and accuracy metrics on the full test split (contract §1.3).

``acc_gt``, ``agreement``, ``kl_mean`` and ``l1_mean`` of the substitute's probabilities against
the victim's (the victim's softmax at T = 1, or at the profile's temperature under the ``tempered``
oracle profile; a defense's answer transforms are not included, see ``mebench.oracle``); their
formulas are below. ``kl_mean`` and ``l1_mean`` are reported for ``soft_prob`` runs only (``None``
for ``hard_top1``). Sums are accumulated in float64. See docs/contract.md (§1.3).
"""
# For test examples i = 1..N with victim probabilities p_v(i) (the victim's
# softmax at T = 1, or at the profile's temperature under the ``tempered`` oracle
# profile; a defense's answer transforms are not included, see
# ``mebench.oracle``) and substitute probabilities p_s(i) = softmax(substitute logits):
#
# - ``acc_gt``    = mean_i [argmax p_s(i) == y_i]               (ground-truth labels)
# - ``agreement`` = mean_i [argmax p_s(i) == argmax p_v(i)]
# - ``kl_mean``   = mean_i sum_k p_v(i)_k (log p_v(i)_k - log p_s(i)_k)   (0 log 0 = 0)
# - ``l1_mean``   = mean_i mean_k |p_v(i)_k - p_s(i)_k|         (i.e. sum of |.| over N*K entries / (N*K))

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mebench.support.inference import eval_logits
from mebench.training.health import top_class_share
from mebench.metricspec import AGREEMENT_AUC, METRIC_NAMES, METRICS, MetricSpec, metric_spec  # noqa: F401 (torch-free table)
from mebench.types import Metrics


def metrics_from_logits(sub_logits: torch.Tensor, victim_probs: torch.Tensor, labels: torch.Tensor,
                        soft: bool) -> Metrics:
    """All four metrics from substitute logits and victim probabilities on one set."""
    pred = sub_logits.argmax(dim=1)
    acc = (pred == labels).double().mean().item()
    agree = (pred == victim_probs.argmax(dim=1)).double().mean().item()
    if not soft:
        return Metrics(acc, agree)
    log_ps = F.log_softmax(sub_logits.double(), dim=1)
    pv = victim_probs.double()
    kl = (torch.special.xlogy(pv, pv) - pv * log_ps).sum(dim=1).mean().item()
    l1 = (pv - log_ps.exp()).abs().mean().item()
    return Metrics(acc, agree, kl, l1)


class Evaluator:
    """Scores substitutes against the victim on a fixed test split.

    The victim's test probabilities are computed once (evaluation is not an
    attacker query and is not charged to the budget).
    """

    def __init__(self, test_x: torch.Tensor, test_y: torch.Tensor, victim_probs: torch.Tensor,
                 soft: bool, device: torch.device | str, batch_size: int = 2048) -> None:
        self.device = torch.device(device)
        self.x = test_x.to(self.device)
        self.y = test_y.to(self.device)
        self.victim_probs = victim_probs.to(self.device)
        self.soft = soft
        self.batch_size = batch_size
        self.victim_top_share = top_class_share(self.victim_probs)

    def score(self, model: nn.Module) -> tuple[Metrics, float]:
        """The metrics and the substitute's top-class share (``mebench.training.health``), one pass."""
        logits = self.logits(model)
        return metrics_from_logits(logits, self.victim_probs, self.y, self.soft), top_class_share(logits)

    def logits(self, model: nn.Module) -> torch.Tensor:
        return eval_logits(model, self.x, self.batch_size)

    def evaluate(self, model: nn.Module) -> Metrics:
        return metrics_from_logits(self.logits(model), self.victim_probs, self.y, self.soft)

    def victim_accuracy(self) -> float:
        return (self.victim_probs.argmax(dim=1) == self.y).double().mean().item()
