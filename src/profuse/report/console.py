"""Rich tables for the terminal: one function per section of the report, over the payload records every
renderer reads (payloads/report.py), in a registry (``SECTIONS``).

Names from the trace are shown through :func:`._text.text` (so tables are laid out on what is printed);
:func:`print_report` prints through :func:`.terminal.printable_on`, so no section can print a control
sequence from a trace even where it forgets."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msgspec import UnsetType
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.advice.hotspots import Hotspot
from ..analysis.busy import StepBusy
from ..analysis.compiled import NeffBrief
from ..analysis.health import Health
from ..payloads.ops import OpsRow as OpRow
from ..payloads.overview import Totals
from ..payloads.report import ReportDocument, ReportView
from ..trace.schema import not_linked
from ..units import fmt_us, fmt_us_or_dash
from ._text import safe, text
from .console_calltree import render_calltree
from .console_diagnosis import render_diagnosis
from .console_memory import fmt_bytes, render_memory
from .fit import Column, fitted_table, left_out_note, print_fitted, shorten_apart, shorten_middle
from .terminal import make_console as make_console  # where it was; the console alone needs no records
from .terminal import renders_printable

ADVICE_ROWS = 8  # rows of each advisor table
KERNEL_NAME_MIN = 32  # cells a compiled region's kernel name keeps, however narrow the terminal
HOTSPOT_NAME_MAX = 60  # cells of a hotspot's name: longer ones keep their head and tail (kernels differ at either)


def render_header(console: Console, view: ReportView) -> None:
    """The report's first lines: trace, device, events, span and device time (named by the device's label, as
    the explorer's Overview and the op table's columns name it: "CUDA time", "ROCm time", "CPU time")."""
    doc = view.document
    tr = doc.trace
    dev = safe(tr.device_kind + (f" ({tr.device_name})" if tr.device_name else ""))
    t = Text()
    t.append(f"{safe(tr.path)}\n", style="bold")
    t.append(f"{dev} · {tr.events:,} events · span {fmt_us(tr.span_us)} · "
             f"{safe(doc.device_label)} time {fmt_us(doc.totals.device_us)}{overlap_note(doc.totals)}")
    if view.from_cache:
        t.append(" · from cache", style="dim")
    console.print(t)


def overlap_note(totals: Totals) -> str:
    """After the summed device time: what of it overlaps (payloads ``Totals.overlap_us``), so it is not read as busy."""
    if not totals.overlap_us:
        return ""
    return (f" ({fmt_us(totals.overlap_us)} of it counted more than once where activities overlap: busy "
            f"{fmt_us(totals.device_us - totals.overlap_us)})")


def _steps_note(steps: list[StepBusy], cpu_only: bool) -> Text | None:
    """Every step of the step model (as many as trace health counts), with the range of their busy shares;
    a step with no device activity in its span has no share, and is named as such."""
    judged = [st for st in steps if st.busy_pct is not None]
    if not judged:
        return None
    pcts = sorted(st.busy_pct for st in judged if st.busy_pct is not None)
    if cpu_only:  # a step's window is its CPU time
        cpu = sorted(st.window_us for st in judged)
        return Text(f"{len(steps)} profiler step(s): {fmt_us(cpu[0])} to {fmt_us(cpu[-1])} of CPU time each, "
                    f"{pcts[0]:.0f}% to {pcts[-1]:.0f}% of it in ops or annotations (any thread)", style="dim")
    bound = sum(st.launch_bound for st in judged)
    waits = sum(st.unrecorded_us for st in judged)
    idle = len(steps) - len(judged)
    # the device-busy lines name what their shares are of: not the budget's span (a step's host span, or the
    # active window), whose shares differ where the device starts late or ends early
    return Text(f"{len(steps)} profiler step(s): device busy {pcts[0]:.1f}% to {pcts[-1]:.1f}% of each step "
                + ("with device activity " if idle else "")
                + "from its first device activity to its last"
                + (f" less its unrecorded wait ({fmt_us(waits)} in all)" if waits else "")
                + (f"; {idle} with none in its span" if idle else "")
                + (f"; {bound} launch-bound" if bound else ""), style="dim")


def notes(doc: ReportDocument) -> list[Text]:
    """Warnings the reader must see before trusting the table (capture status, unlinked events, ...)."""
    out = []
    cap = doc.capture
    if cap is not None and cap.status != "complete":
        why = f": {cap.error}" if cap.error else ""  # redacted in the document unless kept
        out.append(text(f"This bundle's capture {cap.status}{why}", style="red"))
    elif cap is not None and cap.script_exit_code:
        why = f" ({cap.error})" if cap.error else ""
        out.append(text(f"The profiled script exited with code {cap.script_exit_code}{why}; the capture "
                        "is complete", style="yellow"))
    if cap is not None and cap.overhead is not None:
        out.append(Text(f"Capture overhead: a recorded step took {cap.overhead:.2f}x the fastest steady call without "
                        "the profiler (profuse run); the budget's host time includes it", style="yellow"
                        if cap.overhead > 1.5 else "dim"))
    if doc.cpu_only:
        out.append(Text("CPU-only trace: the CPU is the device, so device time is each op's self CPU time.",
                        style="yellow"))
    elif doc.totals.kernels:
        out.append(Text(f"{doc.totals.kernels_linked:,} of {doc.totals.kernels:,} device events linked to the op "
                        "that launched them.", style="dim"))
    busy = doc.device_busy
    if busy is not None and busy.busy_pct is not None:
        waits = (f"; {fmt_us(busy.unrecorded_us)} of it an unrecorded wait, not shown idle, left out of the %"
                 if busy.unrecorded_us else "")
        out.append(Text(f"Device busy {fmt_us(busy.busy_us)} of the {fmt_us(busy.window_us)} from the first device "
                        f"activity to the last ({busy.busy_pct:.1f}%, union over every stream{waits}).", style="dim"))
    steps = _steps_note(doc.steps, doc.device_busy is None)
    if steps is not None:
        out.append(steps)
    for reason, n in sorted(doc.totals.unlinked.items(), key=lambda kv: -kv[1]):
        out.append(text(f"  {n:,} {not_linked(reason)}", style="yellow"))
    if doc.skipped:
        what = ", ".join(f"{n:,} {r}" for r, n in doc.skipped.items())
        out.append(text(f"--lenient skipped events: {what}", style="red"))
    return out


def render_notes(console: Console, view: ReportView) -> None:
    """The notes under the header."""
    for n in notes(view.document):
        console.print(n)


def render_health(console: Console, h: Health) -> None:
    """Trace health: one line of counts, then each finding with its effect and a better capture."""
    linked = "all" if h.linked == h.device_activities else f"{h.linked:,}"
    line = (f"Trace health: {h.device_activities:,} device activities ({linked} with their launch call), "
            f"{h.launch_calls:,} launch calls; steps: {h.steps} ({h.steps_from})")
    console.print(text(line, style="dim" if not h.findings else ""))
    for f in h.findings:
        console.print(text(f"  ! {f.text}: {f.effect}", style="yellow"))
        console.print(text(f"    next capture: {f.fix}", style="dim"))


def _op_columns(doc: ReportDocument, memory: bool) -> list[Column]:
    """The op table's columns, each with how long it is kept as the terminal narrows (higher: longer)."""
    dev = doc.device_label
    first = {"op": "Name", "shape": "Name", "module": "Module", "kernel": "Kernel"}[doc.group_by]
    cols = [Column(first, name=True)]
    if doc.group_by == "shape":
        cols.append(Column("Input shapes", name=True))
    # a CPU-only trace's device is the CPU: its columns once, and no kernels
    if doc.cpu_only:
        cols += [Column("Calls", keep=5), Column("Self CPU", keep=4), Column("CPU total", keep=2),
                 Column("CPU %", keep=3), Column("Avg CPU", keep=1)]
    else:
        cols += [Column("Calls", keep=5), Column("Self CPU", keep=2), Column("CPU total", keep=1),
                 Column(f"Self {dev}", keep=6), Column(f"{dev} total", keep=3), Column(f"{dev} %", keep=4),
                 Column(f"Avg {dev}", keep=2), Column("Kernels", keep=1)]
    if memory:
        mem = ("CPU Mem", "Self CPU Mem") if doc.cpu_only else ("CPU Mem", "Self CPU Mem", f"{dev} Mem",
                                                                f"Self {dev} Mem")
        cols += [Column(c, keep=0) for c in mem]
    return cols


