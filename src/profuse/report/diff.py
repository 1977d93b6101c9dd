"""``profuse diff`` rendered: the console tables, a pull-request comment (markdown) and JUnit XML.

Renderers only read the ``profuse.diff/2`` payload. Names from traces are shortened at their end
(never in the middle, where kernels of one template would read alike) and written as text: rich
``Text`` on the console, escaped in markdown and XML.
"""
from __future__ import annotations

import html
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.compare.diff import OpPair
from ..analysis.compare.significance import TEST, Verdict
from ..errors import printable
from ..payloads.diff import DiffPayload
from ._text import fmt_us, safe, text
from .terminal import renders_printable

NAME_WIDTH = 60


def shorten(name: str, width: int = NAME_WIDTH) -> str:
    """The name cut at its end ("…") to ``width`` characters; the JSON gives it whole."""
    return name if len(name) <= width else name[: width - 1] + "…"


def speed_words(a_us: float, b_us: float) -> str:
    """A's time over B's as a speed: "0.52x (1.92x slower)", "1.25x (1.25x faster)", "1.00x (same)"."""
    if not a_us or not b_us:
        return "n/a"
    s = a_us / b_us
    if round(s, 2) == 1.0:
        return f"{s:.2f}x (same)"
    return f"{s:.2f}x ({1 / s:.2f}x slower)" if s < 1 else f"{s:.2f}x ({s:.2f}x faster)"


def ratio_words(ratio: float | None) -> str:
    """B's time over A's, for one row: "1.92x slower", "0.52x (1.92x faster)"; "-" when A took no time."""
    if ratio is None:
        return "-"
    if round(ratio, 2) == 1.0:
        return "1.00x"
    if ratio == 0:
        return "0.00x"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{ratio:.2f}x ({1 / ratio:.2f}x faster)"


def row_ratio(o: OpPair) -> str:
    """One op row's B/A in words, or which run alone has it."""
    if not o.a_calls:
        return "only in B"
    if not o.b_calls:
        return "only in A"
    return ratio_words(o.ratio)


def _device(p: DiffPayload, side: str) -> str:
    s = p.sides[side]
    peaks = f", peaks: {s.peaks.source}" if s.peaks else ", no peaks"
    return f"{s.kind} ({s.device or 'device name not recorded'}{peaks})"


def verdict_line(v: Verdict) -> str:
    """One metric in words: medians, speed, verdict and the gate."""
    head = (f"{v.metric}: median {fmt_us(v.a_median_us)} ({v.a_steps} step(s)) -> {fmt_us(v.b_median_us)} "
            f"({v.b_steps} step(s)), {speed_words(v.a_median_us, v.b_median_us)}")
    if v.verdict == "cannot tell":
        tail = "cannot tell: too few steps for the test (4 a side at least)"
    else:
        tail = f"{v.verdict} (p = {v.p_value:.3g})"
    if v.threshold_pct is not None:
        tail += (f"; gate {v.threshold_pct:g}%: " +
                 ("FAIL, significantly slower beyond it" if v.fails else "pass"))
    return f"{head}: {tail}"


def _table(title: str, cols: tuple[str, ...]) -> Table:
    t = Table(title=title, show_edge=False, header_style="bold", title_justify="left")
    for c in cols:
        t.add_column(c, justify="left" if c in ("Name", "Module", "Shape") else "right", no_wrap=True)
    return t


