"""Perfetto protobuf traces (.pftrace, .pftrace.gz) load into the same tables as their Kineto JSON twins.

The torch here cannot write Kineto's Perfetto output (its libkineto has the switch,
``get_perfetto_trace_enabled``, but no Perfetto SDK writer is built in, and nothing in Python reaches
it), so each twin is built from a real shared Kineto trace with the protocol package's own classes
(``perfetto.protos.perfetto.trace.perfetto_trace_pb2``), as a Perfetto SDK writer lays a trace out:
a process track per pid and a thread track per (pid, tid) (named tracks where a pid or tid is not a
number), each complete event as a SLICE_BEGIN/SLICE_END pair on its thread's track in time order,
its args as debug annotations (interned names on one sequence, JSON text for shapes), Kineto's
flows as flow ids on the slices they bind to, instants as INSTANT events, and the top-level keys
as Chrome metadata. The reader never sees the JSON: the comparison is of the tables each load built.
"""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import trace_path
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # the dev extra's protocol package

from profuse.cli import main
from profuse.trace import load


def _ns(us: Any) -> int:
    """A Kineto µs value (read as Decimal: exact) as whole ns, truncated as the JSON reader reads the text."""
    return int(Decimal(us) * 1000)


def _annotate(te: Any, args: dict[str, Any], iids: dict[str, int], interned: Any) -> None:
    for key, value in args.items():
        a = te.debug_annotations.add()
        if key not in iids:
            iids[key] = len(iids) + 1
            entry = interned.debug_annotation_names.add()
            entry.iid, entry.name = iids[key], key
        a.name_iid = iids[key]
        if isinstance(value, bool):
            a.bool_value = value
        elif isinstance(value, int):
            a.int_value = value
        elif isinstance(value, Decimal):
            a.double_value = float(value)
        elif isinstance(value, str):
            a.string_value = value
        else:
            a.legacy_json_value = json.dumps(value, default=float)


class _Tracks:
    """uuid of the track of each (pid, tid), with its descriptor packets."""

    def __init__(self, trace: Any, names: dict[tuple[Any, Any], dict[str, Any]]) -> None:
        self.trace, self.names, self.uuids = trace, names, {}

    def of(self, pid: Any, tid: Any, lane: int = 0) -> int:
        """The track of (pid, tid); ``lane`` > 0: another track of the same thread, for slices that overlap
        the lane's slices without nesting (one track's begins and ends must nest)."""
        if (pid, tid, lane) in self.uuids:
            return self.uuids[(pid, tid, lane)]
        parent = self._process(pid)
        uuid = self.uuids[(pid, tid, lane)] = len(self.uuids) + 1
        d = self.trace.packet.add().track_descriptor
        d.uuid, d.parent_uuid = uuid, parent
        meta = self.names.get((pid, tid), {})
        if isinstance(pid, int) and isinstance(tid, int):
            d.thread.pid, d.thread.tid = pid, tid
            if "thread_name" in meta:
                d.thread.thread_name = meta["thread_name"]
        else:
            d.name = meta.get("thread_name", str(tid))
        return uuid

    def _process(self, pid: Any) -> int:
        if (pid, None) in self.uuids:
            return self.uuids[(pid, None)]
        uuid = self.uuids[(pid, None)] = len(self.uuids) + 1
        d = self.trace.packet.add().track_descriptor
        d.uuid = uuid
        meta = self.names.get((pid, ""), {})
        if isinstance(pid, int):
            d.process.pid = pid
            if "process_name" in meta:
                d.process.process_name = meta["process_name"]
            if "process_labels" in meta:
                d.process.process_labels.append(meta["process_labels"])
        else:
            d.name = str(pid)
        return uuid


def _metadata_names(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], dict[str, Any]]:
    names: dict[tuple[Any, Any], dict[str, Any]] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "process_labels", "thread_name"):
            args = e.get("args", {})
            value = args.get("name", args.get("labels"))
            key = (e["pid"], e["tid"] if e["name"] == "thread_name" else "")
            names.setdefault(key, {})[e["name"]] = str(value)
    return names


