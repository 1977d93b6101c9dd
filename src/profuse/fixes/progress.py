"""Progress of a long call (``profuse.advise``): one line per phase, with the seconds since the call began.

In a terminal or a script each line goes to stderr as it starts. In a Jupyter kernel (where stderr is
drawn as an error) the lines go to one plain-text display that is updated in place: the phases so far,
the current one last; no widgets, so any notebook front end shows it.
"""
from __future__ import annotations

import sys
import time
from typing import Any


def _notebook_display() -> Any:
    """A new text display in the running Jupyter kernel, or None outside one (IPython is not imported
    here unless the process already has it)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return None
    from IPython.display import display

    return display({"text/plain": ""}, raw=True, display_id=True)  # type: ignore[no-untyped-call]


class Progress:
    """Phase lines of one call named ``what`` (``enabled`` False: silent)."""

    def __init__(self, what: str, *, enabled: bool = True) -> None:
        self.what = what
        self.enabled = enabled
        self.lines: list[str] = []
        self._start = time.monotonic()
        self._display: Any = None
        self._in_notebook: bool | None = None

    def __call__(self, phase: str) -> None:
        """Say that ``phase`` begins now."""
        if not self.enabled:
            return
        line = f"{self.what} [{time.monotonic() - self._start:6.1f} s] {phase}"
        self.lines.append(line)
        if self._in_notebook is None:
            self._display = _notebook_display()
            self._in_notebook = self._display is not None
        if self._display is not None:
            self._display.update({"text/plain": "\n".join(self.lines)}, raw=True)
            return
        print(line, file=sys.stderr, flush=True)
