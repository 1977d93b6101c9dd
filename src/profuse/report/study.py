"""Console rendering of a study's comparison table."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..studies.llama import LlamaStudy
from ..studies.rmsnorm import StudyResult
from ..units import fmt_us
from ._text import text
from .fit import Column, print_fitted
from .terminal import renders_printable


@renders_printable
def print_study(console: Console, r: StudyResult) -> None:
    """Print the RMSNorm study: one row per variant with device time per call and speed-up."""
    b, s, h = r.shape
    console.print(text(f"RMSNorm on {r.device_kind} ({r.device_name}) · x[{b}, {s}, {h}] {r.dtype} · "
                       f"{r.iters} calls per variant · copy of x at {r.copy_bandwidth_gbps:.1f} GB/s "
                       f"(large-buffer peak {r.peak_copy_bandwidth_gbps:.1f} GB/s)",
                       style="bold"))
    cols = [Column("Variant", name=True), Column("Ops/call", keep=2), Column("Kernels/call", keep=3),
            Column(f"{r.device_kind} time/call", keep=None), Column("Speedup", keep=None),
            Column("Bytes/call", keep=0), Column("Roofline", keep=1), Column("Max abs err", keep=1)]
    print_fitted(console, cols, [
        [text(v.name), f"{v.ops_per_call:g}", f"{v.kernels_per_call:g}", fmt_us(v.device_us_per_call),
         f"{v.speedup_vs_op_by_op:.2f}x", f"{v.bytes_per_call / 1e6:.1f} MB", f"{v.roofline_pct:.0f}%",
         f"{v.max_abs_err:.1e}"] for v in r.variants], what="study.json")
    for note in r.notes:
        console.print(text(f"  note: {note}", style="yellow"))
    for v in r.variants:
        ran = ", ".join(v.ran[:8]) + (" ..." if len(v.ran) > 8 else "")
        console.print(text(f"  {v.name}: ran {ran}", style="dim"))
    noisy = [v.name for v in r.variants if v.spread_pct > 50]
    if noisy:
        console.print(text(f"  warning: per-call times of {', '.join(noisy)} varied by more than 50% "
                           "(a busy machine?); rerun for steadier figures", style="yellow"))
    first = r.variants[0].bundle
    console.print(Text("\nExplore the result:", style="bold"))
    last = r.variants[-1].bundle
    console.print(Text(f"  profuse explore {first} {last}    timelines and the diff of the two in the browser"))
    console.print(Text(f"  profuse report {first}              the op table and advice of one variant"))
    console.print(Text(f"  profuse diff {first} {last}"))
    console.print(Text(f"  summary JSON: {r.out}/study.json"))


@renders_printable
def print_llama(console: Console, r: LlamaStudy) -> None:
    """Print the Llama study: the RMSNorm candidate found in the trace and each fix measured on a copy of the model."""
    c = r.config
    console.print(Text(f"Llama study on {r.device_kind} · {r.size}: {c['num_hidden_layers']} layers, hidden "
                       f"{c['hidden_size']}, {c['num_attention_heads']} heads, prompt {c['seq']} tokens, "
                       "random weights", style="bold"))
    if r.rmsnorm is not None:
        k = r.rmsnorm
        console.print(text(f"Advisor: {k.pattern} in {k.scope}: {k.instances} calls, {k.kernels_per_instance:g} "
                           f"kernels per call, {fmt_us(k.device_us)} -> predicted saving "
                           f"{fmt_us(k.predicted_saving_us)} ({k.confidence} confidence)"))
        console.print(text(f"  recommendation: {k.recommendation}", style="cyan"))
    others = [k for k in r.candidates if k is not r.rmsnorm]
    for k in others[:6]:
        console.print(text(f"  also: {k.pattern} in {k.scope} ({k.instances} calls, predicted "
                           f"{fmt_us(k.predicted_saving_us)})", style="dim"))
    cols = [Column("Fix", name=True), Column("Scope", name=True), Column("Modules", keep=0),
            Column("Scope time/step before -> after (IQR)", keep=1), Column("Measured saving/step", keep=None),
            Column("Predicted saving/step", keep=3), Column("Max abs err", keep=0), Column("Numerics", keep=2),
            Column("Speed", left=True, keep=None)]
    print_fitted(console, cols, [
        [text(f.fix), text(f.scope), str(f.modules_changed),
         f"{fmt_us(f.scope_before_us)} ±{fmt_us(f.scope_before_spread_us)} -> "
         f"{fmt_us(f.scope_after_us)} ±{fmt_us(f.scope_after_spread_us)}",
         fmt_us(f.measured_saving_us) if f.verdict in ("verified faster", "slower") else f.verdict,
         fmt_us(f.predicted_saving_us), f"{f.max_abs_err:.1e}", "ok" if f.ok else "NO", text(f.verdict)]
        for f in r.fixes], title="Fixes applied to a copy of the model", what="the study's JSON")
    if r.ms_per_token_after:
        after = f"{r.ms_per_token_after:.2f} ms/token after ({r.ms_per_token_before / r.ms_per_token_after:.2f}x)"
    else:
        after = "after: not measured (see the notes)"
    console.print(Text(f"End to end (greedy generation, wall clock): {r.ms_per_token_before:.2f} ms/token before, "
                       f"{after}", style="bold"))
    for n in r.notes:
        console.print(text(f"  note: {n}", style="yellow"))
    console.print(Text(f"Bundles and study.json in {r.out}; try: profuse report {r.out}/analysis", style="dim"))
