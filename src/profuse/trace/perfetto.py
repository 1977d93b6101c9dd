"""Perfetto protobuf traces (``.pftrace``, ``.pftrace.gz``) read into the same tables as Kineto JSON.

The file is decoded with the protocol's published definitions (the ``perfetto`` package's compiled
``perfetto_trace.proto``; install ``profuse[perfetto]``), never by a hand-written decoder. Its
TrackEvents become the decoded columns the JSON path produces (:class:`~profuse.trace._columns.Columns`),
and everything after (kinds, correlation, the tables) is the JSON path's own:

* a slice (``TYPE_SLICE_BEGIN``/``TYPE_SLICE_END`` on one track, matched per track in time order, or a
  legacy complete event) is a complete event: its name, its first category as ``cat`` (several are
  joined by commas, as Chrome JSON writes them), start and duration in ns; its debug annotations are
  its ``args`` (``External id``, ``correlation``, ``device``, ``stream``, ``Input Dims``, ...), and the
  event's ``correlation_id`` is ``correlation`` where no annotation names one;
* a track with a thread descriptor is that (pid, tid); any other track is the pid of the process
  track above it (else the root track's name) and its own name as the tid (device streams, queues);
  process and thread names and process labels become the ``threads`` table's names;
* ``TYPE_INSTANT`` events are instants; flow ids are flows (an id's first event starts it, a
  terminating id or its last event finishes it, the events between are steps), at their slice's
  start and thread;
* Chrome metadata entries (``ChromeEventBundle.metadata``) are the trace's top-level keys
  (``deviceProperties``, ``distributedInfo``, ...).

What is not read is counted and said in the load's notes: slices begun and never ended (or ended
and never begun), counter values, packets of other kinds (ftrace, process stats, ...). A
neuron-explorer export folder (``system_profile.pftrace`` and one ``device_profile_model_<id>.pftrace``
per model) is read as one run: each file's tracks kept apart, the device profiles' slices on device
tracks (docs/input.md says what of that layout is verified only from its documentation).
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import Raw

from ..errors import TraceError, UserError
from ._columns import _ARG_INTS, Columns, _float_column, intern, thread_key
from ._decode import MAX_TRACE_BYTES_ENV, Skipped, concrete_text, int_column, max_trace_bytes, read_bytes
from .trace import Trace

SYSTEM_PROFILE = "system_profile.pftrace"
DEVICE_PROFILE = re.compile(r"^device_profile_model_(?P<model>.+)\.pftrace(?:\.gz)?$")
INSTALL = "reading Perfetto traces needs the perfetto package: pip install 'profuse[perfetto]'"
_TIME_MAX = 2**62  # ns: every time and the sum of all durations stays below (the JSON path's limit)
_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4  # TrackEvent.Type
# debug annotations read as the JSON path's args: name -> the column it fills
_INT_ARGS = {"correlation": "correlation", "Sequence number": "seq", "Fwd thread id": "fwd_tid",
             "Python id": "python_id", "Python parent id": "python_parent_id", "bytes": "nbytes",
             "device": "device", "stream": "stream", "stream_id": "stream_id", "External id": "external_id",
             "external id": "external_id_lc"}
_SHAPE_ARGS = ("Input Dims", "Input type", "grid", "block", "Concrete Inputs")
# what a device profile's slice is when its category names no Kineto kind (docs/input.md)
DEVICE_COPY = re.compile(r"dma|copy|memcpy", re.IGNORECASE)


def protos() -> Any:
    """The compiled Perfetto trace protos (``perfetto_trace_pb2``), or a one-line error naming the extra."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:
        raise UserError(INSTALL) from None
    return perfetto_trace_pb2


def is_explorer_export(folder: Path) -> bool:
    """A neuron-explorer ``--output-format perfetto`` folder: ``system_profile.pftrace`` and/or
    ``device_profile_model_<id>.pftrace`` files."""
    if not folder.is_dir():
        return False
    return any(q.name in (SYSTEM_PROFILE, SYSTEM_PROFILE + ".gz") or DEVICE_PROFILE.match(q.name)
               for q in folder.iterdir())


@dataclass
class _Track:
    """One track's place: the (pid, tid) its events get, and the names it gives them."""

    uuid: int
    parent: int
    name: str | None  # None: the descriptor gives none ("" is a name)
    pid: Any = None
    tid: Any = None
    process_name: str | None = None
    labels: str | None = None
    thread_name: str | None = None
    is_process: bool = False


