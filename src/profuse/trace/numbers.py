"""The one rule for a whole number read from input (a trace's args, a mapping file, memory events, a
snapshot): an ``int`` within 64 bits; optionally a ``float`` holding one (``35.0``: a trace re-serialised
by another tool) or a string of ASCII digits (an id written as text). Anything else, ``bool`` included,
is no number (None), and a string of more digits than 64 bits hold is never converted (Python's ``int()``
refuses 4,300 digits)."""
from __future__ import annotations

from typing import Any

INT64_MIN, INT64_END = -(2**63), 2**63
_MAX_DIGITS = 20  # 2^64 has 20 digits


def int64(v: Any, *, floats: bool = False, text: bool = False) -> int | None:
    """``v`` as a whole number within 64 bits, else None (see the module docstring)."""
    if isinstance(v, bool):
        return None
    if floats and isinstance(v, float) and v.is_integer() and abs(v) < INT64_END:
        v = int(v)
    elif text and isinstance(v, str):
        digits = v.strip().removeprefix("-")
        if not (digits.isascii() and digits.isdecimal() and len(digits) <= _MAX_DIGITS):
            return None
        v = int(v)
    return v if isinstance(v, int) and INT64_MIN <= v < INT64_END else None
