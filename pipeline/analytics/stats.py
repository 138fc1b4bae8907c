"""Confidence intervals for repeated runs: Student-t intervals of a mean and of a difference of means.

Replays of one configuration vary (scheduling, controller timing), so a difference between two
configurations is called real only when its confidence interval excludes zero. With few repetitions
(3–10) a bootstrap interval is too narrow; Welch's t-interval is the honest choice and needs no
equal-variance assumption. The Student-t quantile comes from the regularized incomplete beta function
(continued fraction, as in Numerical Recipes) inverted by bisection: no SciPy needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom."""
    low, high = 0.0, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True, slots=True)
class Interval:
    """An estimate with its two-sided confidence interval (``low``/``high`` None: fewer than 2 samples)."""

    estimate: float
    low: float | None
    high: float | None
    samples: int
    confidence: float

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, float | int | None]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {
            "estimate": r(self.estimate),
            "low": r(self.low),
            "high": r(self.high),
            "samples": self.samples,
            "confidence": self.confidence,
        }


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, var


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` with its t-interval."""
    if not values:
        raise ValueError("no values to summarize")
    mean, var = _mean_var(values)
    n = len(values)
    if n < 2:
        return Interval(mean, None, None, n, confidence)
    half = t_quantile(0.5 + confidence / 2, n - 1) * math.sqrt(var / n)
    return Interval(mean, mean - half, mean + half, n, confidence)


def difference_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """mean(b) − mean(a) with Welch's t-interval (Welch–Satterthwaite degrees of freedom)."""
    if not a or not b:
        raise ValueError("both groups need at least one value")
    mean_a, var_a = _mean_var(a)
    mean_b, var_b = _mean_var(b)
    diff = mean_b - mean_a
    if len(a) < 2 or len(b) < 2:
        return Interval(diff, None, None, len(a) + len(b), confidence)
    se2 = var_a / len(a) + var_b / len(b)
    if se2 == 0.0:
        return Interval(diff, diff, diff, len(a) + len(b), confidence)
    df = se2**2 / ((var_a / len(a)) ** 2 / (len(a) - 1) + (var_b / len(b)) ** 2 / (len(b) - 1))
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(se2)
    return Interval(diff, diff - half, diff + half, len(a) + len(b), confidence)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
