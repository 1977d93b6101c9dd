"""``profuse explore``: a local web app over one or two traces (Starlette on uvicorn, 127.0.0.1 only).

The server reads two things only: its own front-end files (a fixed list taken at start-up) and the
traces it was started with. No request parameter ever reaches a file path.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..frontend import assets
from ..trace import Trace
from . import data

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Run:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.lock = threading.Lock()
        data.prepare(trace)

    def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        with self.lock:
            return fn(self.trace, *args, **kw)

    def info(self, i: int) -> dict[str, Any]:
        return {"run": i, "path": str(self.trace.path), "device_label": self.trace.device_label,
                "events": self.trace.meta["events"]}


class RankRuns:
    """The rank traces of a distributed run, loaded when first looked at; at most ``keep`` stay loaded."""

    def __init__(self, doc: dict[str, Any], load: Callable[[str], Trace], keep: int = 2) -> None:
        self.doc = doc
        self.runs = [LazyRun(r["path"], r, load, self) for r in doc["ranks"]]
        self.keep = keep
        self.order: list[LazyRun] = []  # loaded, least recently used first
        self.lock = threading.Lock()

    def touched(self, run: LazyRun) -> None:
        with self.lock:
            if run in self.order:
                self.order.remove(run)
            self.order.append(run)
            for old in self.order[:-self.keep]:
                if old.lock.acquire(blocking=False):  # one that is busy is dropped on a later call
                    try:
                        old.unload()
                        self.order.remove(old)
                    finally:
                        old.lock.release()


class LazyRun(Run):
    """One rank's trace, loaded on the first request for it."""

    def __init__(self, path: str, row: dict[str, Any], load: Callable[[str], Trace], owner: RankRuns) -> None:
        self.path, self.row, self.load, self.owner = path, row, load, owner
        self.trace: Trace | None = None  # type: ignore[assignment]
        self.lock = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        with self.lock:
            if self.trace is None:
                self.trace = self.load(self.path)
                data.prepare(self.trace)
            result = fn(self.trace, *args, **kw)
        self.owner.touched(self)
        return result

    def unload(self) -> None:
        if self.trace is not None:
            self.trace.close()
            self.trace = None

    def info(self, i: int) -> dict[str, Any]:
        return {"run": i, "path": self.path, "device_label": self.row["device_kind"], "events": self.row["events"],
                "rank": self.row["rank"]}


def _json(obj: Any, status: int = 200) -> Response:
    return JSONResponse(obj, status_code=status, headers=SECURITY_HEADERS)


def _not_found() -> Response:
    return Response("not found\n", status_code=404, media_type="text/plain", headers=SECURITY_HEADERS)


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class LoopbackHostOnly:
    """ASGI middleware: answer only requests addressed to this server by a loopback name and its port.

    A page on another site can point its own host name at 127.0.0.1 (DNS rebinding) and read the
    explorer's API as same-origin; its requests still carry that foreign ``Host``, so they get 421.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and not self.allowed(scope):
            if scope["type"] == "http":
                await Response("misdirected request: use http://127.0.0.1:PORT/\n", status_code=421,
                               media_type="text/plain", headers=SECURITY_HEADERS)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def allowed(scope: Any) -> bool:
        hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
        server = scope.get("server")
        if len(hosts) != 1 or not server:
            return False
        port = server[1]
        return hosts[0].decode("latin-1").lower() in {f"{name}:{port}" for name in LOOPBACK_NAMES}


def create_app(traces: list[Trace], *, keep_metadata: bool = False, ranks: RankRuns | None = None) -> Starlette:
    """The app over one or two traces, or (``ranks``) over the rank traces of a distributed run."""
    runs: list[Run] = [*ranks.runs] if ranks is not None else [Run(t) for t in traces]
    files = assets()

    def static(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in files:  # a fixed table lookup: nothing from the request touches the disk
            return _not_found()
        body, mime = files[name]
        return Response(body, media_type=mime, headers=SECURITY_HEADERS | {"Cache-Control": "no-cache"})

    def run_of(request: Request) -> Run | None:
        i = request.path_params["run"]
        return runs[i] if 0 <= i < len(runs) else None

    def api_runs(request: Request) -> Response:
        return _json([r.info(i) for i, r in enumerate(runs)])

    def api_ranks(request: Request) -> Response:
        if ranks is None:
            return _json({"error": "start profuse explore on a folder of rank traces for the Ranks view"}, 404)
        return _json(ranks.doc)

    def api(view: str) -> Callable[[Request], Response]:
        def handler(request: Request) -> Response:
            run = run_of(request)
            if run is None:
                return _not_found()
            q = request.query_params
            try:
                if view == "lanes":
                    return _json(run.call(data.lanes))
                if view == "timeline":
                    t0 = float(q["t0"]) if "t0" in q else None
                    t1 = float(q["t1"]) if "t1" in q else None
                    width = min(max(int(q.get("width", 1600)), 1), 8000)
                    return _json(run.call(data.timeline, t0, t1, width))
                if view == "event":
                    found = run.call(data.event, request.path_params["id"])
                    return _json(found) if found else _not_found()
                if view == "overview":
                    return _json(run.call(data.overview, keep_metadata=keep_metadata))
                if view == "ops":
                    group = q.get("group_by", "op")
                    if group not in ("op", "shape", "module", "kernel"):
                        return _json({"error": "group_by must be op, shape, module or kernel"}, 400)
                    return _json(run.call(data.ops, group))
                if view == "modules":
                    return _json(run.call(data.modules))
                if view == "compiled":
                    return _json(run.call(data.compiled))
            except ValueError:
                return _json({"error": "bad query parameter"}, 400)
            return _not_found()
        return handler

    def api_compare(request: Request) -> Response:
        if len(runs) < 2 or ranks is not None:
            return _json({"error": "start profuse explore with two traces to compare them"}, 404)
        with runs[0].lock, runs[1].lock:
            return _json(data.compare(runs[0].trace, runs[1].trace))

    routes = [
        Route("/", static),
        Route("/assets/{name}", static),
        Route("/api/runs", api_runs),
        Route("/api/ranks", api_ranks),
        Route("/api/compare", api_compare),
        Route("/api/{run:int}/event/{id:int}", api("event")),
    ] + [Route(f"/api/{{run:int}}/{v}", api(v)) for v in ("lanes", "timeline", "overview", "ops", "modules",
                                                            "compiled")]
    async def nf(request: Request, exc: Exception) -> Response:
        return _not_found()

    return Starlette(routes=routes, exception_handlers={404: nf, 405: nf},
                     middleware=[Middleware(LoopbackHostOnly)])


def serve(traces: list[Trace], *, port: int = 0, open_browser: bool = True, keep_metadata: bool = False,
          on_ready: Callable[[str], None] | None = None, ranks: RankRuns | None = None) -> None:
    """Serve until Ctrl-C, on 127.0.0.1 (a free port unless ``port``)."""
    import socket
    import webbrowser

    import uvicorn

    app = create_app(traces, keep_metadata=keep_metadata, ranks=ranks)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)  # connections made as soon as the URL is printed wait for the server
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    # a request still running after Ctrl-C / SIGTERM is cut after 2 s instead of holding the exit
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    if on_ready:
        on_ready(url)
    if open_browser:
        threading.Timer(0.5, lambda: webbrowser.open(url)).start()
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down on SIGTERM, then re-raises it; let that end here like Ctrl-C does
        signal.signal(signal.SIGTERM, _terminate)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down; Ctrl-C is how the explorer is meant to stop
    finally:
        sock.close()


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

