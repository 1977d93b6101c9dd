"""Run the explorer's real server (uvicorn, with `profuse explore`'s socket and configuration) on
127.0.0.1 in a thread, for tests; and the explorer's URLs with its session token."""
from __future__ import annotations

import secrets
import threading
import time
import urllib.parse
from contextlib import contextmanager

import uvicorn

from profuse.explorer.server import create_app, listening_socket, server_config


class Explorer(str):
    """A running explorer's address, ``http://127.0.0.1:PORT`` (no slash at the end), and its session
    token: :meth:`at` is a path of it that the explorer answers (the token in its query)."""

    token: str

    def __new__(cls, base: str, token: str) -> Explorer:
        url = super().__new__(cls, base.rstrip("/"))
        url.token = token
        return url

    @classmethod
    def printed(cls, url: str) -> Explorer:
        """The explorer whose URL `profuse explore` printed (``http://127.0.0.1:PORT/?token=...``)."""
        parts = urllib.parse.urlsplit(url)
        (token,) = urllib.parse.parse_qs(parts.query)["token"]
        return cls(f"{parts.scheme}://{parts.netloc}", token)

    def at(self, path: str) -> str:
        """``path`` (``/api/runs``, ``/#view=ops``) on this explorer, with its token."""
        path, hash_, fragment = path.partition("#")
        sep = "&" if "?" in path else "?"
        return f"{self}{path}{sep}token={self.token}{hash_}{fragment}"


@contextmanager
def running(traces, **kw):
    """The explorer serving ``traces`` as `profuse explore` does; yields its :class:`Explorer` (its
    ``app`` is the Starlette app)."""
    sock, token = listening_socket(), secrets.token_urlsafe(32)
    app = create_app(traces, token=token, **kw)
    with serving(sock, server_config(app)):
        url = Explorer(f"http://127.0.0.1:{sock.getsockname()[1]}", token)
        url.app = app
        yield url


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
