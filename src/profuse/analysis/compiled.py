"""Compiled regions: what ``torch.compile`` ran, kernel by kernel, and which source ops each fused.

Inductor names its kernels after the ops they fuse (``triton_red_fused_add_mean_mul_pow_rsqrt_0``);
in a profuse bundle the generated code itself is saved, so CPU (C++) kernels are listed from it.
Graph breaks show as several compiled regions per step with eager ops between them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._progress import timed
from ..trace import Trace
from ..trace.artifacts import read_artifacts, read_side_bytes, side_files
from ._memo import once_per_trace

# CPU kernels profiled (inductor's cpp.enable_kernel_profile) are named graph_<n>_cpp_fused_...
_KERNEL = re.compile(r"^(?:graph_\d+_)?(?:triton|cpp)_(?:poi|red|per|tem|for)?_?fused_(?P<ops>.+?)(?:_\d+)?$")
_CPP_DEF = re.compile(r"cpp_fused_[A-Za-z0-9_]+")
_TRITON_DEF = re.compile(r"triton_[a-z]+_fused_[A-Za-z0-9_]+")
_EXTRA_OPS = """
_unsafe_view _to_copy convert_element_type embedding index select slice view permute transpose expand
squeeze unsqueeze rand bernoulli scatter gather argmax constant_pad_nd native_dropout lift_fresh_copy
scaled_dot_product_attention _scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention
_scaled_dot_product_cudnn_attention flash_attention efficient_attention bitwise_and bitwise_or bitwise_xor
bitwise_not logical_and logical_or logical_not full zeros ones arange iota copy clone cat fill
_native_batch_norm_legit_functional _native_batch_norm_legit_no_training avg_pool2d max_pool2d_with_indices
_adaptive_avg_pool2d adaptive_avg_pool2d upsample_nearest2d upsample_bilinear2d _unsafe_index
_unsafe_index_put new_zeros new_ones new_empty scalar_tensor sort topk cumsum cumprod isnan isinf repeat
roll flip tril triu any all erfinv split_with_sizes unbind constant_pad_nd reflection_pad2d
silu_backward gelu_backward sigmoid_backward tanh_backward threshold_backward native_layer_norm_backward
""".split()


def _vocabulary() -> list[str]:
    """Op names inductor writes into kernel names: the op tables' names plus inductor's own, longest
    first so multi-word ops (``bitwise_and``, ``native_layer_norm``) are kept whole."""
    from .opclass import ATTENTION, CONV, COPY, INDEXED, MATMUL, NORM, POINTWISE, REDUCTION, SOFTMAX, VIEW

    names = set(_EXTRA_OPS)
    for table in (POINTWISE, REDUCTION, NORM, SOFTMAX, COPY, MATMUL, ATTENTION, VIEW, INDEXED, CONV):
        names |= {n.rstrip("_") if not n.startswith("_") else n for n in table}
    return sorted(names, key=len, reverse=True)


KNOWN_OPS = _vocabulary()


def source_ops(kernel: str) -> list[str]:
    """The op names inductor put in a fused kernel's name, split with a vocabulary of op names.

    Words outside the vocabulary are kept together up to the next known op, so an unknown
    multi-word op stays one name instead of becoming nonsense words."""
    m = _KERNEL.match(kernel)
    if not m:
        return []
    words = m.group("ops").split("_")
    # a leading underscore belongs to the op after it: '_to_copy' splits as ['', 'to', 'copy']
    out: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(words):
        hit = None
        for j in range(len(words), i, -1):
            cand = "_".join(words[i:j])
            if cand in _KNOWN_SET and cand.strip("_"):
                hit = (cand, j)
                break
        if hit is None:
            if words[i]:
                unknown.append(words[i])
            i += 1
            continue
        if unknown:
            out.append("_".join(unknown))
            unknown = []
        out.append(hit[0])
        i = hit[1]
    if unknown:
        out.append("_".join(unknown))
    return out


_KNOWN_SET = frozenset(KNOWN_OPS)


@dataclass
class CompiledKernel:
    """One kernel a compiled region launched: its calls, device time, and the ops its generated name says it
    fuses (none for an extern kernel: a GEMM library's, attention's, a copy)."""

    name: str
    calls: int
    device_us: float
    fused_ops: list[str]


@dataclass
class CompiledRegion:
    """One ``Torch-Compiled Region`` op: its calls, host and device time, kernels, and aten ops it ran as extern calls."""

    name: str                      # 'Torch-Compiled Region: 0/0', or 'CompiledFunctionBackward'
    calls: int
    cpu_us: float
    device_us: float               # device time of all it launched at any depth (= its op-table device total)
    kernels: list[CompiledKernel] = field(default_factory=list)
    eager_ops_inside: list[str] = field(default_factory=list)   # aten ops that ran as extern calls
    device_events: int = 0         # device events it launched at any depth, graph replays included
    replayed: int = 0              # of those, replayed by a graph launch inside it


@dataclass
class NeffBrief:
    """A compiled Neuron executable found beside the trace: what ``profuse neff`` shows, in short."""

    file: str
    error: str | None = None       # why it could not be read (one line), else None
    name: str | None = None
    subgraphs: int = 0
    engines: list[dict[str, Any]] = field(default_factory=list)   # name, instructions (None: unknown), bytes
    hlo_stats: dict[str, Any] = field(default_factory=dict)       # macs, traffic, arithmetic_intensity
    sources: list[dict[str, Any]] = field(default_factory=list)   # engine, instructions, hlo, framework


@dataclass
class CompiledSummary:
    """What ``torch.compile`` did in a trace: its regions, graph breaks, eager ops between regions, generated code."""

    regions: list[CompiledRegion]
    graph_breaks: int              # distinct compiled frames beyond the first
    eager_between: list[str]       # ops that ran eagerly between compiled regions (break points)
    generated_kernels: list[str]   # from the bundle's saved inductor code, when present
    neffs: list[NeffBrief] = field(default_factory=list)  # *.neff beside the trace (Neuron's compiled graphs)


# A compiled region's own events: under ``Torch-Compiled Region`` torch 2.x runs ``CompiledFunction``
# (AOTAutograd), then ``## Call CompiledFxGraph <hash> ##``, then the inductor kernels; a compiled
# backward runs as ``CompiledFunctionBackward`` (autograd thread) outside every forward region.
_REGION_SQL = """
    WITH RECURSIVE roots AS (
        SELECT id, name FROM events WHERE kind = 'cpu_op'
        AND (name LIKE 'Torch-Compiled Region%' OR name = 'CompiledFunctionBackward')),
    inside(root, id) AS (
        SELECT id, id FROM roots
        UNION ALL SELECT i.root, e.id FROM events e JOIN inside i ON e.parent = i.id),
    nested AS (SELECT i.id FROM inside i JOIN roots r ON r.id = i.id WHERE i.root <> i.id),
    owned AS (SELECT r.name, i.root, i.id FROM inside i JOIN roots r ON r.id = i.root
              WHERE i.root NOT IN (SELECT id FROM nested))
