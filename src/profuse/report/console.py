"""Rich tables for the terminal."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import OpTable, Summary
from ..analysis.compiled import NeffBrief
from ..analysis.findings import Findings
from ..redact import redact_text
from ..trace.schema import UNLINKED_REASONS
from ._text import safe, text
from .console_memory import fmt_bytes


def make_console() -> Console:
    """Stdout console; wide when piped so names are not folded into unreadable columns."""
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def fmt_us(us: float) -> str:
    """A duration in µs in the largest unit that keeps it readable (s, ms, µs)."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def header(summary: Summary) -> Text:
    """The report's first lines: trace, device, events, span and linked device events."""
    dev = summary.device_kind + (f" ({summary.device_name})" if summary.device_name else "")
    t = Text()
    t.append(f"{safe(summary.path)}\n", style="bold")
    t.append(f"{dev} · {summary.events:,} events · span {fmt_us(summary.span_us)} · "
             f"device time {fmt_us(summary.device_us)}")
    if summary.from_cache:
        t.append(" · from cache", style="dim")
    return t


def notes(summary: Summary, table: OpTable) -> list[Text]:
    """Warnings the reader must see before trusting the table (capture status, unlinked events, ...)."""
    out = []
    if summary.bundle_status not in (None, "complete"):
        why = f": {redact_text(summary.bundle_error)}" if summary.bundle_error else ""
        out.append(Text(f"This bundle's capture {summary.bundle_status}{why}", style="red"))
    elif summary.script_exit_code:
        why = f" ({redact_text(summary.bundle_error)})" if summary.bundle_error else ""
        out.append(Text(f"The profiled script exited with code {summary.script_exit_code}{why}; the capture "
                        "is complete", style="yellow"))
    if table.cpu_only:
        out.append(Text("CPU-only trace: the CPU is the device, so device time is each op's self CPU time.",
                        style="yellow"))
    elif summary.kernels:
        out.append(Text(f"{summary.kernels_linked:,} of {summary.kernels:,} device events linked to the op "
                        "that launched them.", style="dim"))
    busy = summary.device_busy
    if busy is not None and busy.busy_pct is not None:
        out.append(Text(f"Device busy {fmt_us(busy.busy_us)} of a {fmt_us(busy.window_us)} window "
                        f"({busy.busy_pct:.1f}%, union over every stream).", style="dim"))
    judged = [st for st in summary.steps if st.busy_pct is not None]
    if judged and summary.device_busy is None:  # CPU-only: a step's window is its CPU time
        cpu = sorted(st.window_us for st in judged)
        pcts = sorted(st.busy_pct for st in judged if st.busy_pct is not None)
        out.append(Text(f"{len(judged)} profiler step(s): {fmt_us(cpu[0])} to {fmt_us(cpu[-1])} of CPU time each, "
                        f"{pcts[0]:.0f}% to {pcts[-1]:.0f}% of it in ops", style="dim"))
    elif judged:
        pcts = sorted(st.busy_pct for st in judged if st.busy_pct is not None)
        bound = sum(st.launch_bound for st in judged)
        out.append(Text(f"{len(judged)} profiler step(s): device busy {pcts[0]:.1f}% to {pcts[-1]:.1f}% of each "
                        f"step's window" + (f"; {bound} launch-bound" if bound else ""), style="dim"))
    for reason, n in sorted(summary.unlinked.items(), key=lambda kv: -kv[1]):
        out.append(Text(f"  {n:,} not linked: {UNLINKED_REASONS.get(reason, reason)}", style="yellow"))
    if summary.skipped:
        what = ", ".join(f"{n:,} {r}" for r, n in summary.skipped.items())
        out.append(Text(f"--lenient skipped events: {what}", style="red"))
    return out


def op_table_renderable(table: OpTable, top: int | None) -> Table:
    """The op table as a rich Table, the first ``top`` rows."""
    dev = table.device_label
    first = {"op": "Name", "shape": "Name", "module": "Module", "kernel": "Kernel"}[table.group_by]
    t = Table(show_edge=False, header_style="bold", pad_edge=False)
    t.add_column(first, overflow="fold", max_width=70)
    if table.group_by == "shape":
        t.add_column("Input shapes", overflow="fold", max_width=40)
    for col in ("Calls", "Self CPU", "CPU total", f"Self {dev}", f"{dev} total", f"{dev} %", f"Avg {dev}", "Kernels"):
        t.add_column(col, justify="right")
    memory = bool(table.rows) and table.rows[0].cpu_mem_bytes is not None  # the trace has memory events
    if memory:
        for col in ("CPU Mem", "Self CPU Mem", f"{dev} Mem", f"Self {dev} Mem"):
            t.add_column(col, justify="right")
    for r in table.rows[:top] if top else table.rows:
        cells: list[Text | str] = [text(r.name)]  # Text(): names from traces are never parsed as markup
        if table.group_by == "shape":
            cells.append(text(r.shape or ""))
        cells += [f"{r.calls:,}", fmt_us(r.self_cpu_us), fmt_us(r.cpu_total_us), fmt_us(r.self_device_us),
                  fmt_us(r.device_total_us), f"{table.pct(r):.1f}%", fmt_us(r.avg_device_us), f"{r.kernels:,}"]
        if memory:
            cells += [fmt_bytes(r.cpu_mem_bytes), fmt_bytes(r.self_cpu_mem_bytes), fmt_bytes(r.device_mem_bytes),
                      fmt_bytes(r.self_device_mem_bytes)]
        t.add_row(*cells)
    return t


