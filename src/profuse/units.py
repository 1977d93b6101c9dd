"""How a duration is written, in one place: every renderer and every analysis's text (a lever's evidence) says
"62.31 s", never "62305.91 ms", and writes its figure as the explorer's front end does."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def to_fixed(x: float, places: int) -> str:
    """``x`` with ``places`` decimals as JavaScript's ``Number.toFixed`` writes it (the exact binary value
    rounded to the nearest, halves away from zero), so the console and the browser print one figure."""
    q = Decimal(abs(x)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"-{q}" if x < 0 and q else str(q)


def fmt_us(us: float) -> str:
    """A duration in µs in the largest unit that keeps it readable (s, ms, µs), written as the front end's
    ``fmtUs`` writes it (:func:`to_fixed`)."""
    a = abs(us)
    if a >= 1e6:
        return f"{to_fixed(us / 1e6, 2)} s"
    if a >= 1e3:
        return f"{to_fixed(us / 1e3, 2)} ms"
    return f"{to_fixed(us, 1)} µs"


def fmt_us_or_dash(us: float | None) -> str:
    """:func:`fmt_us`, or "-" where there is no figure (a column that does not apply to the row, a saving not
    modelled), as the front end's ``fmtUsOrDash`` writes it."""
    return "-" if us is None else fmt_us(us)


__all__ = ["fmt_us", "fmt_us_or_dash", "to_fixed"]