def _op_row(doc: ReportDocument, r: OpRow, memory: bool) -> list[Text | str]:
    cells: list[Text | str] = [text(r.name)]  # Text(): names from traces are never parsed as markup
    if doc.group_by == "shape":
        cells.append(text(r.shape or ""))
    base = doc.totals.device_us
    pct = 100.0 * r.self_device_us / base if base else 0.0
    figures = [f"{r.calls:,}", fmt_us_or_dash(r.self_cpu_us), fmt_us_or_dash(r.cpu_total_us), f"{pct:.1f}%",
               fmt_us(r.avg_device_us)]
    if not doc.cpu_only:
        figures[3:3] = [fmt_us(r.self_device_us), fmt_us(r.device_total_us)]
        figures.append(f"{r.kernels:,}")
    if memory:
        figures += [fmt_bytes(r.cpu_mem_bytes), fmt_bytes(r.self_cpu_mem_bytes)]
        if not doc.cpu_only:
            figures += [fmt_bytes(r.device_mem_bytes), fmt_bytes(r.self_device_mem_bytes)]
    # the figures' cells are Text, so rich does not parse them for markup and emoji
    return cells + [Text(f) for f in figures]


def op_table_renderable(console: Console, doc: ReportDocument, top: int | None) -> tuple[Table, list[str]]:
    """The op table's first ``top`` rows as a rich Table that fits ``console``, and the columns left out."""
    memory = bool(doc.ops) and doc.ops[0].cpu_mem_bytes is not None  # the trace has memory events
    rows = [_op_row(doc, r, memory) for r in (doc.ops[:top] if top else doc.ops)]
    return fitted_table(console, _op_columns(doc, memory), rows)


