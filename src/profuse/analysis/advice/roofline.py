"""Roofline: FLOPs and bytes per op from recorded shapes against the device's peaks.

An op whose FLOPs or bytes profuse cannot model from its recorded shapes (gathers and slice writes,
which touch only part of their tensors; a convolution without its recorded stride, padding and
groups; unknown ops),
or whose modelled time would beat the device's peak, is listed as "unknown", never as a percentage.
The compute peak is the one for the op's element size (FP8, BF16/FP16; FP32 matmuls against TF32, or AMD
CDNA2's FP32 matrix rate, where the device has it).
Convolutions and causal attention read their scalar arguments (``Concrete Inputs``): perf_models.

Peaks, in this order: datasheet numbers when the trace names a known device (the device vocabulary's
``datasheets``: trace/datasheets.py, each with its source; marked as such; they
hold every element size's peak, which one measured fp32 matmul rate cannot), else the peaks the
trace's bundle measured on its machine (``profuse peaks``: copy bandwidth and fp32 matmul rate, used
for every element size), else none and no roofline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._progress import timed
from ...trace import Trace
from ...trace.meta import first_device
from ...trace.vocabulary import datasheet
from ..opclass import ATTENTION, base, flops, io_bytes, modelled, op_class, tensors
from .perf_models import CONV_OPS, attention_model_flops, conv_model

if TYPE_CHECKING:
    from ...trace.bundle import MeasuredPeaks  # annotations only: a plain trace never imports msgspec

@dataclass(frozen=True)
class Peaks:
    """The peaks an op's roofline is drawn against: datasheet or measured (``source`` says which)."""
    tflops_half: float
    tflops_fp32: float
    gbps: float
    source: str          # "datasheet: H100" or "measured"
    tflops_tf32: float = 0.0   # fp32 matmuls may run as TF32 (or on AMD's fp32 matrix cores): the higher peak
    tflops_fp8: float = 0.0
    half_format: str = "BF16"  # the 16-bit format tflops_half is for: "BF16", or "FP16" (Volta, Turing)
    tf32_kind: str = ""        # what tflops_tf32 is: "TF32", "FP32 matrix", or "" (no such rate)

    def compute_tflops(self, elem: int, matrix: bool) -> float:
        """The peak that bounds an op of this element size: the fastest the device can do it."""
        if elem == 1:
            return self.tflops_fp8 or self.tflops_half
        if elem == 2:
            return self.tflops_half
        return max(self.tflops_fp32, self.tflops_tf32) if matrix else self.tflops_fp32


@dataclass(frozen=True)
class RooflineRow:
    """One op name's roofline: its time against the time the peaks allow for its FLOPs and bytes."""
    name: str
    calls: int
    time_us: float
    gflop: float | None      # None where no model holds for the op
    mbytes: float | None
    intensity: float | None  # FLOP per byte
    bound: str           # compute | memory | unknown (no FLOP/byte model for this op)
    roofline_us: float | None
    pct_of_roofline: float | None   # None ("unknown") where no model holds or it would exceed 100%


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf")


def device_peaks(trace: Trace, measured: MeasuredPeaks | None = None) -> Peaks | None:
    """Datasheet peaks for a device the trace names, else ``measured`` (one fp32 rate for every
    element size), else None."""
    props = first_device(trace.meta.trace_meta or {})
    sheet = datasheet(trace.meta.device_kind, trace.meta.get("device_name"), props)
    if sheet is not None:
        return Peaks(sheet.half, sheet.fp32, sheet.gbps, f"datasheet: {sheet.model}", sheet.tf32, sheet.fp8,
                     sheet.half_format, sheet.tf32_kind)
    if measured is not None:
        tf, copy_bw = measured.matmul_tflops_fp32, measured.copy_bandwidth_gbps
        if not (_number(tf) and _number(copy_bw) and copy_bw > 0):
            return None  # peaks that are not numbers measure nothing
        return Peaks(float(tf), float(tf), float(copy_bw), "measured")
    return None


