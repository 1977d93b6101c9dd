"""Timestamps become integer ns: baseTimeNanoseconds + µs ts, and ns-resolution text kept exactly."""
from __future__ import annotations

import gzip
import json

from conftest import trace_path

import profuse


def test_ns_resolution_text_is_exact():
    p = trace_path("v100_ns_timestamps.json.gz")
    ev = json.load(gzip.open(p))["traceEvents"]
    first = next(e for e in ev if e.get("ph") == "X")
    raw = gzip.open(p).read()
    # the exact text of the first complete event's ts, e.g. 1712195495519689.047
    start = raw.index(b'"ts": ', raw.index(first["name"].encode()))
    text = raw[start + 6: raw.index(b",", start)].decode()
    whole, frac = text.split(".")
    expect = int(whole) * 1000 + int(frac.ljust(3, "0")[:3])
    t = profuse.load(p, cache=False)
    got = t.con.execute("SELECT ts FROM events WHERE id = 0").fetchall()[0][0]
    assert got == expect
    assert t.meta["imprecise_ts_events"] == 0
    t.close()


def test_base_time_nanoseconds_is_added():
    p = trace_path("h100_bert_small.json.gz")
    doc = json.load(gzip.open(p))
    base = doc["baseTimeNanoseconds"]
    first = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    t = profuse.load(p, cache=False)
    got = t.con.execute("SELECT ts FROM events WHERE id = 0").fetchall()[0][0]
    assert got == base + round(first["ts"] * 1000)
    t.close()


def test_string_pids_and_tids():
    # the MTIA trace has string pids ("Spans") beside ints (read with plain json): each is kept as its text
    p = trace_path("mtia_inference.json.gz")
    raw = {e["pid"] for e in json.load(gzip.open(p))["traceEvents"] if e.get("ph") == "X"}
    assert any(isinstance(v, str) for v in raw) and any(isinstance(v, int) for v in raw)
    t = profuse.load(p, cache=False)
    pids = {r[0] for r in t.con.execute("SELECT DISTINCT pid FROM threads").fetchall()}
    event_pids = {r[0] for r in t.con.execute("SELECT DISTINCT pid FROM events").fetchall()}
    assert event_pids == {str(v) for v in raw} and event_pids <= pids
    t.close()