@renders_printable
def print_diff(con: Console, p: DiffPayload, top: int | None) -> None:
    """The diff on the console: sides, verdicts, one-side-only things, then ops, modules, kernels, roofline."""
    con.print(Text(f"A: {safe(p.a)}\n   {safe(_device(p, 'a'))}\nB: {safe(p.b)}\n   {safe(_device(p, 'b'))}",
                   style="bold"))
    if not p.same_device:
        con.print(Text(f"different devices: {safe(p.devices.a or p.sides['a'].kind)} vs "
                       f"{safe(p.devices.b or p.sides['b'].kind)}: ops and modules matched, kernels not"))
    con.print(Text(f"device time {fmt_us(p.a_device_us)} -> {fmt_us(p.b_device_us)}: "
                   f"{speed_words(p.a_device_us, p.b_device_us)}"))
    for v in p.verdicts:
        con.print(Text(verdict_line(v), style="red" if v.fails else ""))
    matched = sum(1 for o in p.ops if o.matched)
    con.print(Text(f"ops matched (name, shapes, module instance): {matched}; "
                   f"{p.matched_device_pct.a:.1f}% of A's device time, {p.matched_device_pct.b:.1f}% of B's"))
    for side in ("a", "b"):
        o = p.only_in[side]
        bits = [f"{o.ops} op(s)"] if o.ops else []
        bits += [f"compiled region {safe(r)}" for r in o.compiled_regions]
        if o.graph_replay_kernels:
            bits.append(f"{o.graph_replay_kernels} graph-replayed kernel(s)")
        if o.fused_kernels:
            bits.append(f"{len(o.fused_kernels)} fused kernel name(s)")
        if bits:
            con.print(text(f"only in {side.upper()}: " + ", ".join(bits)))
    n = top or None
    t = _table("Ops", ("Name", "Module", "Calls A", "Calls B", "Time A", "Time B", "B/A"))
    for r in p.ops[:n]:
        t.add_row(text(shorten(r.name)), text(shorten(r.module, 24)), str(r.a_calls), str(r.b_calls),
                  fmt_us(r.a_us), fmt_us(r.b_us),
                  Text(row_ratio(r),
                       style="red" if (r.ratio or 0) > 1 else "green"))
    con.print(t)
    for title, rows in (("Modules", p.modules), ("Kernels", p.kernels)):
        if not rows:
            continue
        t = _table(title, ("Name", "Calls A", "Calls B", "Time A", "Time B", "Delta"))
        for m in rows[:n]:
            t.add_row(text(shorten(m.name)), str(m.a_calls), str(m.b_calls), fmt_us(m.a_us), fmt_us(m.b_us),
                      Text(f"{m.delta_us:+.1f} µs", style="green" if m.delta_us < 0 else "red"))
        con.print(t)
    if p.kernels:
        con.print(Text(f"{len(p.kernels_removed)} kernel name(s) removed, {len(p.kernels_added)} added"))
    if p.roofline:
        t = _table("Roofline of the ops both have (each on its own device's peaks)",
                   ("Name", "Time A", "Time B", "% roofline A", "% roofline B"))
        for f in p.roofline[:n]:
            t.add_row(text(shorten(f.name)), fmt_us(f.a_us), fmt_us(f.b_us), _pct(f.a_pct), _pct(f.b_pct))
        con.print(t)


def _pct(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.1f}%"


def _md(s: str) -> str:
    """Trace text in a markdown table cell: control characters shown as escapes (the comment is printed
    on a terminal too), HTML escaped, pipes and backticks neutralised."""
    return html.escape(printable(s), quote=True).replace("|", "&#124;").replace("`", "&#96;")


def _gate_head(verdicts: list[Verdict]) -> str:
    if any(v.fails for v in verdicts):
        return "❌ slower"
    return "✅ no significant slowdown" if any(v.threshold_pct is not None for v in verdicts) else "comparison"


def _verdict_table(verdicts: list[Verdict], unit: str = "steps") -> list[str]:
    out = [f"| metric | A median ({unit}) | B median ({unit}) | speed (A/B) | verdict | gate |",
           "| --- | ---: | ---: | --- | --- | --- |"]
    for v in verdicts:
        word = "cannot tell (too few to test)" if v.p_value is None else f"{v.verdict} (p = {v.p_value:.3g})"
        g = "" if v.threshold_pct is None else (
            f"**fail** (> {v.threshold_pct:g}%)" if v.fails else f"pass ({v.threshold_pct:g}%)")
        out.append(f"| {_md(v.metric)} | {fmt_us(v.a_median_us)} ({v.a_steps}) | {fmt_us(v.b_median_us)} ({v.b_steps}) "
                   f"| {speed_words(v.a_median_us, v.b_median_us)} | {word} | {g} |")
    return out


