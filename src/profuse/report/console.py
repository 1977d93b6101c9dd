"""Rich tables for the terminal."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import OpTable, Summary
from ..trace.schema import UNLINKED_REASONS


def make_console() -> Console:
    """Stdout console; wide when piped so names are not folded into unreadable columns."""
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def header(summary: Summary) -> Text:
    dev = summary.device_kind + (f" ({summary.device_name})" if summary.device_name else "")
    t = Text()
    t.append(f"{summary.path}\n", style="bold")
    t.append(f"{dev} · {summary.events:,} events · span {fmt_us(summary.span_us)} · "
             f"device time {fmt_us(summary.device_us)}")
    if summary.from_cache:
        t.append(" · from cache", style="dim")
    return t


def notes(summary: Summary, table: OpTable) -> list[Text]:
    out = []
    if table.cpu_only:
        out.append(Text("CPU-only trace: the CPU is the device, so device time is each op's self CPU time.",
                        style="yellow"))
    elif summary.kernels:
        out.append(Text(f"{summary.kernels_linked:,} of {summary.kernels:,} device events linked to the op "
                        "that launched them.", style="dim"))
    for reason, n in sorted(summary.unlinked.items(), key=lambda kv: -kv[1]):
        out.append(Text(f"  {n:,} not linked: {UNLINKED_REASONS.get(reason, reason)}", style="yellow"))
    if summary.skipped:
        what = ", ".join(f"{n:,} {r}" for r, n in summary.skipped.items())
        out.append(Text(f"--lenient skipped events: {what}", style="red"))
    return out


def op_table_renderable(table: OpTable, top: int | None) -> Table:
    dev = table.device_label
    first = {"op": "Name", "shape": "Name", "module": "Module", "kernel": "Kernel"}[table.group_by]
    t = Table(show_edge=False, header_style="bold", pad_edge=False)
    t.add_column(first, overflow="fold", max_width=70)
    if table.group_by == "shape":
        t.add_column("Input shapes", overflow="fold", max_width=40)
    for col in ("Calls", "Self CPU", "CPU total", f"Self {dev}", f"{dev} total", f"{dev} %", f"Avg {dev}", "Kernels"):
        t.add_column(col, justify="right")
    for r in table.rows[:top] if top else table.rows:
        cells = [Text(r.name)]  # Text(): names from traces are never parsed as markup
        if table.group_by == "shape":
            cells.append(Text(r.shape or ""))
        cells += [f"{r.calls:,}", fmt_us(r.self_cpu_us), fmt_us(r.cpu_total_us), fmt_us(r.self_device_us),
                  fmt_us(r.device_total_us), f"{table.pct(r):.1f}%", fmt_us(r.avg_device_us), f"{r.kernels:,}"]
        t.add_row(*cells)
    return t


def print_report(console: Console, summary: Summary, table: OpTable, top: int | None) -> None:
    console.print(header(summary))
    for n in notes(summary, table):
        console.print(n)
    console.print(op_table_renderable(table, top))
    shown = min(top or len(table.rows), len(table.rows))
    if shown < len(table.rows):
        console.print(Text(f"{shown} of {len(table.rows)} rows; --top N shows more, --format json shows all.",
                           style="dim"))
