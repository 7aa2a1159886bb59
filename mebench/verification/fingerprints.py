"""Fingerprints of QuRD's family (Godinot et al., AAAI 2025, grodino/QuRD): queries, a representation
of the answers, a distance; neither method changes the victim.

- ``akh``: the public points the victim misclassifies (topped up with CutMix and flips), top-1
  labels, score = label agreement with the victim. See docs/verification/akh.md.
- ``sac``: SAC (Guan, Liang, He, NeurIPS 2022, guanjiyang/SAC) on the same queries: minus the mean
  absolute difference between the suspect's and the victim's sample-correlation matrices of their
  logits. See docs/verification/sac.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from mebench.errors import ConfigError
from mebench.support.inference import chunked
from mebench.verification.base import OwnerData, Suspect, Verifier, params_key, register_verifier


@dataclass(frozen=True)
class FingerprintKey:
    """The owner's key: the fingerprint queries and the victim's logits on them."""

    images: torch.Tensor
    victim_logits: torch.Tensor


def cutmix(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One CutMix of a batch with itself rolled by one (torchvision's ``v2.CutMix(alpha=1.0)`` as QuRD
    calls it, queries.py:138-144): a box of area about ``1 - lam``, ``lam ~ U(0, 1)``, at a uniform centre."""
    h, w = x.shape[-2:]
    lam = float(torch.rand((), generator=generator))
    cy, cx = (int(torch.randint(n, (), generator=generator)) for n in (h, w))
    r = 0.5 * math.sqrt(1.0 - lam)
    dh, dw = int(r * h), int(r * w)
    out = x.clone()
    y1, y2, x1, x2 = max(cy - dh, 0), min(cy + dh, h), max(cx - dw, 0), min(cx + dw, w)
    out[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
    return out


def negative_queries(victim: Any, owner: OwnerData, n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` fingerprint queries (QuRD's ``RandomNegativeQueries(augment=True)``, queries.py:107-168):
    public points the victim misclassifies, in a seeded order (``find_negatives``, :380-430); when
    there are fewer than ``n``, rounds of CutMix and its horizontal and vertical flips of them
    (:133-150). A victim that misclassifies no public point gives its ``n`` lowest-margin points."""
    order = torch.randperm(len(owner.public_x), generator=generator)
    x, y = owner.public_x[order], owner.public_y[order]
    logits = chunked(victim.logits, x, victim.device).cpu()
    wrong = x[logits.argmax(1) != y][:n]
    if len(wrong) == 0:
        top2 = logits.topk(2, dim=1).values
        wrong = x[(top2[:, 0] - top2[:, 1]).argsort()[:n]]
    parts = [wrong]
    for _ in range(math.ceil((n - len(wrong)) / (3 * len(wrong)))):
        mixed = cutmix(wrong, generator)
        parts += [mixed, mixed.flip(-1), mixed.flip(-2)]
    return torch.cat(parts)[:n]


class _NegativeQueryFingerprint(Verifier):
    """Shared by AKH and SAC: ``queries`` negative queries, the victim's logits on them."""

    @dataclass(frozen=True)
    class Params:
        queries: int = 100

    #: The fewest queries the representation makes sense with.
    min_queries = 1

    @classmethod
    def check_params(cls, params: Any) -> None:
        if params.queries < cls.min_queries:
            raise ConfigError(params_key(cls.name, "queries"), params.queries, f"must be at least {cls.min_queries}")

    def prepare(self, victim: Any, owner: OwnerData, generator: torch.Generator, defense: Any = None) -> FingerprintKey:
        images = negative_queries(victim, owner, self.params.queries, generator)
        return FingerprintKey(images, chunked(victim.logits, images, victim.device).cpu())

    def suspect_queries(self, state: FingerprintKey) -> int:
        return len(state.images)

    @classmethod
    def planned_images(cls, params: Any, public: int) -> tuple[int, int]:
        return params.queries, public + params.queries  # the victim labels the public points, then answers the key


@register_verifier
class Akh(_NegativeQueryFingerprint):
    """Label agreement with the victim on its misclassified (and CutMix'd) public points."""

    name, suspect_output = "akh", "label"
    paper = "Godinot, Le Merrer, Penzo, Taïani, Trédan, AAAI 2025 (QuRD's AKH)"
    reference = "grodino/QuRD@fcfe7d86"

    def score(self, state: FingerprintKey, suspect: Suspect) -> float:
        return float((suspect.labels(state.images) == state.victim_logits.argmax(1)).float().mean())


def correlation(logits: torch.Tensor) -> torch.Tensor:
    """SAC's sample-correlation matrix: ``(1 - cos) / 2`` between every pair of rows
    (correlation_wrong.py:42-48)."""
    z = torch.nn.functional.normalize(logits.double(), dim=-1)
    return (1 - z @ z.T) / 2


@register_verifier
class Sac(_NegativeQueryFingerprint):
    """Minus the mean absolute difference between the suspect's and the victim's correlation matrices."""

    name, suspect_output = "sac", "logits"
    paper = "Guan, Liang, He, NeurIPS 2022 (SAC: sample correlation)"
    reference = "guanjiyang/SAC@43b66c81"
    min_queries = 2

    def score(self, state: FingerprintKey, suspect: Suspect) -> float:
        diff = correlation(suspect.logits(state.images)) - correlation(state.victim_logits)
        return -float(diff.abs().mean())
