"""The console's memory section: each device's peak, when it happened and what is live at it."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..analysis.compare.memory_diff import MemoryDiff
from ..analysis.memory import MemorySection
from ._text import safe, text
from .fit import Column, print_fitted
from .terminal import renders_printable


def fmt_bytes(n: int | None) -> str:
    """Bytes in the largest binary unit that keeps them readable (signed: a net free is negative)."""
    if n is None:
        return ""
    sign, v = ("-" if n < 0 else ""), float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{sign}{v:.0f} {unit}" if unit == "B" else f"{sign}{v:.2f} {unit}"
        v /= 1024
    return f"{sign}{v:.2f} TiB"  # pragma: no cover - the loop returns at GiB


@renders_printable
def render_memory(console: Console, payload: MemorySection | None) -> None:
    """Print the memory section (nothing for a trace without memory events)."""
    if payload is None:
        return
    console.print(Text("\nMemory (profile_memory)", style="bold underline"))
    for d in payload.devices:
        where = [f"{k} {v}" for k, v in (("step", d.peak_at.step), ("op", d.peak_at.op),
                                         ("module", d.peak_at.module)) if v]
        line = Text(f"{safe(d.device)}: peak allocated {fmt_bytes(d.peak_allocated_bytes)}")
        if d.gap_bytes is not None:
            line.append(f", reserved {fmt_bytes(d.reserved_at_peak_bytes)} at the peak "
                        f"({fmt_bytes(d.gap_bytes)} cached by the allocator, not in use; "
                        f"peak reserved {fmt_bytes(d.peak_reserved_bytes)})")
        line.append(f", at {d.peak_at.ts_ns / 1e6:.3f} ms")
        if where:
            line.append(" in ")
            line.append(text(", ".join(where)))  # names from the trace: never markup
        console.print(line)
        cols = [Column("Live at the peak: allocated by", name=True), Column("Module", name=True),
                Column("Bytes", keep=2), Column("Allocations", keep=1)]
        print_fitted(console, cols, [[text(g.op), text(g.module or ""), fmt_bytes(g.bytes),
                                      f"{g.allocations:,}" if g.allocations else ""] for g in d.live_at_peak])


def _delta(n: int) -> Text:
    return Text(("+" if n > 0 else "") + fmt_bytes(n), style="green" if n < 0 else "red" if n > 0 else "")


@renders_printable
def render_memory_diff(console: Console, diff: MemoryDiff | None, top: int = 15) -> None:
    """Print the diff's memory: peaks per device and the ops whose memory changed most (nothing without any)."""
    if diff is None:
        return
    cols = [Column("Device A", name=True), Column("Device B", name=True), Column("Peak A", keep=3),
            Column("Peak B", keep=3), Column("Delta", keep=4), Column("Reserved A", keep=1),
            Column("Reserved B", keep=1), Column("Delta reserved", keep=2)]
    print_fitted(console, cols, [
        [text(p.a_device or "-"), text(p.b_device or "-"), fmt_bytes(p.a_peak_allocated_bytes),
         fmt_bytes(p.b_peak_allocated_bytes), _delta(p.delta_allocated_bytes), fmt_bytes(p.a_peak_reserved_bytes),
         fmt_bytes(p.b_peak_reserved_bytes), _delta(p.delta_reserved_bytes)] for p in diff.peaks], title="Memory peaks")
    changed = [o for o in diff.ops if o.delta_device_mem_bytes or o.delta_cpu_mem_bytes][:top]
    if not changed:
        return
    cols = [Column("Name", name=True), Column("Device mem A", keep=3), Column("Device mem B", keep=3),
            Column("Delta", keep=4), Column("CPU mem A", keep=1), Column("CPU mem B", keep=1), Column("Delta CPU", keep=2)]
    print_fitted(console, cols, [
        [text(o.name), fmt_bytes(o.a_device_mem_bytes), fmt_bytes(o.b_device_mem_bytes), _delta(o.delta_device_mem_bytes),
         fmt_bytes(o.a_cpu_mem_bytes), fmt_bytes(o.b_cpu_mem_bytes), _delta(o.delta_cpu_mem_bytes)] for o in changed],
        title="Op memory")