"""


_INDUCTOR = re.compile(r"^(?:graph_\d+_)?(?:triton_|cpp_fused)")


def _is_inductor(name: str) -> bool:
    return _INDUCTOR.match(name) is not None


@once_per_trace
@timed("compiled regions")
def compiled_regions(trace: Trace) -> CompiledSummary:
    """The torch.compile regions of a trace with their kernels, graph breaks and the eager ops between them.

    A region owns every event under it at any depth and every device event those launched, graph
    replays included, so its device time is its op-table device total, and its kernels (inductor's
    and extern ones alike) make up that time. A region inside another region counts in the outer one
    only."""
    heads, dev_rows, host_rows = _region_rows(trace)
    regions = [_region(trace.cpu_only, head, [r[1:] for r in dev_rows if r[0] == head[0]],
                       [r[1:] for r in host_rows if r[0] == head[0]]) for head in heads]
    # compiled frames: "Torch-Compiled Region: 1/0" is frame 1; a compiled backward is no frame of its own
    frames = {r.name.split(":")[-1].strip().split("/")[0] for r in regions if r.name.startswith("Torch-Compiled Region")}
    several = sum(r.name.startswith("Torch-Compiled Region") for r in regions) > 1
    return CompiledSummary(regions=regions, graph_breaks=max(len(frames) - 1, 0),
                           eager_between=_eager_between(trace) if several else [],
                           generated_kernels=_saved_kernels(trace.path), neffs=neffs_beside(trace.path))


def _region_rows(trace: Trace) -> tuple[list[Any], list[Any], list[Any]]:
    """(heads, device rows, host rows) of every region: one statement, the regions' tree of events walked
    once (materialized) for all three parts; empty where the trace has no region."""
    con = trace.con
    (has,) = con.execute("""SELECT count(*) FROM events WHERE kind = 'cpu_op'
        AND (name LIKE 'Torch-Compiled Region%' OR name = 'CompiledFunctionBackward')""").fetchone() or (0,)
    if not has:
        return [], [], []
    rows = con.execute(_REGION_SQL + """, owned_once AS MATERIALIZED (SELECT * FROM owned)
        SELECT 0 AS part, r.name AS a, NULL::VARCHAR AS b, NULL::VARCHAR AS c, count(*) AS n, sum(e.dur) AS x,
               sum(coalesce(e.device_total, 0)) AS y, sum(coalesce(e.kernels_total, 0)) AS z
        FROM (SELECT DISTINCT name, root FROM owned_once) r JOIN events e ON e.id = r.root GROUP BY r.name
        UNION ALL
        -- device events launched by anything inside, by kernel name and by the inductor op that launched them
        SELECT 1, i.name, d.name, o.name, count(*), sum(d.dur), count(*) FILTER (WHERE d.link = 'graph'), NULL
        FROM owned_once i JOIN events d ON d.op = i.id JOIN events o ON o.id = d.op
        WHERE d.kind IN ('kernel', 'memcpy', 'memset') GROUP BY i.name, d.name, o.name
        UNION ALL
        SELECT 2, i.name, e.name, p.name, count(*), sum(e.dur), sum(coalesce(e.device_total, 0)), NULL
        FROM owned_once i JOIN events e ON e.id = i.id LEFT JOIN events p ON p.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND e.id <> i.root AND (regexp_matches(e.name, '^(graph_[0-9]+_)?(triton_|cpp_fused)')
              OR e.name LIKE 'aten::%') GROUP BY i.name, e.name, p.name""").fetchall()
    return (sorted((r[1], r[4], r[5], r[6], r[7]) for r in rows if r[0] == 0),
            [(r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows if r[0] == 1],
            [(r[1], r[2], r[4], r[5], r[6], r[3]) for r in rows if r[0] == 2])


def _region(cpu_only: bool, head: Any, dev_rows: list[Any], host_rows: list[Any]) -> CompiledRegion:
    """One region from its head (name, calls, CPU ns, device ns, device events) and its device and host rows."""
    name, calls, cpu, dev_ns, n_dev = head
    kernels: dict[str, list[float]] = {}   # name -> [calls, µs]
    replayed = 0
    eager: set[str] = set()
    for kname, launcher, n, dur, n_graph in dev_rows:
        replayed += n_graph
        # every kernel it ran: inductor's by their generated name (the launching op's where the
        # kernel's own name is not one), extern ones (GEMM libraries, attention, copies) as named
        kname = launcher if not _is_inductor(kname) and _is_inductor(launcher) else kname
        acc = kernels.setdefault(kname, [0, 0.0])
        acc[0] += n
        acc[1] += dur / 1e3
    for op, n, dur, dev, parent_name in host_rows:
        top = parent_name is None or not (parent_name.startswith("aten::") or _is_inductor(parent_name))
        if cpu_only and _is_inductor(op):  # the CPU is the device: its kernels' time is their CPU time
            acc = kernels.setdefault(op, [0, 0.0])
            acc[0] += n
            acc[1] += dur / 1e3
        elif op.startswith("aten::") and top and (cpu_only or dev):
            eager.add(op)
    device_us = cpu / 1e3 if cpu_only else dev_ns / 1e3
    ks = [CompiledKernel(k, int(c), t, source_ops(k)) for k, (c, t) in kernels.items()]
    return CompiledRegion(name, calls, cpu / 1e3, device_us, sorted(ks, key=lambda k: (-k.device_us, k.name)),
                          sorted(eager), device_events=0 if cpu_only else int(n_dev), replayed=replayed)


def _eager_between(trace: Trace) -> list[str]:
    """The eager top-level aten ops that ran between two compiled regions of one parent (graph breaks)."""
    return [r[0] for r in trace.con.execute("""
        WITH c AS (SELECT id, ts, dur, thread, parent FROM events WHERE name LIKE 'Torch-Compiled Region%')
        SELECT DISTINCT e.name FROM events e JOIN c c1 ON e.thread = c1.thread AND e.ts >= c1.ts + c1.dur
        JOIN c c2 ON c2.thread = e.thread AND c2.ts > e.ts AND c2.parent IS NOT DISTINCT FROM c1.parent
        WHERE e.kind = 'cpu_op' AND e.parent_op IS NULL AND e.name LIKE 'aten::%'
          AND NOT EXISTS (SELECT 1 FROM c c3 WHERE c3.thread = e.thread AND c3.ts > c1.ts AND c3.ts < e.ts)
        ORDER BY 1""").fetchall()]


MAX_NEFFS, MAX_NEFF_BYTES = 8, 512 << 20  # every report reads them: keep it quick; profuse neff reads any size


def neffs_beside(trace_path: Path) -> list[NeffBrief]:
    """Each ``*.neff`` in the trace's folder (Neuron writes ``neff_<hash>.neff`` there), read offline.

    Candidates are listed without following links; each is opened without following a link or
    blocking and read only when it is a regular file of at most ``MAX_NEFF_BYTES``. A link, FIFO,
    device or oversized file is listed with the reason, never read."""
    folder = Path(trace_path) if Path(trace_path).is_dir() else Path(trace_path).parent
    found = side_files(folder, ".neff")
    if not found:  # the common case: no NEFF reader imported (tarfile, protobuf: tens of ms)
        return []
    from ..errors import TraceError
    from ..neuron.neff import parse_neff

    out = []
    for f, why in found[:MAX_NEFFS]:
        raw, why = (None, why) if why else read_side_bytes(f, MAX_NEFF_BYTES)
        if raw is None:
            if "over the" in why:
                why += ": read it with profuse neff"
            out.append(NeffBrief(f.name, error=why))
            continue
        try:
            n = parse_neff(f, raw)
        except TraceError as err:
            out.append(NeffBrief(f.name, error=err.problem))
            continue
        finally:
            del raw
        engines: dict[str, dict[str, Any]] = {}
        for sg in n.subgraphs:
            for e in sg.engines:
                acc = engines.setdefault(e.name, {"name": e.name, "instructions": 0, "bytes": 0})
                acc["instructions"] = None if acc["instructions"] is None or e.instructions is None \
                    else acc["instructions"] + e.instructions
                acc["bytes"] = None if acc["bytes"] is None or e.bytes is None else acc["bytes"] + e.bytes
        rows = sorted((m for sg in n.subgraphs for m in sg.mapping if m.hlo or m.framework),
                      key=lambda m: -m.instructions)
        out.append(NeffBrief(f.name, name=n.header.name, subgraphs=len(n.subgraphs), engines=list(engines.values()),
                             hlo_stats={k: n.hlo_stats.get(k) for k in ("macs", "traffic", "arithmetic_intensity")},
                             sources=[{"engine": m.engine, "instructions": m.instructions, "hlo": m.hlo,
                                       "framework": m.framework} for m in rows[:10]]))
    if len(found) > MAX_NEFFS:
        out.append(NeffBrief("...", error=f"{len(found) - MAX_NEFFS} more NEFFs here (over {MAX_NEFFS}): "
                                          "not shown"))
    return out


def _saved_kernels(trace_path: Path) -> list[str]:
    names: set[str] = set()
    for text in read_artifacts(trace_path, max_files=200, max_bytes=4 << 20).values():
        names |= set(_CPP_DEF.findall(text))
        names |= set(_TRITON_DEF.findall(text))
    return sorted(names)
