"""Roofline: FLOPs and bytes per op from recorded shapes against the device's peaks.

An op whose FLOPs or bytes profuse cannot model from its recorded shapes (convolutions, whose
stride is not kept; gathers and slice writes, which touch only part of their tensors; unknown ops),
or whose modelled time would beat the device's peak, is listed as "unknown", never as a percentage.
The compute peak is the one for the op's element size (FP8, BF16/FP16; FP32 matmuls against TF32).

Peaks come from ``profuse peaks`` (measured, cached per machine) when the trace was recorded here,
else from a table of datasheet numbers for known devices, marked as such.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profuse.analysis.opclass import flops, io_bytes, modelled, op_class, tensors
from profuse.trace import Trace

# The peaks (Peaks, device_peaks) did not change: the test passes the package's.


@dataclass(frozen=True)
class RooflineRow:
    name: str
    calls: int
    time_us: float
    gflop: float | None
    mbytes: float | None
    intensity: float | None
    bound: str
    roofline_us: float | None
    pct_of_roofline: float | None


def roofline(trace: Trace, peaks: Any, *, top: int = 15) -> list[RooflineRow]:
    if peaks is None:
        return []
    # the ops that did the work: top-level ops on the CPU, ops that launched kernels on a device
    where = "e.parent_op IS NULL" if trace.cpu_only else "e.kernels > 0"
    time_col = "e.dur" if trace.cpu_only else "e.self_device"
    rows = trace.con.execute(f"""
        SELECT e.name, {time_col}, s.input_dims, s.input_types FROM events e JOIN shapes s USING (id)
        WHERE e.kind = 'cpu_op' AND {where}""").fetchall()
    agg: dict[str, list[float]] = {}
    unknown: dict[str, list[float]] = {}
    for name, t, dims, types in rows:
        ins = tensors(dims, types)
        if not ins or not t:
            continue
        if not modelled(name):
            u = unknown.setdefault(name, [0, 0.0])
            u[0] += 1
            u[1] += t / 1e3
            continue
        r, w = io_bytes(name, ins)
        a = agg.setdefault(name, [0, 0.0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += t / 1e3
        f = flops(name, ins)
        a[2] += f
        a[3] += r + w
        matrix = op_class(name) in ("matmul", "attention")
        a[4] += f / (peaks.compute_tflops(ins[0].elem, matrix) * 1e12) * 1e6
    out = []
    for name, (calls, t, f, b, compute_us) in agg.items():
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
    for name, (calls, t) in unknown.items():
        out.append(RooflineRow(name, int(calls), round(t, 3), None, None, None, "unknown", None, None))
    out.sort(key=lambda r: -r.time_us)
    return out[:top]
