"""Is run B slower than run A, or is it noise? An exact Mann-Whitney U test over per-step times.

Each side gives a sample (one figure per profiler step, rank or run). The test asks whether a step
of B tends to take longer than a step of A, with no assumption about the shape of either
distribution (step times are skewed: a late page fault, a stray interrupt). For samples of up to
``EXACT_MAX`` values in all the p-value is exact: the distribution of B's rank sum over every way of
splitting the pooled values, counted by dynamic programming over doubled mid-ranks, so ties (µs
timestamps repeat) are exact too. Above that, the normal approximation with the tie correction.

The smallest p-value a two-sided test can reach is ``2 / C(n + m, n)``: with 3 steps a side it is
0.1, so no result can be significant at 5%; with 4 a side it is 0.029. ``cannot_tell`` says so
before looking at the values. Six steps a side (smallest p 0.0022) call any clean 1.9x slowdown.

Written with numpy rather than scipy: scipy's exact method refuses ties and falls back to the
approximation for them, and this is a few lines (tests/test_significance.py checks it against a
brute-force permutation count).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import figures

ALPHA = 0.05
EXACT_MAX = 60   # pooled values up to which the p-value is exact (the count table stays small)
TEST = "Mann-Whitney U (exact up to 60 values in all, ties by mid-ranks), two-sided, alpha 0.05"


def min_p_two_sided(n: int, m: int) -> float:
    """The smallest two-sided p-value samples of these sizes can give (1 when a side is empty)."""
    if n == 0 or m == 0:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def cannot_tell(n: int, m: int, alpha: float = ALPHA) -> bool:
    """True when no outcome of samples this small could be significant at ``alpha``."""
    return min_p_two_sided(n, m) > alpha


def min_steps(alpha: float = ALPHA) -> int:
    """The fewest steps per side (both sides equal) with which a difference can be significant."""
    k = 1
    while cannot_tell(k, k, alpha):
        k += 1
    return k


def _midranks(pooled: np.ndarray) -> np.ndarray:
    """Ranks 1..N of the pooled values, tied values sharing the mean of their ranks."""
    order = np.argsort(pooled, kind="stable")
    ranks = np.empty(pooled.size, dtype=np.float64)
    ranks[order] = np.arange(1, pooled.size + 1, dtype=np.float64)
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return np.asarray(sums[inverse] / counts[inverse])


def _exact_greater(doubled: np.ndarray, m: int, observed: int) -> tuple[float, float]:
    """P(rank sum of a random m-subset >= observed) and P(<= observed), with doubled mid-ranks
    (integers). ``counts[k, s]``: subsets of k values with doubled rank sum s, as float64 (exact up
    to 2**53, about C(56, 28); beyond that only the last digits of a ratio round)."""
    total = int(doubled.sum())
    counts = np.zeros((m + 1, total + 1), dtype=np.float64)
    counts[0, 0] = 1.0
    for v in doubled.tolist():
        counts[1:, v:] += counts[:-1, : total + 1 - v].copy()
    row = counts[m]
    whole = row.sum()
    return float(row[observed:].sum() / whole), float(row[: observed + 1].sum() / whole)


def _normal(ranks: np.ndarray, pooled: np.ndarray, n: int, m: int, w: float) -> tuple[float, float]:
    """The same two tail probabilities by the normal approximation (tie and continuity corrected)."""
    big_n = n + m
    mean = m * (big_n + 1) / 2.0
    _, counts = np.unique(pooled, return_counts=True)
    ties = float(((counts ** 3) - counts).sum())
    var = n * m / 12.0 * ((big_n + 1) - ties / (big_n * (big_n - 1)))
    if var <= 0:
        return 1.0, 1.0
    sd = math.sqrt(var)
    z_hi, z_lo = (w - mean - 0.5) / sd, (w - mean + 0.5) / sd
    return 0.5 * math.erfc(z_hi / math.sqrt(2)), 0.5 * math.erfc(-z_lo / math.sqrt(2))


def p_greater(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """One-sided p-values ``(b tends to be larger than a, b tends to be smaller)``."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 1.0, 1.0
    pooled = np.asarray(list(a) + list(b), dtype=np.float64)
    ranks = _midranks(pooled)
    w = float(ranks[n:].sum())
    if n + m <= EXACT_MAX:
        doubled = np.rint(ranks * 2).astype(np.int64)
        return _exact_greater(doubled, m, round(w * 2))
    return _normal(ranks, pooled, n, m, w)


def p_two_sided(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value: twice the smaller tail, at most 1."""
    hi, lo = p_greater(a, b)
    return min(1.0, 2.0 * min(hi, lo))


@dataclass(frozen=True)
class Verdict:
    """One metric of two runs: medians, ratio b/a, and whether the difference is beyond noise."""

    metric: str
    a_steps: int                # samples of A (steps, or samples of another metric)
    b_steps: int
    a_median_us: float
    b_median_us: float
    ratio: float | None         # median of B over median of A (None when A's median is 0)
    p_value: float | None       # two-sided; None when the samples cannot tell
    verdict: str                # "slower" | "faster" | "not significant" | "cannot tell"
    # the gate: B slower than A by more than the threshold (one-sided test of B against A scaled up)
    threshold_pct: float | None = None
    p_beyond_threshold: float | None = None
    fails: bool = False


def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64))) if len(xs) else 0.0


def compare(metric: str, a: Sequence[float], b: Sequence[float], *, threshold_pct: float | None = None,
            alpha: float = ALPHA) -> Verdict:
    """The verdict on one metric from its per-step samples; with ``threshold_pct`` also whether B
    is significantly slower than A by more than that (B against A's values scaled by 1 + threshold)."""
    ma, mb = _median(a), _median(b)
    ratio = mb / ma if ma else None
    if cannot_tell(len(a), len(b), alpha):
        return Verdict(metric, len(a), len(b), figures.us(ma), figures.us(mb), figures.ratio(ratio), None,
                       "cannot tell", threshold_pct)
    p = p_two_sided(a, b)
    word = "not significant" if p >= alpha else ("slower" if mb > ma else "faster")
    fails, p_thr = False, None
    if threshold_pct is not None:
        scale = 1.0 + threshold_pct / 100.0
        p_thr, _ = p_greater([x * scale for x in a], b)
        fails = p_thr < alpha and ratio is not None and ratio > scale
    return Verdict(metric, len(a), len(b), figures.us(ma), figures.us(mb), figures.ratio(ratio), figures.prob(p), word,
                   threshold_pct, figures.prob(p_thr), fails)