@dataclass
class _Slice:
    """One complete event as read: its place in the file (its begin's), times, names and args."""

    order: int
    track: int
    ts: int
    dur: int
    name: str
    cat: str | None
    args: dict[str, Any]
    flows: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()


@dataclass
class _Raw:
    """A TrackEvent as read, before slices are matched."""

    order: int
    type: int
    track: int
    ts: int
    name: str
    cat: str | None
    args: dict[str, Any]
    flows: tuple[int, ...]
    ends: tuple[int, ...]
    dur: int = -1  # a legacy complete event's duration (ns); -1: a begin, end or instant


@dataclass
class _State:
    """What a file's packets build up: tracks, events, interned strings per sequence, top-level keys."""

    tracks: dict[int, _Track] = field(default_factory=dict)
    events: list[_Raw] = field(default_factory=list)
    top: dict[str, Any] = field(default_factory=dict)
    interned: dict[int, dict[str, dict[int, str]]] = field(default_factory=dict)
    default_track: dict[int, int] = field(default_factory=dict)
    unread: Counter[str] = field(default_factory=Counter)
    counters: int = 0
    device_file: bool = False
    uuid_base: int = 0


def _value(a: Any, names: dict[int, str]) -> Any:
    """A debug annotation's value as the JSON path would hold it (nested arrays and dicts as lists and dicts)."""
    kind = a.WhichOneof("value")
    if kind == "legacy_json_value":
        try:
            return json.loads(a.legacy_json_value)
        except (ValueError, RecursionError):   # not JSON, or nested past the interpreter's depth
            return a.legacy_json_value
    if kind in ("int_value", "uint_value", "double_value", "bool_value", "string_value", "pointer_value"):
        return getattr(a, kind)
    if kind == "string_value_iid":
        return names.get(a.string_value_iid)
    if a.array_values:
        return [_value(v, names) for v in a.array_values]
    if a.dict_entries:
        return {(e.name or names.get(e.name_iid, "")): _value(e, names) for e in a.dict_entries}
    return None


def _args(te: Any, interned: dict[str, dict[int, str]]) -> dict[str, Any]:
    names, values = interned.get("annotation", {}), interned.get("string", {})
    out = {}
    for a in te.debug_annotations:
        key = a.name if a.HasField("name") else names.get(a.name_iid, "")
        out[key] = _value(a, values)
    if te.HasField("correlation_id") and "correlation" not in out:
        out["correlation"] = te.correlation_id
    return out


def _intern(state: _State, packet: Any) -> dict[str, dict[int, str]]:
    """The sequence's interned strings, after this packet's additions (cleared where it says so)."""
    seq = packet.trusted_packet_sequence_id
    if packet.sequence_flags & _CLEARED:
        state.interned[seq] = {}
        state.default_track.pop(seq, None)
    table = state.interned.setdefault(seq, {})
    if packet.HasField("interned_data"):
        data = packet.interned_data
        for key, entries in (("name", data.event_names), ("cat", data.event_categories),
                             ("annotation", data.debug_annotation_names),
                             ("string", data.debug_annotation_string_values)):
            for e in entries:
                text = e.name if hasattr(e, "name") else e.str.decode("utf-8", "replace")
                table.setdefault(key, {})[e.iid] = text
    if packet.HasField("trace_packet_defaults"):
        d = packet.trace_packet_defaults.track_event_defaults
        if d.HasField("track_uuid"):
            state.default_track[seq] = d.track_uuid
    return table


def _track(state: _State, d: Any) -> None:
    base = state.uuid_base
    named = next((getattr(d, k) for k in ("name", "static_name", "atrace_name") if d.HasField(k)), None)
    t = _Track(uuid=base + d.uuid, parent=base + d.parent_uuid if d.HasField("parent_uuid") else 0, name=named)
    if d.HasField("thread"):
        t.pid, t.tid, t.thread_name = d.thread.pid, d.thread.tid, d.thread.thread_name or None
    if d.HasField("process"):
        p = d.process
        t.pid, t.is_process = p.pid, True
        t.process_name = p.process_name or None
        t.labels = ",".join(p.process_labels) or None
    state.tracks[t.uuid] = t