def render_op_table(console: Console, view: ReportView) -> None:
    """The op table's first ``view.top`` rows (None: all), and how many were left out."""
    doc, top = view.document, view.top
    if not doc.ops and doc.group_by == "module":
        console.print(Text("No nn.Module scopes in this trace, so there is nothing to group by module: record "
                           "with python stacks (torch.profiler with_stack=True, or profuse's default streams).",
                           style="yellow"))
        return
    table, dropped = op_table_renderable(console, doc, top)
    console.print(table)
    note = left_out_note(dropped)
    if note is not None:
        console.print(note)
    shown = min(top or len(doc.ops), len(doc.ops))
    if shown < len(doc.ops):
        console.print(Text(f"{shown} of {len(doc.ops)} rows; --top N shows more, --format json shows all.",
                           style="dim"))


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def render_fusion(console: Console, view: ReportView) -> None:
    """Fusion candidates: the table and the first three recommendations."""
    cands = view.document.fusion_candidates
    if isinstance(cands, UnsetType) or not cands:
        return
    console.print(_section("Fusion candidates"))
    cols = [Column("Pattern", name=True), Column("Scope", name=True), Column("Calls", keep=3),
            Column("Kernels/call", keep=1), Column(f"{view.document.device_label} time", keep=4),
            Column("Bytes now -> fused", keep=0), Column("Predicted saving", keep=5),
            Column("Saving model", left=True, keep=1), Column("Confidence", left=True, keep=2)]
    print_fitted(console, cols, [
        [text(c.pattern), text(c.scope), str(c.instances), f"{c.kernels_per_instance:g}", fmt_us(c.device_us),
         f"{c.bytes_now / 1e6:.1f} -> {c.bytes_fused / 1e6:.1f} MB" if c.bytes_now else "not recorded",
         fmt_us(c.predicted_saving_us), c.saving_model, c.confidence]
        for c in cands[:ADVICE_ROWS]])
    for cand in cands[:3]:
        console.print(text(f"  {cand.pattern} in {cand.scope}: {cand.recommendation}", style="cyan"))