def missing_peak(trace: Trace, peaks: Peaks | None) -> str | None:
    """Why a trace has no roofline: "no peak for <device name>" (None when it has peaks)."""
    if peaks is not None:
        return None
    what = trace.meta.get("device_name") or trace.meta.get("device_kind") or "this device"
    hint = "run profuse peaks on that machine; bundles captured after it carry its peaks"
    return f"no peak for {what}: {hint}"


ROOFLINE_TOP = 15        # rows the report's roofline section shows
ALL_ROWS = 1 << 30       # every op (the diagnosis's GEMM bound reads them all)


@timed("roofline")
def roofline(trace: Trace, peaks: Peaks | None, *, top: int = ROOFLINE_TOP) -> list[RooflineRow]:
    """The ops that took the most time against the device's peaks, largest time first.

    Set-based: the tables are grouped by (op name, recorded input shapes and types) in SQL, so each
    distinct shape is parsed and modelled once, however many calls share it.
    """
    if peaks is None:
        return []
    # the ops that did the work: top-level ops on the CPU, ops that launched kernels on a device
    where = "e.parent_op IS NULL" if trace.cpu_only else "e.kernels > 0"
    time_col = "e.dur" if trace.cpu_only else "e.self_device"
    groups = trace.con.execute(f"""
        SELECT e.name, s.input_dims, s.input_types, s.concrete_inputs, count(*), sum({time_col}), min(e.id) AS first
        FROM events e JOIN shapes s USING (id)
        WHERE e.kind = 'cpu_op' AND {where} AND {time_col} IS NOT NULL AND {time_col} <> 0
        GROUP BY e.name, s.input_dims, s.input_types, s.concrete_inputs ORDER BY first""").fetchall()
    agg: dict[str, list[float]] = {}
    unknown: dict[str, list[float]] = {}
    for name, dims, types, concrete, calls, ns, _first in groups:
        ins = tensors(dims, types)
        if not ins:
            continue
        conv = conv_model(name, dims, types, concrete) if base(name) in CONV_OPS else None
        if conv is None and not modelled(name):
            u = unknown.setdefault(name, [0, 0])
            u[0] += calls
            u[1] += ns
            continue
        if conv is not None:
            f, r, w, elem, matrix = conv.flops, conv.read, conv.write, conv.elem, True
        else:
            r, w = io_bytes(name, ins)
            f = attention_model_flops(name, ins, concrete) if base(name) in ATTENTION else flops(name, ins)
            elem, matrix = ins[0].elem, op_class(name) in ("matmul", "attention")
        a = agg.setdefault(name, [0, 0, 0.0, 0.0, 0.0])
        a[0] += calls
        a[1] += ns
        a[2] += f * calls
        a[3] += (r + w) * calls
        a[4] += f / (peaks.compute_tflops(elem, matrix) * 1e12) * 1e6 * calls
    out = []
    for name, (calls, ns, f, b, compute_us) in agg.items():
        t = ns / 1e3
        mem_us = b / (peaks.gbps * 1e9) * 1e6
        roof = max(compute_us, mem_us)
        pct = 100.0 * roof / t if t else None
        if pct is not None and pct > 100.0:
            # faster than the device's peak: the model is wrong for this op, so it claims nothing
            out.append(RooflineRow(name, int(calls), round(t, 3), round(f / 1e9, 4), round(b / 1e6, 3),
                                   round(f / b, 3) if b else 0.0, "unknown", None, None))
            continue
        out.append(RooflineRow(name, int(calls), round(t, 3), round(f / 1e9, 4), round(b / 1e6, 3),
                               round(f / b, 3) if b else 0.0, "compute" if compute_us > mem_us else "memory",
                               round(roof, 3), round(pct, 1) if pct is not None else None))
    for name, (calls, ns) in unknown.items():
        out.append(RooflineRow(name, int(calls), round(ns / 1e3, 3), None, None, None, "unknown", None, None))
    out.sort(key=lambda r: -r.time_us)
    return out[:top]
