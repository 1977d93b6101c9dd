"""One exception family. User errors carry an exit code and print as one line; anything else is a bug."""
from __future__ import annotations

import os
import re

# C0 controls (tab and newline too), DEL, C1 controls, bidi marks, embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` safe to print on one line of a terminal: undecodable file-name bytes and every control
    character (line breaks, ANSI escapes, bidi overrides) shown as visible escapes.

    File names that are not UTF-8 reach Python as lone surrogates (``surrogateescape``), which no
    UTF-8 writer accepts; they are shown as ``\\xff`` instead.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that did not come from a file name
        raw = text.encode("utf-8", "backslashreplace")
    shown = raw.decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), shown)


class ProfuseError(Exception):
    """Base class of every error profuse raises on purpose."""


class UserError(ProfuseError):
    """Bad input or a bad request: the CLI prints ``str(err)`` on one line and exits ``exit_code``."""

    exit_code: int = 2


class TraceError(UserError):
    """A trace that cannot be read. The message always starts with the file it is about."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
