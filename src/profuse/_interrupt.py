"""SIGINT (Ctrl-C) during ``profuse run``: remembered, so whatever it broke ends in one line and exit 130.

A Ctrl-C can land anywhere in the script, also inside an import that a library guards with a broad
``except``: the KeyboardInterrupt is swallowed and a half-imported module (numpy without
``numpy.flexible``) fails later, in the script or in profuse's own bundle writing. Whether SIGINT
came is kept here, so such a later error is reported as the interruption it is.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

_seen = [False]


def _on_sigint(signum: int, frame: Any) -> None:
    _seen[0] = True
    raise KeyboardInterrupt


def watch() -> None:
    """From now on a SIGINT is remembered (and raises KeyboardInterrupt, as Python's own handler does)."""
    _seen[0] = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def seen() -> bool:
    """Whether a SIGINT came since :func:`watch`."""
    return _seen[0]


def exit_on_sigint(*, quiet: bool = False) -> None:
    """From now on a SIGINT ends the process at once: ``profuse: interrupted`` (unless ``quiet``), exit 130.

    For the moments where no KeyboardInterrupt can be caught: while profuse's own modules import,
    and after the work is done, while the interpreter shuts down.
    """
    def now(signum: int, frame: Any) -> None:
        if not quiet:
            try:
                sys.stderr.flush()
                os.write(2, b"profuse: interrupted\n")
            except (OSError, ValueError):
                pass
        os._exit(130)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, now)
