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
    app = create_app(traces, **kw)
    sock = listening_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def scroll_timeline_to(page, y: float) -> None:
    """Scroll the timeline's lane box (it opens on the device lanes) so canvas row ``y`` is mid-view."""
    page.evaluate("y => { const w = document.getElementById('tl-wrap'); "
                  "w.scrollTop = Math.max(0, y - w.clientHeight / 2); }", y)
