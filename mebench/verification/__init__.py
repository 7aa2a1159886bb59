"""Ownership verification: can the owner show that a suspect was derived from the victim? Methods
register in ``VERIFIERS`` (entry points: ``mebench.verifiers``); built-ins register on import.
Page: docs/verification/index.md."""

from __future__ import annotations

from typing import Any

from mebench.verification import dataset_inference as _dataset_inference  # noqa: F401  (registers the built-ins)
from mebench.verification import dawn as _dawn  # noqa: F401
from mebench.verification import fingerprints as _fingerprints  # noqa: F401
from mebench.verification.base import VERIFIERS, OwnerData, Suspect, Verifier, register_verifier
from mebench.verification.rates import FPRS, decide, negatives_needed

__all__ = ["FPRS", "VERIFIERS", "OwnerData", "Suspect", "Verifier", "decide", "make_verifier", "negatives_needed",
           "register_verifier"]


def make_verifier(name: str, params: Any = None) -> Verifier:
    """The verifier ``name`` with its parsed ``Params`` (default: the method's defaults)."""
    return VERIFIERS.get(name)(params)
