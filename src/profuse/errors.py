"""One exception family. User errors carry an exit code and print as one line; anything else is a bug."""
from __future__ import annotations

import os


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