def _event(state: _State, packet: Any, order: int, table: dict[str, dict[int, str]]) -> None:
    te = packet.track_event
    seq = packet.trusted_packet_sequence_id
    kind = te.type
    dur = -1
    if not kind and te.HasField("legacy_event"):
        kind, dur = _legacy(te.legacy_event)
        if kind < 0:
            state.unread["legacy event of another phase"] += 1
            return
    if kind == _COUNTER:
        state.counters += 1
        return
    if kind not in (_BEGIN, _END, _INSTANT):
        state.unread["track event of no slice type"] += 1
        return
    track = te.track_uuid if te.HasField("track_uuid") else state.default_track.get(seq, 0)
    name = te.name if te.HasField("name") else table.get("name", {}).get(te.name_iid, "")
    cats = list(te.categories) or [table.get("cat", {}).get(i, "") for i in te.category_iids]
    flows = tuple(te.flow_ids) + tuple(te.flow_ids_old)
    ends = tuple(te.terminating_flow_ids) + tuple(te.terminating_flow_ids_old)
    state.events.append(_Raw(order, kind, state.uuid_base + track if track else 0, packet.timestamp, name,
                             ",".join(cats) if cats else None, _args(te, table), flows, ends, dur))


def _legacy(e: Any) -> tuple[int, int]:
    """A legacy event's type and, for a complete ('X') event, its duration in ns; (-1, -1) for others."""
    phase = chr(e.phase) if e.phase else ""
    if phase == "X":
        return _BEGIN, e.duration_us * 1000
    return {"B": (_BEGIN, -1), "E": (_END, -1), "i": (_INSTANT, -1), "I": (_INSTANT, -1)}.get(phase, (-1, -1))


def _read_packets(path: str, data: bytes | bytearray, state: _State) -> None:
    """Every packet of one file into ``state``."""
    pb = protos()
    trace = pb.Trace()
    try:
        trace.ParseFromString(bytes(data))
    except Exception as err:  # google.protobuf's DecodeError, whichever implementation is installed
        raise TraceError(path, f"not a Perfetto trace: its protobuf does not decode ({err})") from None
    if not trace.packet:
        raise TraceError(path, "not a Perfetto trace: no packets in it")
    cap = max_packets()
    if len(trace.packet) + len(state.events) > cap:
        raise TraceError(path, f"more than {cap:,} packets, profuse's limit for Perfetto input (each is read "
                               f"into memory, about {PACKET_BYTES:,} bytes per event); set "
                               f"{MAX_TRACE_BYTES_ENV} to a larger number of bytes to load it anyway")
    for order, packet in enumerate(trace.packet):
        table = _intern(state, packet)
        payload = packet.WhichOneof("data")
        if payload == "track_descriptor":
            _track(state, packet.track_descriptor)
        elif payload == "track_event":
            _event(state, packet, order, table)
        elif payload == "chrome_events":
            for m in packet.chrome_events.metadata:
                state.top[m.name] = _metadata(m)
        elif payload is not None:
            state.unread[payload] += 1


PACKET_BYTES = 4096  # what a packet costs once read: protobuf objects, an event record and its args (measured ~2 KB)


def max_packets() -> int:
    """The most packets a Perfetto input may hold: the trace size limit over :data:`PACKET_BYTES`, so that a
    file at the limit costs no more memory than a JSON trace at it (a .pftrace is ~10x denser than JSON)."""
    return max_trace_bytes() // PACKET_BYTES


def _metadata(m: Any) -> Any:
    kind = m.WhichOneof("value")
    if kind == "json_value":
        try:
            return json.loads(m.json_value)
        except (ValueError, RecursionError):
            return m.json_value
    return getattr(m, kind) if kind else None


def _place(tracks: dict[int, _Track], uuid: int) -> tuple[Any, Any]:
    """The (pid, tid) of a track's events (see the module docstring)."""
    t = tracks.get(uuid)
    if t is None:
        return ("", str(uuid) if uuid else "")
    if t.tid is not None:
        return t.pid, t.tid
    up, seen = t, {uuid}
    while up.pid is None and up.parent in tracks and up.parent not in seen:
        seen.add(up.parent)
        up = tracks[up.parent]
    pid = up.pid if up.pid is not None else up.name if up.name is not None else str(up.uuid)
    return pid, t.name if t.name is not None else str(uuid) if not t.is_process else ""


