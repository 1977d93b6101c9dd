"""Roofline: FLOPs and bytes per op from recorded shapes against the device's peaks.

An op whose FLOPs or bytes profuse cannot model from its recorded shapes (gathers and slice writes,
which touch only part of their tensors; a convolution without its recorded stride, padding and
groups; unknown ops),
or whose modelled time would beat the device's peak, is listed as "unknown", never as a percentage.
The compute peak is the one for the op's element size (FP8, BF16/FP16; FP32 matmuls against TF32).
Convolutions and causal attention read their scalar arguments (``Concrete Inputs``): perf_models.

Peaks, in this order: datasheet numbers when the trace names a known device (marked as such; they
hold every element size's peak, which one measured fp32 matmul rate cannot), else the peaks the
trace's bundle measured on its machine (``profuse peaks``: copy bandwidth and fp32 matmul rate, used
for every element size), else none and no roofline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...trace import Trace
from ..opclass import ATTENTION, base, flops, io_bytes, modelled, op_class, tensors
from .perf_models import CONV_OPS, attention_model_flops, conv_model

if TYPE_CHECKING:
    from ...trace.bundle import MeasuredPeaks  # annotations only: a plain trace never imports msgspec

# name fragment -> (dense bf16/fp16 TFLOP/s, fp32 TFLOP/s, memory GB/s, dense TF32 (AMD: fp32 matrix)
# TFLOP/s, dense FP8 TFLOP/s or 0 where the device has none). Dense figures: datasheets that quote
# "with sparsity" are halved. Where a figure exists with FP16 and with FP32 accumulation (GeForce),
# the higher one is kept: a roofline's peak is the fastest the device can go. The longest matching
# fragment wins ("L40S" before "L4", "MI325X" before "MI300").
DATASHEET: dict[str, tuple[float, float, float, float, float]] = {
    # nvidia.com/en-us/data-center/v100/ (SXM2)
    "V100": (125.0, 15.7, 900.0, 15.7, 0.0),
    # nvidia.com/en-us/data-center/a100/ (SXM 80GB)
    "A100": (312.0, 19.5, 2039.0, 156.0, 0.0),
    # nvidia.com/en-us/data-center/h100/ (SXM)
    "H100": (989.0, 67.0, 3350.0, 494.7, 1979.0),
    # nvidia.com/en-us/data-center/h200/ (SXM): H100's compute, 4.8 TB/s HBM3e
    "H200": (989.0, 67.0, 4800.0, 494.7, 1979.0),
    # nvidia.com/en-us/data-center/hgx/ (HGX B200, 8 GPUs, sparse figures; per GPU, dense)
    "B200": (2250.0, 80.0, 8000.0, 1100.0, 4500.0),
    # nvidia.com/en-us/data-center/hgx/ (HGX B300, 8 GPUs, sparse figures; per GPU, dense)
    "B300": (2250.0, 75.0, 8000.0, 1100.0, 4500.0),
    # nvidia.com/en-us/data-center/l4/
    "L4": (121.0, 30.3, 300.0, 60.0, 242.0),
    # nvidia.com/en-us/data-center/l40s/
    "L40S": (362.05, 91.6, 864.0, 183.0, 733.0),
    # aws.amazon.com/ec2/instance-types/g5/ and NVIDIA A10 datasheet
    "A10G": (70.0, 31.2, 600.0, 35.0, 0.0),
    # NVIDIA Ada GPU architecture whitepaper, appendix (GeForce RTX 4090 / 4080)
    "RTX 4090": (330.3, 82.6, 1008.0, 82.6, 660.6),
    "RTX 4080": (194.9, 48.7, 716.8, 48.7, 389.9),
    # amd.com/en/products/accelerators/instinct/mi200/mi210.html
    "MI210": (181.0, 22.6, 1638.0, 45.3, 0.0),
    # amd.com/en/products/accelerators/instinct/mi200/mi250.html
    "MI250": (362.0, 47.9, 3277.0, 95.7, 0.0),
    # amd.com/en/products/accelerators/instinct/mi300/mi300x.html
    "MI300X": (1307.0, 163.4, 5300.0, 653.7, 2614.9),
    # amd.com/en/products/accelerators/instinct/mi300/mi325x.html
    "MI325X": (1307.0, 163.4, 6000.0, 653.7, 2614.9),
    # amd.com/en/products/accelerators/instinct/mi350/mi355x.html (no TF32: its fp32 matrix rate)
    "MI355X": (2516.6, 157.3, 8000.0, 157.3, 5033.2),
}
_BY_LENGTH = sorted(DATASHEET, key=len, reverse=True)


@dataclass(frozen=True)
class Peaks:
    """The peaks an op's roofline is drawn against: datasheet or measured (``source`` says which)."""
    tflops_half: float
    tflops_fp32: float
    gbps: float
    source: str          # "datasheet: H100" or "measured"
    tflops_tf32: float = 0.0   # fp32 matmuls may run as TF32 (or on AMD's fp32 matrix cores): the higher peak
    tflops_fp8: float = 0.0

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
    name = trace.meta.get("device_name") or ""
    for key in _BY_LENGTH:
        if key.lower() in name.lower():
            half, fp32, bw, tf32, fp8 = DATASHEET[key]
            return Peaks(half, fp32, bw, f"datasheet: {key}", tf32, fp8)
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


def roofline(trace: Trace, peaks: Peaks | None, *, top: int = 15) -> list[RooflineRow]:
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
