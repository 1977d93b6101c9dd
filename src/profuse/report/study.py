"""Console rendering of a study's comparison table."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..studies.rmsnorm import StudyResult
from .console import fmt_us


def print_study(console: Console, r: StudyResult) -> None:
    b, s, h = r.shape
    console.print(Text(f"RMSNorm on {r.device_kind} ({r.device_name}) · x[{b}, {s}, {h}] {r.dtype} · "
                       f"{r.iters} calls per variant · copy of x at {r.copy_bandwidth_gbps:.1f} GB/s "
                       f"(large-buffer peak {r.peak_copy_bandwidth_gbps:.1f} GB/s)",
                       style="bold"))
    t = Table(show_edge=False, header_style="bold")
    for col in ("Variant", "Ops/call", "Kernels/call", f"{r.device_kind} time/call", "Speedup", "Bytes/call",
                "Roofline", "Max abs err"):
        t.add_column(col, justify="left" if col == "Variant" else "right")
    for v in r.variants:
        t.add_row(Text(v.name), f"{v.ops_per_call:g}", f"{v.kernels_per_call:g}", fmt_us(v.device_us_per_call),
                  f"{v.speedup_vs_op_by_op:.2f}x", f"{v.bytes_per_call / 1e6:.1f} MB", f"{v.roofline_pct:.0f}%",
                  f"{v.max_abs_err:.1e}")
    console.print(t)
    for v in r.variants:
        ran = ", ".join(v.ran[:8]) + (" ..." if len(v.ran) > 8 else "")
        console.print(Text(f"  {v.name}: ran {ran}", style="dim"))
    noisy = [v.name for v in r.variants if v.spread_pct > 50]
    if noisy:
        console.print(Text(f"  warning: per-call times of {', '.join(noisy)} varied by more than 50% "
                           "(a busy machine?); rerun for steadier figures", style="yellow"))
    first = r.variants[0].bundle
    console.print(Text("\nExplore the result:", style="bold"))
    console.print(Text(f"  profuse report {first}              the op table of one variant"))
    console.print(Text(f"  profuse report {first} --group-by kernel"))
    console.print(Text(f"  summary JSON: {r.out}/study.json"))