def _match(state: _State, lenient: bool, path: str) -> tuple[list[_Slice], list[_Raw], Counter[str]]:
    """Slices (begins matched to ends per track, in time order; ties in file order), instants, and what
    could not be matched."""
    by_track: dict[int, list[_Raw]] = defaultdict(list)
    for e in state.events:
        by_track[e.track].append(e)
    slices: list[_Slice] = []
    instants: list[_Raw] = []
    lost: Counter[str] = Counter()
    for track, events in by_track.items():
        events.sort(key=lambda e: e.ts)
        stack: list[_Raw] = []
        for e in events:
            if e.type == _INSTANT:
                instants.append(e)
            elif e.type == _BEGIN and e.dur >= 0:
                slices.append(_Slice(e.order, track, e.ts, e.dur, e.name, e.cat, e.args, e.flows, e.ends))
            elif e.type == _BEGIN:
                stack.append(e)
            elif stack:
                b = stack.pop(_closing(stack, e.name))
                b.args.update({k: v for k, v in e.args.items() if k not in b.args})  # args given at the end
                slices.append(_Slice(b.order, track, b.ts, e.ts - b.ts, b.name, b.cat, b.args,
                                     b.flows + e.flows, b.ends + e.ends))
            else:
                lost["slice end with no begin"] += 1
        lost["slice begun and never ended"] += len(stack)
    slices.sort(key=lambda s: s.order)
    instants.sort(key=lambda e: e.order)
    _check_times(path, slices, lenient, lost)
    _check_instants(path, instants, lenient, lost)
    return slices, instants, lost


def _closing(stack: list[_Raw], name: str) -> int:
    """Which open slice an end closes: the latest, or where the end names its slice (slices on one track
    that overlap without nesting), the latest open one of that name."""
    if not name or stack[-1].name == name:
        return -1
    return next((k for k in range(len(stack) - 1, -1, -1) if stack[k].name == name), -1)


def _check_times(path: str, slices: list[_Slice], lenient: bool, lost: Counter[str]) -> None:
    """Slices and instants beyond 2^62 ns: an error naming the file, or skipped and counted (--lenient)."""
    _drop_out_of_range(path, slices, lambda s: 0 <= s.ts < _TIME_MAX and s.ts + s.dur < _TIME_MAX, "slice",
                       lenient, lost)


def _check_instants(path: str, instants: list[_Raw], lenient: bool, lost: Counter[str]) -> None:
    _drop_out_of_range(path, instants, lambda e: 0 <= e.ts < _TIME_MAX, "instant", lenient, lost)


def _drop_out_of_range(path: str, items: list[Any], fits: Callable[[Any], bool], what: str, lenient: bool,
                       lost: Counter[str]) -> None:
    bad = [x for x in items if not fits(x)]
    if bad and not lenient:
        raise TraceError(path, f"{what} {bad[0].name!r} at {bad[0].ts} ns runs beyond 2^62 ns (use --lenient "
                               f"to skip such events)")
    if bad:
        lost["ts out of range"] += len(bad)
        drop = {id(x) for x in bad}
        items[:] = [x for x in items if id(x) not in drop]


def _device_cat(s: _Slice) -> str | None:
    """A device profile's slice: its category when it names a Kineto kind, else kernel or gpu_memcpy."""
    from .schema import category_kind

    if s.cat and category_kind(s.cat.lower()) != "other":
        return s.cat
    return "gpu_memcpy" if DEVICE_COPY.search(s.name) else "kernel"


_FILE_SHIFT = 40  # a file's packets are numbered from (its index << _FILE_SHIFT): files in order, kept apart


def _columns(state: _State, slices: list[_Slice], instants: list[_Raw], device_files: set[int], path: str,
             skipped: Skipped | None) -> Columns:
    """The decoded columns of the JSON path (:func:`profuse.trace._columns.add_chunk`'s) for these slices."""
    cols = Columns()
    n = len(slices)
    places = [_place(state.tracks, s.track) for s in slices]
    cats = [_device_cat(s) if s.order >> _FILE_SHIFT in device_files else s.cat for s in slices]
    cols.add("ts", np.array([s.ts for s in slices], dtype=np.int64))
    cols.add("dur", np.array([s.dur for s in slices], dtype=np.int64))
    cols.add("name", intern(cols.names, [s.name for s in slices]))
    cols.add("cat", intern(cols.cats, cats))
    cols.add("thread_key", _keys(cols, places))
    _add_args(cols, [s.args for s in slices], path, skipped)
    cols.n = n
    _thread_meta(cols, state.tracks)
    if instants:
        cols.add("inst_name", intern(cols.names, [e.name for e in instants]))
        cols.add("inst_cat", intern(cols.cats, [e.cat for e in instants]))
        cols.add("inst_ts", np.array([e.ts for e in instants], dtype=np.int64))
        cols.add("inst_thread_key", _keys(cols, [_place(state.tracks, e.track) for e in instants]))
        cols.phase_counts["i"] = len(instants)
    _flows(cols, slices, places)
    return cols


