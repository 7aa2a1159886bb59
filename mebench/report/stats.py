"""Statistics for comparing two attacks over seeds: paired interval of the mean difference, Cohen's d.

The definitions (a paired Student t interval below ``MIN_SEEDS_FOR_BOOTSTRAP`` seeds, the paired
percentile bootstrap from there on, Cohen's d with pooled sample variances, the effect size
categories and the few-seeds rules) are kept fixed so reports stay comparable; they are spelled
out below. See docs/guide/reports.md.
"""
# Definitions (kept fixed so reports stay comparable):
#
# * **Paired interval of the mean difference** (:func:`paired_ci`). Seeds pair the two groups
#   (same run seed → same seed set, same Track A init); the statistic is ``mean(d)`` of the
#   per-seed differences ``d_i = b_i - a_i``, and its ``CI_LEVEL`` interval is
#   - with ``MIN_SEEDS_FOR_INTERVAL`` (2) to ``MIN_SEEDS_FOR_BOOTSTRAP`` - 1 (4) pairs, the
#     **paired Student t interval** ``mean(d) ± t(1 - α/2, n - 1) · s_d / √n``
#     (:func:`paired_t_ci`; exact when seed-to-seed differences are normal). The percentile
#     bootstrap is not used there: with 3 seeds it has only 10 distinct resamples and its 95 %
#     interval is essentially ``[min d_i, max d_i]``, which excludes 0 whenever the three seeds
#     agree in sign — a quarter of the time when the attack adds nothing (contract §10's 3 seeds);
#   - from ``MIN_SEEDS_FOR_BOOTSTRAP`` (5) pairs, the **paired percentile bootstrap**
#     (:func:`paired_bootstrap_ci`): ``N_BOOTSTRAP`` resamples of the ``n`` differences (with
#     replacement, ``numpy.random.Generator`` seeded with ``BOOTSTRAP_SEED``, so a report is
#     reproducible bit for bit; Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993,
#     ch. 13), the statistics design mebench borrows (its property tests draw 5 or more values).
#   The interval's ``method`` ("t" or "bootstrap") is written beside it.
# * **Cohen's d** (Cohen, *Statistical Power Analysis*, 1988):
#   ``(mean(b) - mean(a)) / s_pooled`` with
#   ``s_pooled² = ((n_a-1) s_a² + (n_b-1) s_b²) / (n_a + n_b - 2)``, the sample
#   variances (ddof=1) used by every table of this report. For equal group sizes
#   (always the case here: groups are paired by seed) this is
#   ``sqrt((s_a² + s_b²) / 2)``. d is positive when ``b`` has the larger mean,
#   exactly 0 when the means are equal, ±inf when they differ but both groups are
#   constant, and NaN when a group has fewer than 2 values.
# * **Categories**: |d| < 0.2 negligible, < 0.5 small, < 0.8 medium, else large
#   (Cohen's conventions); ``undefined`` when d is NaN.
# * **Few seeds**: below ``MIN_SEEDS_FOR_BOOTSTRAP`` paired seeds the interval is the t
#   interval, and the row says so (``warning``): it rests on the normality of the seed
#   differences, which a few seeds cannot check.
# * **Fewer than** ``MIN_SEEDS_FOR_INTERVAL`` (2) **paired seeds**: no interval at
#   all. One difference has no spread to measure, so its "interval" would have zero width
#   and "exclude 0" for any non-zero difference. The bounds are NaN and the
#   decision fields (``crosses_zero``, ``statistically_significant``) are ``None``
#   (empty in CSV, ``null`` in JSON); the mean difference is still given.

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats as scipy_stats

BOOTSTRAP_SEED = 0
N_BOOTSTRAP = 10_000
CI_LEVEL = 0.95
MIN_SEEDS_FOR_BOOTSTRAP = 5
"""From this many paired seeds the interval is the percentile bootstrap; below, the Student t."""
MIN_SEEDS_FOR_INTERVAL = 2
"""Below this many paired seeds no interval (and no CI-based claim) is reported."""
CI_TEXT = (f"{CI_LEVEL:.0%} interval: paired Student t below {MIN_SEEDS_FOR_BOOTSTRAP} seeds, "
           f"percentile paired bootstrap from {MIN_SEEDS_FOR_BOOTSTRAP}")
