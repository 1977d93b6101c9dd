"""How a figure is rounded, in one place: when the record that carries it is made, never again by a
payload or a renderer (a renderer formats; it does not round a second time).

Times in µs to the nanosecond (3 places), ratios to 4 places, percentages to 2, probabilities to 6.
"""
from __future__ import annotations


def us(x: float) -> float:
    """A time in µs, to the ns."""
    return round(x, 3)


def ratio(x: float | None) -> float | None:
    """A ratio of two figures (None stays None)."""
    return None if x is None else round(x, 4)


def pct(x: float) -> float:
    """A share in percent."""
    return round(x, 2)


def prob(x: float | None) -> float | None:
    """A probability (a p-value)."""
    return None if x is None else round(x, 6)