def _keys(cols: Columns, places: list[tuple[Any, Any]]) -> np.ndarray:
    """The thread key (pid code * THREAD_SHIFT + tid code) of each (pid, tid), as the JSON path interns them."""
    from ._columns import THREAD_SHIFT

    pid = intern(cols.pids, [p for p, _ in places]).astype(np.int64)
    tid = intern(cols.tids, [t for _, t in places]).astype(np.int64)
    out: np.ndarray = pid * THREAD_SHIFT + tid
    return out


def _add_args(cols: Columns, args: list[dict[str, Any]], path: str, skipped: Skipped | None) -> None:
    """The args columns and shapes rows, by the JSON path's rules (int_column, concrete_text); a number beyond
    64 bits is an error naming ``path``, or with ``skipped`` (--lenient) absent and counted there."""
    n = len(args)
    get: dict[str, list[Any]] = {col: [] for col in _INT_ARGS.values()}
    for a in args:
        for key, col in _INT_ARGS.items():
            get[col].append(a.get(key))
    for key in _ARG_INTS:
        cols.add(key, int_column(get[key], n, key, path, cols.ignored_args, skipped=skipped))
    ext = [e if e is not None else lc for e, lc in zip(get["external_id"], get["external_id_lc"])]
    cols.add("external_id", int_column(ext, n, "External id", path, cols.ignored_args, skipped=skipped))
    cols.add("device", int_column(get["device"], n, "device", path, cols.ignored_args, skipped=skipped))
    stream = [s if s is not None else sid for s, sid in zip(get["stream"], get["stream_id"])]
    cols.add("stream", int_column(stream, n, "stream", path, cols.ignored_args, skipped=skipped))
    cols.add("flops", _float_column([a.get("flops") for a in args], "flops", cols.ignored_args))
    for row, a in enumerate(args):
        texts = [_json_text(a.get(k)) for k in _SHAPE_ARGS]
        if texts[0] is not None or texts[2] is not None:  # as the JSON path: input dims or a grid
            concrete = concrete_text(Raw(texts[4].encode())) if texts[4] is not None else None
            cols.shapes.append((row, texts[0], texts[1], texts[2], texts[3], concrete))


def _json_text(value: Any) -> str | None:
    """An args value as the JSON text Kineto writes (``[[1, 128], []]``); None when absent. A string is taken
    as that text already (a writer passing Kineto's JSON text on), not quoted again."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _thread_meta(cols: Columns, tracks: dict[int, _Track]) -> None:
    """Process names and labels, thread names: the ``threads`` table's names, keyed as the JSON path keys them."""
    for t in tracks.values():
        pid, tid = _place(tracks, t.uuid)
        if t.process_name is not None:
            cols.thread_meta.setdefault(thread_key(pid, ""), {})["process_name"] = t.process_name
        if t.labels is not None:
            cols.thread_meta.setdefault(thread_key(pid, ""), {})["process_labels"] = t.labels
        if t.thread_name is not None:
            cols.thread_meta.setdefault(thread_key(pid, tid), {})["thread_name"] = t.thread_name


def _flows(cols: Columns, slices: list[_Slice], places: list[tuple[Any, Any]]) -> None:
    """Each flow id on a slice as a flow event at the slice's start and thread: an id's first event
    starts it, a terminating id (or the last event of one never terminated) finishes it, the rest are steps."""
    seen: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)  # id -> (ts, slice, terminating)
    for i, s in enumerate(slices):
        for fid in s.flows:
            seen[fid].append((s.ts, i, False))
        for fid in s.ends:
            seen[fid].append((s.ts, i, True))
    rows: list[tuple[int, int, int]] = []  # (slice, id, phase: 0 s, 1 f, 2 t)
    for fid, hits in seen.items():
        hits.sort()
        plain = [h for h in hits if not h[2]]
        ends = any(h[2] for h in hits)
        for k, (_, i, terminating) in enumerate(plain):
            last = k == len(plain) - 1 and k > 0 and not ends
            rows.append((i, fid, 0 if k == 0 else 1 if last else 2))
        rows.extend((i, fid, 1) for _, i, terminating in hits if terminating)
    if not rows:
        return
    rows.sort()
    cols.flow_ids.extend(str(fid) for _, fid, _ in rows)
    cols.flow_cats.extend([None] * len(rows))
    cols.add("flow_ph", np.array([ph for _, _, ph in rows], dtype=np.int8))
    cols.add("flow_ts", np.array([slices[i].ts for i, _, _ in rows], dtype=np.int64))
    cols.add("flow_thread_key", _keys(cols, [places[i] for i, _, _ in rows]))
    for ph, label in enumerate("sft"):
        count = sum(1 for r in rows if r[2] == ph)
        if count:
            cols.phase_counts[label] = count


