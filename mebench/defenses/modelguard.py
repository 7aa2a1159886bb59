"""ModelGuard: Tang, Dai, DiValentin, Ding, Hass, Gong, Chen, Li, "ModelGuard: Information-Theoretic
Defense Against Model Extraction Attacks", USENIX Security 2024; reference code Yoruko-Tang/ModelGuard
@ 0eb60fc (paths below are inside that repository).

Both variants keep every answer's top-1 label and stay within an L_p ball of radius ε around the
victim's probabilities y; neither fits a model. ``modelguard_w`` solves a linear program per answer,
``modelguard_s`` answers from a stateful codebook per top-1 class.
See docs/defenses/modelguard_w.md and docs/defenses/modelguard_s.md.
"""
# - ``modelguard_w`` (the reference's ``MLD`` class, ``defenses/victim/mld.py``; README "ModelGuard-W"):
#   each answer is the solution of the linear program (``mld.py:46-115``)
#
#       min_{y'}  Σ_k log(y_k + 1e-6) · y'_k
#       s.t.      y' ≥ 0, Σ_k y'_k = 1, ||y' - y||_1 ≤ ε, y'_t - y'_k ≥ 1e-4 for k ≠ t = argmax y,
#
#   i.e. it moves up to ε/2 of probability mass onto the classes the victim finds least likely.
#   Solved with scipy's HiGHS where the reference calls PuLP's CBC; rows are independent (the
#   per-row ε constraint, ``batch_constraint=0`` in the README), so a batch is one sparse LP.
# - ``modelguard_s`` (the reference's ``incremental_kmeans`` quantizer, ``defenses/victim/quantize.py``;
#   README "ModelGuard-S": ``quantize=1``, ``ordered_quantization=1``, ``optim=0``, ``frozen=0``, no
#   pre-fit codebook): a stateful codebook per top-1 class. Each answer y of class t is replaced by the
#   first centroid of class t (in insertion order) within distance ε (``quantize.py:225-247``); when
#   none is, y itself joins the codebook and is answered (``:233-240``); the first answer of a class
#   starts its codebook (``:367-369``). The codebook lives as long as the defense instance: one run's
#   oracle (its utility is measured on a fresh, empty one, as the reference's ``eval.py`` starts one).

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mebench.defenses.base import Defense, register_defense
from mebench.errors import ConfigError

MARGIN = 1e-4
"""The top-1 label's lead over every other class in a ModelGuard-W answer (``mld.py:104``)."""
LOG_FLOOR = 1e-6
"""The LP's cost is log(y + 1e-6), 'to avoid too small y_i such that -log(y) is too large' (``mld.py:62``)."""
LP_ROWS = 512
"""Rows per HiGHS call: one call per this many answers keeps each sparse LP small."""
YDISTS = ("l1", "l2")


def _check_epsilon(epsilon: float, lowest: float) -> None:
    if not epsilon >= lowest:
        raise ConfigError("defense.params.epsilon", epsilon,
                          f"must be >= {lowest:g} (smaller balls cannot keep every top-1 label {MARGIN:g} ahead)"
                          if lowest > 0 else "must be >= 0")


def _lp_constraints(y: np.ndarray, epsilon: float) -> tuple[Any, np.ndarray, Any, np.ndarray]:
    """The block-diagonal constraints of ``n`` independent copies of the reference's LP, variables
    [y'(n·K), z(n·K)] with z ≥ |y' - y| (``mld.py:66-104``), built without a per-row loop."""
    from scipy import sparse

    n, k = y.shape
    nk = n * k
    i = np.arange(nk)
    row_of = i // k
    eye = sparse.identity(nk, format="csr")
    # z - y' >= -y  and  z + y' >= y, written as A_ub x <= b_ub
    a_abs = sparse.vstack([sparse.hstack([eye, -eye]), sparse.hstack([-eye, -eye])])
    b_abs = np.concatenate([y.ravel(), -y.ravel()])
    a_ball = sparse.csr_matrix((np.ones(nk), (row_of, nk + i)), shape=(n, 2 * nk))  # sum_k z_k <= eps
    top = y.argmax(axis=1)
    others = i[i % k != top[row_of]]  # y'_j - y'_t <= -MARGIN for j != t
    r, tops = np.arange(others.size), row_of[others] * k + top[row_of[others]]
    a_order = sparse.csr_matrix((np.concatenate([np.ones(others.size), -np.ones(others.size)]),
                                 (np.concatenate([r, r]), np.concatenate([others, tops]))), shape=(others.size, 2 * nk))
    a_ub = sparse.vstack([a_abs, a_ball, a_order]).tocsr()
    b_ub = np.concatenate([b_abs, np.full(n, epsilon), np.full(others.size, -MARGIN)])
    a_eq = sparse.csr_matrix((np.ones(nk), (row_of, i)), shape=(n, 2 * nk))
    return a_ub, b_ub, a_eq, np.ones(n)


