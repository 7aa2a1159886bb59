"""What a defense costs its honest users, measured on the victim's test split (not charged to any budget).

- ``test_accuracy``: accuracy of the defended answers' top-1 label;
- ``agreement_with_undefended``: share of test images whose defended top-1 label is the
  undefended victim's;
- ``mean_abs_perturbation``: mean over images and classes of |defended − undefended probability|;
- ``seconds_per_1000_answers`` and ``overhead_seconds_per_1000``: time of the defended answer
  pipeline per 1,000 images, and its excess over the undefended one. See docs/defenses/index.md.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from mebench.support.inference import chunked
from mebench.metrics import Evaluator
from mebench.oracle import AnswerPipeline


def _timed(pipeline: AnswerPipeline, evaluator: Evaluator) -> tuple[torch.Tensor, float]:
    t0 = time.perf_counter()
    probs = chunked(pipeline.probs, evaluator.x, evaluator.device)
    return probs, time.perf_counter() - t0


def utility_cost(defended: AnswerPipeline, undefended: AnswerPipeline, evaluator: Evaluator) -> dict[str, Any]:
    """The defense's utility cost on the evaluator's test split (see the module docstring)."""
    base, t_base = _timed(undefended, evaluator)
    probs, t_def = _timed(defended, evaluator)
    n = max(int(evaluator.x.shape[0]), 1)
    top = probs.argmax(dim=1)
    return {
        "test_images": n,
        "test_accuracy": (top == evaluator.y).double().mean().item(),
        "agreement_with_undefended": (top == base.argmax(dim=1)).double().mean().item(),
        "mean_abs_perturbation": (probs.double() - base.double()).abs().mean().item(),
        "seconds_per_1000_answers": 1000 * t_def / n,
        "overhead_seconds_per_1000": max(0.0, 1000 * (t_def - t_base) / n),
    }
