"""A header read timeout for the explorer's HTTP connections (uvicorn's h11 protocol has none), and
TCP_NODELAY on each of them.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but a connection that
never sends a complete request head (nothing at all, or half a header) stays open for ever: a few
hundred of them hold the server's sockets. This protocol closes a connection that has not sent a
complete request head within :data:`REQUEST_HEAD_TIMEOUT_S` of opening, or of its last response.

Each connection also sends without Nagle's delay. asyncio turns it off only for sockets made with
``proto=IPPROTO_TCP``, not for a listening socket made as ``socket(AF_INET, SOCK_STREAM)`` (proto 0)
and the connections it accepts; uvicorn writes a response's head and body as two sends, and the
body of a small answer then waited for the browser's delayed ACK: 40-44 ms added to every timeline
answer under ~60 KB (measured in Chromium on 127.0.0.1: download 41-44 ms, 1-3 ms with it off).
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_HEAD_TIMEOUT_S = 5.0


class HeadTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing connections that send no complete request head in time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._heads = 0  # request heads received on this connection
        self._guard: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the connection, with its first request head due within the timeout."""
        super().connection_made(transport)
        no_delay(transport)
        self._arm()

    def handle_events(self) -> None:
        """As uvicorn, counting each request head h11 completes (a new request cycle)."""
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:
            self._heads += 1

    def on_response_complete(self) -> None:
        """As uvicorn; the next request head is due within the timeout too."""
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """As uvicorn, with the guard's timer cancelled."""
        if self._guard is not None:
            self._guard.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
        self._guard = self.loop.call_later(REQUEST_HEAD_TIMEOUT_S, self._check, self._heads)

    def _check(self, heads: int) -> None:
        if self._heads == heads and not self.transport.is_closing():
            self.transport.close()  # no complete request head since the timer was armed


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Nagle's algorithm off on a TCP transport's socket (see the module docstring); a socket that has
    no such option (a Unix socket in a test) is left as it is."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