def modelguard_w_lp(y: torch.Tensor, epsilon: float) -> torch.Tensor:
    """ModelGuard-W's answer to the rows of ``y`` (probability vectors): the LP of the module docstring."""
    from scipy.optimize import linprog

    yn = y.detach().double().cpu().numpy()
    out = np.empty_like(yn)
    for lo in range(0, yn.shape[0], LP_ROWS):  # chunks of rows, not single rows: each chunk is one LP
        part = yn[lo:lo + LP_ROWS]
        n, k = part.shape
        cost = np.concatenate([np.log(part + LOG_FLOOR).ravel(), np.zeros(n * k)])
        a_ub, b_ub, a_eq, b_eq = _lp_constraints(part, epsilon)
        bounds = [(0.0, 1.0)] * (n * k) + [(0.0, None)] * (n * k)
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"ModelGuard-W's linear program failed: {res.message}")
        out[lo:lo + n] = res.x[: n * k].reshape(n, k)
    out = np.clip(out, 0.0, None)
    out /= out.sum(axis=1, keepdims=True)
    return torch.from_numpy(out).to(device=y.device, dtype=y.dtype)


@register_defense
class ModelGuardW(Defense):
    name, space = "modelguard_w", "probs"
    paper = "Tang et al., USENIX Security 2024 (ModelGuard-W)"
    output_modes = frozenset({"soft_prob"})
    modes_reason = "keeps every top-1 label, so a {mode} answer would be the undefended one"

    @dataclass(frozen=True)
    class Params:
        epsilon: float = 1.0  # README "ModelGuard-W": eps=1.0; ydist=l1 (mld.py:23 asserts l1/l2/kl, the LP is L1)

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        _check_epsilon(params.epsilon, 2 * MARGIN)

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return modelguard_w_lp(scores, self.params.epsilon)


class Codebook:
    """ModelGuard-S's centroids per top-1 class, in insertion order (``quantize.py:225-247, 346-388``)."""

    dtype = torch.float64
    """Precision of the centroids and distances (the reference's float32 is a measured deviation,
    ``studies/modelguard/deviations.py``)."""

    def __init__(self, num_classes: int, epsilon: float, norm: int) -> None:
        self.epsilon, self.norm = epsilon, norm
        self.centroids: list[torch.Tensor] = [torch.empty(0, num_classes, dtype=self.dtype)
                                              for _ in range(num_classes)]

    def quantize(self, y: torch.Tensor) -> torch.Tensor:
        """Each row replaced by its class's first centroid within ε, rows taken in order; a row with
        none joins the codebook. One pass per centroid added, never per answer."""
        y = y.to(self.dtype).cpu()
        out = torch.empty_like(y)
        top = y.argmax(dim=1)
        for c in top.unique().tolist():
            rows = (top == c).nonzero().flatten()
            out[rows] = self._quantize_class(c, y[rows])
        return out

    def _quantize_class(self, c: int, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(y)
        start = 0
        while start < y.shape[0]:
            rest = y[start:]
            cents = self.centroids[c]
            if cents.shape[0]:
                within = torch.cdist(rest, cents, p=float(self.norm)) <= self.epsilon
                has = within.any(dim=1)
                first = within.to(torch.int8).argmax(dim=1)  # the first centroid in insertion order
            else:
                has = torch.zeros(rest.shape[0], dtype=torch.bool)
                first = torch.zeros(rest.shape[0], dtype=torch.long)
            miss = int(has.logical_not().to(torch.int8).argmax()) if not bool(has.all()) else rest.shape[0]
            if miss:
                out[start:start + miss] = cents[first[:miss]]
            if miss < rest.shape[0]:  # the first row without a centroid becomes one and answers itself
                self.centroids[c] = torch.cat([cents, rest[miss:miss + 1]])
                out[start + miss] = rest[miss]
            start += miss + 1
        return out

    def sizes(self) -> list[int]:
        return [int(c.shape[0]) for c in self.centroids]


@register_defense
class ModelGuardS(Defense):
    name, space = "modelguard_s", "probs"
    paper = "Tang et al., USENIX Security 2024 (ModelGuard-S)"
    output_modes = frozenset({"soft_prob"})
    modes_reason = "keeps every top-1 label, so a {mode} answer would be the undefended one"

    @dataclass(frozen=True)
    class Params:
        epsilon: float = 1.0  # README "ModelGuard-S": quantize_epsilon=1.0
        ydist: str = "l1"     # README: ydist=l1 (quantize.py:33-38 takes l1 or l2)

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        _check_epsilon(params.epsilon, 0.0)
        if params.ydist not in YDISTS:
            raise ConfigError("defense.params.ydist", params.ydist, f"must be one of {list(YDISTS)}")

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.codebook: Codebook | None = None

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.codebook is None:
            self.codebook = Codebook(scores.shape[1], self.params.epsilon, 1 if self.params.ydist == "l1" else 2)
        return self.codebook.quantize(scores).to(device=scores.device, dtype=scores.dtype)

    def describe(self) -> dict:
        """Adds the codebook's size per class at the time of the call (summary.json's ``defense.fitted``
        describes the utility probe's instance after the test split)."""
        sizes = self.codebook.sizes() if self.codebook is not None else []
        return {**super().describe(), "centroids_per_class": sizes}
