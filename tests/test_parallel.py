"""Decoding on several cores gives exactly the tables decoding on one does."""
from __future__ import annotations

import pytest
from conftest import trace_path

import profuse
from profuse.trace import _parallel

Q = ("SELECT id, kind, name, ts, dur, pid, tid, parent, depth, op, module, launch, link, unlinked, self_cpu, "
     "self_device, device_total, kernels FROM events ORDER BY id")


@pytest.mark.parametrize("name", ["v100_ns_timestamps.json.gz", "a100_nccl_rank0_of2.json.gz",
                                  "mtia_inference.json.gz"])
def test_parallel_equals_sequential(name, monkeypatch):
    path = trace_path(name)
    monkeypatch.setenv("PROFUSE_SCANNER", "0")  # the forked msgspec path (the scanner has tests of its own)
    monkeypatch.setenv("PROFUSE_WORKERS", "1")
    one = profuse.load(path, cache=False)
    seq = one.con.execute(Q).fetchall()
    seq_threads = one.con.execute("SELECT * FROM threads ORDER BY thread").fetchall()
    seq_shapes = one.con.execute("SELECT * FROM shapes ORDER BY id").fetchall()
    seq_directions = one.con.execute("SELECT * FROM directions ORDER BY id").fetchall()
    seq_meta = one.meta
    one.close()
    monkeypatch.setenv("PROFUSE_WORKERS", "2")
    monkeypatch.setattr(_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(_parallel, "MIN_CHUNK", 64 << 10)
    calls = []
    real = _parallel.merge
    monkeypatch.setattr(_parallel, "merge", lambda d, s: (calls.append(1), real(d, s)))
    two = profuse.load(path, cache=False)
    assert len(calls) >= 2, "the trace was split across workers"
    assert two.con.execute(Q).fetchall() == seq
    assert two.con.execute("SELECT * FROM threads ORDER BY thread").fetchall() == seq_threads
    assert two.con.execute("SELECT * FROM shapes ORDER BY id").fetchall() == seq_shapes
    assert two.con.execute("SELECT * FROM directions ORDER BY id").fetchall() == seq_directions
    assert {k: v for k, v in two.meta.items() if k != "source"} == {k: v for k, v in seq_meta.items()
                                                                     if k != "source"}
    two.close()
