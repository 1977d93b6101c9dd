"""No string from a trace reaches a terminal as a control sequence (report/terminal.py).

A trace names its device, ops, modules, kernels, annotations, steps and threads; here each name holds
an OSC 52 clipboard write, a clear-screen, a C1 CSI, BEL and a right-to-left override. Every console
output (report with advice, diff as a table and as markdown, the rank report) must hold none of those
characters and show each name in visible escaped form; the JSON must keep the names exactly.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text

from profuse.cli import main

# OSC 52 (write the clipboard), CSI 2J (clear the screen), a C1 CSI (U+009B), BEL, bidi overrides
HOSTILE = "\x1b]52;c;SGk=\x07\x1b[2J\u009b31m\u202eevil\u2066\x07"
SHOWN = "\\x1b]52;c;SGk=\\x07\\x1b[2J\\x9b31m\\u202eevil\\u2066\\x07"  # what printable() writes
# what must never be printed: C0 controls but the line break, DEL, C1 controls, bidi controls
BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
DEVICE = "NVIDIA H100" + HOSTILE
OP, MODULE, ANNOTATION = "aten::evil" + HOSTILE, "Norm" + HOSTILE, "annot" + HOSTILE
KERNEL, COMM = "kern_evil" + HOSTILE, "ncclKernel_AllReduce" + HOSTILE
THREAD = "main" + HOSTILE
RMSNORM = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul")


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def hostile_trace(rank: int = 0, steps: int = 6) -> dict[str, Any]:
    """``steps`` ProfilerSteps, each: a module holding an annotation holding an RMSNorm's five ops and one
    hostile op, each launching one kernel, and a collective kernel (``rank`` makes it longer)."""
    ev: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": THREAD}}]
    t, corr = 1000.0, 1
    for s in range(steps):
        u = t + 2
        body = []
        for op in (*RMSNORM, OP):
            kernel = KERNEL if op == OP else f"kern_{op[6:]}"
            body += [_x("cpu_op", op, u, 8, **{"External id": corr, "Input Dims": [[64, 4096]],
                                               "Input type": ["float"]}),
                     _x("cuda_runtime", "cudaLaunchKernel", u + 1, 5, correlation=corr),
                     _x("kernel", kernel, u + 20, 30, pid=0, tid=7, correlation=corr, stream=7, device=0)]
            corr, u = corr + 1, u + 10
        body += [_x("cuda_runtime", "cudaLaunchKernel", u + 1, 5, correlation=corr),
                 _x("kernel", COMM, u + 30, 20 + 5 * rank, pid=0, tid=8, correlation=corr, stream=8, device=0)]
        corr, u = corr + 1, u + 10
        ev += [_x("user_annotation", f"ProfilerStep#{s}", t, u + 100 - t),
               _x("python_function", "nn.Module: " + MODULE + "_0", t + 1, u - t - 1),
               _x("user_annotation", ANNOTATION, t + 1.5, u - t - 1.5), *body]
        t = u + 110
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": DEVICE}],
            "distributedInfo": {"rank": rank, "world_size": 2}}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    (d / "ranks").mkdir()
    out = {}
    for name, rank in (("a", 0), ("b", 1)):
        p = d / "ranks" / f"rank{rank}.json"
        p.write_text(json.dumps(hostile_trace(rank)))
        out[name] = p
    out["ranks"] = d / "ranks"
    out["work"] = d / "work"
    return out


def assert_printable(text: str) -> None:
    """No ESC, BEL or other C0 control but the line break, no DEL, no C1 control, no bidi control."""
    bad = sorted({hex(ord(c)) for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
                  or ord(c) in BIDI})
    assert not bad, f"control characters printed: {bad}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert_printable(err)
    return out


def test_report_shows_every_name_escaped_in_every_section(traces, capsys):
    out = run_cli(capsys, "report", str(traces["a"]), "--no-cache")
    assert_printable(out)
    lines = out.splitlines()
    assert f"CUDA (NVIDIA H100{SHOWN})" in lines[1], "the header's device name"
    levers = out[out.index("Levers ("):out.index("Trace health")]
    assert f"in annot{SHOWN}" in levers, "a lever's target"
    assert any(line.startswith(f"aten::evil{SHOWN} ") for line in lines), "an op table row"
    fusion = out[out.index("Fusion candidates"):out.index("Interruptions")]
    assert f"RMSNorm in annot{SHOWN}: " in fusion, "the fusion recommendation line"
    hotspots = out[out.index("\nHotspots"):]
    assert f"Norm{SHOWN} 100%" in hotspots and f"kern_evil{SHOWN} " in hotspots
    # grouped by kernel and by module: those names are the table's first column
    kernels = run_cli(capsys, "report", str(traces["a"]), "--no-cache", "--group-by", "kernel", "--no-advice")
    assert_printable(kernels)
    assert f"kern_evil{SHOWN}" in kernels
    assert f"ncclKernel_AllReduce{SHOWN[:40]}" in kernels, "(the column folds the longer name at 70)"
    modules = run_cli(capsys, "report", str(traces["a"]), "--no-cache", "--group-by", "module", "--no-advice")
    assert_printable(modules)
    assert f"Norm{SHOWN}" in modules


def test_report_on_a_colour_terminal_prints_only_its_own_colour_codes(traces):
    # GIVEN a console that believes it is a colour terminal (rich honours FORCE_COLOR): profuse's own
    # SGR colour codes (ESC [ ... m) are expected; once they are removed no ESC may be left
    import re

    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env.update(FORCE_COLOR="1", TERM="xterm-256color", COLUMNS="200")
    raw = subprocess.run([sys.executable, "-m", "profuse", "report", str(traces["a"]), "--no-cache"], env=env,
                         capture_output=True, check=True).stdout
    text = raw.decode()
    assert "\x1b[" in text, "the console coloured its output"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert_printable(plain)
    assert f"aten::evil{SHOWN}" in plain


def test_report_json_keeps_the_names_exactly(traces, capsys):
    out = run_cli(capsys, "report", str(traces["a"]), "--no-cache", "--format", "json")
    assert_printable(out)   # printed to a terminal as it is: C1 and bidi controls written as \uXXXX
    doc = json.loads(out)
    assert doc["trace"]["device_name"] == DEVICE
    assert OP in {r["name"] for r in doc["ops"]} and ANNOTATION in {r["name"] for r in doc["ops"]}
    assert any(c["scope"] == ANNOTATION for c in doc["fusion_candidates"])
    assert MODULE in {h["name"] for h in doc["hotspots"]}


def test_diff_table_and_markdown_show_names_escaped_and_json_keeps_them(traces, capsys):
    a, b = str(traces["a"]), str(traces["b"])
    table = run_cli(capsys, "diff", a, b, "--no-cache")
    assert_printable(table)
    assert f"CUDA (NVIDIA H100{SHOWN}, " in table
    # an op row (its name the table's first column, so at a line's start) and a module row, whole and escaped
    assert re.search(rf"(^| ){re.escape('aten::evil' + SHOWN)} ", table, re.MULTILINE), "an op row"
    assert re.search(rf"(^| ){re.escape('Norm' + SHOWN)} ", table, re.MULTILINE), "a module row"
    assert re.search(rf"(^| ){re.escape('ncclKernel_AllReduce' + SHOWN)} ", table, re.MULTILINE), "a kernel row"
    md = run_cli(capsys, "diff", a, b, "--no-cache", "--format", "markdown")
    assert_printable(md)
    assert f"| aten::evil{SHOWN} (64x4096) |" in md and f"on CUDA (NVIDIA H100{SHOWN}, " in md   # op and shapes
    d = json.loads(run_cli(capsys, "diff", a, b, "--no-cache", "--format", "json"))
    assert d["devices"] == {"a": DEVICE, "b": DEVICE}
    assert OP in {o["name"] for o in d["ops"]} and MODULE in {m["name"] for m in d["modules"]}
    assert COMM in {k["name"] for k in d["kernels"]}


def test_rank_report_shows_names_escaped_and_json_keeps_them(traces, capsys):
    work = ["--work-dir", str(traces["work"]), "--workers", "2", "--no-cache"]
    out = run_cli(capsys, "report", str(traces["ranks"]), *work)
    assert_printable(out)
    assert "2 ranks (named by distributedInfo)" in out
    # the op varying most across ranks, and the merged fusion scope: whole cells, escaped
    assert re.search(rf"(^|│ ){re.escape('annot' + SHOWN)} +│", out, re.MULTILINE), out
    doc = json.loads(run_cli(capsys, "report", str(traces["ranks"]), *work, "--format", "json"))
    assert ANNOTATION in {o["name"] for o in doc["varying_ops"]}
    assert ANNOTATION in {f["scope"] for f in doc["fusion"]}


def test_an_error_quoting_a_name_is_one_printable_line(tmp_path, capsys):
    # GIVEN a trace whose hostile kernel has no dur: the strict load names the event
    doc = hostile_trace(steps=1)
    next(e for e in doc["traceEvents"] if e["name"] == KERNEL).pop("dur")
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    assert main(["report", str(p), "--no-cache"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"profuse: {p}: ")
    assert_printable(err)
    assert "kern_evil" in err and "\\x1b]52;c;" in err


def test_a_section_that_forgets_text_still_prints_nothing_raw(traces):
    # GIVEN a new report section that prints a name as a raw rich Text (no text(), no safe()), on the
    # CLI's console and on a plain rich Console a library user might pass
    import profuse
    from profuse.payloads.report import analyse, report_view
    from profuse.report.console import SECTIONS, Section, print_report
    from profuse.report.terminal import make_console

    def careless(console: Console, view: Any) -> None:
        console.print(Text(f"careless: {view.document.trace.device_name}"))
        console.print(f"markup [bold]{view.document.ops[0].name}[/bold] :smile:", markup=False)

    with profuse.load(traces["a"], cache=False) as trace:
        view = report_view(analyse(trace), top=5)
    for make in (lambda buf: Console(file=buf, width=200, color_system=None),
                 lambda buf: make_console(file=buf, width=200)):
        buf = io.StringIO()
        print_report(make(buf), view, [*SECTIONS, Section("careless", lambda v: v, careless)])
        out = buf.getvalue()
        # THEN nothing raw is printed, and the name is shown escaped
        assert_printable(out)
        # (rich's Text drops BEL itself; every other control character is shown)
        assert "careless: NVIDIA H100" + SHOWN.replace("\\x07", "") in out.replace("\n", "")