def _flow_binding(events: list[dict[str, Any]]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Kineto's flow events -> the complete event each binds to (same thread, same start)."""
    start_of: dict[tuple[Any, Any, int], int] = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X":
            start_of.setdefault((e["pid"], e["tid"], _ns(e["ts"])), i)
    flows: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            i = start_of[(e["pid"], e["tid"], _ns(e["ts"]))]  # every flow of these traces binds (KeyError if not)
            (ends if e["ph"] == "f" else flows).setdefault(i, []).append(int(e["id"]))
    return flows, ends


def _span(e: dict[str, Any], base: int) -> tuple[int, int]:
    ts = _ns(e["ts"]) + base
    return ts, ts + int((Decimal(e["dur"]) * 1000).to_integral_value())


def _lanes(events: list[dict[str, Any]], base: int) -> dict[int, int]:
    """Each complete event's lane on its thread: the first whose open slices it nests in."""
    by_thread: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X":
            ts, end = _span(e, base)
            by_thread.setdefault((e["pid"], e["tid"]), []).append((ts, -end, i))
    out = {}
    for spans in by_thread.values():
        stacks: list[list[int]] = []
        for ts, neg_end, i in sorted(spans):
            end = -neg_end
            for k in range(len(stacks) + 1):
                if k == len(stacks):
                    stacks.append([])
                stack = stacks[k]
                while stack and stack[-1] <= ts and not (stack[-1] == ts == end):
                    stack.pop()
                if not stack or stack[-1] >= end:
                    stack.append(end)
                    out[i] = k
                    break
    return out


def pftrace_from_kineto(src: Path, dst: Path) -> dict[str, int]:
    """Write ``src`` (Kineto JSON) as a Perfetto protobuf trace at ``dst`` (gzip when named .gz); the
    number of each kind of thing written."""
    doc = json.load(gzip.open(src), parse_float=Decimal)
    events, base = doc["traceEvents"], int(doc.get("baseTimeNanoseconds") or 0)
    trace = pb.Trace()
    bundle = trace.packet.add().chrome_events
    for key, value in doc.items():
        if key not in ("traceEvents", "baseTimeNanoseconds"):
            m = bundle.metadata.add()
            m.name, m.json_value = key, json.dumps(value, default=float)
    tracks = _Tracks(trace, _metadata_names(events))
    flows, ends = _flow_binding(events)
    # (track, time, rank, tie, index, sub, what): per track in time order; at one time the ends first, then
    # the begins, the longer slice first; a zero-length slice's end right after its begin
    marks: list[tuple[int, int, int, int, int, int, str]] = []
    lanes = _lanes(events, base)
    for i, e in enumerate(events):
        if e.get("ph") == "X":
            track, (ts, end) = tracks.of(e["pid"], e["tid"], lanes[i]), _span(e, base)
            marks.append((track, ts, 1, -end, i, 0, "B"))
            marks.append((track, ts, 1, -end, i, 1, "E") if end == ts else (track, end, 0, ts, -i, 0, "E"))
        elif e.get("ph") in ("i", "I"):
            marks.append((tracks.of(e["pid"], e["tid"]), _ns(e["ts"]) + base, 2, 0, i, 0, "I"))
    marks.sort()
    first = True
    iids: dict[str, int] = {}
    counts = {"slices": 0, "instants": 0, "flows": 0}
    for track, ts, _, _, index, _, what in marks:
        i = abs(index)
        e = events[i]
        p = trace.packet.add()
        p.timestamp, p.trusted_packet_sequence_id = ts, 1
        if first:
            p.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED: the interned names start here
            first = False
        te = p.track_event
        te.track_uuid = track
        if e.get("name") is not None:
            te.name = e["name"]  # on an end too: Kineto's slices on one thread may overlap without nesting
        if what == "E":
            te.type = te.TYPE_SLICE_END
            continue
        te.type = te.TYPE_SLICE_BEGIN if what == "B" else te.TYPE_INSTANT
        if e.get("cat") is not None:
            te.categories.append(e["cat"])
        if what == "I":
            counts["instants"] += 1
            continue
        counts["slices"] += 1
        _annotate(te, e.get("args", {}), iids, p.interned_data)
        te.flow_ids.extend(flows.get(i, []))
        te.terminating_flow_ids.extend(ends.get(i, []))
        counts["flows"] += len(flows.get(i, [])) + len(ends.get(i, []))
    data = trace.SerializeToString()
    dst.write_bytes(gzip.compress(data) if dst.name.endswith(".gz") else data)
    return counts


ID_COLUMNS = ("id", "parent", "op", "module", "scope", "parent_op", "launch")


def _rows(trace: Any, query: str) -> list[tuple[Any, ...]]:
    return trace.con.execute(query).fetchall()


def _keyed_events(trace: Any) -> tuple[dict[int, tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Each event's identity (pid, tid, ts, dur, name, kind, ids, stream) by id, and every row with its ids
    replaced by those identities (so two loads numbering events differently compare equal)."""
    cols = [r[0] for r in trace.con.execute("DESCRIBE events").fetchall()]
    rows = trace.con.execute("SELECT * FROM events").fetchall()
    who = [cols.index(c) for c in ("pid", "tid", "ts", "dur", "name", "kind", "correlation", "external_id", "stream")]
    key = {r[cols.index("id")]: tuple(r[k] for k in who) for r in rows}
    scope_key = {s: key[s] for (s,) in trace.con.execute("SELECT id FROM scopes").fetchall()}
    out = []
    for r in rows:
        out.append(tuple(
            (key.get(v) if c in ("id", "parent", "op", "parent_op", "launch") else scope_key.get(v))
            if c in ID_COLUMNS and v is not None else v for c, v in zip(cols, r)))
    return key, sorted(out, key=repr)


def _compare(json_trace: Any, pf_trace: Any) -> None:
    jkey, jrows = _keyed_events(json_trace)
    _, prows = _keyed_events(pf_trace)
    assert len(set(jkey.values())) == len(jkey), "event identities must be unique for this comparison"
    assert len(prows) == len(jrows)
    for a, b in zip(jrows, prows):
        assert a == b
    shapes = "SELECT e.pid, e.tid, e.ts, e.dur, e.name, s.input_dims, s.input_types, s.grid, s.block, " \
             "s.concrete_inputs FROM shapes s JOIN events e ON e.id = s.id"
    norm = lambda rows: sorted([r[:5] + tuple(None if v is None else json.loads(v) for v in r[5:]) for r in rows],
                               key=repr)
    assert norm(_rows(pf_trace, shapes)) == norm(_rows(json_trace, shapes))
    for q in ("SELECT kind, name, label, ts, dur, thread FROM scopes",
              "SELECT thread, pid, tid, process_name, thread_name, labels, is_device FROM threads",
              "SELECT name, cat, ts, pid, tid FROM instants",
              "SELECT id, ph, ts, thread FROM flows"):
        assert sorted(_rows(pf_trace, q), key=repr) == sorted(_rows(json_trace, q), key=repr), q
    jm, pm = json_trace.meta, pf_trace.meta
    for k in ("device_kind", "device_name", "events", "span_us", "kinds", "unlinked", "unmatched_flows",
              "ignored_args", "unnamed_events"):
        assert getattr(pm, k, None) == getattr(jm, k, None), k
    assert {k: v for k, v in pm.trace_meta.items()} == {k: v for k, v in jm.trace_meta.items()}


@pytest.mark.parametrize("name", ["a100_alexnet.json.gz", "h100_bert_small.json.gz", "mtia_inference.json.gz"])
def test_pftrace_loads_into_the_same_tables_as_its_json_twin(name, tmp_path):
    src = trace_path(name)
    dst = tmp_path / (Path(name).name.replace(".json.gz", ".pftrace"))
    counts = pftrace_from_kineto(src, dst)
    assert counts["slices"] > 500 and counts["flows"] > 100
    with load(src, cache=False) as j, load(dst, cache=False) as p:
        assert p.con.execute("SELECT count(*) FROM events").fetchone()[0] == counts["slices"]
        _compare(j, p)


def test_gzipped_and_unnamed_pftrace_are_found_by_their_bytes_and_reported(tmp_path, capsys):
    src = trace_path("a100_alexnet.json.gz")
    gz = tmp_path / "run" / "trace.pftrace.gz"
    gz.parent.mkdir()
    counts = pftrace_from_kineto(src, gz)
    plain = tmp_path / "capture.bin"  # no telling name: found by its first bytes
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    for path in (gz, gz.parent, plain):  # the file, its folder, the unnamed copy
        assert main(["report", str(path), "--format", "json", "--no-advice"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["trace"]["device_kind"] == "CUDA"
        assert doc["trace"]["events"] == counts["slices"]
    with load(src, cache=False) as j:
        expected = j.con.execute("SELECT name, sum(self_device) FROM events WHERE kind = 'cpu_op' "
                                 "GROUP BY name HAVING sum(self_device) > 0").fetchall()
    got = {o["name"]: o["self_device_us"] for o in doc["ops"] if o["self_device_us"]}
    assert got == {n: pytest.approx(ns / 1e3, abs=2e-3) for n, ns in expected}


@pytest.mark.parametrize(("data", "problem"), [
    (b"not a trace at all", "not a Perfetto trace"),
    (b"", "file is empty"),
    (None, "not a Perfetto trace"),  # a real one cut short
])
def test_bad_pftrace_is_one_line_and_exit_2(data, problem, tmp_path, capsys):
    bad = tmp_path / "bad.pftrace"
    if data is None:
        whole = tmp_path / "whole.pftrace"
        pftrace_from_kineto(trace_path("a100_alexnet.json.gz"), whole)
        data = whole.read_bytes()[:-7]
    bad.write_bytes(data)
    assert main(["report", str(bad), "--format", "json"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and problem in err, err
    assert "Traceback" not in captured.err and not captured.out


def test_unmatched_slices_are_counted_not_dropped_silently(tmp_path):
    trace = pb.Trace()
    d = trace.packet.add().track_descriptor
    d.uuid, d.thread.pid, d.thread.tid = 1, 10, 11
    for ts, kind, name in ((100, 1, "whole"), (200, 1, "never ended"), (300, 2, ""), (400, 2, ""), (500, 2, "")):
        p = trace.packet.add()
        p.timestamp, p.trusted_packet_sequence_id = ts, 1
        p.track_event.type, p.track_event.track_uuid, p.track_event.name = kind, 1, name
    counter = trace.packet.add()
    counter.timestamp, counter.track_event.type, counter.track_event.counter_value = 600, 4, 3
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    with load(path, cache=False) as t:
        rows = t.con.execute("SELECT name, ts, dur, pid, tid FROM events ORDER BY ts").fetchall()
        notes = " ".join(t.notes)
    # the end at 300 closes "never ended" (the latest open), 400 closes "whole"; 500 has no begin
    assert rows == [("whole", 100, 300, "10", "11"), ("never ended", 200, 100, "10", "11")]
    assert "1 slice end with no begin" in notes and "1 counter value(s) not read" in notes


def test_neuron_explorer_export_folder_reads_as_one_run(tmp_path, capsys):
    """The documented layout (system_profile.pftrace + device_profile_model_<id>.pftrace): the host's
    nrt_* calls from the system profile, device work from the model's file on its own tracks."""
    from test_privateuse1 import rewrite

    neuron = tmp_path / "neuron.json.gz"
    rewrite(trace_path("h100_bert_small.json.gz"), neuron, prefix="nrt_")
    doc = json.load(gzip.open(neuron))
    device_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    host = {**doc, "traceEvents": [e for e in doc["traceEvents"]  # flows dropped: the files are linked by ids
                                   if e.get("cat") not in device_cats and e.get("ph") not in ("s", "f", "t")]}
    device = [dict(e, cat="neuron_hw") for e in doc["traceEvents"] if e.get("cat") in device_cats]
    folder = tmp_path / "export"
    folder.mkdir()
    for name, part in (("system_profile", host), ("device_profile_model_7", {"traceEvents": device})):
        staged = tmp_path / f"{name}.json.gz"
        staged.write_bytes(gzip.compress(json.dumps(part).encode()))
        pftrace_from_kineto(staged, folder / f"{name}.pftrace")
    copies = sum(1 for e in device if e["ph"] == "X" and any(w in e["name"].lower() for w in ("dma", "copy", "memcpy")))
    with load(folder, cache=False) as t:
        kinds = dict(t.con.execute("SELECT kind, count(*) FROM events WHERE kind IN ('kernel', 'memcpy') "
                                   "GROUP BY kind").fetchall())
        assert t.meta.device_kind == "Neuron"
        assert kinds == {"kernel": sum(1 for e in device if e["ph"] == "X") - copies, "memcpy": copies}
        assert any("read as one run from 2 Perfetto files" in n for n in t.notes)


def _one_slice(tmp_path: Path, *, annotations: dict[str, Any] | None = None, instant_ts: int | None = None,
               chrome_json: str | None = None) -> Path:
    """A Perfetto trace of one thread track with one complete slice (annotated as given), optionally an
    instant at ``instant_ts`` and a Chrome metadata entry holding ``chrome_json``."""
    trace = pb.Trace()
    d = trace.packet.add().track_descriptor
    d.uuid, d.thread.pid, d.thread.tid = 1, 10, 11
    for ts, kind in ((100, 1), (400, 2)):
        p = trace.packet.add()
        p.timestamp, p.trusted_packet_sequence_id = ts, 1
        p.track_event.type, p.track_event.track_uuid, p.track_event.name = kind, 1, "aten::mm" if kind == 1 else ""
        p.track_event.categories.append("cpu_op")
        if kind == 1:
            for key, value in (annotations or {}).items():
                a = p.track_event.debug_annotations.add()
                a.name = key
                if isinstance(value, str):
                    a.string_value = value
                else:
                    a.uint_value = value
    if instant_ts is not None:
        p = trace.packet.add()
        p.timestamp, p.trusted_packet_sequence_id = instant_ts, 1
        p.track_event.type, p.track_event.track_uuid, p.track_event.name = 3, 1, "mark"
    if chrome_json is not None:
        m = trace.packet.add().chrome_events.metadata.add()
        m.name, m.json_value = "distributedInfo", chrome_json
    path = tmp_path / "one.pftrace"
    path.write_bytes(trace.SerializeToString())
    return path


def _report(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv, "--format", "json", "--no-cache"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_hostile_values_are_one_line_or_read_as_the_json_path_reads_them(tmp_path, capsys):
    # an instant past 2^62 ns: one line naming the file (before: OverflowError traceback); --lenient skips it
    p = _one_slice(tmp_path, instant_ts=2**64 - 5)
    code, out, err = _report(capsys, str(p))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(p) in err and "Traceback" not in err
    code, out, err = _report(capsys, str(p), "--lenient")
    assert code == 0 and json.loads(out)["skipped"] == {"ts out of range": 1}
    # a correlation beyond 64 bits: the error names the file (not "perfetto"), and --lenient reads it as absent
    p = _one_slice(tmp_path, annotations={"correlation": 2**64 - 1})
    code, out, err = _report(capsys, str(p))
    assert code == 2 and str(p) in err and "--lenient" in err
    code, out, err = _report(capsys, str(p), "--lenient")
    assert code == 0 and sum(json.loads(out)["skipped"].values()) == 1
    # a 5000-digit id written as text, and JSON nested past Python's depth: no traceback
    p = _one_slice(tmp_path, annotations={"stream": "9" * 5000}, chrome_json="[" * 100_000 + "]" * 100_000)
    code, out, err = _report(capsys, str(p), "--lenient")
    assert code == 0 and "Traceback" not in err
    # input dims given as Kineto's JSON text: kept as that text, not quoted again
    p = _one_slice(tmp_path, annotations={"Input Dims": "[[1, 128], [128, 64]]"})
    with load(p, cache=False) as t:
        assert t.sql_rows("SELECT input_dims FROM shapes")[1] == [("[[1, 128], [128, 64]]",)]


def test_a_pftrace_over_the_packet_limit_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    from profuse.trace.perfetto import PACKET_BYTES

    p = _one_slice(tmp_path)   # 3 packets
    monkeypatch.setenv("PROFUSE_MAX_TRACE_BYTES", str(2 * PACKET_BYTES))  # room for 2
    code, _out, err = _report(capsys, str(p))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "more than 2 packets" in err and str(p) in err