def markdown_folders(a: str, b: str, verdicts: list[Verdict]) -> str:
    """The pull-request comment for two folders of runs: one figure per trace, the verdicts."""
    return "\n".join([f"### profuse diff: {_gate_head(verdicts)}", "", f"A: `{_md(a)}`  ", f"B: `{_md(b)}`", "",
                      *_verdict_table(verdicts, "traces"), "", f"_{_md(TEST)}; one figure per trace_"])


def markdown(p: DiffPayload, top: int = 10) -> str:
    """A short pull-request comment: the gate, the verdicts, the devices and the largest op changes."""
    out = [f"### profuse diff: {_gate_head(p.verdicts)}", "",
           f"A: `{_md(p.a)}` on {_md(_device(p, 'a'))}  ", f"B: `{_md(p.b)}` on {_md(_device(p, 'b'))}", ""]
    if not p.same_device:
        out += ["Different devices: ops matched by name, shapes and module; kernels not compared.", ""]
    out += _verdict_table(p.verdicts)
    out += ["", f"Device time {fmt_us(p.a_device_us)} → {fmt_us(p.b_device_us)}: "
                f"{speed_words(p.a_device_us, p.b_device_us)}; matched ops hold {p.matched_device_pct.a:.1f}% "
                f"(A) and {p.matched_device_pct.b:.1f}% (B) of it.", ""]
    changed = sorted(p.ops, key=lambda o: -abs(o.delta_us))[:top]
    if changed:
        out += ["| op | module | A | B | B/A |", "| --- | --- | ---: | ---: | --- |"]
        for o in changed:
            out.append(f"| {_md(shorten(o.name))} | {_md(shorten(o.module, 24))} | {fmt_us(o.a_us)} | "
                       f"{fmt_us(o.b_us)} | {row_ratio(o)} |")
        out.append("")
    out.append(f"_{_md(p.test)}; full names and every row: `profuse diff --format json`_")
    return "\n".join(out)


def junit(p: DiffPayload) -> str:
    """JUnit XML of a two-trace diff (see :func:`junit_of`)."""
    return junit_of(p.verdicts, [("a", p.a), ("b", p.b), ("device_a", p.devices.a or p.sides["a"].kind),
                                 ("device_b", p.devices.b or p.sides["b"].kind), ("test", p.test)])


def junit_of(cases: list[Verdict], properties: list[tuple[str, str]]) -> str:
    """JUnit XML: one test case per metric; the gate's metric fails when B is significantly slower
    beyond the threshold, a metric too few steps can tell is skipped. ElementTree escapes every name."""
    suites = ET.Element("testsuites", name="profuse diff", tests=str(len(cases)),
                        failures=str(sum(v.fails for v in cases)), errors="0")
    suite = ET.SubElement(suites, "testsuite", name="profuse diff", tests=str(len(cases)),
                          failures=str(sum(v.fails for v in cases)), errors="0",
                          skipped=str(sum(v.verdict == "cannot tell" for v in cases)), time="0")
    props = ET.SubElement(suite, "properties")
    for k, val in properties:
        ET.SubElement(props, "property", name=k, value=safe(val))
    for v in cases:
        case = ET.SubElement(suite, "testcase", name=safe(v.metric), classname="profuse.diff",
                             time=f"{v.b_median_us / 1e6:.6f}")
        line = verdict_line(v)
        if v.fails:
            ET.SubElement(case, "failure", type="slower", message=safe(line)).text = safe(line)
        elif v.verdict == "cannot tell":
            ET.SubElement(case, "skipped", message=safe(line))
        ET.SubElement(case, "system-out").text = safe(line)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode")
