"""Strings from input files shown on a terminal: never parsed as rich markup, never a control sequence.

A NEFF's JSON, a Parquet table or a trace can hold ``[bold]``-style markup, ANSI escapes (``ESC [2J``
clears the screen, ``ESC ]0;`` retitles the window), other control characters or bidi overrides.
:func:`safe` shows each such character as a visible escape (``\\x1b``); :func:`text` wraps the result in
a rich ``Text``, which rich prints as is.
"""
from __future__ import annotations

from typing import Any

from rich.text import Text

from ..errors import printable
from ..redact import output_redacted, redact_text
from ..units import to_fixed


def safe(value: Any) -> str:
    """``str(value)`` with every control character written as a visible ``\\xNN``/``\\uNNNN`` escape.

    Inside the output boundary (:func:`profuse.redact.redacted_output`) secrets are redacted here too,
    before a table cell can wrap a token over two lines.
    """
    out = printable(value if isinstance(value, str) else str(value))
    return redact_text(out) if output_redacted() else out


def text(value: Any, style: str | None = None) -> Text:
    """A rich ``Text`` of :func:`safe` ``(value)``: no markup parsed, no escape sequence printed."""
    return Text(safe(value), style=style or "")


def signed_us(us: float) -> str:
    """A change with its sign, in fmt_us's units: "+76.2 µs", "-1.23 ms"; its figure as :func:`to_fixed`
    writes it, so the console and the explorer's Compare view print the same change."""
    a = abs(us)
    div, unit, places = (1e6, "s", 2) if a >= 1e6 else (1e3, "ms", 2) if a >= 1e3 else (1.0, "µs", 1)
    return f"{'+' if us > 0 else '-' if us < 0 else ''}{to_fixed(a / div, places)} {unit}"