def _notes(path: str, state: _State, lost: Counter[str]) -> list[str]:
    """What the load did not read, said once each (nothing is dropped silently)."""
    notes = [f"{path}: {n:,} {what} (not read)" for what, n in sorted(lost.items()) if n]
    if state.counters:
        notes.append(f"{path}: {state.counters:,} counter value(s) not read (profuse reads slices and instants)")
    if state.unread:
        kinds = ", ".join(f"{k} x{v:,}" for k, v in state.unread.most_common(6))
        notes.append(f"{path}: {sum(state.unread.values()):,} packet(s) of kinds profuse does not read: {kinds}")
    return notes


def read_columns(files: list[Path], *, lenient: bool = False,
                 device_files: frozenset[int] = frozenset()) -> tuple[Columns, dict[str, Any], Skipped, bytes]:
    """Decode Perfetto files (one run) into the JSON path's columns, top-level keys and skipped counts,
    with the bytes read (for the fingerprint). ``device_files``: indices of the files whose slices are
    device work (neuron-explorer's device profiles)."""
    state = _State()
    raw = b""
    for index, f in enumerate(files):
        data = read_bytes(str(f))
        raw += bytes(data)
        state.uuid_base = index << 64
        before = len(state.events)
        _read_packets(str(f), data, state)
        for e in state.events[before:]:
            e.order += index << _FILE_SHIFT
    where = str(files[0]) if len(files) == 1 else str(files[0].parent)
    slices, instants, lost = _match(state, lenient, where)
    skipped = Skipped()
    cols = _columns(state, slices, instants, set(device_files), where, skipped if lenient else None)
    cols.notes.extend(_notes(where, state, lost))
    if lenient and lost.get("ts out of range"):
        skipped.counts["ts out of range"] = lost["ts out of range"]
    return cols, state.top, skipped, raw


def load_file(src: Path, *, lenient: bool = False) -> Trace:
    """One ``.pftrace`` (or ``.pftrace.gz``) as a trace's tables, built in memory (not cached)."""
    return _load([src], src, lenient=lenient, device_files=frozenset())


def export_files(folder: Path) -> tuple[list[Path], frozenset[int]]:
    """A neuron-explorer export folder's files, the system profile first, then the device profiles by
    model id; and which of them are device profiles."""
    names = sorted(q.name for q in folder.iterdir() if q.is_file())
    system = [folder / n for n in names if n in (SYSTEM_PROFILE, SYSTEM_PROFILE + ".gz")][:1]
    devices = [folder / n for n in names if DEVICE_PROFILE.match(n)]
    return system + devices, frozenset(range(len(system), len(system) + len(devices)))


def load_folder(folder: Path, *, lenient: bool = False) -> Trace:
    """A neuron-explorer ``--output-format perfetto`` folder as one run's tables (see the module docstring)."""
    files, devices = export_files(folder)
    if not files:
        raise TraceError(folder, "holds no system_profile.pftrace and no device_profile_model_<id>.pftrace")
    return _load(files, folder, lenient=lenient, device_files=devices)


def _load(files: list[Path], where: Path, *, lenient: bool, device_files: frozenset[int]) -> Trace:
    from .build import _empty_tables, _load_settings, _write_tables
    from .cache import fingerprint_of_bytes

    with _load_settings():
        cols, top, skipped, raw = read_columns(files, lenient=lenient, device_files=device_files)
        notes = list(cols.notes)
        if len(files) > 1:
            notes.append(f"{where}: read as one run from {len(files)} Perfetto files "
                         f"({', '.join(f.name for f in files[:4])}{', ...' if len(files) > 4 else ''})")
        con = _empty_tables()
        try:
            fp = fingerprint_of_bytes(raw)
            _write_tables(con, str(where if len(files) > 1 else files[0]), cols, top, lambda: fp, skipped,
                          parallel=False)
        except BaseException:
            con.close()
            raise
    return Trace(where, con, from_cache=False, notes=notes)
