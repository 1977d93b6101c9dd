"""The payload layer: one typed shape per view, the same in the JSON report, the explorer's API and
the HTML report; typedefs for the front end generated from it."""
from __future__ import annotations

import gzip
import json
import re
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from conftest import ALL_TRACES, REPO, trace_id, trace_path
from explorer_util import running

import profuse
from profuse.analysis import op_table, summarize
from profuse.analysis.advice.findings import trace_findings
from profuse.analysis.breakdown import device_breakdown
from profuse.analysis.timeline import event_links, timeline_model, timeline_window
from profuse.cli import main
from profuse.payloads import build, jsdoc
from profuse.payloads.advice import advice_payload
from profuse.payloads.ops import OpKernels, Ops
from profuse.payloads.report import ReportDocument, report_document
from profuse.payloads.timeline import EventLinks, Lane, TimelineWindow


def roundtrip(payload: object, kind: object) -> None:
    assert msgspec.json.decode(msgspec.json.encode(payload), type=kind) == payload


def test_types_js_is_generated_from_the_structs():
    assert jsdoc.TYPES_JS.read_text() == jsdoc.generate(), "run: python -m profuse.payloads.jsdoc"
    text = jsdoc.generate()
    for name in ("Ops", "OpsRow", "OpKernels", "Overview", "Lane", "TimelineWindow", "DiffPayload", "ReportDocument"):
        assert f"@typedef {{Object}} {name}\n" in text
    # only fields left out of the JSON when unset are optional; fields with defaults are always sent
    assert " * @property {string} [shape]" in text and " * @property {number} [rank]" in text
    assert " * @property {string} schema" in text and "[schema]" not in text


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_payloads_round_trip(path: Path):
    with profuse.load(path) as t:
        summary, table, advice = summarize(t), op_table(t, group_by="shape"), trace_findings(t)
        ops = build.ops_of(t, table=table)
        roundtrip(ops, Ops)
        roundtrip(build.op_kernels_of(t, ops), dict[str, OpKernels])
        roundtrip(report_document(summary, ops, advice_payload(advice)), ReportDocument)
        roundtrip(build.overview_of(t, summary=summary, advice=advice), type(build.overview_of(t, summary=summary,
                                                                                             with_advice=False)))
        roundtrip(build.modules_of(t), type(build.modules_of(t)))
        roundtrip(build.compiled_of(t), type(build.compiled_of(t)))
        model = timeline_model(t)
        try:
            roundtrip(model.lanes, list[Lane])
            window = timeline_window(model, None, None, 800)
            roundtrip(window, TimelineWindow)
            if window.id and max(window.id) >= 0:
                roundtrip(event_links(t, model, max(window.id)), EventLinks)
        finally:
            model.close()


def documented_report_keys() -> tuple[set[str], set[str]]:
    """The report/3 keys and op row keys as docs/schema.md lists them."""
    doc = (REPO / "docs" / "schema.md").read_text()
    section = doc.split("## `profuse report --format json`", 1)[1].split("\n\n", 2)[1]
    keys: set[str] = set()
    op_keys: set[str] = set()
    for line in section.splitlines()[2:]:
        first, content = line.split("|")[1], line.split("|")[2]
        keys |= set(re.findall(r"`([a-z_]+)`", first))
        if "`ops`" in first:
            op_keys = {k.strip() for part in re.findall(r"`([^`]+)`", content) for k in part.split(",")
                       if re.fullmatch(r"[a-z_]+", k.strip())}
    return keys, op_keys