"""How every paired interval of the report is made, in the words its captions use."""
FEW_SEEDS_TEXT = (f"⚠: fewer than {MIN_SEEDS_FOR_BOOTSTRAP} paired seeds, a t interval (it assumes normal "
                  f"seed differences)")
"""The captions' note on the ⚠ mark (:func:`seed_warning` gives it per row)."""
EFFECT_SIZE_THRESHOLD = 0.2
"""|d| at or above which a difference counts as practically significant."""

EFFECT_SIZE_BINS: tuple[tuple[float, str], ...] = ((0.8, "large"), (0.5, "medium"), (0.2, "small"))


@dataclass(frozen=True)
class PairedCI:
    """An interval of the mean paired difference ``b - a`` and how it was made (``method``:
    ``"t"`` for the paired Student t interval, ``"bootstrap"`` for the percentile bootstrap)."""

    mean_diff: float
    ci_lower: float
    ci_upper: float
    ci_level: float
    crosses_zero: bool
    n: int
    method: str


def _differences(a: Sequence[float], b: Sequence[float], least: int = 1) -> np.ndarray:
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.shape != xb.shape or xa.ndim != 1 or xa.size < least:
        raise ValueError(f"paired samples must be equal-length 1-D with at least {least} "
                         f"value(s); got {xa.shape} and {xb.shape}")
    return xb - xa


def _interval(diffs: np.ndarray, lower: float, upper: float, level: float, method: str) -> PairedCI:
    """The :class:`PairedCI` of ``diffs`` with these bounds; whether it crosses zero follows from them."""
    return PairedCI(mean_diff=float(diffs.mean()), ci_lower=lower, ci_upper=upper, ci_level=level,
                    crosses_zero=bool(lower <= 0.0 <= upper), n=int(diffs.size), method=method)


def paired_ci(
    a: Sequence[float],
    b: Sequence[float],
    n_bootstrap: int = N_BOOTSTRAP,
    level: float = CI_LEVEL,
    seed: int = BOOTSTRAP_SEED,
) -> PairedCI:
    """The report's interval of ``mean(b - a)`` (``a[i]`` and ``b[i]`` from the same seed): the
    paired t interval below ``MIN_SEEDS_FOR_BOOTSTRAP`` pairs, the percentile bootstrap from there
    (module comment). Needs ``MIN_SEEDS_FOR_INTERVAL`` pairs."""
    n = _differences(a, b, MIN_SEEDS_FOR_INTERVAL).size
    if n < MIN_SEEDS_FOR_BOOTSTRAP:
        return paired_t_ci(a, b, level=level)
    return paired_bootstrap_ci(a, b, n_bootstrap=n_bootstrap, level=level, seed=seed)