def print_report(console: Console, summary: Summary, table: OpTable, top: int | None) -> None:
    """Print the header, the notes and the op table."""
    console.print(header(summary))
    for n in notes(summary, table):
        console.print(n)
    if not table.rows and table.group_by == "module":
        console.print(Text("No nn.Module scopes in this trace, so there is nothing to group by module: record "
                           "with python stacks (torch.profiler with_stack=True, or profuse's default streams).",
                           style="yellow"))
        return
    console.print(op_table_renderable(table, top))
    shown = min(top or len(table.rows), len(table.rows))
    if shown < len(table.rows):
        console.print(Text(f"{shown} of {len(table.rows)} rows; --top N shows more, --format json shows all.",
                           style="dim"))


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def print_advice(console: Console, advice: Findings, device: str, top: int = 8) -> None:
    """Hotspots, interruptions, fusion candidates, compiled regions and roofline, most useful first."""
    if advice.fusion_candidates:
        console.print(_section("Fusion candidates"))
        t = Table(show_edge=False, header_style="bold", pad_edge=False)
        for col in ("Pattern", "Scope", "Calls", "Kernels/call", f"{device} time", "Bytes now -> fused",
                  "Predicted saving", "Confidence"):
            t.add_column(col, justify="left" if col in ("Pattern", "Scope", "Confidence") else "right",
                         overflow="fold", max_width=44)
        for cand in advice.fusion_candidates[:top]:
            t.add_row(text(cand.pattern), text(cand.scope), str(cand.instances), f"{cand.kernels_per_instance:g}",
                      fmt_us(cand.device_us), f"{cand.bytes_now / 1e6:.1f} -> {cand.bytes_fused / 1e6:.1f} MB",
                      fmt_us(cand.predicted_saving_us), cand.confidence)
        console.print(t)
        for cand in advice.fusion_candidates[:3]:
            console.print(Text(f"  {cand.pattern} in {cand.scope}: {cand.recommendation}", style="cyan"))
    bound = [i for i in advice.interruptions if i.launch_bound]
    if advice.interruptions:
        console.print(_section("Interruptions (device idle between a scope's kernels)"))
        t = Table(show_edge=False, header_style="bold", pad_edge=False)
        for c in ("Scope", "Calls", "Kernels/call", "Busy", "Idle", "Busy %", "Launch CPU", "Queue delay", ""):
            t.add_column(c, justify="left" if c in ("Scope", "") else "right", overflow="fold", max_width=50)
        for i in advice.interruptions[:top]:
            t.add_row(text(i.scope), str(i.instances), f"{i.kernels_per_instance:g}", fmt_us(i.busy_us),
                      fmt_us(i.idle_us), f"{i.busy_pct:.0f}%", fmt_us(i.launch_us), fmt_us(i.queue_delay_us),
                      Text("launch-bound", style="yellow") if i.launch_bound else "")
        console.print(t)
        if bound:
            console.print(Text(f"  {len(bound)} launch-bound scope(s): many short kernels with gaps; fusing "
                               "them removes the gaps.", style="yellow"))
        if advice.skewed_launches:
            console.print(Text(f"  clock skew: {advice.skewed_launches:,} device activities start before their "
                               "launch call; they are left out of queue delays", style="yellow"))
    comp = advice.compiled
    if comp.regions:
        console.print(_section("Compiled regions"))
        for r in comp.regions:
            events = f"{r.device_events:,} device event(s)" + (f" ({r.replayed:,} replayed)" if r.replayed else "")
            console.print(text(f"  {r.name}: {r.calls} call(s), {fmt_us(r.device_us)} {device}, "
                               + (f"{events}, " if r.device_events else "") + f"{len(r.kernels)} compiled kernel(s)"))
            for k in r.kernels[:top]:
                console.print(text(f"    {k.name}  {fmt_us(k.device_us)}  fuses {', '.join(k.fused_ops)}"))
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
    if advice.roofline:
        src = advice.peaks.source if advice.peaks else ""
        console.print(_section(f"Roofline ({src})"))
        t = Table(show_edge=False, header_style="bold", pad_edge=False)
        for col in ("Op", "Calls", "Time", "GFLOP", "MB", "FLOP/byte", "Bound", "% of roofline"):
            t.add_column(col, justify="left" if col in ("Op", "Bound") else "right", overflow="fold", max_width=44)
        for row in advice.roofline[:top]:
            known = row.gflop is not None and row.mbytes is not None and row.intensity is not None
            t.add_row(text(row.name), str(row.calls), fmt_us(row.time_us),
                      f"{row.gflop:.3f}" if known else "unknown", f"{row.mbytes:.1f}" if known else "unknown",
                      f"{row.intensity:.2f}" if known else "unknown", row.bound,
                      "unknown" if row.pct_of_roofline is None else f"{row.pct_of_roofline:.0f}%")
        console.print(t)
    elif advice.roofline_note:
        console.print(_section("Roofline"))
        console.print(text(f"  {advice.roofline_note}", style="yellow"))
    if advice.hotspots:
        console.print(_section("Hotspots"))
        for kind in ("op", "module", "kernel"):
            hs = [h for h in advice.hotspots if h.kind == kind][:5]
            if hs:
                line = "; ".join(f"{h.name[:60]} {h.share_pct:.0f}%" for h in hs)
                console.print(text(f"  {kind}s: {line}"))


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
