"""Run the explorer's real server (uvicorn, with `profuse explore`'s socket and configuration) on
127.0.0.1 in a thread, for tests."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import uvicorn

from profuse.explorer.server import create_app, listening_socket, server_config


@contextmanager
def running(traces, **kw):
    """The explorer serving ``traces`` as `profuse explore` does; yields its URL."""
    sock = listening_socket()
    with serving(sock, server_config(create_app(traces, **kw))):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def serving(sock, config):
    """uvicorn with ``config`` on the listening socket ``sock``, in a thread; yields the server (its
    ``server_state`` holds the open connections). The socket is closed after."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def scroll_timeline_to(page, y: float) -> None:
    """Scroll the timeline's lane box (it opens on the device lanes) so canvas row ``y`` is mid-view."""
    page.evaluate("y => { const w = document.getElementById('tl-wrap'); "
                  "w.scrollTop = Math.max(0, y - w.clientHeight / 2); }", y)