def paired_t_ci(a: Sequence[float], b: Sequence[float], level: float = CI_LEVEL) -> PairedCI:
    """Paired Student t interval of ``mean(b - a)``: ``mean ± t(1-α/2, n-1) · s / √n`` (ddof=1);
    zero width when every difference is the same."""
    diffs = _differences(a, b, 2)
    mean_diff, n = float(diffs.mean()), diffs.size
    half = float(scipy_stats.t.ppf(0.5 + level / 2.0, n - 1) * diffs.std(ddof=1) / math.sqrt(n))
    return _interval(diffs, mean_diff - half, mean_diff + half, level, "t")


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    n_bootstrap: int = N_BOOTSTRAP,
    level: float = CI_LEVEL,
    seed: int = BOOTSTRAP_SEED,
) -> PairedCI:
    """Percentile bootstrap CI of ``mean(b - a)``; ``a[i]`` and ``b[i]`` must come from the same
    seed. The report uses it from ``MIN_SEEDS_FOR_BOOTSTRAP`` pairs (:func:`paired_ci`).

    Vectorised: one ``[n_bootstrap, n]`` index draw, no Python loop per resample.
    """
    diffs = _differences(a, b)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diffs.size, size=(n_bootstrap, diffs.size))
    boot = diffs[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lower, upper = (float(q) for q in np.quantile(boot, [alpha, 1.0 - alpha]))
    return _interval(diffs, lower, upper, level, "bootstrap")


def cohens_d(a: Sequence[float], b: Sequence[float]) -> float:
    """Standardised mean difference, positive when ``b`` has the larger mean."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(xb.mean() - xa.mean())
    if diff == 0.0:
        return 0.0
    if xa.size < 2 or xb.size < 2:
        return math.nan
    dof = xa.size + xb.size - 2
    pooled = math.sqrt(((xa.size - 1) * xa.var(ddof=1) + (xb.size - 1) * xb.var(ddof=1)) / dof)
    if pooled == 0.0:
        return math.copysign(math.inf, diff)
    return diff / pooled


def effect_size_category(d: float) -> str:
    """negligible / small / medium / large at |d| = 0.2 / 0.5 / 0.8; NaN → undefined."""
    if math.isnan(d):
        return "undefined"
    for bound, name in EFFECT_SIZE_BINS:
        if abs(d) >= bound:
            return name
    return "negligible"


def seed_warning(n: int) -> str:
    """Why an interval over ``n`` paired seeds should not be trusted ('' if it can)."""
    if n >= MIN_SEEDS_FOR_BOOTSTRAP:
        return ""
    if n == 0:
        return "no seed in common: nothing to compare"
    if n < MIN_SEEDS_FOR_INTERVAL:
        return (f"n<{MIN_SEEDS_FOR_INTERVAL}: a single paired seed, no interval; the "
                "difference is one observation")
    return (f"only {n} paired seeds (< {MIN_SEEDS_FOR_BOOTSTRAP}): Student t interval, which "
            "assumes normal seed-to-seed differences")


def definitions(n_bootstrap: int = N_BOOTSTRAP) -> dict[str, Any]:
    """The constants behind every comparison, written next to the numbers."""
    return {
        "difference": "mean over paired seeds of (b - a)",
        "ci": (f"paired Student t interval of the mean difference below "
               f"{MIN_SEEDS_FOR_BOOTSTRAP} paired seeds, percentile paired bootstrap from "
               f"{MIN_SEEDS_FOR_BOOTSTRAP}"),
        "ci_level": CI_LEVEL, "n_bootstrap": n_bootstrap, "bootstrap_seed": BOOTSTRAP_SEED,
        "cohens_d": "(mean_b - mean_a) / pooled sample std (ddof=1)",
        "effect_size_bins": {name: bound for bound, name in EFFECT_SIZE_BINS},
        "effect_size_threshold": EFFECT_SIZE_THRESHOLD,
        "min_seeds_for_bootstrap": MIN_SEEDS_FOR_BOOTSTRAP,
        "min_seeds_for_interval": MIN_SEEDS_FOR_INTERVAL,
    }


def compare_groups(a: Sequence[float], b: Sequence[float], **bootstrap: Any) -> dict[str, Any]:
    """Everything the report says about ``b`` versus ``a`` (paired by position).

    Keys: ``n_pairs, mean_a, mean_b`` + :class:`PairedCI` fields (``method`` as ``ci_method``) + ``cohens_d,
    effect_size_category, statistically_significant`` (CI excludes 0),
    ``practically_significant`` (|d| ≥ 0.2) and ``warning``. Empty inputs give NaNs.
    With fewer than ``MIN_SEEDS_FOR_INTERVAL`` pairs the bounds are NaN and
    ``crosses_zero``/``statistically_significant`` are ``None``: no CI claim.
    """
    n = len(a)
    d = cohens_d(a, b) if n else math.nan
    if n < MIN_SEEDS_FOR_INTERVAL:
        mean_diff = float(np.mean(np.asarray(b, float) - np.asarray(a, float))) if n else math.nan
        fields: dict[str, Any] = {
            "mean_diff": mean_diff, "ci_lower": math.nan, "ci_upper": math.nan,
            "ci_level": bootstrap.get("level", CI_LEVEL), "crosses_zero": None, "ci_method": ""}
    else:
        ci = paired_ci(a, b, **bootstrap)
        fields = {("ci_method" if k == "method" else k): v for k, v in asdict(ci).items() if k != "n"}
    out: dict[str, Any] = {
        "n_pairs": n,
        "mean_a": float(np.mean(a)) if n else math.nan,
        "mean_b": float(np.mean(b)) if n else math.nan,
    }
    out.update(fields)
    out.update({
        "cohens_d": d,
        "effect_size_category": effect_size_category(d),
        "statistically_significant": (None if fields["crosses_zero"] is None
                                      else not fields["crosses_zero"]),
        "practically_significant": bool(abs(d) >= EFFECT_SIZE_THRESHOLD),
        "warning": seed_warning(n),
    })
    return out
