"""Stopping the explorer on SIGINT or SIGTERM at once, in one line.

uvicorn stops taking connections, gives the requests in flight ``timeout_graceful_shutdown`` to end,
then cancels them, logging a count and a CancelledError traceback for each. The explorer's requests
that wait (for a run busy with another, for the timeline model) look at a stop event, which
:class:`StoppingServer` sets when the signal comes: they are answered 503 within a poll and the
server is down in a fraction of a second. What uvicorn still logs of a request it cuts meanwhile is
dropped by :class:`QuietStop`: the user asked for the stop, it is not an error.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from types import FrameType

import uvicorn


class StoppingServer(uvicorn.Server):
    """uvicorn's server, setting ``stop`` as soon as it is told to exit by a signal."""

    def __init__(self, config: uvicorn.Config, stop: threading.Event) -> None:
        super().__init__(config)
        self.stop = stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Set the stop event (requests waiting give up), then stop as uvicorn does."""
        self.stop.set()
        super().handle_exit(sig, frame)


class QuietStop(logging.Filter):
    """For uvicorn's error log: once ``stop`` is set, drop the count of the requests it cuts and the
    CancelledError each of them ends in; anything else is logged as before."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop

    def filter(self, record: logging.LogRecord) -> bool:
        """False for what a cut request logs while stopping."""
        if not self.stop.is_set():
            return True
        if str(record.msg).startswith("Cancel ") and "timeout graceful shutdown" in str(record.msg):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)