def render_interruptions(console: Console, view: ReportView) -> None:
    """Scopes whose kernels leave the device idle, launch-bound ones flagged, and clock-skewed launches."""
    interruptions, skewed = view.document.interruptions, view.document.skewed_launches
    if isinstance(interruptions, UnsetType) or not interruptions:
        return
    console.print(_section("Interruptions (device idle between a scope's kernels)"))
    # the time budget's unrecorded waits, where a scope's window holds any: never called idle
    waits = any(i.unrecorded_us for i in interruptions[:ADVICE_ROWS])
    cols = [Column("Scope", name=True), Column("Calls", keep=3), Column("Kernels/call", keep=1),
            Column("Busy", keep=2), Column("Idle", keep=4), *([Column("Unrecorded", keep=4)] if waits else []),
            Column("Busy %", keep=3), Column("Launch CPU", keep=0), Column("Queue delay", keep=0),
            Column("", left=True, keep=5)]
    print_fitted(console, cols, [
        [text(i.scope), str(i.instances), f"{i.kernels_per_instance:g}", fmt_us(i.busy_us), fmt_us(i.idle_us),
         *([fmt_us(i.unrecorded_us)] if waits else []), f"{i.busy_pct:.0f}%", fmt_us(i.launch_us),
         fmt_us(i.queue_delay_us), Text("launch-bound", style="yellow") if i.launch_bound else ""]
        for i in interruptions[:ADVICE_ROWS]])
    bound = [i for i in interruptions if i.launch_bound]
    if bound:
        console.print(Text(f"  {len(bound)} launch-bound scope(s): many short kernels with gaps; CUDA/HIP graphs "
                           "(torch.compile mode=\"reduce-overhead\") remove the launch gaps, fusion removes kernels "
                           "(see the levers above).", style="yellow"))
    if not isinstance(skewed, UnsetType) and skewed:
        console.print(Text(f"  clock skew: {skewed:,} device activities start before their launch call; they are "
                           "left out of queue delays", style="yellow"))


