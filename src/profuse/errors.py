"""One exception family. User errors carry an exit code and print as one line; anything else is a bug."""
from __future__ import annotations

import os


def printable(text: str) -> str:
    """``text`` safe to print on one line: undecodable file-name bytes and line breaks escaped.

    File names that are not UTF-8 reach Python as lone surrogates (``surrogateescape``), which no
    UTF-8 writer accepts; they are shown as ``\\xff`` instead.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that did not come from a file name
        raw = text.encode("utf-8", "backslashreplace")
    shown = raw.decode("utf-8", "backslashreplace")
    return shown.replace("\r", "\\r").replace("\n", "\\n")


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
