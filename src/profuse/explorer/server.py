"""``profuse explore``: a local web app over one or two traces (Starlette on uvicorn, 127.0.0.1 only).

The server reads two things only: its own front-end files (a fixed list taken at start-up) and the
traces it was started with. No request parameter ever reaches a file path. It answers only requests
addressed to its loopback name and port (:class:`LoopbackHostOnly`) that carry its session token
(``_token``), and no request waits for a run for ever (:data:`LOCK_WAIT_S`, the stop event).
"""
from __future__ import annotations

import html
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..analysis._choices import GROUPS
from ..analysis.health import trace_health
from ..analysis.memory import live_at
from ..analysis.summary import summarize
from ..analysis.timeline import (
    FirstView,
    Lane,
    TimelineModel,
    TimelineWindow,
    bucket_ns_for,
    coarse_view,
    event_links,
    timeline_model,
    timeline_model_later,
    timeline_window,
)
from ..errors import UserError
from ..frontend import assets
from ..payloads import build, calltree
from ..payloads.memory import MemoryTimeline, memory_timeline_of
from ..payloads.overview import Overview
from ..payloads.ranks import RankRow, RanksDocument
from ..payloads.views import RunInfo
from ..redact import redact_text, redacted
from ..trace import Trace
from ..trace.cache import SourceCheck
from ._token import SessionTokenOnly

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Loaded:
    """A trace being served and its timeline model; a request that needs no model does not wait for it.

    What the first view of the timeline shows (its lanes and span, the whole span at one level of
    detail, the memory lanes) is kept as derived entries of the trace (``Trace.derived``: per trace
    bytes and profuse build), so a trace opened again draws its first view without waiting for the model;
    a trace opened the first time draws a coarse first view (:func:`coarse_view`) until the model is built.
    ``built`` says whether the model is at hand (asking for it waits for nothing)."""

    def __init__(self, trace: Trace, model: Callable[[], TimelineModel],
                 built: Callable[[], bool] = lambda: True) -> None:
        self.trace = trace
        self._model = model
        self.built = built
        self._kept: dict[str, Any] = {}
        self._once: dict[str, Any] = {}

    @property
    def model(self) -> TimelineModel:
        """The timeline model (waits for it where it is still being built)."""
        return self._model()

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``key`` is asked for, the same value after (for as long as the trace
        is served: what two answers share, the summary the Overview's head and whole both show)."""
        if key not in self._once:
            self._once[key] = compute()
        found: T = self._once[key]
        return found

    def kept(self, key: str, of: type[T], compute: Callable[[], T] | None = None) -> T | None:
        """The record kept under ``key`` (decoded as ``of``), else ``compute()`` kept there; None where
        nothing is kept and there is no ``compute``."""
        if key in self._kept:
            found: T = self._kept[key]
            return found
        raw = self.trace.stored(key)
        value = _decoded(raw, of) if raw is not None else None
        if value is None:
            if compute is None:
                return None
            value = compute()
            self.trace.derived(key, lambda: msgspec.msgpack.encode(value))
        self._kept[key] = value
        return value

    def head(self, *, build: bool = True) -> TimelineHead | None:
        """The timeline's lanes and span (from the model where they are not kept, unless not ``build``)."""
        def compute() -> TimelineHead:
            return TimelineHead(lanes=self.model.lanes, span_us=self.model.span_us)

        return self.kept(f"{KEPT}timeline-head", TimelineHead, compute if build else None)

    def full_window(self, bucket: int, *, build: bool = True) -> TimelineWindow | None:
        """The whole span at level of detail ``bucket`` ns (from the model where it is not kept, unless not ``build``)."""
        return self.kept(f"{KEPT}timeline-full/{bucket}", TimelineWindow,
                         (lambda: timeline_window(self.model, None, None, 1, bucket)) if build else None)


WANT_WITHIN_S = 1.0  # a kept first view's model is built this long after the check at the latest
# and this long after the first view is answered, unless a request needs it sooner: the page's parse
# and first draw then have the cores (measured on 2 cores at 1.36 M events: from the answer to the
# drawn boxes 0.21-0.35 s with the build waiting, 0.24-0.54 s with it started at the answer)
VIEWED_GRACE_S = 0.3
# A due build that finds a request computing on its run waits for that request's end (its release wakes the
# build; this is the longest it sleeps between looks): the two side by side held both their peaks at once
# (1 GB trace, the Overview's first open: 1,139 MB with the build beside the diagnosis, 836 MB with it after)
BUSY_POLL_S = 0.05
KEPT = "explorer/1/"  # the derived entries' key prefix: change it when what they hold changes
T = TypeVar("T")
LOCK_WAIT_S = 30.0  # the longest a request waits for a run busy with other requests' work: then 503
STOP_POLL_S = 0.05  # how often a waiting request looks whether the explorer is stopping
# the widest window a request may ask for, and the farthest its ends may lie from the trace's start,
# in µs (11.6 days: any trace's span is far shorter); a wider one is refused before any work: its
# level of detail alone took a loop without end where t1 - t0 overflowed to infinity
MAX_WINDOW_US = 1e12


class TimelineHead(msgspec.Struct, frozen=True):
    """What the timeline's first view needs of the model besides its events: the lanes and the span."""

    lanes: list[Lane]
    span_us: tuple[float, float]


def _decoded(raw: bytes, of: type[T]) -> T | None:
    try:
        return msgspec.msgpack.decode(raw, type=of)
    except msgspec.DecodeError:  # another layout under the same key: computed again
        return None


class ModelBuild:
    """A trace's timeline model, built on a thread started here: once ``after`` (the trace's check, if
    any) is done and the model is wanted (:meth:`want`), or VIEWED_GRACE_S after the first view is
    answered (:meth:`viewed`), or WANT_WITHIN_S after the check, whichever comes first: what the first
    view does (the hash, its answers, the page's parse and drawing) has the cores to itself. Unless
    wanted, a due build also waits while ``busy()`` (a request computes on the run: :meth:`released` says
    when one ends), so that the model's memory and a diagnosis's do not peak together."""

    def __init__(self, trace: Trace, after: SourceCheck | None, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._model: TimelineModel | None = None
        self._failed: BaseException | None = None
        self._wanted = threading.Event()
        self._wake = threading.Event()  # set by want() and viewed(): the build thread looks again
        self._viewed_at: float | None = None
        build_model = timeline_model_later(trace)

        def build() -> None:
            try:
                if after is not None and after.wait() is not None:
                    # the bytes changed: the trace is loaded again, with its own model
                    self._failed = RuntimeError("the trace changed on disk; its model was not built")
                    return
                self._wait_for_start(time.monotonic() + WANT_WITHIN_S)
                self._model = build_model()
            except BaseException as e:  # re-raised by the request that needs the model
                self._failed = e

        self._thread = threading.Thread(target=build, name="profuse-timeline-model", daemon=True)
        self._thread.start()

    def _wait_for_start(self, deadline: float) -> None:
        while not self._wanted.is_set():
            viewed = self._viewed_at
            left = min(deadline, viewed + VIEWED_GRACE_S if viewed is not None else deadline) - time.monotonic()
            if left <= 0:
                if not self._busy():
                    return
                left = BUSY_POLL_S   # due, but a request computes: after it
            self._wake.wait(left)
            self._wake.clear()

    def want(self) -> None:
        """Start the build now where it waits (a request needs the model)."""
        self._wanted.set()
        self._wake.set()

    def released(self) -> None:
        """A request on the run has ended: a due build that waited for it looks again."""
        self._wake.set()

    def viewed(self) -> None:
        """The first view is answered: its zooms will want the model, VIEWED_GRACE_S from now at the latest."""
        if self._viewed_at is None:
            self._viewed_at = time.monotonic()
            self._wake.set()

    def built(self) -> bool:
        """Whether the model is built (asking for it waits for nothing)."""
        return self._model is not None

    def join(self) -> None:
        """Wait for the build to end."""
        self.want()
        self._thread.join()

    def wait(self, stop: threading.Event) -> None:
        """Wait for the build to end, unless ``stop`` is set meanwhile (then 503)."""
        self.want()
        while self._thread.is_alive():
            if stop.is_set():
                raise ApiError(503, STOPPING)
            self._thread.join(STOP_POLL_S)

    def result(self) -> TimelineModel:
        """The model (waits for it), or what its build raised."""
        self.join()
        if self._model is None:
            raise self._failed or RuntimeError("the timeline model was not built")
        return self._model

    def close(self) -> None:
        """Wait for the build, then free the model's tables."""
        self.join()
        if self._model is not None:
            self._model.close()
            self._model = None
            self._failed = RuntimeError("the timeline model was closed with its trace")


class Run:
    """One trace the explorer serves; requests on it run one at a time.

    Its timeline model is built in a thread started here, on a cursor of its own, while the server
    starts, the page loads and requests that need no model are answered; the first that needs it waits.
    A trace opened by its stat entry (``load(verify="behind")``) is hashed meanwhile: no request is
    answered from it before its bytes are found to be its tables'; where they are not, the trace is
    loaded again (hashing first) and its model rebuilt, and requests are answered from that."""

    def __init__(self, trace: Trace, stop: threading.Event) -> None:
        self.lock, self.stop = threading.Lock(), stop
        self._serve(trace)

    @contextmanager
    def held(self) -> Iterator[None]:
        """This run's lock, waited for at most LOCK_WAIT_S and not once the explorer stops (else 503)."""
        _acquire(self.lock, self.stop)
        try:
            yield
        finally:
            self.lock.release()
            self._released()

    def _released(self) -> None:
        """A request has let the run go: the model's build, where it waits for that, looks again."""
        self._building.released()

    def _serve(self, trace: Trace) -> None:
        # the first view needs no model (kept, else coarse): its build waits for the trace's check, so
        # the hash (which every answer waits for) and the first view have the cores to themselves
        building = ModelBuild(trace, trace.source_check, busy=self.lock.locked)
        loaded = Loaded(trace, building.result, building.built)
        trace.closing.append(building.close)  # the model's cursor is done with before the trace closes
        self.trace, self.loaded, self._building = trace, loaded, building

    def checked(self) -> None:
        """Wait, outside the lock, until the trace's bytes are known to be its tables' (at once for a
        trace hashed before it was opened); a trace whose bytes changed is loaded again first."""
        check = self.trace.source_check
        if check is None or check.wait() is None:
            return
        with self.held():
            if self.trace.source_check is not check:
                return  # another request has loaded it again meanwhile
            try:
                fresh = check.reload()
            except UserError as e:  # asked again by the next request: the file may be put right meanwhile
                raise ApiError(409, f"{e} (the trace changed on disk since it was opened, and no longer loads)") from None
            self.trace.close()
            self._serve(fresh)

    def ready(self) -> None:
        """Wait, outside the lock, for the timeline model (requests that need no model go on meanwhile)."""
        self.checked()
        self._building.wait(self.stop)

    def want_model(self) -> None:
        """The page is on the timeline: build its model soon where the build waits (see ModelBuild)."""
        self._building.viewed()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(loaded, *args)`` under this run's lock, on a trace whose bytes have been checked."""
        self.checked()
        with self.held():
            return fn(self.loaded, *args)

    def ahead(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(loaded, *args)`` as :meth:`call` answers it, but computed under this run's lock while the
        trace's check may still run (the first view: the hash and it share the cores): returned only
        once the bytes are found to be the tables'; where they are not, computed again on the trace as
        it is loaded again."""
        with self.held():
            loaded = self.loaded
            found = fn(loaded, *args)
        self.checked()
        return found if self.loaded is loaded else self.call(fn, *args)

    def info(self, i: int) -> RunInfo:
        """The run as the run picker lists it."""
        self.checked()
        with self.held():
            return build.run_info(i, self.trace)


class RankRuns:
    """The rank traces of a distributed run, loaded when first looked at; at most ``keep`` stay loaded."""

    def __init__(self, doc: RanksDocument, load: Callable[[str], Trace], keep: int = 2) -> None:
        self.doc = doc
        self.stop = threading.Event()  # set when the explorer serving them stops
        self.runs = [LazyRun(r.path, r, load, self) for r in doc.ranks]
        self.keep = keep
        self.order: list[LazyRun] = []  # loaded, least recently used first
        self.lock = threading.Lock()

    def touched(self, run: LazyRun) -> None:
        """Note ``run`` as used now; unload the least recently used beyond ``keep``."""
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

    def __init__(self, path: str, row: RankRow, load: Callable[[str], Trace], owner: RankRuns) -> None:
        self.path, self.row, self.load, self.owner = path, row, load, owner
        self._loaded: Loaded | None = None
        self.lock, self.stop = threading.Lock(), owner.stop

    def ready(self) -> None:
        """Nothing to wait for: the trace and its model are loaded by :meth:`call`."""

    def checked(self) -> None:
        """Nothing to check: a rank's trace is hashed before it is opened."""

    def want_model(self) -> None:
        """Nothing to start: a rank's model is built with its trace, by :meth:`call`."""

    def _released(self) -> None:
        """Nothing waits for a request's end: a rank's model is built with its trace."""

    def ahead(self, fn: Callable[..., Any], *args: Any) -> Any:
        """:meth:`call`: a rank's trace is hashed before it is opened."""
        return self.call(fn, *args)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(loaded, *args)``, loading the trace first if it is not loaded."""
        with self.held():
            if self._loaded is None:
                trace = self.load(self.path)
                model = timeline_model(trace)
                self._loaded = Loaded(trace, lambda: model)
            result = fn(self._loaded, *args)
        self.owner.touched(self)
        return result

    def unload(self) -> None:
        """Close the trace and its model (reloaded on the next request)."""
        if self._loaded is not None:
            self._loaded.model.close()
            self._loaded.trace.close()
            self._loaded = None

    def info(self, i: int) -> RunInfo:
        """The rank as the run picker lists it (without loading its trace)."""
        return RunInfo(run=i, path=self.path, device_label=self.row.device_kind, events=self.row.events,
                       rank=self.row.rank)


class ApiError(Exception):
    """A request the API answers with an error status and a one-line JSON ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


STOPPING = "the explorer is stopping"


def _acquire(lock: threading.Lock, stop: threading.Event) -> None:
    """Take ``lock``, waiting at most LOCK_WAIT_S and not once ``stop`` is set: else ApiError 503."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            raise ApiError(503, f"busy: this run has been working on other requests for {LOCK_WAIT_S:g} s; "
                                "ask again")
        if lock.acquire(timeout=min(left, STOP_POLL_S)):
            if not stop.is_set():
                return
            lock.release()
    raise ApiError(503, STOPPING)


@dataclass(frozen=True)
class Options:
    """What the explorer was started with that changes its payloads."""

    keep_metadata: bool = False


def _group_by(request: Request) -> str:
    group = request.query_params.get("group_by", "op")
    if group not in GROUPS:
        raise ApiError(400, "group_by must be " + ", ".join(GROUPS[:-1]) + " or " + GROUPS[-1])
    return group


def overview_key(*, later: bool, keep_metadata: bool) -> str:
    """The derived entry's key of a kept Overview: its head alone (``later``: without the advice) or whole, with
    the trace's metadata kept or redacted."""
    return f"{KEPT}overview{'-head' if later else ''}{'-kept-metadata' if keep_metadata else ''}"


def _overview(run: Loaded, request: Request, opts: Options) -> Any:
    """The Overview, kept per trace; ``?advice=later``: without its advice (the summary, the device time by
    category and the trace's health: what the page draws while the diagnosis is computed)."""
    later = request.query_params.get("advice") == "later"
    key = overview_key(later=later, keep_metadata=opts.keep_metadata)

    def compute() -> Overview:
        summary = run.once("summary", lambda: summarize(run.trace))
        health = run.once("health", lambda: trace_health(run.trace))
        return build.overview_of(run.trace, summary=summary, health=health, with_advice=not later,
                                 keep_metadata=opts.keep_metadata)

    return run.kept(key, Overview, compute)


def _ops(run: Loaded, request: Request, opts: Options) -> Any:
    return build.ops_of(run.trace, group_by=_group_by(request))


def _op_kernels(run: Loaded, request: Request, opts: Options) -> Any:
    key = request.query_params.get("key")
    if key is None:
        raise ApiError(400, "op_kernels needs ?key= (an ops row's key)")
    kernels = build.op_kernels_of(run.trace, build.ops_of(run.trace, group_by=_group_by(request)))
    found = kernels.get(key)
    if found is None and not opts.keep_metadata:  # the key as the ops answer showed it: redacted
        found = next((v for k, v in kernels.items() if redact_text(k) == key), None)
    if found is None:
        raise ApiError(404, "no ops row has this key in this grouping")
    return found


def _lanes(run: Loaded, request: Request, opts: Options) -> Any:
    head = run.head()
    return head.lanes if head is not None else run.model.lanes


def _memory(run: Loaded, request: Request, opts: Options) -> Any:
    return run.kept(f"{KEPT}memory", MemoryTimeline, lambda: memory_timeline_of(run.trace))


def _memory_live(run: Loaded, request: Request, opts: Options) -> Any:
    q = request.query_params
    found = live_at(run.trace, q.get("device", ""), int(q.get("id", "-1")))
    if found is None:
        raise ApiError(404, "no such memory event on that device")
    return found


def _window_asked(request: Request) -> tuple[float | None, float | None, int, int | None]:
    """A timeline request's t0 and t1 (µs; None: the span's own end), width and level of detail."""
    q = request.query_params
    t0 = float(q["t0"]) if "t0" in q else None
    t1 = float(q["t1"]) if "t1" in q else None
    if not all(t is None or (math.isfinite(t) and abs(t) <= MAX_WINDOW_US) for t in (t0, t1)):
        raise ApiError(400, f"t0 and t1 must be finite numbers of µs within {MAX_WINDOW_US:g} of the trace's start")
    if t0 is not None and t1 is not None and t1 - t0 > MAX_WINDOW_US:
        raise ApiError(400, f"the window t0..t1 may span at most {MAX_WINDOW_US:g} µs")
    bucket = int(q["bucket_ns"]) if "bucket_ns" in q else None
    if bucket is not None and not (0 < bucket <= 1 << 50 and bucket & (bucket - 1) == 0):
        raise ApiError(400, "bucket_ns must be a power of two")
    return t0, t1, min(max(int(q.get("width", 1600)), 1), 8000), bucket


def _full_bucket(run: Loaded, request: Request, *, build: bool) -> int | None:
    """The level of detail of a request for the whole span, or None for any other request (or, unless
    ``build``, where the span is not kept)."""
    t0, t1, width, bucket = _window_asked(request)
    if t0 is not None or t1 is not None:
        return None
    head = run.head(build=build)
    return None if head is None else bucket or bucket_ns_for(*head.span_us, width)


def _timeline(run: Loaded, request: Request, opts: Options) -> Any:
    full = _full_bucket(run, request, build=True)
    if full is not None:
        return run.full_window(full)
    t0, t1, width, bucket = _window_asked(request)
    return timeline_window(run.model, t0, t1, width, bucket)


def _first_view(run: Loaded, request: Request, opts: Options) -> FirstView:
    """The timeline's first view (the whole span ``width`` pixels wide): exact where it is kept or the
    model is built, else coarse; it never waits for the model."""
    width = _window_asked(request)[2]
    head = run.head(build=run.built())
    full = run.full_window(bucket_ns_for(*head.span_us, width), build=run.built()) if head is not None else None
    if head is not None and full is not None:
        return FirstView(lanes=head.lanes, window=full, exact=True)
    return coarse_view(run.trace, width)


def _kept_without_model(run: Loaded, request: Request, builder: Callable[..., Any]) -> bool:
    """Whether ``builder``'s answer to ``request`` is kept, so it needs no model (the first view of a
    trace opened before)."""
    if builder is _lanes:
        return run.head(build=False) is not None
    if builder is _timeline:
        full = _full_bucket(run, request, build=False)
        return full is not None and run.full_window(full, build=False) is not None
    return False


def _event(run: Loaded, request: Request, opts: Options) -> Any:
    found = event_links(run.trace, run.model, request.path_params["id"])
    if found is None:
        raise ApiError(404, "no such event")
    return found


def _modules(run: Loaded, request: Request, opts: Options) -> Any:
    return build.modules_of(run.trace)


def _compiled(run: Loaded, request: Request, opts: Options) -> Any:
    return build.compiled_of(run.trace)


def _calltree(run: Loaded, request: Request, opts: Options) -> Any:
    found = calltree.call_tree_of(run.trace)
    if found is None:
        raise ApiError(404, "no python_function events in this trace (record with with_stack=True)")
    return found


def _event_detail(run: Loaded, request: Request, opts: Options) -> Any:
    found = calltree.event_detail_of(run.trace, request.path_params["id"])
    if found is None:
        raise ApiError(404, "no such event")
    return found


def _kernel_launches(run: Loaded, request: Request, opts: Options) -> Any:
    return calltree.kernel_launches_of(run.trace)


def _search(run: Loaded, request: Request, opts: Options) -> Any:
    query = request.query_params.get("q", "")
    if not query or len(query) > 200:
        raise ApiError(400, "search needs ?q= (1 to 200 characters of an event's name)")
    return calltree.search_of(run.model, query)


# The API of one run: path under /api/{run} -> its payload builder. Nothing else reaches a trace.
RUN_ROUTES: dict[str, Callable[[Loaded, Request, Options], Any]] = {
    "overview": _overview,
    "ops": _ops,
    "op_kernels": _op_kernels,
    "lanes": _lanes,
    "timeline": _timeline,
    "first_view": _first_view,
    "event/{id:int}": _event,
    "modules": _modules,
    "compiled": _compiled,
    "memory": _memory,
    "memory_live": _memory_live,
    "calltree": _calltree,
    "event_detail/{id:int}": _event_detail,
    "kernel_launches": _kernel_launches,
    "search": _search,
}
NEEDS_MODEL = {_lanes, _timeline, _event, _search}  # what waits for the timeline model (before taking the run's lock)


def _json(obj: Any, status: int = 200, *, keep_metadata: bool = False) -> Response:
    """``obj`` as the JSON answer; every string in it redacted once here, before it is encoded (unless
    ``keep_metadata``): every route's records, error messages included, pass this one place."""
    body = msgspec.json.encode(redacted(obj, keep=keep_metadata))
    return Response(body, status_code=status, media_type="application/json", headers=SECURITY_HEADERS)


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
        """Answer 421 to a request whose Host is not this server's loopback name and port."""
        if scope["type"] in ("http", "websocket") and not self.allowed(scope):
            if scope["type"] == "http":
                await Response("misdirected request: use http://127.0.0.1:PORT/\n", status_code=421,
                               media_type="text/plain", headers=SECURITY_HEADERS)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def allowed(scope: Any) -> bool:
        """Whether the request carries exactly one ``Host`` naming a loopback address and this port."""
        hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
        server = scope.get("server")
        if len(hosts) != 1 or not server:
            return False
        port = server[1]
        return hosts[0].decode("latin-1").lower() in {f"{name}:{port}" for name in LOOPBACK_NAMES}


class _Handlers:
    """The app's request handlers over its runs (one or two traces, or a distributed run's ranks)."""

    def __init__(self, runs: list[Run], ranks: RankRuns | None, keep_metadata: bool) -> None:
        self.runs, self.ranks, self.keep_metadata = runs, ranks, keep_metadata
        self.files = assets()
        self.opts = Options(keep_metadata=keep_metadata)

    def reply(self, obj: Any, status: int = 200) -> Response:
        return _json(obj, status, keep_metadata=self.keep_metadata)

    def static(self, request: Request) -> Response:
        """A front-end file from the table read at start-up."""
        name = request.path_params.get("name", "index.html")
        if name not in self.files:  # a fixed table lookup: nothing from the request touches the disk
            return _not_found()
        body, mime = self.files[name]
        return Response(body, media_type=mime, headers=SECURITY_HEADERS | {"Cache-Control": "no-cache"})

    def api_runs(self, request: Request) -> Response:
        try:
            return self.reply([r.info(i) for i, r in enumerate(self.runs)])
        except ApiError as e:
            return self.reply({"error": str(e)}, e.status)

    def api_ranks(self, request: Request) -> Response:
        if self.ranks is None:
            return self.reply({"error": "start profuse explore on a folder of rank traces for the Ranks view"}, 404)
        return self.reply(self.ranks.doc)

    def api_compare(self, request: Request) -> Response:
        runs = self.runs
        if len(runs) < 2 or self.ranks is not None:
            return self.reply({"error": "start profuse explore with two traces to compare them"}, 404)
        try:
            runs[0].checked()
            runs[1].checked()
            with runs[0].held(), runs[1].held():
                # built as it is: reply redacts it, as every answer
                return self.reply(build.compare_of(runs[0].trace, runs[1].trace, keep_metadata=True))
        except ApiError as e:
            return self.reply({"error": str(e)}, e.status)

    def on_run(self, builder: Callable[[Loaded, Request, Options], Any]) -> Callable[[Request], Response]:
        """The handler of one ``RUN_ROUTES`` entry: find the run, build the payload, encode it."""
        def handler(request: Request) -> Response:
            i = request.path_params["run"]
            if not 0 <= i < len(self.runs):
                return _not_found()
            run = self.runs[i]
            try:
                if builder is _timeline:
                    _window_asked(request)  # a window out of bounds is refused before it waits for the run
                if builder in NEEDS_MODEL and not run.call(_kept_without_model, request, builder):
                    run.ready()
                answer = self.reply((run.ahead if builder is _first_view else run.call)(builder, request, self.opts))
                if builder is _timeline or builder is _first_view:
                    run.want_model()  # the first view answered: its zooms will want the model
                return answer
            except ApiError as e:
                return self.reply({"error": str(e)}, e.status)
            except ValueError:
                return self.reply({"error": "bad query parameter"}, 400)
        return handler


def create_app(traces: list[Trace], *, token: str, keep_metadata: bool = False,
               ranks: RankRuns | None = None) -> Starlette:
    """The app over one or two traces, or (``ranks``) over the rank traces of a distributed run, answering
    only requests that carry ``token`` (``_token``). ``app.state.runs`` are its runs and
    ``app.state.stop`` the event that, set, has every request waiting for one of them give up (503)."""
    stop = ranks.stop if ranks is not None else threading.Event()
    runs: list[Run] = [*ranks.runs] if ranks is not None else [Run(t, stop) for t in traces]
    h = _Handlers(runs, ranks, keep_metadata)
    routes = [Route("/", h.static), Route("/assets/{name}", h.static), Route("/api/runs", h.api_runs),
              Route("/api/ranks", h.api_ranks), Route("/api/compare", h.api_compare)]
    routes += [Route(f"/api/{{run:int}}/{path}", h.on_run(builder)) for path, builder in RUN_ROUTES.items()]

    async def nf(request: Request, exc: Exception) -> Response:
        return _not_found()

    app = Starlette(routes=routes, exception_handlers={404: nf, 405: nf},
                    middleware=[Middleware(LoopbackHostOnly),  # first: a foreign Host gets 421, token or not
                                Middleware(SessionTokenOnly, token=token, headers=SECURITY_HEADERS)])
    app.state.runs, app.state.stop = runs, stop
    return app


def _private_opener(url: str) -> Path:
    """A page only this account can read that sends the browser on to ``url`` (Jupyter's way): the
    browser is started with this file's path, so the token never appears on a command line, which every
    local account can read (/proc/PID/cmdline)."""
    folder = Path(tempfile.mkdtemp(prefix="profuse-explore-"))   # 0700
    page = folder / "open.html"
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        href = html.escape(url, quote=True)
        fh.write(f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={href}">'
                 f'<title>profuse explorer</title><a href="{href}">open the profuse explorer</a>\n')
    return page


def serve(traces: list[Trace], *, port: int = 0, open_browser: bool = True, keep_metadata: bool = False,
          on_ready: Callable[[str], None] | None = None, ranks: RankRuns | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM, on 127.0.0.1 (a free port unless ``port``); ``on_ready`` gets the
    URL to open, with the session token in it. Returns once no request works on a trace any more."""
    import logging
    import webbrowser

    from ._stop import QuietStop, StoppingServer
    from ._token import new_token

    token = new_token()
    app = create_app(traces, token=token, keep_metadata=keep_metadata, ranks=ranks)
    sock = listening_socket(port)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/?token={token}"
    server = StoppingServer(server_config(app), app.state.stop)
    quiet = QuietStop(app.state.stop)
    logging.getLogger("uvicorn.error").addFilter(quiet)
    if on_ready:
        on_ready(url)
    opener = _private_opener(url) if open_browser else None
    if opener is not None:
        threading.Timer(0.5, lambda: webbrowser.open(opener.as_uri())).start()
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down on SIGTERM, then re-raises it; let that end here like Ctrl-C does
        signal.signal(signal.SIGTERM, _terminate)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down; Ctrl-C is how the explorer is meant to stop
    finally:
        app.state.stop.set()
        sock.close()
        if opener is not None:
            shutil.rmtree(opener.parent, ignore_errors=True)
        for run in app.state.runs:  # a request uvicorn cut may still be at work on its trace: let it end
            with run.lock:
                pass
        logging.getLogger("uvicorn.error").removeFilter(quiet)


def listening_socket(port: int = 0) -> socket.socket:
    """The explorer's listening socket: TCP on 127.0.0.1 only (a free port unless ``port``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(2048)  # connections made as soon as the URL is printed wait for the server
    except BaseException:
        sock.close()
        raise
    return sock


def server_config(app: Any) -> Any:
    """uvicorn's configuration for the explorer (``profuse explore`` and benchmarks/bench_explorer.py):
    a request still running after Ctrl-C / SIGTERM is cut after 1 s instead of holding the exit; a
    connection that sends no complete request head within a few seconds is closed, and every one sends
    without Nagle's delay (_guard)."""
    import uvicorn

    from ._guard import HeadTimeoutH11

    return uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1,
                          http=HeadTimeoutH11)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt

