"""One classification of device events by category, whatever the vendor: MTIA compute events named
after their op are kernels, DMA is a copy, event records/waits are bookkeeping."""
from __future__ import annotations

import json

import profuse
from profuse.trace.schema import mtia_device_kind


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_mtia_kind_by_what_the_event_is():
    assert mtia_device_kind("dma_request") == "memcpy"
    assert mtia_device_kind("event_wait") == "device_other"
    assert mtia_device_kind("event_record") == "device_other"
    for compute in ("pe_exe", "merge", "remote", "aten::mm", "fused_linear_relu"):
        assert mtia_device_kind(compute) == "kernel", compute


def test_mtia_compute_named_after_its_op_counts_as_device_time(tmp_path):
    # GIVEN an MTIA trace whose compute event is named after the op that launched it
    events = [
        _x("cpu_op", "aten::mm", 0, 50),
        _x("mtia_runtime", "runFunction", 5, 10, correlation=7),
        _x("mtia_ccp_events", "aten::mm", 20, 300, pid=17, tid=3, correlation=7, stream=1),
        _x("mtia_ccp_events", "dma_request", 330, 40, pid=17, tid=3, stream=1),
        _x("mtia_ccp_events", "event_wait", 0, 5000, pid=17, tid=4, stream=2),
    ]
    p = tmp_path / "mtia.json"
    p.write_text(json.dumps({"traceEvents": events}))
    with profuse.load(p) as t:
        assert t.device_kind == "MTIA"
        kinds = dict(t.sql_rows("SELECT name, kind FROM events WHERE cat = 'mtia_ccp_events'")[1])
        (mm_dev,) = t.sql_rows("SELECT self_device FROM events WHERE kind = 'cpu_op' AND name = 'aten::mm'")[1][0]
    assert kinds == {"aten::mm": "kernel", "dma_request": "memcpy", "event_wait": "device_other"}
    assert mm_dev == 300_000
