"""Traces from PrivateUse1 backends (TorchNeuron, ...) give the same per-op device time as CUDA ones.

No real TorchNeuron trace is public, so the tests derive one from real CUDA traces the way such a
backend writes them: runtime and driver calls under ``privateuse1_runtime`` / ``privateuse1_driver``
with the backend's own call names, kernels unchanged, no CUDA device properties. The expected per-op
device time is computed from the *original* file with plain json (test_device_totals'
independent computation), so it is known exactly.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import trace_path
from test_device_totals import independent_device_time

from profuse.cli import main
from profuse.trace import load

CATS = {"cuda_runtime": "privateuse1_runtime", "cuda_driver": "privateuse1_driver"}
CUDA_ONLY_KEYS = ("deviceProperties", "cuda_runtime_version", "cuda_driver_version", "cupti_version")


def _rename(name: str, prefix: str) -> str:
    for cuda in ("cuda", "cu"):
        if name.startswith(cuda):
            return prefix + name[len(cuda):]
    return prefix + name


def rewrite(src: Path, dst: Path, *, prefix: str, process_name: str | None = None) -> dict[str, str]:
    """Write ``src`` as a PrivateUse1 backend would; returns old -> new runtime call names."""
    doc = json.load(gzip.open(src))
    for k in CUDA_ONLY_KEYS:
        doc.pop(k, None)
    renamed: dict[str, str] = {}
    device_pids = set()
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        if cat in CATS:
            e["cat"] = CATS[cat]
            renamed[e["name"]] = e["name"] = _rename(e["name"], prefix)
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            device_pids.add(e["pid"])
    if process_name:
        doc["traceEvents"] += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": f"{process_name} {i}"}} for i, pid in enumerate(sorted(device_pids))]
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return renamed


def _report(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["report", str(path), "--format", "json", "--no-advice"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("name", "prefix", "process", "device"), [
    ("h100_bert_small.json.gz", "nrt_", None, "Neuron"),          # Neuron Runtime calls are nrt_*
    ("a100_alexnet.json.gz", "pu1", "Neuron", "Neuron"),          # named by its device process
    ("a100_alexnet.json.gz", "pu1", None, "PrivateUse1"),         # nothing names it
])
def test_per_op_device_time_equals_the_cuda_original(name, prefix, process, device, tmp_path, capsys):
    src = trace_path(name)
    dst = tmp_path / "pu1" / "trace.json.gz"
    renamed = rewrite(src, dst, prefix=prefix, process_name=process)
    assert renamed and all(not n.startswith("cu") for n in renamed.values())
    expected = independent_device_time(src)
    assert expected
    doc = _report(dst, capsys)
    assert doc["trace"]["device_kind"] == device
    assert doc["device_label"] == device
    got = {o["name"]: o["self_device_us"] for o in doc["ops"] if o["self_device_us"]}
    assert set(got) == set(expected)
    for op, us in expected.items():
        assert got[op] == pytest.approx(us, rel=1e-6, abs=2e-3), op
    # and the runtime rows carry the backend's call names, with the same call counts as the original
    original = json.load(gzip.open(src))["traceEvents"]
    want_calls: dict[str, int] = {}
    for e in original:
        if e.get("cat") in CATS and e.get("ph") == "X":
            want_calls[renamed[e["name"]]] = want_calls.get(renamed[e["name"]], 0) + 1
    runtime_rows = {o["name"]: o["calls"] for o in doc["ops"] if o["name"] in want_calls}
    assert runtime_rows == want_calls


def test_framework_mapping_beside_the_trace_links_ops(tmp_path, capsys):
    src = trace_path("a100_alexnet.json.gz")
    dst = tmp_path / "rank0" / "trace.json.gz"
    rewrite(src, dst, prefix="nrt_")
    ops = [e for e in json.load(gzip.open(src))["traceEvents"]
           if e.get("cat") == "cpu_op" and "Sequence number" in e.get("args", {})]
    assert len(ops) > 10
    # GIVEN a mapping file: one record per op with a sequence number, one for a sequence number no op
    # has, and two records it cannot use (no runtime id; no op sequence number)
    records = [{"nrt_sequence_id": 1000 + i, "sequence_number": e["args"]["Sequence number"],
                "thread_id": e["tid"], "stream_id": 7} for i, e in enumerate(ops)]
    records += [{"nrt_sequence_id": 1, "sequence_number": 10**9}, {"sequence_number": 3}, {"nrt_sequence_id": 2}]
    (dst.parent / "framework_mapping_0.json").write_text(json.dumps(records))
    with load(dst) as trace:
        assert trace.framework_mapping == {"files": ["framework_mapping_0.json"], "rows": len(ops) + 1,
                                           "skipped": 2, "linked": len(ops)}
        _, rows = trace.sql_rows("SELECT m.runtime_seq, e.name, e.tid, m.stream FROM framework_mapping m "
                            "JOIN events e ON e.id = m.op ORDER BY m.runtime_seq")
    # THEN each runtime sequence id reaches the op that carried that sequence number on its thread
    # (the first to start, the outermost of equal starts, when several ops share one)
    first: dict[tuple[int, str], dict] = {}
    for e in ops:
        key = (e["args"]["Sequence number"], str(e["tid"]))
        if key not in first or (e["ts"], -e["dur"]) < (first[key]["ts"], -first[key]["dur"]):
            first[key] = e
    want = [first[(e["args"]["Sequence number"], str(e["tid"]))] for e in ops]
    assert [(r[1], r[2]) for r in rows] == [(e["name"], str(e["tid"])) for e in want]
    # ... and the view is there again when the tables come from the cache, and for `profuse sql`
    assert main(["sql", str(dst), "SELECT count(*) AS n, count(op) AS linked FROM framework_mapping",
                 "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert str(len(ops) + 1) in out and str(len(ops)) in out


def test_broken_framework_mapping_is_one_line(tmp_path, capsys):
    dst = tmp_path / "t" / "trace.json.gz"
    rewrite(trace_path("a100_alexnet.json.gz"), dst, prefix="nrt_")
    bad = dst.parent / "framework_mapping_1.json"
    bad.write_text("{not json")
    assert main(["report", str(dst)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"profuse: {bad}:") and "not valid JSON" in err and "\n" not in err


def test_folder_with_a_named_trace_and_its_mapping_resolves_to_the_trace(tmp_path, capsys):
    # Neuron's per-rank folder: the Kineto trace under its own name, and framework_mapping_*.json beside it
    dst = tmp_path / "i-0abc_pid_42" / "i-0abc_pid_42.pt.trace.json.gz"
    rewrite(trace_path("a100_alexnet.json.gz"), dst, prefix="nrt_")
    (dst.parent / "framework_mapping_0.json").write_text("[]")
    doc = _report(dst.parent, capsys)
    assert doc["trace"]["path"] == str(dst) and doc["trace"]["device_kind"] == "Neuron"