def test_report_keys_are_the_documented_ones(capsys):
    keys, op_keys = documented_report_keys()
    assert {"schema", "trace", "ops", "fusion_candidates"} <= keys and {"name", "key", "shape"} <= op_keys
    p = str(trace_path("h100_bert_small.json.gz"))
    assert main(["report", p, "--format", "json", "--group-by", "shape"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == keys
    assert all(set(r) == op_keys for r in doc["ops"])
    assert main(["report", p, "--format", "json", "--no-advice"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == keys - {"hotspots", "interruptions", "fusion_candidates", "peaks", "roofline", "compiled",
                               "roofline_note", "skewed_launches", "diagnosis"}
    assert all(set(r) == op_keys - {"shape"} for r in doc["ops"])


def embedded(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="profuse-data">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def html_report(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "r.html"
    assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "html", "-o", str(out),
                 *flags]) == 0
    return embedded(out.read_text())


def json_report(capsys, *flags: str) -> dict:
    capsys.readouterr()
    assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_html_report_honours_top_sort_and_group_by(tmp_path, capsys):
    data = html_report(tmp_path, "--top", "5", "--sort", "calls", "--group-by", "shape")
    rows = data["0/ops"]["rows"]
    assert len(rows) == 5 and data["0/ops"]["group_by"] == "shape"
    assert all("shape" in r for r in rows)
    # the same rows, in the same order, as the JSON report with the same flags
    whole = json_report(capsys, "--sort", "calls", "--group-by", "shape")["ops"]
    assert rows == whole[:5] and data["0/ops"]["total_rows"] == len(whole)
    assert [r["calls"] for r in rows] == sorted((r["calls"] for r in rows), reverse=True)
    assert set(data["0/op_kernels"]) == {r["key"] for r in rows}, "kernels embedded for the rows shown"


def test_html_report_without_advice_embeds_none(tmp_path):
    with_advice = html_report(tmp_path)
    assert with_advice["0/overview"]["advice"]["hotspots"], "advice is there unless --no-advice"
    data = html_report(tmp_path, "--no-advice")
    assert data["0/overview"]["advice"] is None
    assert "fusion_candidates" not in json.dumps(data) and "hotspots" not in json.dumps(data)
    assert len(data["0/ops"]["rows"]) == 25, "--top defaults to 25"


def raw_kernels_by_innermost_op(path: Path, op_name: str) -> Counter[str]:
    """Kernel names (with counts) launched by runtime calls whose innermost enclosing cpu_op is
    ``op_name``, from the trace's JSON alone."""
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    ops: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            ops.setdefault((e["pid"], e["tid"]), []).append(e)
    corr: set[int] = set()
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            around = [o for o in ops.get((e["pid"], e["tid"]), []) if o["ts"] <= e["ts"] < o["ts"] + o["dur"]]
            if around and min(around, key=lambda o: o["dur"])["name"] == op_name:
                corr.add(e["args"]["correlation"])
    return Counter(e["name"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and e.get("args", {}).get("correlation") in corr)


def test_op_kernels_route(tmp_path):
    path = trace_path("h100_bert_small.json.gz")
    expected = raw_kernels_by_innermost_op(path, "aten::addmm")
    assert expected
    with profuse.load(path) as t, running([t]) as url:
        with urllib.request.urlopen(url.at("/api/0/op_kernels?key=aten%3A%3Aaddmm")) as r:
            got = json.load(r)
        assert {k["name"]: k["calls"] for k in got["kernels"]} == dict(expected)
        for query, code in (("key=no-such-op", 404), ("", 400), ("key=aten%3A%3Aaddmm&group_by=x", 400)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url.at("/api/0/op_kernels?" + query))
            assert e.value.code == code and "error" in json.load(e.value)


def test_breakdown_communication_is_the_nccl_kernels():
    path = trace_path("a100_nccl_rank0_of2.json.gz")
    raw = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    nccl_us = sum(e["dur"] for e in raw if e["name"].lower().startswith("nccl"))
    assert nccl_us > 0
    with profuse.load(path) as t:
        b = device_breakdown(t, summarize(t).device_busy)
    assert b.communication_us == pytest.approx(nccl_us, rel=1e-6)
    assert b.compute_us == pytest.approx(sum(e["dur"] for e in raw) - nccl_us, rel=1e-6)


def test_lanes_carry_kind_and_whole_label():
    with profuse.load(trace_path("h100_bert_small.json.gz")) as t:
        model = timeline_model(t)
        lanes = model.lanes
        model.close()
        names = {n for (n,) in t.con.execute("SELECT thread_name FROM threads WHERE thread_name IS NOT NULL")
                 .fetchall()}
    assert {lane.kind for lane in lanes} == {"scopes", "ops", "runtime", "stream"}
    host = [lane for lane in lanes if lane.kind != "stream"]
    assert all(lane.label.endswith(" · " + lane.kind) for lane in host)
    assert all(lane.label.rsplit(" · ", 1)[0] in names or lane.label.startswith("thread ") for lane in host)


def test_ranks_document_is_its_record(tmp_path):
    from profuse.payloads.ranks import RanksDocument, ranks_payload
    from profuse.ranks import run_ranks
    from profuse.ranks.discover import candidates

    folder = str(trace_path("multirank/sampled_rank-0.json.gz").parent)
    doc = run_ranks(folder, candidates(folder), workers=1, cache=False, work_dir=tmp_path).doc
    record = ranks_payload(doc)
    assert msgspec.json.decode(msgspec.json.encode(record)) == msgspec.json.decode(msgspec.json.encode(doc))
    roundtrip(record, RanksDocument)
    with pytest.raises(msgspec.ValidationError, match="ranks_found"):
        ranks_payload({**msgspec.to_builtins(doc), "ranks_found": "two"})


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_sglang_decode_cudagraph.json.gz",
                                  "mi300_torch_compile_triton.json.gz", "mtia_inference.json.gz",
                                  "h100_vit_falconsai.json.gz"])
def test_every_rows_kernels_add_up_to_its_device_total(name):
    # the kernels listed under a row are exactly the device events its device total counts, and their self parts
    # the events counted in its `kernels` column and its self device time
    with profuse.load(trace_path(name)) as t:
        for group in ("op", "shape", "module", "kernel"):
            ops = build.ops_of(t, group_by=group)
            found = build.op_kernels_of(t, ops)
            assert set(found) == {r.key for r in ops.rows} and len(found) == len(ops.rows), "keys name rows once"
            for row in ops.rows:
                kernels = found[row.key].kernels
                tol = 1e-3 * (1 + len(kernels))
                assert sum(k.self_calls for k in kernels) == row.kernels, (group, row.key)
                assert sum(k.self_device_us for k in kernels) == pytest.approx(row.self_device_us, abs=tol), (group, row.key)
                assert sum(k.device_us for k in kernels) == pytest.approx(row.device_total_us, abs=tol), (group, row.key)
                assert all(0 <= k.self_calls <= k.calls and k.self_device_us <= k.device_us for k in kernels)
