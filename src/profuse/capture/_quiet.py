"""Keep the profiler's own ``USDT: ... profiler_start/stop`` lines off the user's terminal.

Kineto prints them from C++ straight to file descriptor 2 when a trace starts or stops, so
Python's ``sys.stderr`` never sees them. Around those calls only, fd 2 is pointed at a temporary
file; afterwards every line that is not such a marker is written back to the real stderr. The
script's own stderr outside those calls is untouched, and nothing written inside them is lost.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

MARKER = b"USDT:"
# what torch's C++ side says when a profiler interrupted in its warm-up is stopped (profiler_kineto.cpp): the
# interruption's own consequence, which profuse reports in its one line
CANCELLED = b"disableProfiler called but no active profiling session found"


def drop_markers(data: bytes, also: tuple[bytes, ...] = ()) -> bytes:
    """The bytes without the profiler's marker lines (nor lines holding any of ``also``)."""
    return b"".join(line for line in data.splitlines(keepends=True) if not _dropped(line, also))


def _dropped(line: bytes, also: tuple[bytes, ...]) -> bool:
    return line.lstrip().startswith(MARKER) or any(a in line for a in also)


@dataclass
class Filtered:
    """What a :func:`quiet_profiler_markers` block kept off the terminal (set when the block ends)."""
    dropped: bytes = b""


@contextlib.contextmanager
def quiet_profiler_markers(also: tuple[bytes, ...] = ()) -> Iterator[Filtered]:
    """Filter the profiler's marker lines (and lines holding any of ``also``) out of fd 2 for the
    duration of the block; the lines dropped are in the ``Filtered`` it yields once the block ends."""
    fd = 2  # the C++ side writes to fd 2 whatever sys.stderr is now (a test harness may replace it)
    seen = Filtered()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        saved = os.dup(fd)
    except OSError:  # no real fd 2 (embedded interpreter): nothing to filter
        yield seen
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield seen
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().splitlines(keepends=True)
            seen.dropped = b"".join(line for line in lines if _dropped(line, also))
            rest = b"".join(line for line in lines if not _dropped(line, also))
            if rest:
                os.write(fd, rest)
