"""``profuse diff`` rendered: the console tables, a pull-request comment (markdown) and JUnit XML.

Renderers only read the ``profuse.diff/2`` payload. The console's tables fit the terminal (report/fit.py):
op names and shapes shortened in the middle, figure columns dropped before anything wraps; kernel names
are cut at their end first (never in the middle alone, where kernels of one template would read alike).
Names from traces are written as text: rich ``Text`` on the console, escaped in markdown and XML. A
change is printed as :func:`signed_us` writes it, which the explorer's Compare view matches.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.text import Text

from ..analysis.compare.diff import DiffRow, OpGroup
from ..analysis.compare.significance import TEST, Verdict
from ..errors import printable
from ..payloads.diff import DiffPayload
from ..units import fmt_us, to_fixed
from ._text import safe, signed_us, text
from .fit import Cell, Column, print_fitted, shorten_middle
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


def _aside(note: str) -> str:
    """A note in brackets after a headline (the payload's ``totals_note``), or nothing."""
    return f" ({note})" if note else ""


def ratio_words(ratio: float | None) -> str:
    """B's time over A's, for one row: "1.92x slower", "0.52x (1.92x faster)"; "-" when A took no time."""
    if ratio is None:
        return "-"
    if round(ratio, 2) == 1.0:
        return "1.00x"
    if ratio == 0:
        return "0.00x"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{ratio:.2f}x ({1 / ratio:.2f}x faster)"


def factor_words(ratio: float | None) -> str:
    """B's time over A's as one factor that says which way: "1.92x slower", "1.92x faster", "1.00x";
    "-" when A took no time (figures as :func:`to_fixed` writes them)."""
    if ratio is None:
        return "-"
    if to_fixed(ratio, 2) == "1.00":
        return "1.00x"
    if ratio == 0:
        return "0.00x"
    return f"{to_fixed(ratio, 2)}x slower" if ratio > 1 else f"{to_fixed(1 / ratio, 2)}x faster"


def row_ratio(o: DiffRow) -> str:
    """One row's B/A (:func:`factor_words`), or which run alone has it."""
    if not o.a_calls:
        return "only in B"
    if not o.b_calls:
        return "only in A"
    return factor_words(o.ratio)


def shapes_text(shape: str) -> str:
    """Recorded input shapes, short: each tensor's dims joined by "x", a scalar or None "-", trailing
    ones left out: ``[[512], [141, 512], [512, 512], [], []]`` -> "512, 141x512, 512x512"."""
    try:
        dims = json.loads(shape) if shape else []
    except ValueError:
        return shape
    if not isinstance(dims, list):
        return shape
    while dims and dims[-1] in ([], None):
        dims.pop()
    return ", ".join("x".join(_dim(x) for x in d) if isinstance(d, list) and d else "-" for d in dims)


def _dim(x: object) -> str:
    """One recorded dimension as the explorer writes it: a number as is, anything else as compact JSON."""
    return str(x) if isinstance(x, int) and not isinstance(x, bool) else json.dumps(x, separators=(",", ":"))


_INSTANCE = re.compile(r"_[0-9]+$")   # Linear_25 -> Linear


def group_name(g: OpGroup) -> str:
    """An op group's name: the op, or for a pair matched by class A's op and B's ("A → B")."""
    return g.name if g.matched_by != "class" else f"{g.name} → {g.b_name}"


def modules_text(g: OpGroup) -> str:
    """Where an op group ran: its one module instance ("Linear_25"), else how many and their class when
    they share one ("26× Linear"), else how many ("5 modules")."""
    if g.instances == 1:
        return g.by_module[0].module or "-"
    classes = {_INSTANCE.sub("", m.module) for m in g.by_module}
    return f"{g.instances}× {classes.pop()}" if len(classes) == 1 and "" not in classes else f"{g.instances} modules"


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


MODULES_WIDTH = 24  # the Modules column's cells, shortened in the middle beyond this


def _head(con: Console, p: DiffPayload) -> None:
    """The sides, devices, device time, verdicts, what was matched and what one side alone has."""
    con.print(Text(f"A: {safe(p.a)}\n   {safe(_device(p, 'a'))}\nB: {safe(p.b)}\n   {safe(_device(p, 'b'))}",
                   style="bold"))
    if not p.same_device:
        con.print(Text(f"different devices: {safe(p.devices.a or p.sides['a'].kind)} vs "
                       f"{safe(p.devices.b or p.sides['b'].kind)}: ops and modules matched, kernels not "
                       "(kernel classes: the budget)"))
    con.print(Text(f"device time {fmt_us(p.a_device_us)} -> {fmt_us(p.b_device_us)}: "
                   f"{speed_words(p.a_device_us, p.b_device_us)}{_aside(p.totals_note)}"))
    for v in p.verdicts:
        con.print(Text(verdict_line(v), style="red" if v.fails else ""))
    by = {k: sum(1 for g in p.op_groups if g.matched_by == k) for k in ("name", "class")}
    con.print(Text(f"op groups (name, shapes) matched: {by['name']} by name, {by['class']} by class; "
                   f"{p.matched_device_pct.a:.1f}% of A's device time, {p.matched_device_pct.b:.1f}% of B's"))
    for side in ("a", "b"):
        o = p.only_in[side]
        bits = [f"{o.op_groups} op group(s)"] if o.op_groups else []
        bits += [f"compiled region {safe(r)}" for r in o.compiled_regions]
        if o.graph_replay_kernels:
            bits.append(f"{o.graph_replay_kernels} graph-replayed kernel(s)")
        if o.fused_kernels:
            bits.append(f"{len(o.fused_kernels)} fused kernel name(s)")
        if bits:
            con.print(text(f"only in {side.upper()}: " + ", ".join(bits)))


def _delta(us: float) -> Text:
    return Text(signed_us(us), style="green" if us < 0 else "red" if us > 0 else "")


def _groups(con: Console, p: DiffPayload, n: int | None) -> None:
    """One row per op and shapes, largest change first, its module instances counted."""
    cols = [Column("Op", name=True), Column("Shapes", name=True), Column("Modules", left=True, keep=1),
            Column("Calls A"), Column("Calls B"), Column("Time A", keep=2), Column("Time B", keep=2),
            Column("Delta", keep=None), Column("B/A", keep=3)]
    rows: list[Sequence[Cell]] = [
        [text(group_name(g)), text(shapes_text(g.shape)), text(shorten_middle(safe(modules_text(g)), MODULES_WIDTH)),
         str(g.a_calls), str(g.b_calls), fmt_us(g.a_us), fmt_us(g.b_us), _delta(g.delta_us),
         Text(row_ratio(g), style="red" if (g.ratio or 0) > 1 else "green")] for g in p.op_groups[:n]]
    print_fitted(con, cols, rows, title="Ops, by name and shapes (module instances: --format json)")
    shown = len(rows)
    if shown < len(p.op_groups):
        con.print(Text(f"{shown} of {len(p.op_groups)} op groups; --top N shows more, --format json all "
                       "and each group's module instances", style="dim"))


@renders_printable
def print_diff(con: Console, p: DiffPayload, top: int | None) -> None:
    """The diff on the console, each table fitted to its width: sides, verdicts, one-side-only things,
    then op groups, modules, kernels, roofline."""
    _head(con, p)
    n = top or None
    _groups(con, p, n)
    for title, rows, width in (("Modules", p.modules, None), ("Kernels", p.kernels, NAME_WIDTH)):
        if not rows:
            continue
        cols = [Column("Name", name=True), Column("Calls A"), Column("Calls B"), Column("Time A", keep=2),
                Column("Time B", keep=2), Column("Delta", keep=None)]
        print_fitted(con, cols, [[text(shorten(m.name, width or len(m.name))), str(m.a_calls),
                                  str(m.b_calls), fmt_us(m.a_us), fmt_us(m.b_us), _delta(m.delta_us)]
                                 for m in rows[:n]], title=title)
    if p.kernels:
        con.print(Text(f"{len(p.kernels_removed)} kernel name(s) removed, {len(p.kernels_added)} added"))
    if p.roofline:
        cols = [Column("Name", name=True), Column("Time A", keep=2), Column("Time B", keep=2),
                Column("% roofline A", keep=1), Column("% roofline B", keep=1)]
        print_fitted(con, cols, [[text(f.name), fmt_us(f.a_us), fmt_us(f.b_us), _pct(f.a_pct), _pct(f.b_pct)]
                                 for f in p.roofline[:n]],
                     title="Roofline of the ops both have (each on its own device's peaks)")


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
        out += ["Different devices: ops matched by name and shapes (attention and GEMM variants by class); "
                "kernels not compared.", ""]
    out += _verdict_table(p.verdicts)
    out += ["", f"Device time {fmt_us(p.a_device_us)} → {fmt_us(p.b_device_us)}: "
                f"{speed_words(p.a_device_us, p.b_device_us)}{_aside(p.totals_note)}; matched ops hold "
                f"{p.matched_device_pct.a:.1f}% (A) and {p.matched_device_pct.b:.1f}% (B) of it.", ""]
    changed = p.op_groups[:top]   # largest change first
    if changed:
        out += ["| op (shapes) | modules | A → B | delta | B/A |", "| --- | --- | --- | ---: | --- |"]
        for g in changed:
            out.append(f"| {_md(shorten(group_name(g)))} ({_md(shorten(shapes_text(g.shape), 40))}) | "
                       f"{_md(shorten(modules_text(g), 24))} | {fmt_us(g.a_us)} → {fmt_us(g.b_us)} | "
                       f"{signed_us(g.delta_us)} | {row_ratio(g)} |")
        out.append("")
    out.append(f"_{_md(p.test)}; full names, every group and its module instances: `profuse diff --format json`_")
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
