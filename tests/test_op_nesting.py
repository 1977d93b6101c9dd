"""An op-table call inside a call of its own name (torch records an overload dispatching to another under
one name: aten::sum in aten::sum; an annotation opened again inside itself) counts once in its row's CPU
total and device total: each moment once, where torch's key_averages() adds it again (sglang's 463 ms
blocking aten::copy_ twice in a 474 ms trace). Expected figures from the raw JSON (tests/oracle.py)."""
from __future__ import annotations

import oracle
import pytest
from conftest import trace_path

import profuse
from profuse.analysis.optable import op_table

CASES = [
    ("mi300_sglang_decode_cudagraph", "aten::copy_"),
    ("a100_event_sync", "aten::sum"),
    ("v100_ns_timestamps", "aten::div"),
    ("a100_nccl_rank0_of2", "aten::sum"),
    ("mi300_normalization_layers", "aten::mse_loss_backward"),
    ("a100_alexnet", "[param|pytorch.model.alex_net|0|0|0|warmup|forward]"),
    ("h100_bert_small", "aten::linear"),   # never nested in itself: the same figures as before
]


def _naive_us(path, name):
    """torch's key_averages() CPU total: every call's duration, nested or not."""
    return sum(float(e["dur"]) for e in oracle.complete_events(path)
               if oracle.category(e) in oracle.OP_CATS and e.get("name") == name)


@pytest.mark.parametrize(("trace", "name"), CASES)
def test_a_call_inside_its_own_name_counts_once(trace, name):
    # GIVEN a real trace where (all but the last) an op or annotation runs inside a call of its own name
    path = trace_path(f"{trace}.json.gz")
    with profuse.load(path) as t:
        row = next(r for r in op_table(t).rows if r.name == name)
        shaped = [r for r in op_table(t, group_by="shape").rows if r.name == name]
    cpu, device = oracle.op_totals_once(path, name)
    # THEN its row's CPU total and device total are the union of its calls and the device time they
    # launched, each moment once
    assert row.cpu_total_us == pytest.approx(float(cpu), abs=0.01)
    assert row.device_total_us == pytest.approx(float(device), abs=0.01)
    # AND it still counts every call, as torch's table does
    assert row.calls == oracle.calls_by_name(path, name)
    # AND by input shapes, no row holds more than the op's total (a call inside one of the same shape is
    # left out there too)
    assert all(r.cpu_total_us <= row.cpu_total_us + 0.01 for r in shaped)
    if trace != "h100_bert_small":
        assert row.cpu_total_us < _naive_us(path, name) - 1.0   # what key_averages() would show


def test_a_cpu_only_trace_counts_a_nested_call_once_in_both_totals(tmp_path):
    # GIVEN a CPU-only trace: aten::sum (10 us) dispatching to aten::sum (6 us) inside it, then a lone aten::sum
    import json

    def x(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": [x("aten::sum", 0, 10), x("aten::sum", 2, 6), x("aten::sum", 20, 4)]}))
    with profuse.load(p) as t:
        row = next(r for r in op_table(t).rows if r.name == "aten::sum")
    # THEN 3 calls, CPU total 14 us (the union), device total (the CPU's: its time) the same, self CPU 4 + 6 + 4
    assert (row.calls, row.cpu_total_us, row.device_total_us, row.self_cpu_us) == (3, 14.0, 14.0, 14.0)


def test_a_call_under_a_python_frame_inside_its_own_name_counts_once(tmp_path):
    # GIVEN a record_function block ("decode") opened again inside itself, a Python frame between (with_stack)
    import json

    def x(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [
        x("user_annotation", "decode", 0, 100), x("python_function", "model.py(10): step", 10, 80),
        x("user_annotation", "decode", 20, 60), x("cpu_op", "aten::mm", 30, 10)]}))
    with profuse.load(p) as t:
        row = next(r for r in op_table(t).rows if r.name == "decode")
    # THEN its CPU total is the outer call's 100 us, with both calls counted
    assert (row.calls, row.cpu_total_us) == (2, 100.0)


def test_a_call_back_under_another_op_inside_its_own_name_counts_once(tmp_path):
    # GIVEN aten::copy_ (100 us) calling aten::to calling aten::copy_ (40 us), then a lone aten::copy_ (5 us)
    import json

    def x(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": [x("aten::copy_", 0, 100), x("aten::to", 10, 80),
                                             x("aten::copy_", 20, 40), x("aten::copy_", 200, 5)]}))
    with profuse.load(p) as t:
        rows = {r.name: r for r in op_table(t).rows}
        nested = t.con.execute("SELECT id, around FROM nested_calls").fetchall()
    # THEN the inner copy_ is nested in the outer one (the call two levels up), and copy_'s CPU total is the
    # union 105 us with its 3 calls counted; aten::to is untouched
    assert nested == [(2, 0)]
    assert (rows["aten::copy_"].calls, rows["aten::copy_"].cpu_total_us) == (3, 105.0)
    assert (rows["aten::to"].calls, rows["aten::to"].cpu_total_us) == (1, 80.0)


def _wrapped_linears(tmp_path):
    """h100_bert_small with every aten::linear wrapped in a new aten::addmm of its own (1 us longer each side):
    the op's own aten::addmm is then inside an aten::addmm two levels up."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    outer = [dict(e, name="aten::addmm", ts=e["ts"] - 1, dur=e["dur"] + 2, args={})
             for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] == "aten::linear"]
    doc["traceEvents"] += outer
    p = tmp_path / "wrapped.json"
    p.write_text(json.dumps(doc))
    return p, len(outer)


def test_a_kernel_launched_two_levels_inside_its_own_name_counts_once(tmp_path):
    # GIVEN a real trace whose aten::addmm calls run inside aten::linear inside another aten::addmm
    path, wrapped = _wrapped_linears(tmp_path)
    assert wrapped > 0
    with profuse.load(path) as t:
        row = next(r for r in op_table(t).rows if r.name == "aten::addmm")
    cpu, device = oracle.op_totals_once(path, "aten::addmm")
    # THEN its CPU total and device total count each moment once (the raw JSON's union), every call counted
    assert row.cpu_total_us == pytest.approx(float(cpu), abs=0.01)
    assert row.device_total_us == pytest.approx(float(device), abs=0.01)
    assert row.calls == oracle.calls_by_name(path, "aten::addmm")
    assert row.cpu_total_us < _naive_us(path, "aten::addmm") - 1.0
