"""Every claim the report makes is bounded by what the trace holds, on every shared trace.

The bounds are arithmetic facts, so they hold whatever the trace: busy time never exceeds its window
and busy + idle = window, every percentage is in [0, 100], a predicted saving never exceeds the device
time of the kernels it comes from, no roofline exceeds 100% of peak, every device event is linked or
counted under a reason, and ops' self device time never adds up to more than the device time. A
scope's or a step's busy time counts each device activity once, so it never exceeds the device's.
"""
from __future__ import annotations

import bisect
import json
import re

import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis.steps import step_model
from profuse.cli import main
from profuse.trace.schema import DEVICE_TIME_SQL

EPS = 1e-3  # µs: values are rounded to ns in the JSON
TOL = 1.0   # µs, for sums of rounded figures


def _pct_ok(v) -> bool:
    return v is None or 0.0 <= v <= 100.0


def _report(path, capsys) -> dict:
    assert main(["report", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _walk_numbers(o, path=""):
    """(key path, number) for every number in a JSON document."""
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _walk_numbers(v, f"{path}.{k}")
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _walk_numbers(v, f"{path}[{i}]")
    elif isinstance(o, (int, float)) and not isinstance(o, bool):
        yield path, o


def _generic_bounds(doc) -> None:
    """Every share or percentage in [0, 100], every duration, delay and count >= 0, wherever it is."""
    for path, v in _walk_numbers(doc):
        key = path.rsplit(".", 1)[-1].split("[")[0]
        if "pct" in key:
            assert 0.0 <= v <= 100.0, (path, v)
        elif key.endswith("_mem_bytes"):
            continue  # net bytes allocated within an op (torch's key_averages memory columns): frees make it negative
        elif key.endswith(("_us", "_ns", "_bytes")) or key in ("calls", "kernels", "instances", "bytes_now",
                                                                "bytes_fused", "skewed_launches", "activities"):
            assert v >= 0, (path, v)


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_report_claims_are_bounded(path, capsys):
    _check_claims(_report(path, capsys))
    _check_modules(path, capsys)


def _check_modules(path, capsys) -> None:
    """Per module class, device and CPU totals never exceed the trace's (a class nested in itself counts once)."""
    assert main(["report", str(path), "--format", "json", "--group-by", "module", "--no-advice"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _generic_bounds(doc)
    span_us = doc["trace"]["span_us"]
    for r in doc["ops"]:
        if not doc["cpu_only"]:
            assert r["device_total_us"] <= doc["totals"]["device_us"] + TOL, r
        assert r["cpu_total_us"] <= span_us * max(1, _threads(path)) + TOL, r


def _threads(path) -> int:
    with profuse.load(path) as t:
        (n,) = t.con.execute("SELECT count(DISTINCT thread) FROM scopes").fetchone()
    return int(n or 1)


def _check_claims(doc) -> None:
    _generic_bounds(doc)
    totals = doc["totals"]
    assert totals["kernels_linked"] + sum(totals["unlinked"].values()) == totals["kernels"]
    if not doc["cpu_only"]:
        assert sum(o["self_device_us"] for o in doc["ops"]) <= totals["device_us"] + EPS
    busy = doc["device_busy"]
    if doc["cpu_only"]:
        assert busy is None, "a CPU-only trace claims nothing about device idle"
        assert not any(s["launch_bound"] for s in doc["steps"])
    else:
        assert busy is not None
        assert 0 <= busy["busy_us"] <= busy["window_us"] + EPS
        assert busy["busy_us"] <= totals["device_us"] + EPS, "a union is never longer than its parts"
        assert _pct_ok(busy["busy_pct"])
    for s in doc["steps"]:
        assert 0 <= s["busy_us"] <= s["window_us"] + EPS
        assert s["busy_us"] + s["idle_us"] + s["unrecorded_us"] == pytest.approx(s["window_us"], abs=EPS)
        assert _pct_ok(s["busy_pct"])
        assert not (s["launch_bound"] and (s["busy_pct"] or 0) >= 50)
    for i in doc["interruptions"]:
        assert i["busy_us"] >= 0 and i["idle_us"] >= 0 and i["unrecorded_us"] >= 0
        assert _pct_ok(i["busy_pct"])
        window = i["busy_us"] + i["idle_us"] + i["unrecorded_us"]
        if window - i["unrecorded_us"] > 0:   # busy % of the scope's device window (without the unrecorded wait)
            assert i["busy_pct"] == pytest.approx(100 * i["busy_us"] / (window - i["unrecorded_us"]), abs=0.05 + EPS), i
        if not doc["cpu_only"]:
            # a scope's activities are some of the device's, each counted once: never busier than
            # the device, and its window (the union of its calls' windows) lies inside the device's
            assert i["busy_us"] <= busy["busy_us"] + TOL, i
            assert window <= busy["window_us"] + TOL, i
        assert not (i["launch_bound"] and i["busy_pct"] >= 50)
        assert not (doc["cpu_only"] and i["launch_bound"])
    for h in doc["hotspots"]:
        assert _pct_ok(h["share_pct"]), h
    for c in doc["fusion_candidates"]:
        assert 0 <= c["predicted_saving_us"] <= c["device_us"] + EPS, c
        if c["bytes_now"] and c["bytes_fused"] >= c["bytes_now"] and c["kernels_per_instance"] <= 1:
            assert c["predicted_saving_us"] == 0, f"fusing moves no fewer bytes and launches no fewer kernels: {c}"
        if c["pattern"] == "pointwise chain":
            assert c["bytes_now"] > c["bytes_fused"], f"a chain that saves no bytes claims no saving: {c}"
        if doc["cpu_only"]:
            # on the CPU a byte-model saving needs the bytes to explain the time (>= 10 MB/s)
            assert c["bytes_now"] / (c["device_us"] * 1e3) >= 0.01, c
    for r in doc["roofline"]:
        assert _pct_ok(r["pct_of_roofline"]), r
    for o in doc["ops"]:
        for k in ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"):
            assert o[k] >= -EPS, (k, o)
    for i in doc["interruptions"]:
        assert i["queue_delay_us"] >= 0 and i["launch_us"] >= 0, i
        assert 0 <= i["skewed_launches"] <= doc["skewed_launches"], i


def _title(kind: str, name: str) -> str:
    """A scope instance's row title, as docs/advisor.md names interruption rows."""
    return f"nn.Module: {name}" if kind == "module" else re.sub(r"#\d+$", "#*", name)


def _union_us(intervals: list[tuple[int, int]]) -> float:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + (0 if cur_e is None else cur_e - cur_s)) / 1e3


def _inside(merged: list[tuple[int, int]], t: int) -> bool:
    """Whether t lies in one of the disjoint, sorted intervals [s, e)."""
    i = bisect.bisect_right(merged, (t, float("inf"))) - 1
    return i >= 0 and t < merged[i][1]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_scopes_and_steps_count_each_activity_once(path, capsys):
    """Per interruption row, recomputed from the loaded tables in plain Python: the scope's device
    activities are those launched inside any of its calls, each once, so their number is
    instances x kernels per instance and busy is their union; each step's activities (those that start in
    its span, whoever launched them) are disjoint."""
    doc = _report(path, capsys)
    if doc["cpu_only"]:
        return
    with profuse.load(path) as t:
        scopes = t.con.execute("SELECT kind, name, ts, ts + dur FROM scopes").fetchall()
        acts = t.con.execute("""
            SELECT d.ts, d.ts + d.dur, l.ts FROM events d JOIN events l ON l.id = d.launch
            WHERE d.kind IN ('kernel', 'memcpy', 'memset')""").fetchall()
        starts = [s for (s,) in t.con.execute(f"SELECT ts FROM events WHERE kind IN ({DEVICE_TIME_SQL})")
                  .fetchall()]
        model = step_model(t)
        spans = list(model.spans) if model.steps else []
    calls: dict[str, list[tuple[int, int]]] = {}
    for kind, name, lo, hi in scopes:
        calls.setdefault(_title(kind, name), []).append((lo, hi))
    for row in doc["interruptions"]:
        merged = _merged(calls[row["scope"]])
        mine = [(s, e) for s, e, launch in acts if _inside(merged, launch)]
        assert row["instances"] * row["kernels_per_instance"] == pytest.approx(len(mine), abs=0.005 * row["instances"]), row
        assert row["busy_us"] == pytest.approx(_union_us(mine), abs=EPS), row
    in_steps = [t0 for t0 in starts if any(lo <= t0 < hi for lo, hi in spans)]
    assert sum(s["activities"] for s in doc["steps"]) == len(in_steps), "an activity counted in two steps"


# --- mutated traces: the same bounds where real traces go wrong ----------------------------------

def _raw(name):
    import gzip

    from conftest import trace_path

    return json.loads(gzip.decompress(trace_path(name).read_bytes()))


def _write(tmp_path, name, doc):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc))
    return p


def _nested_same_name(tmp_path):
    """Every BertLayer scope wrapped twice more in a BertLayer scope (a class nested in itself)."""
    doc = _raw("h100_bert_small.json.gz")
    extra = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "python_function" and e["name"].startswith("nn.Module: BertLayer"):
            for k in (1, 2):
                w = dict(e, name=f"nn.Module: BertLayer_{90 + k}", ts=e["ts"] - 0.5 * k, dur=e["dur"] + k,
                         args=dict(e.get("args") or {}, **{"Python id": 10**6 * k + len(extra)}))
                extra.append(w)
    doc["traceEvents"] += extra
    return _write(tmp_path, "nested", doc)


def _overlapping(tmp_path):
    """Ops that outlive their parent, and ops that start inside their previous sibling."""
    doc = _raw("h100_bert_small.json.gz")
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    for e in ops:
        if e["name"] == "aten::addmm":
            e["dur"] += 5
        if e["name"] == "aten::gelu":
            e["ts"] -= 3
            e["dur"] += 3
    return _write(tmp_path, "overlapping", doc)


def _skewed(tmp_path):
    """The device clock one second behind the host's: every kernel starts before its launch."""
    doc = _raw("h100_bert_small.json.gz")
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or (e.get("ph") == "f" and e.get("cat") == "ac2g"):
            e["ts"] -= 1_000_000
    return _write(tmp_path, "skewed", doc)


MUTATIONS = {"nested_same_name_modules": _nested_same_name, "overlapping_events": _overlapping,
             "skewed_launches": _skewed}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_mutated_traces_keep_the_bounds(mutation, tmp_path, capsys):
    path = MUTATIONS[mutation](tmp_path)
    _check_claims(_report(path, capsys))
    _check_modules(path, capsys)


def test_a_module_nested_in_its_own_class_counts_once(tmp_path, capsys):
    from oracle import complete_events, launch_of, launches

    path = _nested_same_name(tmp_path)
    events = complete_events(path)
    layers = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: BertLayer")]
    by_corr = launches(events)
    want = 0.0
    for d in events:
        launch = launch_of(d, by_corr) if d.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else None
        if launch is not None and any(m["tid"] == launch["tid"] and m["ts"] <= launch["ts"] < m["ts"] + m["dur"]
                                      for m in layers):
            want += d["dur"]
    doc = _report(path, capsys)
    (h,) = [h for h in doc["hotspots"] if h["kind"] == "module" and h["name"] == "BertLayer"]
    assert h["device_us"] == pytest.approx(want, abs=EPS) and 0 < h["share_pct"] <= 100
    assert h["share_pct"] == pytest.approx(100 * want / doc["totals"]["device_us"], abs=0.01)


def test_skewed_launches_are_counted_not_negative(tmp_path, capsys):
    from oracle import complete_events, launch_of, launches

    path = _skewed(tmp_path)
    events = complete_events(path)
    by_corr = launches(events)
    skewed = sum(1 for d in events if d.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                 and (lc := launch_of(d, by_corr)) is not None and d["ts"] < lc["ts"])
    doc = _report(path, capsys)
    assert skewed > 0 and doc["skewed_launches"] == skewed
    assert all(i["queue_delay_us"] == 0 for i in doc["interruptions"])  # every delay was skewed: none to give
    assert main(["report", str(path)]) == 0
    assert f"clock skew: {skewed:,} device activities start before their launch call" in capsys.readouterr().out


# --- pattern names follow data flow; savings need bytes -------------------------------------------

def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _chain_trace(tmp_path, name, ops, *, device=True, shape=(64, 1024), dur=8, with_shapes=True):
    """One module running ``ops`` in a row, each on a tensor of ``shape`` (and a second one for a product)."""
    ev = [_x("python_function", "nn.Module: Head_0", 0, 40 * len(ops) + 20)]
    for i, op in enumerate(ops):
        ts = 10 + 40 * i
        two = op in ("mul", "add", "sub", "div", "where", "le")
        args = {"Input Dims": [list(shape), list(shape) if two else []], "Input type": ["float", "float" if two else ""]}
        ev.append(_x("cpu_op", f"aten::{op}", ts, dur, **(args if with_shapes else {})))
        if device:
            ev += [_x("cuda_runtime", "cudaLaunchKernel", ts + 1, 2, correlation=i + 1),
                   _x("kernel", f"k_{op}_{i}", ts + 10, 5, pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def _candidates(path):
    from profuse.analysis.advice.fusion import fusion_candidates

    with profuse.load(path) as t:
        return fusion_candidates(t)


@pytest.mark.parametrize("ops", [["layer_norm", "sigmoid", "mul"],
                                 ["sub", "div", "log", "add", "sigmoid", "le", "where", "mul", "clamp"]])
def test_a_sigmoid_among_other_work_is_not_silu(tmp_path, ops):
    names = {c.pattern for c in _candidates(_chain_trace(tmp_path, "chain", ops))}
    assert not {n for n in names if "SiLU" in n or "GELU" in n}, names


def test_x_times_sigmoid_x_is_silu(tmp_path):
    cands = _candidates(_chain_trace(tmp_path, "silu", ["sigmoid", "mul"]))
    assert [c.pattern for c in cands] == ["SiLU (x * sigmoid(x))"]
    assert 0 < cands[0].predicted_saving_us <= cands[0].device_us


def test_a_pointwise_chain_without_bytes_claims_no_saving(tmp_path):
    # no shapes recorded: nothing says fusion saves bytes, so no saving is predicted (and no candidate)
    path = _chain_trace(tmp_path, "noshape", ["sub", "exp", "log", "neg"], with_shapes=False)
    assert [c for c in _candidates(path) if c.pattern == "pointwise chain"] == []
    # with shapes, the same chain saves its intermediates' round trips
    path = _chain_trace(tmp_path, "shaped", ["sub", "exp", "log", "neg"])
    (c,) = [c for c in _candidates(path) if c.pattern == "pointwise chain"]
    assert c.bytes_fused < c.bytes_now and 0 < c.predicted_saving_us <= c.device_us


def test_cpu_only_tiny_bytes_claim_no_byte_saving(tmp_path):
    # 5 ops on 20 floats, 44 µs each on the CPU: the time is dispatch, not traffic
    path = _chain_trace(tmp_path, "cpu_tiny", ["sub", "exp", "log", "neg", "abs"], device=False, shape=(20,), dur=44)
    assert _candidates(path) == []
    # the same chain on 64k floats moves bytes at a rate memory explains: a saving is claimed
    path = _chain_trace(tmp_path, "cpu_big", ["sub", "exp", "log", "neg", "abs"], device=False, shape=(256, 256))
    (c,) = _candidates(path)
    assert c.pattern == "pointwise chain" and 0 < c.predicted_saving_us <= c.device_us
