"""``profuse diff`` across devices on real traces: every op matched or listed, ratios against plain
json, device names compared, and the markdown and JUnit outputs parsed by real parsers."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import oracle
import pytest
from conftest import FIXTURES, trace_path
from oracle import OP_CATS, category, complete_events, is_device, launch_of, launches, module_around, op_of

from profuse.cli import main

H100, MI300 = "h100_bert_small.json.gz", "mi300_bert_small.json.gz"
_STEP = re.compile(r"^ProfilerStep#\d+$")


def oracle_op_times(path: Path) -> dict[tuple[str, str, str], tuple[int, float]]:
    """(op name, Input Dims as JSON, module instance) -> (calls, µs of the device events it launched),
    the slow way: each device event -> its runtime call by correlation -> the innermost op holding
    the call's start; each op -> the innermost ``nn.Module: X_N`` scope holding its start."""
    events = complete_events(path)
    by_corr = launches(events)
    own: dict[int, float] = {}
    for d in filter(is_device, events):
        launch = launch_of(d, by_corr)
        op = op_of(events, launch) if launch is not None else None
        if op is not None:
            own[op["order"]] = own.get(op["order"], 0.0) + float(d["dur"])
    out: dict[tuple[str, str, str], tuple[int, float]] = {}
    for e in events:
        if category(e) not in OP_CATS:
            continue
        mod = module_around(events, e)
        dims = (e.get("args") or {}).get("Input Dims")
        key = (_STEP.sub("ProfilerStep#*", e["name"]), json.dumps(dims) if dims is not None else "",
               mod["name"].removeprefix("nn.Module: ") if mod is not None else "")
        calls, us = out.get(key, (0, 0.0))
        out[key] = (calls + 1, us + own.get(e["order"], 0.0))
    return out


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    rc = main(["diff", *argv, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def _key(o: dict) -> tuple[str, str, str]:
    return o["name"], json.dumps(json.loads(o["shape"])) if o["shape"] else "", o["module"]


def test_h100_vs_mi300_every_op_matched_or_listed_and_ratios_equal_plain_json(capsys):
    rc, d = run_json(capsys, str(trace_path(H100)), str(trace_path(MI300)))
    assert rc == 0
    ours = {_key(o): o for o in d["ops"]}
    assert len(ours) == len(d["ops"]), "one row per (name, shapes, module instance)"
    want_a, want_b = oracle_op_times(trace_path(H100)), oracle_op_times(trace_path(MI300))
    # every op of either side is a row: matched when both have it, else listed with 0 calls on the other
    assert set(ours) == want_a.keys() | want_b.keys()
    for key, o in ours.items():
        (ca, ua), (cb, ub) = want_a.get(key, (0, 0.0)), want_b.get(key, (0, 0.0))
        assert (o["a_calls"], o["b_calls"]) == (ca, cb), key
        assert o["matched"] == (ca > 0 and cb > 0)
        assert o["a_us"] == pytest.approx(ua, abs=1e-3) and o["b_us"] == pytest.approx(ub, abs=1e-3), key
        if ua:
            assert o["ratio"] == pytest.approx(ub / ua, rel=1e-3, abs=1e-4), key
        else:
            assert o["ratio"] is None
    timed = [k for k in want_a if want_a[k][1] > 0]
    assert len(timed) > 40 and all(ours[k]["matched"] for k in timed), "the same model: every timed op is in both"
    assert d["only_in"]["a"]["ops"] == sum(1 for k in want_a if k not in want_b)
    # the share of device time in matched ops, from the same plain-json reading
    dev_a = sum(float(e["dur"]) for e in complete_events(trace_path(H100)) if is_device(e))
    matched_a = sum(us for k, (_c, us) in want_a.items() if k in want_b)
    assert d["matched_device_pct"]["a"] == pytest.approx(100 * matched_a / dev_a, abs=0.01)


def test_devices_differ_by_vendor_and_by_name_within_one_vendor(capsys):
    _, d = run_json(capsys, str(trace_path(H100)), str(trace_path(MI300)))
    assert d["devices"] == {"a": "NVIDIA H100 80GB HBM3", "b": "AMD Instinct MI300X VF"}
    assert d["same_device"] is False and d["kernels"] == []
    assert d["sides"]["a"]["peaks"]["source"] == "datasheet: H100"
    assert d["sides"]["b"]["peaks"]["source"] == "datasheet: MI300X"
    shared = {r["name"] for r in d["roofline"]}
    assert "aten::addmm" in shared and all(r["a_pct"] is None or 0 <= r["a_pct"] <= 100 for r in d["roofline"])
    # two CUDA devices of different names: the kind alone would call them the same
    _, d = run_json(capsys, str(trace_path("a100_alexnet.json.gz")), str(trace_path("v100_ns_timestamps.json.gz")))
    assert d["sides"]["a"]["kind"] == d["sides"]["b"]["kind"] == "CUDA"
    assert d["devices"] == {"a": "NVIDIA A100-PG509-200", "b": "Tesla V100-SXM2-32GB"}
    assert d["same_device"] is False and d["kernels"] == []
    _, d = run_json(capsys, str(trace_path("a100_alexnet.json.gz")), str(trace_path("a100_event_sync.json.gz")))
    assert d["same_device"] is True and d["kernels"]
    main(["diff", str(trace_path("a100_alexnet.json.gz")), str(trace_path("v100_ns_timestamps.json.gz"))])
    out = capsys.readouterr().out
    assert "different devices: NVIDIA A100-PG509-200 vs Tesla V100-SXM2-32GB" in out


def test_one_side_only_compiled_regions_and_graph_replays(capsys):
    _, d = run_json(capsys, str(trace_path("mi300_torch_compile_triton.json.gz")),
                    str(trace_path("mi300_sglang_decode_cudagraph.json.gz")))
    a_regions = {e["name"] for e in complete_events(trace_path("mi300_torch_compile_triton.json.gz"))
                 if e["name"].startswith("Torch-Compiled Region") and category(e) == "cpu_op"}
    assert a_regions and set(d["only_in"]["a"]["compiled_regions"]) == a_regions
    assert d["only_in"]["a"]["fused_kernels"] and all(k.startswith("triton_") for k in d["only_in"]["a"]["fused_kernels"])
    assert d["sides"]["b"]["graph_replay_kernels"] > 0 == d["sides"]["a"]["graph_replay_kernels"]
    assert d["only_in"]["b"]["graph_replay_kernels"] == d["sides"]["b"]["graph_replay_kernels"]


def test_one_step_a_side_cannot_tell_and_the_gate_passes(capsys):
    rc, d = run_json(capsys, str(trace_path(H100)), str(trace_path(MI300)), "--fail-if-slower", "5%",
                     "--metric", "device_busy")
    assert rc == 0
    v = {x["metric"]: x for x in d["verdicts"]}
    assert v["device_busy"]["verdict"] == "cannot tell" and v["device_busy"]["fails"] is False
    assert v["device_busy"]["a_steps"] == v["device_busy"]["b_steps"] == 1


def test_names_are_cut_at_their_end_and_speed_says_which_way(capsys):
    from profuse.report.diff import ratio_words, shorten, speed_words

    long = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<Functor_A>>(int, F)"
    assert shorten(long, 40) == long[:39] + "…" and shorten("aten::mm") == "aten::mm"
    assert speed_words(502.0, 964.0) == "0.52x (1.92x slower)"
    assert speed_words(964.0, 502.0) == "1.92x (1.92x faster)"
    assert ratio_words(1.92) == "1.92x slower" and ratio_words(0.5) == "0.50x (2.00x faster)"
    assert ratio_words(None) == "-", "A took no time: no ratio, and not 'only in B'"


def _hostile_pair(tmp_path: Path) -> tuple[Path, Path]:
    """compare_base/test with one op renamed to markup, a pipe and a backtick (as a trace may hold)."""
    out = []
    for name in ("compare_base.json.gz", "compare_test.json.gz"):
        with gzip.open(trace_path(name)) as fh:
            doc = json.load(fh)
        for e in doc["traceEvents"]:
            if e.get("cat") == "cpu_op":
                e["name"] = "<img src=x onerror=alert(1)>|`x` & " + e["name"]
        p = tmp_path / name
        with gzip.open(p, "wt") as fh:
            json.dump(doc, fh)
        out.append(p)
    return out[0], out[1]


def test_markdown_is_a_table_a_markdown_parser_reads_with_no_markup_from_the_trace(tmp_path, capsys):
    from markdown_it import MarkdownIt

    a, b = _hostile_pair(tmp_path)
    out = tmp_path / "comment.md"
    assert main(["diff", str(a), str(b), "--format", "markdown", "-o", str(out), "--fail-if-slower", "5"]) == 0
    md = out.read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    kinds = [t.type for t in tokens]
    assert kinds.count("table_open") == 2, "the verdicts and the op changes"
    assert "html_inline" not in {c.type for t in tokens for c in (t.children or [])} and "html_block" not in kinds
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in html and "&lt;img src=x" in html
    cells, n = [], 0
    for t in tokens:
        if t.type == "tr_open":
            n = 0
        elif t.type in ("td_open", "th_open"):
            n += 1
        elif t.type == "tr_close":
            cells.append(n)
    # each table row keeps its columns: the pipe in the op name is not a cell border
    assert len(cells) >= 4 and set(cells) == {5, 6}


JUNIT_XSD = FIXTURES / "junit-jenkins.xsd"


def test_junit_validates_against_the_jenkins_schema(tmp_path, capsys):
    from lxml import etree

    a, b = _hostile_pair(tmp_path)
    out = tmp_path / "diff.xml"
    assert main(["diff", str(a), str(b), "--format", "junit", "-o", str(out), "--fail-if-slower", "5%"]) == 0
    schema = etree.XMLSchema(etree.parse(str(JUNIT_XSD)))
    doc = etree.parse(str(out))
    schema.assertValid(doc)
    cases = doc.findall(".//testcase")
    assert {c.get("name") for c in cases} == {"step", "device_busy"}
    assert all(c.find("skipped") is not None for c in cases), "one step a side: cannot tell, reported as skipped"
    assert doc.find(".//failure") is None
    props = {p.get("name"): p.get("value") for p in doc.findall(".//property")}
    assert props["a"] == str(a)


def test_per_step_samples_equal_plain_json():
    # step: each ProfilerStep#N's duration; device_busy: the union of the device events whose
    # launching call starts inside the step (a100_nccl_rank0_of2: 3 steps, kernels on several
    # streams, backward launched from the autograd thread). Times read as decimals: as floats,
    # µs timestamps near 1.7e15 keep only a quarter of a µs.
    from decimal import Decimal

    import profuse
    from profuse.analysis.compare.step_samples import samples

    path = trace_path("a100_nccl_rank0_of2.json.gz")
    with gzip.open(path) as fh:
        raw = [e for e in json.load(fh, parse_float=Decimal)["traceEvents"] if e.get("ph") == "X"]
    by_corr = {e["args"]["correlation"]: e for e in raw
               if category(e) in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    steps = sorted((e for e in raw if str(e["name"]).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    busy = []
    for s in steps:
        spans = sorted((Decimal(d["ts"]), Decimal(d["ts"]) + Decimal(d["dur"])) for d in raw if is_device(d)
                       and (lc := by_corr.get(d["args"].get("correlation"))) is not None
                       and s["ts"] <= lc["ts"] < s["ts"] + s["dur"])
        total, reach = Decimal(0), Decimal("-Infinity")
        for lo, hi in spans:
            if hi > reach:
                total += hi - max(lo, reach)
                reach = hi
        busy.append(float(total))
    with profuse.load(path) as t:
        assert samples(t, "step") == pytest.approx([float(s["dur"]) for s in steps], abs=1e-3)
        assert samples(t, "device_busy") == pytest.approx(busy, abs=1e-3)
    assert len(steps) == 3


def test_a_serving_step_is_a_step(capsys):
    # sglang marks its scheduler step (step[DECODE bs=32]) rather than a ProfilerStep#N; a step's time is
    # what it holds in the step model: its host interval to the end of the last activity it launched
    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    marked = [e for e in complete_events(path) if str(e["name"]).startswith("step[")]
    (_name, lo, hi, _busy), = oracle.step_spans(path)
    _, d = run_json(capsys, str(path), str(path))
    assert d["sides"]["a"]["steps"] == len(marked) == 1
    assert d["sides"]["a"]["step_median_us"] == pytest.approx(hi - lo, abs=1e-3)


def test_console_cuts_long_kernel_names_at_their_end(capsys):
    a, b = trace_path("a100_alexnet.json.gz"), trace_path("a100_event_sync.json.gz")
    _, d = run_json(capsys, str(a), str(b))
    long = [k["name"] for k in d["kernels"][:15] if len(k["name"]) > 60]
    assert long, "alexnet's cuDNN and elementwise kernels have long template names"
    assert main(["diff", str(a), str(b), "--top", "15"]) == 0
    out = capsys.readouterr().out
    for name in long:
        assert name[:59] + "…" in out