def render_compiled(console: Console, view: ReportView) -> None:
    """torch.compile regions with their kernels and graph breaks, then any NEFF beside the trace."""
    comp = view.document.compiled
    if isinstance(comp, UnsetType):
        return
    device = view.document.device_label
    if comp.regions:
        console.print(_section("Compiled regions"))
        for r in comp.regions:
            events = f"{r.device_events:,} device event(s)" + (f" ({r.replayed:,} replayed)" if r.replayed else "")
            console.print(text(f"  {r.name}: {r.calls} call(s), {fmt_us(r.device_us)} {device}, "
                               + (f"{events}, " if r.device_events else "") + f"{len(r.kernels)} distinct kernel(s)"))
            for k in r.kernels[:ADVICE_ROWS]:
                what = f"fuses {', '.join(k.fused_ops)}" if k.fused_ops else "extern (not generated)"
                # a kernel's name on its own line's first half (Tensile's run to 500 characters): whole in JSON
                name = shorten_middle(safe(k.name), max(KERNEL_NAME_MIN, console.width // 2))
                console.print(text(f"    {name}  {fmt_us(k.device_us)}  {what}"))
            if r.eager_ops_inside:
                console.print(text(f"    extern (not fused): {', '.join(r.eager_ops_inside)}", style="dim"))
        if comp.generated_kernels:
            console.print(text(f"  generated code saved in the bundle: {', '.join(comp.generated_kernels[:6])}",
                               style="dim"))
        console.print(text(f"  graph breaks: {comp.graph_breaks}"
                           + (f" (eager between regions: {', '.join(comp.eager_between[:6])})"
                              if comp.eager_between else "")))
    for n in comp.neffs:
        _print_neff(console, n)


def render_roofline(console: Console, view: ReportView) -> None:
    """Each op's arithmetic intensity, bound and share of the roofline."""
    rows_in, peaks, note = view.document.roofline, view.document.peaks, view.document.roofline_note
    if isinstance(rows_in, UnsetType):
        return
    if not rows_in:
        if isinstance(note, str) and note:
            console.print(_section("Roofline"))
            console.print(text(f"  {note}", style="yellow"))
        return
    src = peaks.source if peaks is not None and not isinstance(peaks, UnsetType) else ""
    console.print(_section(f"Roofline ({safe(src)})"))
    cols = [Column("Op", name=True), Column("Calls", keep=2), Column("Time", keep=5), Column("GFLOP", keep=1),
            Column("MB", keep=1), Column("FLOP/byte", keep=3), Column("Bound", left=True, keep=4),
            Column("% of roofline", keep=4)]
    rows: list[list[Text | str]] = []
    for row in rows_in[:ADVICE_ROWS]:
        known = row.gflop is not None and row.mbytes is not None and row.intensity is not None
        rows.append([text(row.name), str(row.calls), fmt_us(row.time_us),
                     f"{row.gflop:.3f}" if known else "unknown", f"{row.mbytes:.1f}" if known else "unknown",
                     f"{row.intensity:.2f}" if known else "unknown", row.bound,
                     "unknown" if row.pct_of_roofline is None else f"{row.pct_of_roofline:.0f}%"])
    print_fitted(console, cols, rows)


def render_hotspots(console: Console, hotspots: list[Hotspot]) -> None:
    """The five largest ops, modules and kernels by share of device time, one line each kind."""
    if not hotspots:
        return
    console.print(_section("Hotspots"))
    for kind in ("op", "module", "kernel"):
        hs = [h for h in hotspots if h.kind == kind][:5]
        if hs:
            shown = shorten_apart([h.name for h in hs], HOTSPOT_NAME_MAX)
            line = "; ".join(f"{name} {h.share_pct:.0f}%" for name, h in zip(shown, hs))
            console.print(text(f"  {kind}s: {line}"))


@dataclass(frozen=True)
class Section:
    """One console section: ``select`` picks its payload from the report's records (None or UNSET: the
    section is left out, as with ``--no-advice``), ``render`` prints it."""

    name: str
    select: Callable[[ReportView], Any]
    render: Callable[[Console, Any], None]


def _whole(view: ReportView) -> ReportView:
    return view


# The report's sections in print order. A new section is one line here: its payload (a field of
# ReportDocument, built in payloads/) and its renderer (docs/architecture.md, "Adding a section").
# The advisor's sections read fields that --no-advice leaves UNSET, so they drop out by themselves.
SECTIONS: list[Section] = [
    Section("header", _whole, render_header),
    Section("diagnosis", lambda v: v.document.diagnosis, render_diagnosis),  # the report opens with it
    Section("notes", _whole, render_notes),
    Section("health", lambda v: v.document.health, render_health),
    Section("ops", _whole, render_op_table),
    Section("memory", lambda v: v.document.memory, render_memory),
    Section("calltree", lambda v: v.document.calltree, render_calltree),
    Section("fusion_candidates", _whole, render_fusion),
    Section("interruptions", _whole, render_interruptions),
    Section("compiled", _whole, render_compiled),
    Section("roofline", _whole, render_roofline),
    Section("hotspots", lambda v: v.document.hotspots, render_hotspots),
]


@renders_printable
def print_report(console: Console, view: ReportView, sections: list[Section] | None = None) -> None:
    """Print every section (default :data:`SECTIONS`) whose payload the report's records hold."""
    for s in SECTIONS if sections is None else sections:
        payload = s.select(view)
        if payload is not None and not isinstance(payload, UnsetType):
            s.render(console, payload)


def _print_neff(console: Console, n: NeffBrief) -> None:
    """A NEFF beside the trace: the compiled graph's engines, HLO statistics and top instruction sources.

    Every string here comes from the NEFF: shown through :func:`._text.text`, never as markup."""
    from .neff import number

    console.print(_section(f"Compiled NEFF {safe(n.file)}"))
    if n.error:
        console.print(text(f"  not read: {n.error}", style="yellow"))
        return
    s = n.hlo_stats
    console.print(text(f"  {n.subgraphs} subgraph(s) · HLO MACs {number(s.get('macs'))} · traffic "
                       f"{number(s.get('traffic'))} · arithmetic intensity {number(s.get('arithmetic_intensity'))}"))
    console.print(text("  engines: " + ", ".join(f"{e['name']} {number(e['instructions'])} instr / "
                                                 f"{number(e['bytes'])} B" for e in n.engines)))
    for m in n.sources[:5]:
        console.print(text(f"    {m['engine']}: {m['instructions']:,} instr from {m['hlo'] or '-'}"
                           f" ({m['framework'] or '-'})", style="dim"))
