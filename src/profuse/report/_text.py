"""Strings from input files shown on a terminal: never parsed as rich markup, never a control sequence.

A NEFF's JSON, a Parquet table or a trace can hold ``[bold]``-style markup, ANSI escapes (``ESC [2J``
clears the screen, ``ESC ]0;`` retitles the window), other control characters or bidi overrides.
:func:`safe` shows each such character as a visible escape (``\\x1b``); :func:`text` wraps the result in
a rich ``Text``, which rich prints as is.
"""
from __future__ import annotations

import re
from typing import Any

from rich.text import Text

# C0 controls (tab and newline too: a value is one cell), DEL, C1 controls, bidi embeddings/overrides/isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(value: Any) -> str:
    """``str(value)`` with every control character written as a visible ``\\xNN``/``\\uNNNN`` escape."""
    s = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s)


def text(value: Any, style: str | None = None) -> Text:
    """A rich ``Text`` of :func:`safe` ``(value)``: no markup parsed, no escape sequence printed."""
    return Text(safe(value), style=style or "")
