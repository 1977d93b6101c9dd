"""Bad input: one line naming the file and the problem, exit code 2, nothing written."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from conftest import trace_path

import profuse
from profuse.cli import main

SMALL = "a100_event_sync.json.gz"


def small_doc() -> dict:
    return json.load(gzip.open(trace_path(SMALL)))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def with_event(tmp_path: Path, change) -> Path:
    doc = small_doc()
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    change(ev)
    return write(tmp_path, "t.json", json.dumps(doc).encode())


def run_bad(capsys, path: Path, *extra: str) -> str:
    before = set(path.parent.iterdir()) if path.parent.exists() else set()
    code = main(["report", str(path), *extra])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert str(path) in lines[0]
    after = set(path.parent.iterdir()) if path.parent.exists() else set()
    assert after == before, f"files left behind: {after - before}"
    return lines[0]


def test_missing_file(tmp_path, capsys):
    assert "no such file" in run_bad(capsys, tmp_path / "nope.json")


def test_folder_without_trace(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    assert "no trace" in run_bad(capsys, tmp_path / "empty")


def test_not_json(tmp_path, capsys):
    assert "not JSON" in run_bad(capsys, write(tmp_path, "t.json", b"hello world"))


def test_truncated_gzip(tmp_path, capsys):
    data = trace_path(SMALL).read_bytes()
    assert "gzip" in run_bad(capsys, write(tmp_path, "t.json.gz", data[: len(data) // 2]))


def test_truncated_json(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes())
    assert "truncated" in run_bad(capsys, write(tmp_path, "t.json", data[: len(data) // 2]))


def test_json_not_a_trace(tmp_path, capsys):
    assert "not a trace" in run_bad(capsys, write(tmp_path, "t.json", b'{"hello": [1, 2]}'))
    assert "not a trace" in run_bad(capsys, write(tmp_path, "u.json", b'{"traceEvents": 5}'))


def test_event_without_dur(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.pop("dur")))
    assert "no dur" in msg and "event #" in msg and "--lenient" in msg


def test_negative_dur(tmp_path, capsys):
    assert "negative dur" in run_bad(capsys, with_event(tmp_path, lambda e: e.update(dur=-5)))


def test_string_number(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.update(ts=str(e["ts"]))))
    assert "ts" in msg and "str" in msg


def test_int_over_64_bits(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e["args"].update(correlation=2**70)))
    assert "64 bits" in msg


def test_invalid_utf8(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes()).replace(b'"cudaLaunchKernel"', b'"cuda\xffLaunch"', 1)
    assert "UTF-8" in run_bad(capsys, write(tmp_path, "t.json", data))


def test_lenient_loads_what_it_can(tmp_path, capsys):
    doc = small_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    device_events = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels[0].pop("dur")
    kernels[1]["dur"] = -3
    kernels[2]["ts"] = "oops"
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    assert main(["report", str(p), "--lenient", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(out["skipped"].values()) == 3
    assert out["totals"]["kernels"] == len(device_events) - 3
    assert main(["report", str(p), "--lenient"]) == 0
    assert "--lenient skipped events" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.duckdb")), "a lenient load leaves no cache"


def test_lenient_invalid_utf8_is_replaced(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes()).replace(b'"cudaLaunchKernel"', b'"cuda\xffLaunch"', 1)
    p = write(tmp_path, "t.json", data)
    assert main(["report", str(p), "--lenient", "--format", "json"]) == 0
    assert "cuda\ufffdLaunch" in capsys.readouterr().out


def test_unmatched_flows_are_counted_not_fatal(tmp_path, capsys):
    # Real traces carry flow ends without starts (ac2g); they are counted and the load goes on.
    doc = small_doc()
    doc["traceEvents"].append({"ph": "s", "id": 999999, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"})
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    assert main(["report", str(p), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unmatched_flows"] >= 1


def test_sql_error_is_one_line(capsys):
    code = main(["sql", str(trace_path(SMALL)), "SELECT nope FROM events"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "SQL error" in err


def test_bad_output_folder_writes_nothing(tmp_path, capsys):
    code = main(["report", str(trace_path(SMALL)), "--format", "json", "-o", str(tmp_path / "no" / "r.json")])
    assert code == 2
    assert "no" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


# --- issue 9: one test per root cause ---------------------------------------------------------

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def device_us(doc: dict) -> float:
    """Device time straight from the JSON: the durations of kernels, memcpys and memsets."""
    return sum(e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS)


def report_json(capsys, path: Path, *extra: str) -> dict:
    code = main(["report", str(path), "--format", "json", "--no-cache", *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    return json.loads(captured.out)


def test_fifo_and_devices_are_refused(tmp_path, capsys):
    # reading either would block forever or never end
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO)" in run_bad(capsys, fifo)
    link = tmp_path / "zero.json.gz"
    link.symlink_to("/dev/zero")
    assert "not a regular file (a character device)" in run_bad(capsys, link)


def test_bundle_whose_trace_is_a_folder(tmp_path, capsys):
    (tmp_path / "b" / "trace.json.gz").mkdir(parents=True)
    msg = run_bad(capsys, tmp_path / "b")
    assert "trace.json.gz: is a folder, not a trace file" in msg


def test_gzip_bomb_stops_at_the_limit(tmp_path, capsys, monkeypatch):
    # GIVEN 300 gzip members of 1 MiB of spaces each: 300 KB that inflate to 300 MiB
    member = gzip.compress(b" " * (1 << 20), 9)
    bomb = write(tmp_path, "bomb.json.gz", gzip.compress(b'{"traceEvents": [') + member * 300 + gzip.compress(b"]}"))
    monkeypatch.setenv("PROFUSE_MAX_TRACE_BYTES", str(16 << 20))
    msg = run_bad(capsys, bomb)
    assert "inflates to more than 16,777,216 bytes" in msg and "PROFUSE_MAX_TRACE_BYTES" in msg
    # a plain file over the limit is refused before it is read
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b'{"traceEvents": [')
        fh.truncate(17 << 20)
    assert "holds more than 16,777,216 bytes" in run_bad(capsys, big)
    # a limit that is not a number is a one-line error too
    monkeypatch.setenv("PROFUSE_MAX_TRACE_BYTES", "lots")
    assert main(["report", str(trace_path(SMALL))]) == 2
    assert "PROFUSE_MAX_TRACE_BYTES='lots'" in capsys.readouterr().err


def test_gzip_members_and_padding_still_load(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes())
    two = write(tmp_path, "two.json.gz", gzip.compress(data[:1000]) + gzip.compress(data[1000:]) + b"\0" * 64)
    assert report_json(capsys, two)["totals"]["device_us"] == device_us(json.loads(data))


def test_deep_nesting(tmp_path, capsys):
    deep = b"[" * 100_000 + b"]" * 100_000
    assert "nested too deeply" in run_bad(capsys, write(tmp_path, "t.json", b'{"traceEvents": ' + deep + b"}"))
    data = gzip.decompress(trace_path(SMALL).read_bytes()).replace(b"{", b'{"deep": ' + deep + b", ", 1)
    assert "nested too deeply" in run_bad(capsys, write(tmp_path, "u.json", data))


def test_dur_out_of_range(tmp_path, capsys):
    # a dur of 1e17 µs overflowed 64-bit ns and gave negative totals with exit code 0
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.update(dur=1e17)))
    assert "dur 1e+17 µs, out of range" in msg and "--lenient" in msg
    doc = small_doc()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    expected = device_us(doc) - kernel["dur"]
    kernel["dur"] = 1e17
    out = report_json(capsys, write(tmp_path, "l.json", json.dumps(doc).encode()), "--lenient")
    assert out["skipped"] == {"dur out of range": 1}
    assert out["totals"]["device_us"] == pytest.approx(expected)


@pytest.mark.parametrize("ts", [2**64 + 1, 2**53, -1e16])
def test_ts_beyond_64_bits(tmp_path, capsys, ts):
    # in ns these overflow 64 bits (2^53 µs did so with a traceback, 2^64 + 1 silently)
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.update(ts=ts)))
    assert f"has ts {float(ts):g} µs, out of range" in msg


@pytest.mark.parametrize("far_us", [2**53 / 1000 + 1, 2.4e15])
def test_span_beyond_2_53_ns(tmp_path, capsys, far_us):
    # 2.4e15 µs: too far apart for nesting's (thread, time) keys, so threads are nested one by one
    doc = small_doc()
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    xs[-1]["ts"] = min(e["ts"] for e in xs) + far_us  # one event far after the rest
    out = report_json(capsys, write(tmp_path, "t.json", json.dumps(doc).encode()))
    start, end = min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)
    assert out["trace"]["span_us"] == pytest.approx(end - start, abs=1e-3)
    assert out["totals"]["device_us"] == pytest.approx(device_us(doc))


def test_pid_and_tid_beyond_64_bits(tmp_path, capsys):
    doc = small_doc()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["pid"], kernel["tid"] = 2**64 + 1, -(2**70)
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    assert report_json(capsys, p)["totals"]["device_us"] == pytest.approx(device_us(doc))
    assert main(["sql", str(p), f"SELECT pid, tid FROM threads WHERE pid = '{2**64 + 1}'",
                 "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"pid": str(2**64 + 1), "tid": str(-(2**70))}]


def test_base_time_beyond_64_bits(tmp_path, capsys):
    doc = small_doc()
    doc["baseTimeNanoseconds"] = 2**64 + 1
    msg = run_bad(capsys, write(tmp_path, "t.json", json.dumps(doc).encode()))
    assert f"baseTimeNanoseconds {2**64 + 1} is out of range" in msg and "--lenient" in msg
    out = report_json(capsys, tmp_path / "t.json", "--lenient")
    assert out["skipped"] == {"baseTimeNanoseconds ignored": 1}
    assert out["totals"]["device_us"] == pytest.approx(device_us(doc))


def test_null_name_is_kept_and_counted(tmp_path, capsys):
    doc = small_doc()
    op = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    op["name"] = None
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    out = report_json(capsys, p)
    assert out["totals"]["device_us"] == pytest.approx(device_us(doc))
    assert main(["sql", str(p), "SELECT value FROM meta WHERE key = 'unnamed_events'", "--format", "csv",
                 "--no-cache"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "1"


@pytest.mark.parametrize("key,value", [("Input Dims", 5), ("Input type", 7), ("device", [0, 1]), ("flops", "x"),
                                       ("stream", {"a": 1}), ("grid", "x")])
def test_args_of_wrong_types(tmp_path, capsys, key, value):
    # values profuse cannot use are read as absent: the rest of the trace gives the same numbers
    doc = small_doc()
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "kernel"):
            e.setdefault("args", {})[key] = value
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    for group in ("op", "shape"):
        out = report_json(capsys, p, "--group-by", group)
        assert out["totals"]["device_us"] == pytest.approx(device_us(doc))
        assert out["totals"]["kernels"] == sum(1 for e in doc["traceEvents"] if e.get("cat") in DEVICE_CATS)
    # numbers profuse reads are counted when ignored; shapes are kept as written in the shapes table
    changed = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "kernel"))
    assert main(["sql", str(p), "SELECT value FROM meta WHERE key = 'ignored_args'", "--format", "json",
                 "--no-cache"]) == 0
    ignored = json.loads(json.loads(capsys.readouterr().out)[0]["value"])
    assert ignored == ({key: changed} if key in ("device", "flops", "stream") else {})


@pytest.mark.parametrize("props", [{"name": "A100"}, 7, "A100", [1, 2], [{"name": 5}], [[{"name": "A"}]]])
def test_device_properties_of_wrong_shape(tmp_path, capsys, props):
    doc = small_doc()
    doc["deviceProperties"] = props
    out = report_json(capsys, write(tmp_path, "t.json", json.dumps(doc).encode()))
    assert out["trace"]["device_name"] is None
    assert out["totals"]["device_us"] == pytest.approx(device_us(doc))


def test_non_utf8_file_name(tmp_path, capsys):
    name = os.fsdecode(b"caf\xe9 trace.json")
    p = write(tmp_path, name, gzip.decompress(trace_path(SMALL).read_bytes()))
    out = report_json(capsys, p)
    assert out["trace"]["path"].endswith("caf\\xe9 trace.json")
    bad = write(tmp_path, os.fsdecode(b"bad\xff\nname.json"), b"hello")
    code = main(["report", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad\\xff\\nname.json: not JSON" in err


def test_instants_out_of_range_are_counted(tmp_path, capsys):
    doc = small_doc()
    doc["traceEvents"].append({"ph": "i", "name": "far", "cat": "x", "pid": 1, "tid": 1, "ts": 1e19, "s": "t"})
    out = report_json(capsys, write(tmp_path, "t.json", json.dumps(doc).encode()))
    assert out["skipped"] == {"instant ts out of range": 1}


def bundle_with(tmp_path: Path, meta: bytes | None) -> Path:
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "trace.json.gz").write_bytes(trace_path(SMALL).read_bytes())
    if meta is not None:
        (b / "meta.json").write_bytes(meta)
    return b


@pytest.mark.parametrize("meta", [b"[1]", b'{"schema": "profuse.bundle/1", "status": [1], "run": 5, "peaks": [1]}',
                                  b'{"peaks": {"matmul_tflops_fp32": "x", "copy_bandwidth_gbps": null}}',
                                  b"[" * 100_000, b"\xff\xfe"])
def test_bundle_meta_of_wrong_shape(tmp_path, capsys, meta):
    # a bundle's meta.json is optional: one that says nothing usable is ignored, never a traceback
    out = report_json(capsys, bundle_with(tmp_path, meta))
    assert out["totals"]["device_us"] == pytest.approx(device_us(small_doc()))


def test_measured_peaks_that_are_not_numbers(tmp_path):
    from profuse.analysis.advice.roofline import device_peaks
    from profuse.trace.bundle import MeasuredPeaks

    # GIVEN bundles whose meta.json holds peaks that measure nothing, and one whose peaks are numbers
    bad = {"schema": "profuse.bundle/1", "peaks": {"matmul_tflops_fp32": "x", "copy_bandwidth_gbps": None}}
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "trace.json.gz").write_bytes(trace_path("compare_base.json.gz").read_bytes())  # no deviceProperties
    (b / "meta.json").write_text(json.dumps(bad))
    with profuse.load(b, cache=False) as trace:
        assert trace.bundle is not None and trace.bundle.peaks is None
        assert any("peaks of an unexpected shape: ignored" in n for n in trace.notes), trace.notes
        assert device_peaks(trace, trace.bundle.peaks) is None
        assert device_peaks(trace, MeasuredPeaks(matmul_tflops_fp32=float("nan"), copy_bandwidth_gbps=1.0)) is None
        good = device_peaks(trace, MeasuredPeaks(matmul_tflops_fp32=10, copy_bandwidth_gbps=100))
        assert good is not None and good.source == "measured" and good.gbps == 100
    (b / "meta.json").write_text(json.dumps(dict(bad, peaks={"matmul_tflops_fp32": 10, "copy_bandwidth_gbps": 100})))
    with profuse.load(b, cache=False) as trace:
        assert trace.bundle is not None and trace.bundle.peaks == MeasuredPeaks(matmul_tflops_fp32=10,
                                                                                copy_bandwidth_gbps=100)
        assert trace.notes == []


def test_bundle_side_files_that_are_not_regular(tmp_path, capsys):
    # a FIFO as meta.json or as a saved kernel would block the report forever; a link may point anywhere
    b = bundle_with(tmp_path, None)
    os.mkfifo(b / "meta.json")
    inductor = b / "artifacts" / "inductor"
    inductor.mkdir(parents=True)
    os.mkfifo(inductor / "k.py")
    secret = tmp_path / "secret.py"
    secret.write_text("def triton_poi_fused_secret_0(): pass\n")
    (inductor / "link.py").symlink_to(secret)
    (inductor / "real.py").write_text("def triton_poi_fused_add_0(): pass\n")
    out = report_json(capsys, b)
    assert out["compiled"]["generated_kernels"] == ["triton_poi_fused_add_0"]


@pytest.mark.parametrize("scanner", ["1", "0"])
def test_ids_written_as_floats_are_the_integers_they_are(tmp_path, monkeypatch, capsys, scanner):
    # GIVEN a real trace re-serialised with every correlation and External id as a float (35.0), and two
    # kernels' correlations with a fraction (35.5)
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    doc = json.loads(gzip.decompress(trace_path("a100_event_sync.json.gz").read_bytes()))
    floats, fraction = json.loads(json.dumps(doc)), json.loads(json.dumps(doc))
    for d, bump in ((floats, 0.0), (fraction, 0.5)):
        n = 0
        for e in d["traceEvents"]:
            a = e.get("args") or {}
            for key in ("correlation", "External id"):
                if key in a:
                    a[key] = float(a[key])
            if bump and e.get("cat") == "kernel" and n < 2:
                a["correlation"] += bump
                n += 1
    reports = {}
    for name, d in (("ints", doc), ("floats", floats), ("fraction", fraction)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        assert main(["report", str(p), "--format", "json", "--no-cache"]) == 0
        reports[name] = json.loads(capsys.readouterr().out)
    # THEN the float ids load as the ints (same totals, ops and diagnosis), and a fraction is absent and
    # counted, its event kept
    for key in ("totals", "ops", "diagnosis", "steps"):
        assert reports["floats"][key] == reports["ints"][key], key
    assert reports["fraction"]["trace"]["events"] == reports["ints"]["trace"]["events"]
    with profuse.load(tmp_path / "fraction.json", cache=False) as t:
        assert t.meta.ignored_args == {"correlation": 2}


@pytest.mark.parametrize("scanner", ["1", "0"])
def test_a_huge_ts_and_a_memory_device_beyond_32_bits_are_one_line_or_counted(tmp_path, monkeypatch, capsys, scanner):
    # GIVEN a ts written as a 400-digit integer; and [memory] events with a Device Id of 2^31 and a negative total
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    big = tmp_path / "bigts.json"
    big.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": '
                   + "9" * 400 + ', "dur": 5}]}')
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 5, "args": {}}

    def mem(ts, dev, total):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
                "args": {"Device Type": 1, "Device Id": dev, "Addr": ts, "Bytes": 100, "Total Allocated": total,
                         "Total Reserved": 200}}
    memp = tmp_path / "mem.json"
    memp.write_text(json.dumps({"traceEvents": [op, mem(2, 2**31, 100), mem(3, 0, -5), mem(4, 0, 100)]}))
    # THEN the ts is one line naming the file and exit 2 (--lenient: skipped and counted)
    assert main(["report", str(big), "--no-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(big) in err[0] and "out of range" in err[0]
    assert main(["report", str(big), "--no-cache", "--lenient"]) == 0
    capsys.readouterr()
    # and the two memory events no table can hold (or no figure may show) are left out and counted
    with profuse.load(memp, cache=False) as t:
        assert t.meta.memory_events == 1 and t.meta.memory_skipped == 2
        assert t.con.execute("SELECT min(total_allocated) FROM memory").fetchone()[0] >= 0
