"""The ``[memory]`` instants read by the compiled scanner with the other events, against trace/memory.py.

The scanner hands over the memory events' columns only where it can tell they are what
``read_memory_events`` (the reference, reading the text again) would give; anything it cannot tell
(a figure twice, a float, a time with float noise, an escaped name; an escaped phase sends
the whole trace to the reference decoder) it leaves to the
reference. So on every shared trace and on each mutation below the two give the same events, the
same skipped count and the same memory tables.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id, trace_path

import profuse
from profuse.trace import _native
from profuse.trace import memory as trace_memory

pytestmark = pytest.mark.skipif(not _native.available(), reason="compiled scanner not built (pure-Python install)")

FIELDS = ("ts", "bytes", "addr", "total_allocated", "total_reserved", "device_type", "device")


def _same(a: trace_memory.MemoryEvents, b: trace_memory.MemoryEvents) -> None:
    assert len(a) == len(b) and a.skipped == b.skipped
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.pid_tid == b.pid_tid


def _scanned(data: bytes, threads: int = 1) -> trace_memory.MemoryEvents | None:
    found = _native.scan_document(data, threads=threads)
    assert found is not None, "the scanner declined the trace"
    return trace_memory.scanned_memory_events(found[0])


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_scanned_memory_events_equal_the_reference(path: Path) -> None:
    data = gzip.decompress(path.read_bytes())
    scanned = _scanned(data)
    assert scanned is not None, "the scanner left a real trace's memory events to the reference"
    _same(scanned, trace_memory.read_memory_events(data))
    # the count is the oracle's too (plain json), not only the reference reader's
    want = sum(1 for e in json.loads(data)["traceEvents"] if e.get("name") == "[memory]" and e.get("ph") == "i")
    assert len(scanned) == want


def test_two_scan_threads_give_the_same_memory_events() -> None:
    # GIVEN a trace big enough to split (the ViT trace repeated), WHEN scanned by one and by two threads
    doc = json.loads(gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * 8
    data = json.dumps(doc).encode()
    one, two = _scanned(data, 1), _scanned(data, 2)
    # THEN both equal the reference
    assert one is not None and two is not None and len(one) == 8 * 620
    ref = trace_memory.read_memory_events(data)
    _same(one, ref)
    _same(two, ref)


def _mutate(change: Any) -> bytes:
    """h100_bert_small with ``change(event)`` applied to its memory events 3, 10 and 50."""
    doc = json.loads(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    k = 0
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            if k in (3, 10, 50):
                change(e)
            k += 1
    return json.dumps(doc).encode()


def _set(key: str, value: Any) -> Any:
    return lambda e: e["args"].__setitem__(key, value)


def _drop(key: str) -> Any:
    return lambda e: e["args"].pop(key)


# (what, mutation, True where the scanner keeps the events itself, False where it leaves them to memory.py)
MUTATIONS = [
    ("a figure missing", _drop("Bytes"), True),
    ("a figure a bool", _set("Addr", True), True),
    ("a figure a string", _set("Device Id", "0"), True),
    ("a figure null", _set("Total Allocated", None), True),
    ("a figure a list", _set("Device Type", [1]), True),
    ("no args", lambda e: e.pop("args"), True),
    ("no time", lambda e: e.pop("ts"), True),
    ("phase I", lambda e: e.__setitem__("ph", "I"), True),
    ("phase X", lambda e: e.update(ph="X", dur=1), True),
    ("a figure a float", _set("Bytes", 512.0), False),
    ("a figure beyond int64", _set("Addr", 2**64 + 1), False),
    ("a figure of -2^63", _set("Addr", -(2**63)), False),
]


@pytest.mark.parametrize(("what", "change", "kept"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_memory_events_read_as_the_reference(what: str, change: Any, kept: bool) -> None:
    data = _mutate(change)
    scanned = _scanned(data)
    assert (scanned is not None) == kept
    if scanned is not None:
        _same(scanned, trace_memory.read_memory_events(data))


def _text_mutation(pattern: bytes, new: bytes) -> bytes:
    """h100_bert_small with ``pattern`` replaced in the text of its first memory event."""
    data = gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes())
    at = data.index(b'"[memory]"')
    start = data.rindex(b"{", 0, at)
    end = data.index(b"}}", at) + 2
    piece = re.sub(pattern, new, data[start:end], count=1)
    assert piece != data[start:end]
    return data[:start] + piece + data[end:]


@pytest.mark.parametrize(("pattern", "new"), [
    (rb'"\[memory\]"', rb'"[memor\\u0079]"'),               # an escaped name (the reference reads names as written)
    (rb'"Bytes": ', rb'"Bytes": 1, "Bytes": '),              # a figure twice (the last one counts)
    (rb'("ts": *[0-9]+\.[0-9]+)', rb"\g<1>1"),                # a time with float noise (4 fraction digits)
], ids=["escaped name", "repeated figure", "noisy time"])
def test_memory_events_the_scanner_cannot_tell_go_to_the_reference(pattern: bytes, new: bytes) -> None:
    data = _text_mutation(pattern, new)
    assert _scanned(data) is None
    # and the load reads them through the reference: the same events as without the scanner
    assert len(trace_memory.read_memory_events(data)) > 0


@pytest.mark.parametrize("change", [MUTATIONS[0][1], MUTATIONS[-1][1]], ids=["skipped", "left to memory.py"])
def test_memory_tables_equal_with_and_without_the_scanner(change: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_mutate(change))
    out = []
    for scanner in ("1", "0"):
        monkeypatch.setenv("PROFUSE_SCANNER", scanner)
        with profuse.load(path, cache=False) as t:
            out.append([t.con.execute(f"SELECT * FROM {tb} ORDER BY ALL").fetchall() for tb in ("memory", "op_memory")]
                       + [t.con.execute("SELECT value FROM meta WHERE key IN ('memory_events', 'memory_skipped') "
                                        "ORDER BY key").fetchall()])
    assert out[0] == out[1]
    assert out[0][0]  # memory rows there
