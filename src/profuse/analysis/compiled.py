"""Compiled regions: what ``torch.compile`` ran, kernel by kernel, and which source ops each fused.

Inductor names its kernels after the ops they fuse (``triton_red_fused_add_mean_mul_pow_rsqrt_0``);
in a profuse bundle the generated code itself is saved, so CPU (C++) kernels are listed from it.
Graph breaks show as several compiled regions per step with eager ops between them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .._files import read_side_text, regular_files
from ..trace import Trace

_KERNEL = re.compile(r"^(?:triton|cpp)_(?:poi|red|per|tem|for)?_?fused_(?P<ops>.+?)(?:_\d+)?$")
_CPP_DEF = re.compile(r"cpp_fused_[A-Za-z0-9_]+")
KNOWN_OPS = sorted("""
_unsafe_view _to_copy native_layer_norm native_group_norm native_batch_norm _softmax _log_softmax
add sub mul div mean sum pow rsqrt sqrt exp log tanh erf relu gelu silu sigmoid neg cat clone copy
convert_element_type embedding index select slice view permute transpose expand squeeze unsqueeze
amax amin max min var var_mean where masked_fill fill full zeros ones rand bernoulli gt lt ge le eq ne
abs reciprocal clamp maximum minimum bmm mm addmm baddbmm scatter gather cos sin argmax logsumexp
""".split(), key=len, reverse=True)


def source_ops(kernel: str) -> list[str]:
    """The op names inductor put in a fused kernel's name, split with a vocabulary of op names."""
    m = _KERNEL.match(kernel)
    if not m:
        return []
    rest, out = m.group("ops"), []
    while rest:
        rest = rest.lstrip("_") if not any(rest.startswith(k) for k in KNOWN_OPS if k.startswith("_")) else rest
        hit = next((k for k in KNOWN_OPS if rest.startswith(k) and (len(rest) == len(k) or rest[len(k)] == "_")),
                   None)
        if hit is None:
            word, _, rest = rest.partition("_")
            if word:
                out.append(word)
            continue
        out.append(hit)
        rest = rest[len(hit):]
    return out


@dataclass
class CompiledKernel:
    name: str
    calls: int
    device_us: float
    fused_ops: list[str]


@dataclass
class CompiledRegion:
    name: str                      # 'Torch-Compiled Region: 0/0'
    calls: int
    cpu_us: float
    device_us: float
    kernels: list[CompiledKernel] = field(default_factory=list)
    eager_ops_inside: list[str] = field(default_factory=list)   # aten ops that ran as extern calls


@dataclass
class CompiledSummary:
    regions: list[CompiledRegion]
    graph_breaks: int              # distinct compiled frames beyond the first
    eager_between: list[str]       # ops that ran eagerly between compiled regions (break points)
    generated_kernels: list[str]   # from the bundle's saved inductor code, when present


def compiled_regions(trace: Trace) -> CompiledSummary:
    con = trace.con
    regions = []
    for name, calls, cpu in con.execute("""
            SELECT name, count(*), sum(dur) FROM events WHERE kind = 'cpu_op'
            AND name LIKE 'Torch-Compiled Region%' GROUP BY name ORDER BY name""").fetchall():
        rows = con.execute("""
            SELECT e.kind, e.name, count(*), sum(coalesce(e.device_total, 0)), sum(e.dur)
            FROM events e JOIN events r ON r.id = e.parent_op
            WHERE r.name = ? AND e.kind = 'cpu_op' GROUP BY 1, 2""", [name]).fetchall()
        kernels, eager, dev = [], [], 0.0
        for _kind, op, n, dev_ns, dur in rows:
            if op.startswith(("triton_", "cpp_fused")):
                t = (dur if trace.cpu_only else dev_ns) / 1e3
                kernels.append(CompiledKernel(op, n, t, source_ops(op)))
                dev += t
            elif op.startswith("aten::") and dev_ns:
                eager.append(op)
                dev += dev_ns / 1e3
        if trace.cpu_only and not kernels:
            dev = cpu / 1e3  # the CPU is the device; its C++ kernels are not profiler events
        regions.append(CompiledRegion(name, calls, cpu / 1e3, dev, sorted(kernels, key=lambda k: -k.device_us),
                                      sorted(set(eager))))
    frames = {r.name.split(":")[-1].strip().split("/")[0] for r in regions}
    between = [r[0] for r in con.execute("""
        WITH c AS (SELECT id, ts, dur, thread, parent FROM events WHERE name LIKE 'Torch-Compiled Region%')
        SELECT DISTINCT e.name FROM events e JOIN c c1 ON e.thread = c1.thread AND e.ts >= c1.ts + c1.dur
        JOIN c c2 ON c2.thread = e.thread AND c2.ts > e.ts AND c2.parent IS NOT DISTINCT FROM c1.parent
        WHERE e.kind = 'cpu_op' AND e.parent_op IS NULL AND e.name LIKE 'aten::%'
          AND NOT EXISTS (SELECT 1 FROM c c3 WHERE c3.thread = e.thread AND c3.ts > c1.ts AND c3.ts < e.ts)
        ORDER BY 1""").fetchall()] if len(regions) > 1 else []
    return CompiledSummary(regions=regions, graph_breaks=max(len(frames) - 1, 0), eager_between=between,
                           generated_kernels=_saved_kernels(trace.path))


def _saved_kernels(trace_path: Path) -> list[str]:
    folder = Path(trace_path).parent / "artifacts" / "inductor"
    names: set[str] = set()
    for f in regular_files(folder, "*.py"):  # no links, FIFOs or huge files: a bundle may be hostile
        text = read_side_text(f)
        if text is not None:
            names |= set(_CPP_DEF.findall(text))
            names |= set(re.findall(r"triton_[a-z]+_fused_[A-Za-z0-9_]+", text))
    return sorted(names)
