"""The levers of a diagnosis: changes ranked by the time they buy back, each bounded by its leaves.

Every lever names the budget leaves it ``draws`` from and its ``gain_us`` never exceeds their sum.
``combined_gain_us`` pulls every lever in rank order, each taking at most what its leaves still
hold, so no leaf's time is counted twice and the total never exceeds the span; ``combined_outside_us``
is the part of it that levers graded outside the trace take. Levers under
``max(1% of the device window, 10 µs)`` are folded into "small items" (the window: the span less its
unrecorded wait; each lever's ``share_pct`` is of it too). docs/advisor.md states each rule.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_module
from ..._progress import timed
from ...trace import Trace, compiled
from ...trace.arrays import distinct
from ...trace.vocabulary import is_graph_launch, is_launch, launch_call_sql
from ...units import fmt_us
from ..beside import Submit, now
from ..busy import LAUNCH_GAP_MAX_US, Activities, late, launch_wait, launch_work, named_launch_calls
from ..opclass import op_class
from ..steps import step_model
from .budget import (
    BUSY_PRIORITY,
    CPU_OTHER,
    HOST_SYNC,
    LAUNCH_OVERHEAD,
    LEAVES,
    NO_NAME,
    QUEUED,
    RAW_DUR,
    TOP_OP,
    UNRECORDED,
    UNRECORDED_LEAF,
    DeviceWork,
    Labels,
    search_sorted,
    shared_work,
)
from .records import Lever, Steady, grade_of

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

SMALL_PCT = 1.0
SMALL_US = 10.0
GRAPHED_SHARE = 0.9  # graphs replay at least this share of the busy time: the step is captured already
GEMM_UNKNOWN_SHARE = 0.3   # no roofline: assume 30% of a GEMM's time reachable (a tuned one takes 70%)
MEMORY_BOUND_PCT = 60.0    # a memory-bound GEMM at this % of its bandwidth roofline streams near the device's peak
FP32_UNKNOWN_SPEEDUP = 2.0  # no peak table: every matrix unit here runs half precision at least 2x FP32

FUSION_DRAWS = ("busy/elementwise", "busy/norm", "busy/reduction", "busy/other", "busy/attention")
ATTENTION_DRAWS = ("busy/reduction", "busy/elementwise", "busy/other", "busy/gemm")
CPU_FUSION_DRAWS = ("cpu/elementwise", "cpu/norm", "cpu/reduction", "cpu/other", "cpu/gemm", "cpu/attention")
SLUG = {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm", "softmax": "softmax", "GELU (tanh)": "gelu",
        "GELU (erf)": "gelu", "SiLU x mul (SwiGLU)": "swiglu", "QuickGELU (x * sigmoid(1.702 x))": "quickgelu",
        "SiLU (x * sigmoid(x))": "silu", "rotary embedding": "rotary", "residual add + norm": "residual_norm",
        "bias + activation": "bias_activation", "norm + residual add + activation": "norm_residual_activation",
        "multi-kernel norm": "norm", "pointwise chain": "pointwise"}

# the precision lever's advice: the 16-bit format the device's peaks are for (datasheet ``half_format``), and the
# TF32 setting where the device has TF32 faster than the rate its FP32 matmuls run at
PRECISION_HOW = {
    "BF16": "run the matrix work in lower precision: torch.autocast(device_type, dtype=torch.bfloat16) or a "
            "bf16/fp16 model",
    "FP16": "run the matrix work in FP16: torch.autocast(device_type, dtype=torch.float16) or an fp16 model "
            "(model.half()); when training, scale the loss so small gradients do not underflow: "
            "torch.amp.GradScaler(\"cuda\") (torch.cuda.amp.GradScaler before PyTorch 2.3)",
}
TF32_HOW = ("; or allow TF32 (torch.set_float32_matmul_precision('high'), torch.backends.cudnn.allow_tf32 = "
            "True)")

HOW = {
    "cuda_graphs": "capture the step in a graph: torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph "
                   "(HIP graphs on ROCm); serving engines: run without eager mode (vLLM without enforce_eager, "
                   "sglang without --disable-cuda-graph)",
    "graphs_outside": "the step already replays as a graph; these ops and calls run outside it every step: "
                      "bring them into the capture (copy inputs into the graph's static buffers on the device, "
                      "read outputs after the replay without a synchronise per step) or cut them",
    "graph_launch": "fewer, larger graphs (one capture of the whole step rather than several) or more work per "
                    "replay (a larger batch); measure the launch without the profiler first (torch.cuda.Event "
                    "around replay()), which does not pay the profiler's per-node cost",
    "cpu_work": "overlap the CPU work with device work (DataLoader num_workers > 0 and pin_memory=True, prefetch "
                "the next batch, a side thread), move it to the device, or cut it",
    "cpu_work_model": "the CPU time is the model's own ops (Python and op dispatch between kernels), not "
                      "input work: cut the op count with torch.compile (mode=\"reduce-overhead\" also captures a "
                      "graph, which removes the dispatch), or give each step more work (a larger batch)",
    "cpu_work_runtime": "the host sat in runtime calls that neither launch nor synchronise (context creation on "
                        "the first device call, allocation, device queries): make one device call before the "
                        "profiled steps (warm-up), and allocate once outside the step (reuse buffers) rather than "
                        "per step",
    "cpu_work_blocked": "the host sat in launch calls that blocked: warm up before the profiled steps (run each "
                        "kernel once first: a module loads on its first launch), or load every module at start "
                        "(CUDA_MODULE_LOADING=EAGER; HIP_ENABLE_DEFERRED_LOADING=0 on ROCm); a launch that blocks "
                        "while the device is busy is a full launch queue instead: the device is the bottleneck, "
                        "not the host",
    "elementwise_loop": "the host time is a loop of small in-place elementwise ops (an optimizer stepping each "
                        "parameter: mul_, add_, addcmul_): use a foreach or fused optimizer "
                        "(torch.optim.AdamW(..., fused=True) or foreach=True), torch.compile the step "
                        "(torch.compile(optimizer.step)), or capture it in a CUDA graph; DataLoader workers do "
                        "not help here",
    "input_pipeline": "feed the device ahead of the step: DataLoader(num_workers > 0, pin_memory=True, "
                      "persistent_workers=True, prefetch_factor >= 2), decode and augment in the workers or on the "
                      "device rather than in the loop, and copy batches with .to(device, non_blocking=True)",
    "pinned_memory": "put the host tensors in pinned memory (tensor.pin_memory(), DataLoader(pin_memory=True)) "
                     "and copy with .to(device, non_blocking=True), or prefetch on a side stream",
    "precision": PRECISION_HOW["BF16"] + TF32_HOW,   # no peak table: what any device may have
    "gemm": "check the GEMM shapes (dimensions multiples of 16/64), the dtype, and the backend's tuning "
            "(PYTORCH_TUNABLEOP_ENABLED=1, hipBLASLt/cuBLASLt tuning, torch.compile(mode=\"max-autotune\"))",
    "memory_bound": "the GEMMs are memory-bound (decode with small batches: each step streams the weights): move "
                    "fewer bytes per token rather than tune the GEMM: batch more requests per step (the same "
                    "weight read serves more tokens), quantise the weights (int8/fp8, 4-bit), speculative decoding "
                    "(several tokens per weight read), or a smaller/quantised lm_head",
    "communication": "overlap the collectives with compute (DDP bucket_cap_mb, FSDP forward/backward prefetch, "
                     "async ops waited on later) or send fewer, larger collectives",
    "no_device_data": "record device activity: torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                      "ProfilerActivity.CUDA]) (CUPTI on NVIDIA, roctracer/rocprofiler on ROCm); check that no "
                      "other profiler holds CUPTI and that profiling is allowed for this user",
    "sync_copy": "keep the value on the device (no .item()/.cpu()/.tolist() inside the step), or copy into "
                 "pinned memory with non_blocking=True and synchronise once, later",
    "stream_wait": "find what the stream waits on before acting: the trace shows the wait, not its cause. Look for a "
                   "stream.wait_event()/wait_stream() (or an event recorded by another thread, process or a previous "
                   "iteration's overlapped work) before the waiting launch, and profile that work too; then make it "
                   "finish earlier or drop the dependency. A synchronising call during the wait is waiting on this work",
    "unrecorded_wait": "profile what came before: start the capture a step earlier, record the other processes "
                       "or streams that feed this one, and check the host and device clocks (a device clock "
                       "ahead of the host's makes launch latency look like waits); until then, read the step "
                       "from its device window",
    "sync_wait": "remove the synchronise from the step (timing or debugging code?), or move it to where the "
                 "result is needed",
    "cpu_fallback": "the op has no kernel for this device, so the backend copied its inputs to the host, ran it "
                    "on the CPU and copied the result back: use an op (or dtype) the device supports, rewrite it "
                    "with supported ops, or move it out of the step (precompute it); the backend's fallback "
                    "warnings name such ops",
}


@dataclass
class Context:
    """What the levers are computed from: the trace, its classified work, and the steady spans."""

    trace: Trace
    work: DeviceWork | None
    labels: Labels | None
    steady: Steady
    candidates: list[Any]
    peaks: Any
    roofline_rows: list[Any]
    target: str
    cpu: bool
    submit: Submit = now   # where levers that read nothing of each other's may run meanwhile (analysis/beside.py)
    # cpu_other_holders(work) as the diagnosis handed it to another thread once the work was found (None: none
    # was, and _cpu_other finds it where it needs it)
    cpu_other_holders: Callable[[], CpuOtherHolders] | None = None

    def leaf(self, *keys: str) -> int:
        """ns in these leaves of the steady budget."""
        return sum(self.steady.leaves.get(k, 0) for k in keys)

    @property
    def window_ns(self) -> int:
        """The device window: the steady span less the waits the trace cannot show (``unrecorded/wait``),
        where the device's own story (busy share, gates) is asked."""
        return self.steady.span_ns - self.leaf(UNRECORDED_LEAF)


def _lever(ctx: Context, kind: str, target: str, gain_ns: float, confidence: str, evidence: str, how: str,
           draws: tuple[str, ...], **kw: Any) -> Lever:
    """A lever with its gain bounded by its leaves."""
    gain = min(max(float(gain_ns), 0.0), float(ctx.leaf(*draws)))
    grade = kw.pop("grade", grade_of(kind))
    return Lever(kind, target, round(gain / 1e3, 3), confidence, evidence, how, draws, grade=grade, **kw)


def _pieces(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The steady spans' pieces: start, ns, index into the trace's labels, leaf."""
    ps = ctx.steady.pieces
    if not ps:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    if len(ps) == 1:   # the diagnosis puts the steady spans' pieces in one run: no copy
        return ps[0].start, ps[0].ns, ps[0].idx, ps[0].label
    return (np.concatenate([p.start for p in ps]), np.concatenate([p.ns for p in ps]),
            np.concatenate([p.idx for p in ps]), np.concatenate([p.label for p in ps]))


def _us(ns: float) -> str:
    return fmt_us(ns / 1e3)


def _top(counter: Counter[str], n: int = 3) -> list[str]:
    return [k for k, _ in counter.most_common(n) if k]


def device_levers(ctx: Context) -> list[Lever]:
    """Every device lever that applies to the steady spans."""
    assert ctx.work is not None and ctx.labels is not None
    start, ns, idx, label = _pieces(ctx)
    # the launch calls holding the launch gaps, the waits' and the fallbacks' levers read nothing the others
    # make: handed to ctx.submit (a report's other thread, ahead of the sections queued there) while the CPU
    # time is split here; the levers are listed in the same order either way
    launches = ctx.submit(lambda: _launch_holders(ctx, start, ns, label), first=True)
    waits = ctx.submit(lambda: [*_stream_wait(ctx, start, ns, label), *_unrecorded_wait(ctx, start, ns, label),
                                *_host_sync(ctx, start, ns, label), *_drained_syncs(ctx, start, ns, label)],
                       first=True)
    fallbacks = ctx.submit(lambda: _cpu_fallback(ctx, start, ns, label), first=True)
    cpu = _cpu_other(ctx, start, ns, label)
    out = _graphs(ctx, ns, idx, label, cpu, launches())
    out += waits()
    out += _cpu_work(ctx, cpu)
    out += _input_pipeline(ctx)
    out += _pinned(ctx, ns, idx, label)
    out += fallbacks()
    out += _precision(ctx, ns, idx, label)
    out += _gemm(ctx)
    comm = ctx.leaf("busy/communication")
    if comm:
        out.append(_lever(ctx, "communication", "collectives", comm, "medium",
                          f"{_us(comm)} of collectives not overlapped with compute", HOW["communication"],
                          ("busy/communication",), kernels=tuple(_kernels(ctx, "communication"))))
    out += fusion_levers(ctx, FUSION_DRAWS, ATTENTION_DRAWS)
    return out


def _kernels(ctx: Context, cls: str, mask: np.ndarray | None = None) -> list[str]:
    w = ctx.work
    assert w is not None
    m = w.cls == BUSY_PRIORITY.index(cls)
    if mask is not None:
        m &= mask
    c: Counter[str] = Counter()
    for name, s, e in zip(w.name[m], w.acts.start[m], w.acts.end[m]):
        c[name] += int(e - s)
    return _top(c)


def _graphs(ctx: Context, ns: np.ndarray, idx: np.ndarray, label: np.ndarray, cpu: CpuOther,
            launches: tuple[Counter[str], Counter[str], int]) -> list[Lever]:
    """Launch-bound spans: a graph replays the kernels without the host launching each one, and without
    dispatching the model's ops in between, so it draws the launch gaps (their holders: ``launches``, from
    :func:`_launch_holders`) and the idle CPU time spent inside the model's own ops (``cpu.model_ns``; the
    rest of that CPU time stays a ``cpu_work`` lever). The idle time inside graph launches themselves is the
    replay's own cost, which no capture removes: it is the ``graph_launch`` lever's. Where graphs already
    replay most of the busy time (:data:`GRAPHED_SHARE`), what is left is the host work outside the graphs,
    and the lever says so."""
    causes = {k: ctx.leaf(k) for k in ("idle/queued", "idle/host_sync", "idle/launch_overhead", "idle/input",
                                       "idle/cpu_other", "idle/no_work")}
    launch = causes["idle/launch_overhead"]
    if not launch:
        return []
    busy = ctx.leaf(*(k for k in LEAVES if k.startswith("busy/")))
    assert ctx.labels is not None
    replayed = int(ns[(label < len(BUSY_PRIORITY)) & ctx.labels.graph[idx]].sum()) if idx.size else 0
    by_call, calls, pieces_ns = launches
    replay_pieces = sum(v for k, v in by_call.items() if is_graph_launch(k))
    replay = round(launch * replay_pieces / max(pieces_ns, 1))  # the leaf's ns (the pieces may be a sample)
    out = [_graph_launch(replay, by_call, calls, ctx)] if replay else []
    eager = launch - replay
    if not eager and not cpu.model_ns:
        return out
    graphed = busy > 0 and replayed >= GRAPHED_SHARE * busy
    idle = sum(causes.values())
    gain = eager + cpu.model_ns
    draws: tuple[str, ...] = ("idle/launch_overhead",) + (("idle/cpu_other",) if cpu.model_ns else ())
    if graphed:
        outside = [k for k, _ in by_call.most_common() if not is_graph_launch(k)][:3]
        ev = (f"graphs already replay {100 * replayed / busy:.0f}% of the busy time; the device still idled "
              f"{_us(gain)} while the host worked outside them: {_us(eager)} launching or wrapping"
              + (f" ({', '.join(outside)})" if outside else "")
              + (f", {_us(cpu.model_ns)} in the model's ops ({', '.join(_top(cpu.model_ops, 3))})" if cpu.model_ns else ""))
    else:
        ev = f"idle {_us(idle)} of the span, {_us(eager)} of it while the host launches"
        if cpu.model_ns:
            ev += f" and {_us(cpu.model_ns)} while it dispatches the model's ops between kernels"
        if replayed:
            ev += f"; graphs already replay {100 * replayed / busy:.0f}% of the busy time: the rest launches eagerly"
    if replay:
        ev += f" (and {_us(replay)} inside graph launches: the graph_launch lever)"
    ev += _submission_evidence(ctx)
    others = max(causes["idle/queued"], causes["idle/host_sync"], causes["idle/no_work"], causes["idle/input"],
                 causes["idle/cpu_other"] - cpu.model_ns)
    span = max(ctx.window_ns, 1)
    # high: most of the span, and nothing in it that makes a capture hard (a synchronise, collectives)
    if graphed:
        confidence = "low"  # the step is captured already: what is left is the work a capture keeps out
    elif gain >= span / 2 and causes["idle/host_sync"] < span / 20 and ctx.leaf("busy/communication") < span / 20:
        confidence = "high"
    elif gain >= others:
        confidence = "medium"
    else:
        confidence = "low"
    how = HOW["graphs_outside"] if graphed else HOW["elementwise_loop"] if _elementwise_loop(cpu.model_ops) \
        else HOW["cuda_graphs"]
    caps = (eager / 1e3, cpu.model_ns / 1e3)[:len(draws)]  # its own parts of each leaf (graph_launch has the rest)
    return [*out, _lever(ctx, "cuda_graphs", ctx.target, gain, confidence, ev, how, draws,
                         ops=tuple(_top(cpu.model_ops, 4)), caps=caps)]


def _submission_evidence(ctx: Context) -> str:
    """On a device other than CUDA, the launch-bound evidence its runtime gives: submissions per step (and
    Neuron's runtime counters), analysis/submissions.py."""
    if ctx.trace.meta.device_kind == "CUDA":
        return ""
    from ..submissions import submission_text, submissions

    return f"; {submission_text(submissions(ctx.trace))}"


def _launch_holders(ctx: Context, start: np.ndarray, ns: np.ndarray,
                    label: np.ndarray) -> tuple[Counter[str], Counter[str], int]:
    """ns of the idle launch-overhead pieces per name of the launch call holding them (a graph launch
    first: an op's kernel launch run can enclose a graph launch made earlier in the same op), how many
    calls of each name hold some, and the ns of all those pieces."""
    m = label == LAUNCH_OVERHEAD
    if not m.any():
        return Counter(), Counter(), 0
    ls, le, names, graph = named_launch_calls(ctx.trace)
    t, v = start[m], ns[m]
    held_g = _covering(ls[graph], le[graph], t)
    rest = held_g < 0
    held_o = _covering(ls[~graph], le[~graph], t[rest])
    by_name = _ns_by_name(names[graph], held_g, v) + _ns_by_name(names[~graph], held_o, v[rest])
    calls = Counter(names[graph][distinct(held_g[held_g >= 0])].tolist())
    calls += Counter(names[~graph][distinct(held_o[held_o >= 0])].tolist())
    return by_name, calls, int(v.sum())


def _graph_launch(replay: int, by_call: Counter[str], calls: Counter[str], ctx: Context) -> Lever:
    """The device idle while the host sits in graph launches: the replay's own launch cost."""
    names = [k for k in by_call if is_graph_launch(k)]
    n = sum(calls[k] for k in names)
    ev = (f"the device idled {_us(replay)} while the host sat in {n} graph launch(es) ({', '.join(names)}), "
          f"{_us(replay / max(n, 1))} each; a kernel-level profiler adds a cost per graph node to each launch, "
          f"so part of this may be the profiler's")
    return _lever(ctx, "graph_launch", ctx.target, replay, "low", ev, HOW["graph_launch"], ("idle/launch_overhead",),
                  caps=(replay / 1e3,))


def _prefix_argmax(end: np.ndarray) -> np.ndarray:
    """For each i, the index of the largest end among 0..i."""
    run = np.maximum.accumulate(end)
    idx: np.ndarray = np.maximum.accumulate(np.where(end == run, np.arange(end.size), 0))
    return idx


def _host_sync(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> list[Lever]:
    w = ctx.work
    assert w is not None
    m = label == HOST_SYNC
    if not m.any() or w.sync_ts.size == 0:
        return []
    j = np.clip(np.searchsorted(w.sync_ts, start[m], side="right") - 1, 0, None)
    call = w.sync_id[_prefix_argmax(w.sync_end)[j]]
    per: Counter[int] = Counter()
    for c, v in zip(call, ns[m]):
        per[int(c)] += int(v)
    sites = _sync_sites(ctx.trace, list(per))
    by_site: dict[tuple[str, str, str, str], list[int]] = {}
    for c, v in per.items():
        site = sites.get(c, ("?", "", "", ""))
        acc = by_site.setdefault(site, [0, 0])
        acc[0] += v
        acc[1] += 1
    out = []
    for (call_name, op, module, frame), (v, n) in by_site.items():
        frame = display_name(frame)
        where = " ".join(x for x in (f"in {op}" if op else "", f"under {module}" if module else "",
                                     f"at {frame}" if frame else "") if x)
        copy = "memcpy" in call_name.lower()
        out.append(_lever(ctx, "host_sync", f"{call_name} {where}".strip(), v, "high",
                          f"the host blocked {_us(v)} in {n} call(s) of {call_name} while the device was idle",
                          HOW["sync_copy" if copy or "item" in op or "local_scalar" in op else "sync_wait"],
                          ("idle/host_sync",), ops=(op,) if op else ()))
    return out


DRAIN_DRAWS = ("idle/launch_overhead",)
_HOST_IDLE = ("idle/host_sync", "idle/launch_overhead", "idle/input", "idle/cpu_other", "idle/no_work")
DRAIN_IDLE_SHARE = 0.1   # a blocking call idle for at most this share of its time: the device ran through it


def _drained_syncs(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> list[Lever]:
    """Blocking calls of 1 ms or more through which the device kept running queued work (idle for at
    most DRAIN_IDLE_SHARE of the call: not ``idle/host_sync``), after which it idled until the host
    launched again: the host could not queue ahead while it blocked, so the queue drained; the gain is
    the launch overhead in the idle run right after the call (the refill; other work the host did
    there is another lever's). Graded inferred (the trace holds the block and the idle after it; that
    one caused the other is a model)."""
    w = ctx.work
    assert w is not None
    long_ = (w.sync_end - w.sync_ts) >= LAUNCH_GAP_MAX_US * 1000
    if not long_.any() or not start.size:
        return []
    t, once = np.unique(start, return_index=True)   # each piece once (sorted), as _waits reads them
    v, lab = ns[once], label[once]
    # a piece that does not follow the one before it (another step's span next) ends any walk
    joined = np.ones(t.size, dtype=bool)
    joined[1:] = t[1:] == t[:-1] + v[:-1]
    after = np.isin(lab, [LEAVES.index(k) for k in _HOST_IDLE])
    refill = lab == LAUNCH_OVERHEAD
    gaps: Counter[int] = Counter()
    blocked: Counter[int] = Counter()
    for cid, cs, ce in zip(w.sync_id[long_].tolist(), w.sync_ts[long_].tolist(), w.sync_end[long_].tolist()):
        i0, i1 = int(np.searchsorted(t, cs)), int(np.searchsorted(t, ce))
        if i1 <= i0 or int(v[i0:i1][lab[i0:i1] == HOST_SYNC].sum()) > DRAIN_IDLE_SHARE * (ce - cs):
            continue
        k = i1
        while k < t.size and after[k] and (k == i1 or joined[k]):
            k += 1
        gap = int(v[i1:k][refill[i1:k]].sum())
        if gap:
            gaps[cid] += gap
            blocked[cid] += ce - cs
    return _sync_levers(ctx, gaps, blocked)


def _sync_levers(ctx: Context, gaps: Counter[int], blocked: Counter[int]) -> list[Lever]:
    """One host_sync lever per call site of the drained blocking calls."""
    sites = _sync_sites(ctx.trace, list(gaps))
    by_site: dict[tuple[str, str, str, str], list[int]] = {}
    for c, gap in gaps.items():
        acc = by_site.setdefault(sites.get(c, ("?", "", "", "")), [0, 0, 0])
        acc[0] += gap
        acc[1] += blocked[c]
        acc[2] += 1
    out = []
    for (call_name, op, module, frame), (gap, held, n) in by_site.items():
        frame = display_name(frame)
        where = " ".join(x for x in (f"in {op}" if op else "", f"under {module}" if module else "",
                                     f"at {frame}" if frame else "") if x)
        ev = (f"the host blocked {_us(held)} in {n} call(s) of {call_name} while the device still ran queued work, "
              f"so it could not queue ahead: each return found the queue drained, and the device idled {_us(gap)} "
              "while the host launched again")
        out.append(_lever(ctx, "host_sync", f"{call_name} {where}".strip(), gap, "medium", ev, HOW["sync_copy"],
                          DRAIN_DRAWS, ops=(op,) if op else (), grade="inferred"))
    return out


STREAM_WAIT_CALL_SQL = """
    SELECT name, ts FROM events WHERE thread = ? AND kind IN ('runtime', 'sync') AND name ILIKE '%StreamWaitEvent%'
      AND ts > ? AND ts <= ? ORDER BY ts DESC, id DESC LIMIT 1"""


@dataclass(frozen=True)
class _Waits:
    """Runs of waiting pieces: their total, how many, and what the longest one held."""

    ns: int
    runs: int
    kernel: str           # the first launched activity to start in the longest run
    stream: int
    text: str             # the evidence about the longest run


def _waits(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray, code: int,
           min_ns: int) -> _Waits | None:
    """The runs of pieces labelled ``code`` (each piece once: steps may share pieces) of at least
    ``min_ns``, and what the trace shows of the longest: which launched work waited in it, the first
    to start (the wait's end released it), and a stream-wait call its thread made before launching it."""
    w = ctx.work
    assert w is not None
    m = label == code
    if not m.any():
        return None
    t, once = np.unique(start[m], return_index=True)
    v = ns[m][once]
    first = np.ones(t.size, dtype=bool)
    first[1:] = t[1:] != t[:-1] + v[:-1]  # a wait is a run of pieces that follow one another
    run_ns = np.bincount(np.cumsum(first) - 1, weights=v).astype(np.int64)
    long_ = run_ns >= min_ns
    if not long_.any():
        return None
    at = int(t[first][np.argmax(run_ns)])  # the longest wait: [at, until)
    until = at + int(run_ns.max())
    a = w.acts
    wait = launch_wait(a)
    waiting = np.flatnonzero(late(a) & (a.start - wait < until) & (a.start > at))
    if not waiting.size:  # cannot happen (the pieces are waits): say nothing rather than guess
        return None
    # the first of them to start (the wait's end released it), the earlier launch on a tie
    i = int(waiting[np.lexsort((a.launch_ts[waiting], a.start[waiting]))[0]])
    stream = int(w.stream[i]) if i < w.stream.size else -1
    on = f" on stream {stream}" if stream >= 0 else ""
    launch = ctx.trace.con.execute("SELECT name FROM events WHERE id = ?", [int(a.launch_id[i])]).fetchone()
    by = f" (launched by {launch[0] if launch else '?'}" + (f" in {w.op_name[i]})" if w.op_name[i] else ")")
    n = int(long_.sum())
    text = (f"in {'the longest' if n > 1 else 'it'} ({_us(until - at)}) {waiting.size} launched "
            f"activit{'y' if waiting.size == 1 else 'ies'} waited; the first to start, {w.name[i]}{on}{by}, started "
            f"{_us(int(wait[i]))} after its launch call ended. ")
    call = _wait_call_before(ctx, a, i)
    if call:
        text += (f"Its thread called {call[0]} {_us(int(a.launch_ts[i] - call[1]))} before that launch, with no "
                 "launch between: the stream may have waited on that event. ")
    return _Waits(int(run_ns[long_].sum()), n, str(w.name[i]), stream, text)


def _stream_wait(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> list[Lever]:
    """Launched work that waited to start while the device idled (``idle/queued``), in waits of at least
    launch overhead's 1 ms bound: a stream held by an event or by work the trace does not show. Shorter
    waits are the device's own gaps between the kernels of a deep queue: no lever (nothing to name)."""
    found = _waits(ctx, start, ns, label, QUEUED, int(LAUNCH_GAP_MAX_US * 1000))
    if found is None:
        return []
    gain, n = found.ns, found.runs
    ev = (f"the device idled {_us(gain)} in {n} wait{'s' if n > 1 else ''} of 1 ms or more while launched work had "
          f"not started; {found.text}What it waited on is not in this trace: work it did not record (a previous "
          "batch's, another process's) or a clock offset between host and device, so the device may not have "
          "been idle")
    return [_lever(ctx, "stream_wait", f"stream {found.stream}" if found.stream >= 0 else "launched work", gain, "low",
                   ev, HOW["stream_wait"], ("idle/queued",), kernels=(found.kernel,))]


def _unrecorded_wait(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> list[Lever]:
    """Waits the trace cannot show to be idle (``unrecorded/wait``): said as such, graded outside the
    trace, never ranked above a lever the trace shows."""
    v = ctx.leaf(UNRECORDED_LEAF)
    found = _waits(ctx, start, ns, label, UNRECORDED, int(LAUNCH_GAP_MAX_US * 1000))  # as stream_wait: 1 ms waits
    if not v or found is None:
        return []
    busy = ctx.leaf(*(k for k in LEAVES if k.startswith("busy/")))
    ev = (f"launched work waited {_us(v)} before any device activity this trace recorded in its step, or at least "
          f"half as long as its step's recorded device work (the steps' together: {_us(busy)}); {found.text}"
          "What the device did meanwhile is "
          "not in this trace: work it did not record (a previous batch's, another process's) or a clock offset "
          f"between host and device, not idle time the trace shows; the device window ({_us(ctx.window_ns)}) is "
          "read without it")
    return [_lever(ctx, "unrecorded_wait", f"stream {found.stream}" if found.stream >= 0 else "launched work", v,
                   "low", ev, HOW["unrecorded_wait"], (UNRECORDED_LEAF,), kernels=(found.kernel,))]


def _wait_call_before(ctx: Context, a: Activities, i: int) -> tuple[str, int] | None:
    """The last ``*StreamWaitEvent`` call of activity i's launching thread before its launch and after that
    thread's previous launch (a wait made for this launch, not an earlier one's), or None."""
    thread, ts = int(a.launch_thread[i]), int(a.launch_ts[i])
    earlier = a.launch_ts[a.launched & (a.launch_thread == thread) & (a.launch_ts < ts)]
    after = int(earlier.max()) if earlier.size else -(2 ** 62)
    row = ctx.trace.con.execute(STREAM_WAIT_CALL_SQL, [thread, after, ts]).fetchone()
    return (str(row[0]), int(row[1])) if row else None


# Blocking calls' sites: the top-level op around each call that started first, and the Python frame (not
# a module scope) around it that started last, the shortest of those; ties go to the earlier event ("around":
# on the call's thread, ``ts <= call ts`` and ``end >= call end``). tests/test_sweeps.py keeps the SQL
# definition (one correlated subquery per call) the sweep below is checked against.
@timed("host-sync sites")
def _sync_sites(trace: Trace, ids: list[int]) -> dict[int, tuple[str, str, str, str]]:
    """Call id -> (call name, outermost op, module class, innermost Python frame), as the comment above
    defines them; found by one sweep per thread over the candidate intervals sorted by start
    (:func:`_holders_of_calls`), in time near-linear in calls + intervals. The candidates are the host
    intervals the diagnosis read already (:func:`budget.shared_work`) where they cover the calls' threads."""
    if not ids:
        return {}
    con = trace.con
    calls = con.execute("""
        SELECT c.id, c.name, c.thread, c.ts, c.ts + c.dur, (SELECT s.name FROM scopes s WHERE s.id = c.module)
        FROM events c WHERE c.id IN (SELECT unnest(?::BIGINT[])) ORDER BY c.id""", [sorted(ids)]).fetchall()
    timed = [r for r in calls if r[2] is not None and r[3] is not None and r[4] is not None]
    shared = _host_candidates(trace, {int(r[2]) for r in timed}, True, np.asarray([r[3] for r in timed], dtype=np.int64),
                              np.asarray([r[4] for r in timed], dtype=np.int64))
    if shared is not None:
        cand, names_of = shared
    else:
        cand, names_of = _candidates_by_sql(con, timed), None
    held = _holders_of_calls(timed, cand)
    wanted = sorted({i for pair in held.values() for i in pair if i >= 0})
    if names_of is not None:
        names = names_of(wanted)
    else:
        names = dict(con.execute("SELECT id, name FROM events WHERE id IN (SELECT unnest(?::BIGINT[]))",
                                 [wanted]).fetchall()) if wanted else {}
    out = {}
    for cid, name, _thread, _ts, _end, module in calls:
        op, frame = held.get(int(cid), (-1, -1))
        out[int(cid)] = (name or "", names.get(op) or "", module or "", names.get(frame) or "")
    return out


def _candidates_by_sql(con: Any, timed: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    """What may hold the calls ``timed`` (id, name, thread, ts, end, ...), read from the events: on a call's
    thread, started by the last call's start, ended by the first call's end, a top-level op or a Python frame
    (not a module's): id, thread, ts, stop, is_op."""
    cand = con.execute(f"""
        SELECT id, thread, ts, ts + dur AS stop, kind = 'cpu_op' AS is_op FROM events
        WHERE thread IN (SELECT unnest(?::INTEGER[])) AND ts <= ? AND ts + dur >= ?
          AND ((kind = 'cpu_op' AND {TOP_OP.format(e="events")}) OR (kind = 'python' AND name NOT LIKE 'nn.Module:%'))""",
        [sorted({int(r[2]) for r in timed}), max((r[3] for r in timed), default=0),
         min((r[4] for r in timed), default=0)]).fetchnumpy()
    return {k: np.asarray(v) for k, v in cand.items()}


def _host_candidates(trace: Trace, threads: set[int], frames: bool, qts: np.ndarray, qend: np.ndarray) -> tuple[
        dict[str, np.ndarray], Callable[[list[int]], dict[int, str]]] | None:
    """The top-level ops (and, with ``frames``, the Python frames but modules' ``nn.Module:`` ones) of
    ``threads`` that hold some call [qts, qend] (:func:`_holds_any`; only those can answer) among the host
    intervals the diagnosis read (:func:`budget.shared_work`), as the events would give them (id, thread, ts,
    stop: ts + dur, is_op), with a function from ids to their names; None where no such read holds every one
    of the threads. An interval of no duration or an unknown one has its own end read again (its ``stop``
    there is ts + 1, which holds no less): those are few."""
    w = shared_work(trace)
    if w is None or not threads <= w.threads:
        return None
    ok_name = _frame_names(w)
    parts = []
    for c in _host_sets(w):
        want = c["top"] | (c["frame"] & ok_name[c["code"]] & ((c["bits"] & NO_NAME) == 0)) if frames else c["top"]
        if threads != w.threads:
            want = want & np.isin(c["thread"], np.asarray(sorted(threads), dtype=c["thread"].dtype))
        at = np.flatnonzero(want & _holds_any(c["ts"], c["stop"], qts, qend))
        parts.append({"id": c["id"][at], "thread": c["thread"][at], "ts": c["ts"][at], "stop": c["stop"][at],
                      "is_op": c["top"][at], "code": c["code"][at], "raw": (c["bits"][at] & RAW_DUR) != 0})
    cand = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if len(parts) > 1 else parts[0]
    cand = _raw_ends(trace, cand)
    names = w.host_names

    def names_of(ids: list[int]) -> dict[int, str]:
        at = np.flatnonzero(np.isin(cand["id"], np.asarray(ids, dtype=np.int64)))
        return {int(i): names[int(c)] for i, c in zip(cand["id"][at].tolist(), cand["code"][at].tolist())}
    return cand, names_of


def _host_sets(w: DeviceWork) -> list[dict[str, np.ndarray]]:
    """The diagnosis's host intervals as two sets of columns: those it keeps and those enclosing a step (id,
    ts, stop, thread, code, bits; top: a top-level op; frame: a Python frame)."""
    kept = {"id": w.host_id, "ts": w.host_ts, "stop": w.host_end, "thread": w.host_thread, "code": w.host_code,
            "bits": w.host_bits, "top": w.host_top, "frame": ~(w.host_op | w.host_runtime)}
    a = w.around
    if not a or not a["id"].size:
        return [kept]
    return [kept, {**{k: a[k] for k in ("id", "ts", "stop", "thread", "code", "bits")}, "top": a["kind"] == 3,
                   "frame": a["kind"] == 0}]


def _frame_names(w: DeviceWork) -> np.ndarray:
    """Per host name code: whether a Python frame of that name may hold a call (a module's ``nn.Module:``
    frame may not)."""
    return np.fromiter((not n.startswith("nn.Module:") for n in w.host_names), dtype=bool, count=len(w.host_names))


def _raw_ends(trace: Trace, cand: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The candidates with the end of those of no (or an unknown) duration read as the events hold it (ts +
    dur), those whose end is unknown dropped (they hold nothing)."""
    raw = np.flatnonzero(cand["raw"])
    if not raw.size:
        return cand
    got = dict(trace.con.execute("SELECT id, ts + dur FROM events WHERE id IN (SELECT unnest(?::BIGINT[]))",
                                 [cand["id"][raw].tolist()]).fetchall())
    stop = cand["stop"].copy()
    known = np.ones(stop.size, dtype=bool)
    for i, r in zip(raw.tolist(), cand["id"][raw].tolist()):
        end = got.get(r)
        known[i] = end is not None
        stop[i] = end if end is not None else 0
    out = {k: v[known] for k, v in cand.items()}
    out["stop"] = stop[known]
    return out


def _holders_of_calls(calls: list[tuple[Any, ...]], cand: dict[str, np.ndarray]) -> dict[int, tuple[int, int]]:
    """Call id -> (id of its outermost op, id of its innermost frame), -1 for none (see :func:`_sync_sites`),
    for ``calls`` (id, name, thread, ts, end, ...) with a thread and times; ``cand``: the top-level ops and
    Python frames that may hold them (id, thread, ts, stop, is_op)."""
    out: dict[int, tuple[int, int]] = {}
    for thread in sorted({int(r[2]) for r in calls}):
        mine = [(r[0], r[3], r[4]) for r in calls if r[2] == thread]
        cid, cts, cend = (np.asarray(a, dtype=np.int64) for a in zip(*mine))
        mine = cand["thread"] == thread
        ts, stop = (np.asarray(cand[k], dtype=np.int64) for k in ("ts", "stop"))
        on = np.flatnonzero(mine) if not mine.all() else None   # one thread (the common case): no copy
        if on is not None:
            ts, stop = ts[on], stop[on]
        held = np.flatnonzero(_holds_any(ts, stop, cts, cend))  # only these can answer
        on = held if on is None else on[held]
        pid, pts, pend = (np.asarray(cand[k], dtype=np.int64)[on] for k in ("id", "ts", "stop"))
        is_op = cand["is_op"][on].astype(bool)
        op = first_holding(pid[is_op], pts[is_op], pend[is_op], cts, cend)
        frame = last_holding(pid[~is_op], pts[~is_op], pend[~is_op], cts, cend)
        out.update(zip(cid.tolist(), zip(op.tolist(), frame.tolist())))
    return out


def _holds_any(ts: np.ndarray, end: np.ndarray, qts: np.ndarray, qend: np.ndarray) -> np.ndarray:
    """Which intervals [ts, end] hold some query interval [qts, qend] (``ts <= qts`` and ``end >= qend``):
    among the queries that start at ts or later, the least qend reaches back to end or before (a search
    per interval over the queries sorted by start). Only these can answer :func:`first_holding` or
    :func:`last_holding`, whose answers are defined by the holders alone."""
    if qts.size == 0:
        return np.zeros(ts.size, dtype=bool)
    order = np.argsort(qts, kind="stable")
    least_end = np.minimum.accumulate(qend[order][::-1])[::-1]   # over the queries from each on
    if ts.size > 64 * qts.size and bool((ts[1:] >= ts[:-1]).all()):
        # sorted intervals (the diagnosis's host intervals), far more than queries: the queries before each
        # interval counted by one pass (a query at qts precedes every interval after the last ts <= qts)
        i = np.bincount(np.searchsorted(ts, qts[order], side="right"), minlength=ts.size + 1)[:-1]
        np.cumsum(i, out=i)
    else:
        i = np.searchsorted(qts[order], ts, side="left")
    # one array as long as the intervals, worked in place: the first query at or after each, then that
    # query's least end (as many intervals as the trace has host events: a report's other thread runs this
    # beside the diagnosis's own passes)
    out: np.ndarray = i < qts.size
    np.minimum(i, qts.size - 1, out=i)
    np.take(least_end.astype(i.dtype, copy=False), i, out=i, mode="clip")
    out &= i <= end
    return out


def first_holding(ids: np.ndarray, ts: np.ndarray, end: np.ndarray, qts: np.ndarray, qend: np.ndarray) -> np.ndarray:
    """For each query interval [qts, qend], the id of the interval holding it (``ts <= qts`` and
    ``end >= qend``) that comes first by (ts, id), or -1: the first interval in that order whose end
    reaches qend (a search over the running maximum of the ends), if it started by qts."""
    out = np.full(qts.size, -1, dtype=np.int64)
    if ids.size == 0 or qts.size == 0:
        return out
    order = np.lexsort((ids, ts))
    ts, end, ids = ts[order], end[order], ids[order]
    i = np.searchsorted(np.maximum.accumulate(end), qend, side="left")
    ok = i < ids.size
    ok[ok] = ts[i[ok]] <= qts[ok]
    out[ok] = ids[i[ok]]
    return out


def last_holding(ids: np.ndarray, ts: np.ndarray, end: np.ndarray, qts: np.ndarray, qend: np.ndarray) -> np.ndarray:
    """For each query interval [qts, qend], the id of the interval holding it (``ts <= qts`` and
    ``end >= qend``) that started last, the shortest of those, then the least id; -1 for none: in the
    order (ts, -end, -id), the last interval started by qts whose end reaches qend (:func:`last_at_least`)."""
    out = np.full(qts.size, -1, dtype=np.int64)
    if ids.size == 0 or qts.size == 0:
        return out
    order = np.lexsort((-ids, -end, ts))
    ts, end, ids = ts[order], end[order], ids[order]
    j = last_at_least(end, np.searchsorted(ts, qts, side="right"), qend)
    out[j >= 0] = ids[j[j >= 0]]
    return out


def last_at_least(v: np.ndarray, k: np.ndarray, x: np.ndarray, width: int = 32) -> np.ndarray:
    """For each query (k, x): the largest index j < k with ``v[j] >= x``, or -1. Each query scans its
    own block of ``width`` values back from k - 1; the rest ask the same question of the blocks' maxima
    (one level up, recursively) and scan the block found: O(width x levels) per query, O(len(v)) memory."""
    v = np.asarray(v, dtype=np.int64)
    k = np.minimum(np.asarray(k, dtype=np.int64), v.size)
    x = np.asarray(x, dtype=np.int64)
    lo = (np.maximum(k, 1) - 1) // width * width  # the start of the block holding k - 1
    out = _scan_back(v, k - 1, lo, x, width)
    todo = np.flatnonzero((out < 0) & (lo > 0))
    if todo.size:
        blocks = -(-v.size // width)
        padded = np.full(blocks * width, np.iinfo(np.int64).min, dtype=np.int64)
        padded[:v.size] = v
        b = last_at_least(padded.reshape(blocks, width).max(axis=1), lo[todo] // width, x[todo], width)
        hit = b >= 0
        todo, b = todo[hit], b[hit]
        out[todo] = _scan_back(v, b * width + width - 1, b * width, x[todo], width)
    return out


def _scan_back(v: np.ndarray, hi: np.ndarray, lo: np.ndarray, x: np.ndarray, width: int) -> np.ndarray:
    """For each query, the largest j in [lo, hi] (at most ``width`` of them) with ``v[j] >= x``, or -1."""
    out = np.full(hi.size, -1, dtype=np.int64)
    for d in range(width):
        j = hi - d
        open_ = (out < 0) & (j >= lo) & (j >= 0)
        if not open_.any():
            break
        hit = open_ & (v[np.clip(j, 0, None)] >= x)
        out[hit] = j[hit]
    return out


def holding_top_ops(trace: Trace, calls_sql: str) -> dict[int, int]:
    """Call id -> the id of the outermost op holding it on its thread (``TOP_OP``; the first by (ts, id)),
    for the calls ``calls_sql`` selects (a query of ids): :func:`first_holding` per thread, one sweep, over the
    host intervals the diagnosis read (:func:`budget.shared_work`) where they cover the calls' threads."""
    c = trace.con.execute(f"""SELECT id, thread, ts, ts + dur AS e FROM events
                              WHERE id IN ({calls_sql}) AND thread IS NOT NULL""").fetchnumpy()
    out: dict[int, int] = {}
    if not len(c["id"]):
        return out
    cthread = np.asarray(c["thread"], dtype=np.int64)
    shared = _host_candidates(trace, {int(t) for t in distinct(cthread)}, False, np.asarray(c["ts"], dtype=np.int64),
                              np.asarray(c["e"], dtype=np.int64))
    if shared is not None:
        o = {"id": shared[0]["id"], "thread": shared[0]["thread"], "ts": shared[0]["ts"], "e": shared[0]["stop"]}
    else:
        threads = ", ".join(str(int(t)) for t in distinct(cthread))
        o = trace.con.execute(f"""SELECT id, thread, ts, ts + dur AS e FROM events WHERE kind = 'cpu_op'
                                  AND {TOP_OP.format(e="events")} AND thread IN ({threads})""").fetchnumpy()
    othread = np.asarray(o["thread"], dtype=np.int64)
    for t in distinct(cthread):
        cm, om = cthread == t, othread == t
        top = first_holding(np.asarray(o["id"], dtype=np.int64)[om], np.asarray(o["ts"], dtype=np.int64)[om],
                            np.asarray(o["e"], dtype=np.int64)[om], np.asarray(c["ts"], dtype=np.int64)[cm],
                            np.asarray(c["e"], dtype=np.int64)[cm])
        out.update((int(i), int(h)) for i, h in zip(np.asarray(c["id"])[cm].tolist(), top.tolist()) if h >= 0)
    return out


def _outer_ops(trace: Trace, ids: list[int]) -> dict[int, str]:
    """Call id -> the outermost op around it (what the code called: ``aten::to``, not its ``copy_``)."""
    if not ids:
        return {}
    wanted = sorted(set(ids))
    top = holding_top_ops(trace, ", ".join(map(str, wanted)))
    held = ", ".join(map(str, set(top.values()))) or "-1"
    names: dict[int, str] = dict(trace.con.execute(f"SELECT id, name FROM events WHERE id IN ({held})").fetchall())
    return {i: (names.get(top[i]) or "") if i in top else "" for i in wanted}


# what a CUDA/HIP runtime call holding idle CPU time is (:func:`_call_kinds`): a call that neither launches nor
# synchronises; a launch call over 1 ms, which blocked (busy.launch_work, the one rule, says it is no launch
# work); a shorter launch call that rule still leaves out of launch overhead (its op ran over 1 ms before it,
# or no device work of its was recorded)
OTHER_CALL, BLOCKED_LAUNCH, LEFT_OUT_LAUNCH = 0, 1, 2


@dataclass(frozen=True)
class InCalls:
    """The idle CPU time inside CUDA/HIP runtime calls, by kind of call (:data:`BLOCKED_LAUNCH`, ...): ns per
    call name, and how many distinct calls of each kind held any."""

    runtime: Counter[str]    # ns per name of the calls that neither launch nor synchronise
    blocked: Counter[str]    # ns per name of the launch calls over 1 ms
    left_out: Counter[str]   # ns per name of the shorter launch calls launch overhead leaves out
    blocked_calls: int
    left_out_calls: int

    @property
    def total_ns(self) -> int:
        """The ns inside any of these calls."""
        return sum(self.runtime.values()) + sum(self.blocked.values()) + sum(self.left_out.values())


class _CallTally:
    """:class:`InCalls` summed over the chunks of idle pieces: each kind's ns per call name, and the calls
    (host interval indices) of each launch kind seen."""

    def __init__(self) -> None:
        self.ns: tuple[Counter[str], Counter[str], Counter[str]] = (Counter(), Counter(), Counter())
        self.calls: tuple[set[int], set[int]] = (set(), set())

    def add(self, names: Sequence[str], code: np.ndarray, kind: np.ndarray, held: np.ndarray, ns: np.ndarray) -> None:
        """Add the pieces' ns (``code``: each one's holding call's name code, -1 none; ``kind``: that call's kind;
        ``held``: its host interval index)."""
        for k, into in enumerate(self.ns):
            into.update(_ns_by_code(names, code, ns, kind == k))
        for k, seen in zip((BLOCKED_LAUNCH, LEFT_OUT_LAUNCH), self.calls):
            seen.update(distinct(held[(kind == k) & (held >= 0)]).tolist())

    def done(self) -> InCalls:
        """The sums."""
        return InCalls(*self.ns, *(len(c) for c in self.calls))


@dataclass(frozen=True)
class CpuOther:
    """The idle CPU time of the launching thread (``idle/cpu_other``): what held it, and how much of it
    was the model's own ops (a graph capture removes that part) or runtime calls (initialisation, blocked
    launches)."""

    total_ns: int
    pieces_ns: int          # the ns of the pieces looked at (the leaf, or the sample of it the pieces are)
    names: Counter[str]     # ns per innermost holder name (top-level op where one holds it)
    ops: Counter[str]       # ns per top-level op
    calls: InCalls          # ns per runtime call holding it, by kind of call
    model_ns: int           # the model's share: inside its ops and forward calls, not in a runtime call
    rest_names: Counter[str]  # names and top-level ops of the rest (outside the model)
    rest_ops: Counter[str]
    model_ops: Counter[str]  # ns per top-level op of the model's share


# idle CPU pieces whose holders are found at once: each answer is an array per piece (about 60 bytes a
# piece in all), so a big trace's millions of pieces (4.5 M on a 1 GB trace) go a chunk at a time, summed
CPU_OTHER_CHUNK = 1 << 20


@dataclass(frozen=True)
class CpuOtherHolders:
    """What :func:`_cpu_other` asks of every idle piece, from the work alone (so it may be found on another
    thread while the time is labelled): masks over the host intervals of the stalls (``stall``), the
    model's intervals (``model``), the top-level ops (``top``) and the runtime calls (``cuda``, None where
    none), each interval's kind as a runtime call (:func:`_call_kinds`), its name code (:meth:`_Held.codes`) and
    its depth as the compiled walk reads it (int64: widened once, not once per chunk of idle pieces)."""

    stall: np.ndarray
    model: np.ndarray
    top: np.ndarray
    cuda: np.ndarray | None
    kinds: np.ndarray
    code: np.ndarray
    depth: np.ndarray


def cpu_other_holders(w: DeviceWork) -> CpuOtherHolders:
    """:class:`CpuOtherHolders` of the work ``w``."""
    # inside the model: under any op or frame of its forward (at any depth: a built-in a forward calls
    # counts), and neither inside a runtime call (initialisation there is a warm-up's, not a graph's) nor
    # inside an op longer than launch overhead's 1 ms bound (a host stall: an allocation, CPU compute)
    gap = LAUNCH_GAP_MAX_US * 1000
    long_ = w.host_end - w.host_ts
    stall = w.host_top & (long_ > gap)
    # in an op over 1 ms whose launches are more than 1 ms apart on average: its own work (initialisation,
    # autotuning, CPU compute), not dispatch; an op that launched more often, a compiled region's wrapper
    # or an autograd node running a compiled backward, is dispatch however long
    stall[stall] = _launch_calls_in(w, stall) * gap < long_[stall]
    return CpuOtherHolders(stall, _model_intervals(w), w.host_top, _cuda_calls(w), _call_kinds(w), _Held.codes(w),
                           w.host_depth.astype(np.int64))


def _cpu_other(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> CpuOther:
    w = ctx.work
    assert w is not None
    v = ctx.leaf("idle/cpu_other")
    if not v:
        return CpuOther(0, 0, Counter(), Counter(), _CallTally().done(), 0, Counter(), Counter(), Counter())
    held = ctx.cpu_other_holders() if ctx.cpu_other_holders is not None else cpu_other_holders(w)
    # each _Cover walks its intervals once over the chunks below: made here, fresh, for this one pass
    top, model, host_top = _Cover(held.stall), _Cover(held.model), _Cover(held.top)
    runtime_calls = None if held.cuda is None else _Cover(held.cuda)
    kinds, code = held.kinds, held.code
    # sums over the chunks, each Counter filled in the order the pieces first name each key (as one pass would)
    ops, free, rest_ops, rest_free, model_ops = (Counter[str]() for _ in range(5))
    calls = _CallTally()
    pieces_ns = model_in_ns = 0
    for lo in range(0, label.size, CPU_OTHER_CHUNK):
        m = label[lo:lo + CPU_OTHER_CHUNK] == CPU_OTHER
        if not m.any():
            continue
        t, v_ns = start[lo:lo + CPU_OTHER_CHUNK][m], ns[lo:lo + CPU_OTHER_CHUNK][m]
        h = _Held.of(w, t, host_top, code, held.depth)  # each time's holders, found once for the counts below
        _held_ns(w, h, v_ns, ops, free)
        in_runtime = _runtime_holders(w, h, v_ns, runtime_calls, kinds, calls)
        inside = (h.covering(top) < 0) & ~in_runtime
        inside &= h.covering(model) >= 0
        _held_ns(w, h, v_ns, rest_ops, rest_free, ~inside)
        model_ops.update(_ns_by_code(w.host_names, h.op_code, v_ns, inside))
        pieces_ns += int(v_ns.sum())
        model_in_ns += int(v_ns[inside].sum())
        del h, t, v_ns, inside, in_runtime   # before the next chunk's are made
    # the model's share of the leaf, in the leaf's own ns (the pieces may be a sample of it)
    model_ns = round(v * model_in_ns / max(pieces_ns, 1))
    return CpuOther(v, pieces_ns, ops + free, ops, calls.done(), model_ns, rest_ops + rest_free, rest_ops, model_ops)


def _launch_calls_in(w: DeviceWork, keep: np.ndarray) -> np.ndarray:
    """Per host interval that ``keep`` selects: how many distinct launch calls its own thread starts inside it."""
    a = w.acts
    _ids, first = np.unique(a.launch_id[a.launched], return_index=True)
    lts, lthr = a.launch_ts[a.launched][first], a.launch_thread[a.launched][first]
    hts, hend, hthread = w.host_ts[keep], w.host_end[keep], w.host_thread[keep]
    out = np.zeros(hts.size, dtype=np.int64)
    for thread in distinct(hthread):
        mine = hthread == thread
        ts = np.sort(lts[lthr == thread])
        out[mine] = np.searchsorted(ts, hend[mine], side="left") - np.searchsorted(ts, hts[mine], side="left")
    return out


@dataclass(frozen=True)
class _Held:
    """What holds each of the times ``t`` among the host intervals (sorted by start): ``after``, how many
    intervals started by each time (searched once for every question below); ``op_code``, the name code
    of the top-level op holding it (as :func:`_covering` finds it), else -1; ``free_code``, where no
    top-level op holds it, the name code of the innermost frame or call holding it (:func:`_holders`),
    else -1 (codes: int32; ``code``: the intervals' codes and a last -1, for no interval). ``scratch``:
    one array per time that each answer below is written into and read from at once (on a big trace each
    is tens of MB: made once, not once per question)."""

    w: DeviceWork
    t: np.ndarray
    after: np.ndarray
    code: np.ndarray
    op_code: np.ndarray
    free_code: np.ndarray
    scratch: np.ndarray

    @staticmethod
    def codes(w: DeviceWork) -> np.ndarray:
        """The host intervals' name codes and a last -1 (no interval): :meth:`of`'s ``code``, made once for
        every chunk of times."""
        return np.append(w.host_code, -1).astype(np.int32, copy=False)

    @classmethod
    def of(cls, w: DeviceWork, t: np.ndarray, host_top: _Cover, code: np.ndarray, depth: np.ndarray) -> _Held:
        """The holders of each time t (``host_top``: the top-level host intervals, ``w.host_top``; ``code``:
        :meth:`codes` of ``w``; ``depth``: ``w.host_depth`` as int64)."""
        after = _started(w.host_ts, t)
        scratch = host_top.covering(w.host_end, after, t)
        op_code = code[scratch]
        after -= 1   # the last interval started by each time, for the walk (and back after it)
        holder = _holders(w.host_ts, w.host_end, depth, w.host_op, t, after, out=scratch)
        after += 1
        free_code = code[holder]
        free_code[op_code >= 0] = -1
        return cls(w, t, after, code, op_code, free_code, scratch)

    def covering(self, keep: _Cover) -> np.ndarray:
        """:func:`_covering` of each time among the host intervals ``keep`` selects (an index among all
        host intervals, or -1), in ``scratch``: read it before the next question."""
        return keep.covering(self.w.host_end, self.after, self.t, out=self.scratch)


class _Cover:
    """Host intervals that a mask selects, asked :func:`_covering_after` for chunks of times in order: the
    compiled walk over the intervals goes on from where the chunk before left it (``walk``), so the
    chunks walk them once in all, not once each (17 chunks of idle pieces at 3 GB, 35 at 6 GB)."""

    def __init__(self, keep: np.ndarray) -> None:
        self.keep = keep
        self.walk = np.array([0, -1, np.iinfo(np.int64).min], dtype=np.int64)

    def covering(self, end: np.ndarray, after: np.ndarray, t: np.ndarray, out: np.ndarray | None = None
                 ) -> np.ndarray:
        """:func:`_covering_after` among the intervals ``keep`` selects (``end``: all the intervals' ends)."""
        return _covering_after(end, self.keep, after, t, out=out, walk=self.walk)


def _held_ns(w: DeviceWork, h: _Held, v_ns: np.ndarray, ops: Counter[str], free: Counter[str],
             sel: np.ndarray | None = None) -> None:
    """Add to ``ops`` the ns per top-level op holding each idle time, and to ``free`` the ns per innermost
    frame or call holding a time no top-level op holds, from :class:`_Held`'s answers for those times
    (those ``sel`` selects); what held each time by name is ``ops + free``."""
    ops.update(_ns_by_code(w.host_names, h.op_code, v_ns, sel))
    free.update(_ns_by_code(w.host_names, h.free_code, v_ns, sel))


def _cpu_work(ctx: Context, cpu: CpuOther) -> list[Lever]:
    """Idle CPU time that a graph capture would not remove (the model's own dispatch is the cuda_graphs
    lever's where the span also waits on launches: then this lever is the rest, named by its holders)."""
    v = cpu.total_ns
    graphs_take = cpu.model_ns if ctx.leaf("idle/launch_overhead") else 0
    if not v or v - graphs_take <= 0:
        return []
    names, ops = (cpu.rest_names, cpu.rest_ops) if graphs_take else (cpu.names, cpu.ops)
    top_names = list(dict.fromkeys(display_name(n) for n in _top(names, 4)))
    ev = f"the launching thread spent {_us(v)} outside launch overhead and waits while the device was idle"
    if graphs_take:
        ev += f"; {_us(graphs_take)} of it is the model's op dispatch (the cuda_graphs lever's), the other " \
              f"{_us(v - graphs_take)} is not"
    ev += f": {', '.join(top_names)}" if top_names else ""
    in_calls = cpu.calls.total_ns > cpu.pieces_ns / 2   # initialisation, allocation, queries, blocked launches
    ev += _in_calls_evidence(cpu, in_calls)
    if in_calls:
        how = _in_calls_how(cpu.calls)
    elif _elementwise_loop(ops):
        ev += f" ({100 * _loop_share(ops):.0f}% of it in in-place elementwise ops: a per-parameter loop)"
        how = HOW["elementwise_loop"]
    elif cpu.model_ns > v / 2 and not graphs_take:
        ev += f" ({100 * cpu.model_ns / v:.0f}% of it inside the model's ops and forward calls)"
        how = HOW["cpu_work_model"]
    else:
        how = HOW["cpu_work"]
    return [_lever(ctx, "cpu_work", ctx.target, v - graphs_take, "medium", ev, how, ("idle/cpu_other",),
                   ops=tuple(_top(ops, 4)))]


CALL_ADVICE_SHARE = 0.05   # a kind of runtime call holding this share of the time inside calls gets its advice


def _in_calls_evidence(cpu: CpuOther, runtime: bool) -> str:
    """What of the idle CPU time sat inside runtime calls: launch calls over 1 ms (blocked) and the shorter
    launch calls launch overhead leaves out, wherever they hold any (a launch call's time is never left
    unexplained), and (``runtime``) the calls that neither launch nor synchronise."""
    c = cpu.calls

    def leaf_ns(part: Counter[str]) -> int:   # the leaf's ns (the pieces may be a sample of it)
        return round(cpu.total_ns * sum(part.values()) / max(cpu.pieces_ns, 1))

    parts = []
    if c.blocked:
        parts.append(f"{_us(leaf_ns(c.blocked))} of it in {c.blocked_calls} launch call{_s(c.blocked_calls)} over "
                     f"1 ms ({', '.join(_top(c.blocked, 3))}): a blocked launch, such as a module's first load or "
                     "a full launch queue")
    if c.left_out:
        parts.append(f"{_us(leaf_ns(c.left_out))} in {c.left_out_calls} shorter launch call{_s(c.left_out_calls)} "
                     f"({', '.join(_top(c.left_out, 3))}) that launch overhead leaves out: the op around each ran "
                     "over 1 ms before it, or no device work of its was recorded")
    if runtime and c.runtime:
        pct = 100 * sum(c.runtime.values()) / max(cpu.pieces_ns, 1)
        parts.append(f"{_us(leaf_ns(c.runtime))} ({f'{pct:.0f}%' if pct >= 0.5 else 'under 1%'}) inside runtime "
                     f"calls that neither launch nor synchronise: {', '.join(_top(c.runtime, 3))}")
    return f" ({'; '.join(parts)})" if parts else ""


def _in_calls_how(c: InCalls) -> str:
    """The advice for idle CPU time mostly inside runtime calls: for blocked launches (a warm-up, eager module
    loading) and for the calls that neither launch nor synchronise (a warm-up call, allocation outside the
    step), the larger first, each where it holds at least :data:`CALL_ADVICE_SHARE` of the time in calls."""
    total = max(c.total_ns, 1)
    held = sorted(((sum(c.blocked.values()), HOW["cpu_work_blocked"]), (sum(c.runtime.values()), HOW["cpu_work_runtime"])),
                  key=lambda p: -p[0])
    advice = [how for ns, how in held if ns >= CALL_ADVICE_SHARE * total]
    return "; ".join(advice) or HOW["cpu_work"]


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _input_pipeline(ctx: Context) -> list[Lever]:
    """The device idle while the step waits on its next batch (``idle/input``: a DataLoader's ``__next__``)."""
    v = ctx.leaf("idle/input")
    if not v:
        return []
    ev = (f"the step waited {_us(v)} for its next batch (inside the DataLoader's __next__) while the device was "
          f"idle: {100 * v / max(ctx.window_ns, 1):.0f}% of the device window")
    confidence = "high" if 4 * v >= ctx.window_ns else "medium"
    return [_lever(ctx, "input_pipeline", "the input pipeline", v, confidence, ev, HOW["input_pipeline"],
                   ("idle/input",))]


LOOP_SHARE = 0.5   # in-place elementwise ops hold over this share: a per-parameter loop (an optimizer's step)


def _loop_share(ops: Counter[str]) -> float:
    """The share of ``ops``' time held by in-place elementwise ops (``mul_``, ``add_``, ``addcmul_``, ...)."""
    total = sum(ops.values())
    loop = sum(v for name, v in ops.items() if name.endswith("_") and op_class(name) == "pointwise")
    return loop / total if total else 0.0


def _elementwise_loop(ops: Counter[str]) -> bool:
    """Per-op host overhead of a loop of in-place elementwise ops (an optimizer stepping each parameter)."""
    return _loop_share(ops) > LOOP_SHARE


_PYBIND_METHOD = re.compile(r"<built-in method (\w*) of pybind11_builtins\.\S+ object at 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r" object at 0x[0-9a-fA-F]+>")
_PROFILER_OWN = ("_record_function_enter", "_record_function_exit", "torch/autograd/profiler.py(",
                 "torch/profiler/profiler.py(")


def display_name(name: str) -> str:
    """A holder's name as a reader wants it: the profiler's own marks (record_function enter and exit)
    said to be the profiler's, and a pybind11 method's repr without its address (which differs per run)."""
    if any(p in name for p in _PROFILER_OWN):
        return "the profiler's own step marks (record_function)"
    name = _PYBIND_METHOD.sub(lambda m: f"<built-in method {m.group(1) or '(unnamed)'} (pybind11)>", name)
    return _ADDRESS.sub(">", name)


def _cuda_calls(w: DeviceWork) -> np.ndarray | None:
    """The host intervals that are CUDA/HIP runtime or driver calls (not an accelerator's executor scopes,
    as on MTIA): a mask, or None where there are none."""
    rt = w.host_runtime
    if rt.size == 0 or not rt.any():
        return None
    out: np.ndarray = rt & _per_name(w, lambda n: n.startswith(("cuda", "hip", "cu")))
    return out


def _call_kinds(w: DeviceWork) -> np.ndarray:
    """Each host interval's kind as a runtime call holding idle CPU time (:data:`BLOCKED_LAUNCH`, ...), and a
    last :data:`OTHER_CALL` (for no interval): a launch call (the device vocabulary's) that is no launch work by
    :func:`busy.launch_work` on its own length blocked; a shorter one is left out of launch overhead all the
    same (the budget gives a call's idle time to launch overhead only where the call launched recorded work
    and its op's dispatch up to it is launch work); any other call neither launches nor synchronises (a
    synchronising call's time is ``idle/host_sync``)."""
    launch = _per_name(w, is_launch)
    kinds = np.zeros(w.host_code.size + 1, dtype=np.int8)
    if launch.any():
        graph = _per_name(w, is_graph_launch)[launch]
        work = launch_work(w.host_end[launch] - w.host_ts[launch], graph)
        kinds[:-1][launch] = np.where(work, LEFT_OUT_LAUNCH, BLOCKED_LAUNCH)
    return kinds


def _runtime_holders(w: DeviceWork, h: _Held, ns: np.ndarray, cuda: _Cover | None, kinds: np.ndarray,
                     into: _CallTally) -> np.ndarray:
    """Add to ``into`` the ns per runtime call holding each idle time, by the call's kind (``kinds``:
    :func:`_call_kinds`; ``cuda``: :func:`_cuda_calls`), and return which times a runtime call holds."""
    if cuda is None or h.t.size == 0:
        return np.zeros(h.t.size, dtype=bool)
    held = h.covering(cuda)
    into.add(w.host_names, h.code[held], kinds[held], held, ns)
    out: np.ndarray = held >= 0
    return out


def _model_intervals(w: DeviceWork) -> np.ndarray:
    """The host intervals of the model's forward (a mask): its module and forward frames (compiled regions
    too), and the top-level ops that launched device work (a graph replays those; an op that only computes
    on the CPU, preprocessing, is not the model's dispatch)."""
    # a compiled region's own frames are not counted: its guards and wrapper still run when the region
    # replays a graph (mode="reduce-overhead"); the ops it launches from still count below
    keep = _per_name(w, lambda n: _in_model(n) and not n.startswith(("aten::", *_COMPILED_FRAMES)))
    launched = np.sort(w.acts.launch_ts[w.acts.launched])
    top = w.host_top & ~keep
    keep[top] = (np.searchsorted(launched, w.host_end[top], side="left")
                 - np.searchsorted(launched, w.host_ts[top], side="left")) > 0
    return keep


_COMPILED_FRAMES = ("Torch-Compiled Region", "TorchDynamo", "CompiledFunction")


def _in_model(name: str) -> bool:
    """An op or frame of the model's forward (aten/framework ops, nn.Module calls), not data loading or
    other Python around the model."""
    return (name.startswith(("aten::", "nn.Module:", *_COMPILED_FRAMES))
            or "nn/modules/" in name or name.endswith("forward") or "_call_impl" in name)


def _covering(ts: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time t, the index of an interval (sorted by start) holding it, or -1: the one with
    the latest end among those started by t (the later one on a tie)."""
    return _covering_after(end, None, _started(ts, t), t)


def _started(ts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of the sorted ``ts`` each time follows or equals (``searchsorted(ts, t, side="right")``, each
    search from the one before: :func:`budget.search_sorted`)."""
    return search_sorted(ts, t, "right")


def _covering_after(end: np.ndarray, keep: np.ndarray | None, after: np.ndarray, t: np.ndarray,
                    out: np.ndarray | None = None, walk: np.ndarray | None = None) -> np.ndarray:
    """:func:`_covering` among the intervals ``keep`` selects (None: all), given ``after``, how many
    intervals (all of them) started by each time (:func:`_started`); the answer indexes all the intervals
    (written into ``out`` where given: int64, one per time). ``walk``: the compiled walk's state for these
    very ``end`` and ``keep`` (see :class:`_Cover`), which it goes on from and updates."""
    if out is None:
        out = np.empty(t.size, dtype=np.int64)
    if end.size == 0:
        out[:] = -1
        return out
    if keep is None:
        keep = np.ones(end.size, dtype=bool)
    if compiled.enabled():  # the same answer in C (trace/_accel.c, covering), with no array per interval
        args = (np.ascontiguousarray(end, dtype=np.int64), np.ascontiguousarray(keep, dtype=bool),
                np.ascontiguousarray(after, dtype=np.int64), np.ascontiguousarray(t, dtype=np.int64), out)
        compiled.accel.covering(*args, *(() if walk is None else (walk,)))
        return out
    out[:] = _covering_numpy(end, keep, after, t)
    return out


def _covering_numpy(end: np.ndarray, keep: np.ndarray, after: np.ndarray, t: np.ndarray) -> np.ndarray:
    """:func:`_covering_after` in numpy: the running answer is worked out once per interval, so each time
    costs two look-ups, not a search."""
    n = end.size
    e = np.where(keep, end, np.iinfo(np.int64).min)
    lead = (e == np.maximum.accumulate(e)) & keep  # the latest end so far: the answer from here on (till the next)
    best = np.empty(n + 1, dtype=np.int64)   # [i]: the answer among the first i intervals, -1 for none
    best[0] = -1
    np.maximum.accumulate(np.where(lead, np.arange(n, dtype=np.int64), -1), out=best[1:])
    at = best[after]
    out: np.ndarray = np.where((at >= 0) & (end[at] > t), at, -1)
    return out


def _holders(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, is_op: np.ndarray, t: np.ndarray,
             last: np.ndarray | None = None, back: int = 64, out: np.ndarray | None = None) -> np.ndarray:
    """For each time t, the index of what held it, or -1: the outermost op holding it (what the code
    called), else the innermost Python frame or runtime call (among the ``back`` latest starts before t);
    ``last``: the last interval started by each time, when already searched; ``out``: where to write the
    answer (int64, one per time), when given."""
    best = np.empty(t.size, dtype=np.int64) if out is None else out
    if ts.size == 0 or t.size == 0:
        best[:] = -1
        return best
    if last is None:
        last = np.searchsorted(ts, t, side="right") - 1
    if compiled.enabled():  # the same walk in C (trace/_accel.c, holders)
        compiled.accel.holders(*(np.ascontiguousarray(a, dtype=np.int64) for a in (ts, end, depth, t, last)),
                               np.ascontiguousarray(is_op, dtype=bool), back, best)
        return best
    best[:] = _holders_numpy(ts, end, depth, is_op, t, last, back)
    return best


def _holders_numpy(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, is_op: np.ndarray, t: np.ndarray,
                   last: np.ndarray, back: int) -> np.ndarray:
    """For each time t, the index of its holder among the ``back`` intervals started latest by it
    (``last``: the latest), or -1: an op beats any non-op; among ops the shallowest wins, among the
    others the deepest; on a tie the later start."""
    best = np.full(t.size, -1, dtype=np.int64)
    if ts.size == 0:
        return best
    best_score = np.full(t.size, -(2 ** 40), dtype=np.int64)
    for k in range(back):
        j = last - k
        ok = j >= 0
        jc = np.clip(j, 0, None)
        score = np.where(is_op[jc], 2 ** 30 - depth[jc], depth[jc])
        hold = ok & (ts[jc] <= t) & (t < end[jc]) & (score > best_score)
        best = np.where(hold, jc, best)
        best_score = np.where(hold, score, best_score)
    return best


def _ns_by_name(name: np.ndarray, idx: np.ndarray, ns: np.ndarray) -> Counter[str]:
    """ns per ``name[i]`` summed over the pieces whose index ``idx`` is not -1: a Counter filled in
    the order the pieces first name each name (as a loop over the pieces would fill it)."""
    listed = name.tolist()
    index = {n: i for i, n in enumerate(dict.fromkeys(listed))}   # each distinct name once
    code = np.fromiter(map(index.__getitem__, listed), dtype=np.int32, count=len(listed))
    return _ns_by_code([str(n) for n in index], np.append(code, np.int32(-1))[idx], ns)


def _ns_by_code(names: Sequence[str], code: np.ndarray, ns: np.ndarray, sel: np.ndarray | None = None) -> Counter[str]:
    """ns per ``names[c]`` summed over the pieces (those ``sel`` selects) whose name code ``c`` is not -1
    (integer sums: no string is touched per piece), as a Counter filled in the order the pieces first name
    each name."""
    code = np.ascontiguousarray(code, dtype=np.int32)
    ns = np.ascontiguousarray(ns, dtype=np.int64)
    sel = np.ones(code.size, dtype=bool) if sel is None else np.ascontiguousarray(sel, dtype=bool)
    totals = np.empty(len(names), dtype=np.int64)
    first = np.empty(len(names), dtype=np.int64)
    if compiled.enabled():  # one pass in C (trace/_accel.c, tally)
        compiled.accel.tally(code, ns, sel, totals, first)
    else:
        _tally_numpy(code, ns, sel, totals, first)
    seen = np.flatnonzero(first >= 0)
    seen = seen[np.argsort(first[seen])]   # in the order the pieces first name them (first uses differ)
    out: Counter[str] = Counter()
    for i, v in zip(seen.tolist(), totals[seen].tolist()):
        out[names[i]] += v
    return out


def _tally_numpy(code: np.ndarray, ns: np.ndarray, sel: np.ndarray, totals: np.ndarray, first: np.ndarray) -> None:
    """Into ``totals`` and ``first`` (one per code): the ns of the selected pieces of each code, and the
    first of them (-1: none); a code of -1 is no name."""
    held = np.flatnonzero((code >= 0) & sel)
    c = code[held]
    if c.size and int(c.max()) >= totals.size:
        raise ValueError("tally: a code is out of range")
    totals[:] = 0
    np.add.at(totals, c, ns[held])
    first[:] = held.size
    np.minimum.at(first, c, np.arange(held.size, dtype=np.int64))
    first[first == held.size] = -1
    found = first >= 0
    first[found] = held[first[found]]


def _per_name(w: DeviceWork, flag: Callable[[str], bool]) -> np.ndarray:
    """``flag`` of each host interval's name (a mask), worked out once per distinct name."""
    once = np.fromiter((flag(n) for n in w.host_names), dtype=bool, count=len(w.host_names))
    out: np.ndarray = once[w.host_code] if once.size else np.zeros(w.host_code.size, dtype=bool)
    return out


def _pinned(ctx: Context, ns: np.ndarray, idx: np.ndarray, label: np.ndarray) -> list[Lever]:
    assert ctx.labels is not None and ctx.work is not None
    if not idx.size:
        return []
    v = int(ns[(label == BUSY_PRIORITY.index("memcpy_h2d")) & ctx.labels.pageable[idx]].sum())
    if not v:
        return []
    w = ctx.work
    outer = _outer_ops(ctx.trace, [int(i) for i in w.acts.launch_id[w.pageable] if i >= 0])
    ops: Counter[str] = Counter()
    for lid, s, e in zip(w.acts.launch_id[w.pageable], w.acts.start[w.pageable], w.acts.end[w.pageable]):
        ops[outer.get(int(lid), "")] += int(e - s)
    return [_lever(ctx, "pinned_memory", ", ".join(_top(ops)) or "host-to-device copies", v, "high",
                   f"{_us(v)} of pageable host-to-device copies not overlapped with compute", HOW["pinned_memory"],
                   ("busy/memcpy_h2d",), ops=tuple(_top(ops)))]


# A CPU fallback: a top-level op that launched no device work, run between an op that copied device
# memory to the host and one that copied host memory back (aten::to -> _to_copy -> copy_ around it)
FALLBACK_DRAWS = ("busy/memcpy_d2h", "busy/memcpy_h2d", "idle/host_sync", "idle/launch_overhead",
                  "idle/cpu_other", "idle/no_work")
COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::item", "aten::_local_scalar_dense", "aten::cpu",
            "aten::contiguous", "aten::clone", "aten::empty", "aten::empty_strided")
# ops that make a tensor from nothing (the next batch's inputs made on the host): no device input fell back
_FACTORY = re.compile(r"^aten::(rand\w*|normal|bernoulli|uniform|zeros\w*|ones\w*|full\w*|arange|linspace|logspace|"
                      r"eye|tensor|scalar_tensor|from_numpy|lift_fresh\w*|empty\w*)$")


@dataclass(frozen=True)
class Fallback:
    """One CPU fallback: the op, the ops that copied to the host before it and back after it, and the
    round trip from the first copy's start to the last one's end (ns)."""

    op: str
    before: str
    after: str
    copies: tuple[str, str]
    ts: int
    dur: int
    window: tuple[int, int]


def cpu_fallbacks(trace: Trace) -> list[Fallback]:
    """Every CPU fallback of the trace, in time order (docs/advisor.md, ``cpu_fallback``): on a launching
    thread, three top-level ops in a row, the first of which launched a device-to-host copy, the last a
    host-to-device copy, and the middle one no device work at all (nor is it a copy, an allocation, or a
    factory op such as ``aten::randint``, which makes the next inputs on the host rather than falling back)."""
    from ..kernel_class import memcpy_class

    tops = holding_top_ops(trace, "SELECT launch FROM events WHERE kind = 'memcpy' AND launch IS NOT NULL")
    copies = [(name, ts, end, thread, tops.get(int(launch)), memcpy_class(name, call, recorded))
              for name, ts, end, thread, launch, call, recorded in trace.con.execute("""
        SELECT d.name, d.ts, d.ts + d.dur, l.thread, l.id, l.name, r.direction
        FROM events d JOIN events l ON l.id = d.launch LEFT JOIN directions r ON r.id = d.id
        WHERE d.kind = 'memcpy' ORDER BY d.ts, d.id""").fetchall()]
    d2h: dict[int, tuple[str, int, int]] = {}
    h2d: dict[int, tuple[str, int, int]] = {}
    held: dict[int, int] = {}   # top op -> copies it launched
    for name, ts, end, _thread, top, way in copies:
        if top is not None:
            held[int(top)] = held.get(int(top), 0) + 1
            (d2h if way == "memcpy_d2h" else h2d if way == "memcpy_h2d" else {}).setdefault(int(top), (name, ts, end))
    if not d2h or not h2d:
        return []
    ops = _ops_after_copies(trace, {int(c[3]) for c in copies}, d2h)
    if ops is None:
        threads = ", ".join(str(int(t)) for t in sorted({c[3] for c in copies}))
        ops = trace.con.execute(f"""
            SELECT id, name, ts, dur, thread, coalesce(kernels_total, 0) FROM events
            WHERE kind = 'cpu_op' AND thread IN ({threads}) AND {TOP_OP.format(e="events")}
            ORDER BY thread, ts, id""").fetchall()
    return sorted(_fallbacks_between(ops, d2h, h2d) + _fallbacks_within(ops, d2h, h2d, held), key=lambda f: f.ts)


def _ops_after_copies(trace: Trace, threads: set[int], d2h: dict[int, tuple[str, int, int]]) -> list[Any] | None:
    """The top-level ops of ``threads`` that :func:`_fallbacks_between` and :func:`_fallbacks_within` can use,
    as the events give them (id, name, ts, dur, thread, kernels_total), in (thread, ts, id) order: each op
    that copied to the host and the two top-level ops after it on its thread, a None row between runs (no
    triple spans one), from the host intervals the diagnosis read (:func:`budget.shared_work`); None where
    they do not cover the threads."""
    w = shared_work(trace)
    if w is None or not threads <= w.threads:
        return None
    sets = [(c["id"][c["top"]], c["thread"][c["top"]], c["ts"][c["top"]]) for c in _host_sets(w)]
    ids, thread, ts = (np.concatenate([x[k] for x in sets]) for k in range(3))
    if threads != w.threads:
        mine = np.isin(thread, np.asarray(sorted(threads), dtype=thread.dtype))
        ids, thread, ts = ids[mine], thread[mine], ts[mine]
    order = np.lexsort((ids, ts, thread))
    at = np.flatnonzero(np.isin(ids[order], np.fromiter(d2h, dtype=np.int64, count=len(d2h))))
    take = distinct(np.concatenate([at, at + 1, at + 2]))
    take = take[take < order.size]
    rows = {int(r[0]): r for r in trace.con.execute("""
        SELECT id, name, ts, dur, thread, coalesce(kernels_total, 0) FROM events
        WHERE id IN (SELECT unnest(?::BIGINT[]))""", [ids[order[take]].tolist()]).fetchall()}
    out: list[Any] = []
    prev = -2
    for k, i in zip(take.tolist(), ids[order[take]].tolist()):
        if out and k != prev + 1:   # a gap: the triples do not run across it
            out.append(None)
        out.append(rows[i])
        prev = k
    return out


def _falls_back(op: tuple[Any, ...]) -> bool:
    """An op that could have fallen back: it ran for a while and is no copy, factory, view or allocation op
    (:data:`..step_stats.NO_WORK`: those do no arithmetic on any device)."""
    from ..step_stats import NO_WORK

    return bool(op[3] > 0 and op[1] not in COPY_OPS and op[1] not in NO_WORK and not _FACTORY.match(op[1]))


def _fallbacks_between(ops: list[Any], d2h: dict[int, tuple[str, int, int]],
                       h2d: dict[int, tuple[str, int, int]]) -> list[Fallback]:
    """The op between the op that copied to the host and the op that copied back (it launched nothing); ``ops``:
    top-level op rows in (thread, ts, id) order, a None row where a run of them breaks."""
    out = []
    for p, x, n in zip(ops, ops[1:], ops[2:]):
        if p is None or x is None or n is None:
            continue
        if p[4] == x[4] == n[4] and p[0] in d2h and n[0] in h2d and x[5] == 0 and _falls_back(x):
            first, last = d2h[p[0]], h2d[n[0]]
            out.append(Fallback(x[1], p[1], n[1], (first[0], last[0]), int(x[2]), int(x[3]),
                                (int(first[1]), int(last[2]))))
    return out


def _fallbacks_within(ops: list[Any], d2h: dict[int, tuple[str, int, int]],
                      h2d: dict[int, tuple[str, int, int]], held: dict[int, int]) -> list[Fallback]:
    """The op that copied its input to the host and its result back itself, and launched nothing else: a
    backend's boxed CPU fallback, recorded inside the op (``aten::silu`` holding ``aten::_to_cpu`` and
    ``aten::to``)."""
    out = []
    for x in ops:
        if x is None:
            continue
        first, last = d2h.get(x[0]), h2d.get(x[0])
        if first and last and first[1] < last[1] and x[5] == held[x[0]] and _falls_back(x):
            out.append(Fallback(x[1], x[1], x[1], (first[0], last[0]), int(x[2]), int(x[3]),
                                (int(first[1]), int(last[2]))))
    return out


def _cpu_fallback(ctx: Context, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> list[Lever]:
    """One ``cpu_fallback`` lever per op that fell back: the round trips' time in the steady spans (the
    copies and the device idle between them), bounded by those pieces' leaves (what the op would take on
    the device is not known: not subtracted, said so)."""
    found = [f for f in cpu_fallbacks(ctx.trace) if start.size]
    if not found:
        return []
    draws = [LEAVES.index(k) for k in FALLBACK_DRAWS]
    by_op: dict[str, list[Fallback]] = {}
    for f in found:
        by_op.setdefault(f.op, []).append(f)
    out = []
    for op, falls in by_op.items():
        inside = np.zeros(start.size, dtype=bool)
        for f in falls:
            inside |= (start >= f.window[0]) & (start < f.window[1])
        take = inside & np.isin(label, draws)
        caps = tuple(float(ns[take & (label == k)].sum()) / 1e3 for k in draws)
        gain = sum(caps) * 1e3
        if not gain:
            continue
        f = falls[0]
        how = (f"its own copies moved its input to the host ({f.copies[0]}) and the result back ({f.copies[1]})"
               if f.before == op == f.after else
               f"{f.before} copied its input to the host ({f.copies[0]}) and {f.after} copied the result back "
               f"({f.copies[1]})")
        ev = (f"{op} ran on the CPU ({len(falls)} time(s), {_us(sum(x.dur for x in falls))} in all) between device "
              f"work: {how}; from the first copy's start to the last one's end the device ran the copies or "
              f"idled for {_us(gain)} (less what {op} would take on the device, which the trace cannot show)")
        out.append(_lever(ctx, "cpu_fallback", op, gain, "medium", ev, HOW["cpu_fallback"], FALLBACK_DRAWS,
                          ops=(op, f.before, f.after), caps=caps))
    return out


def _precision(ctx: Context, ns: np.ndarray, idx: np.ndarray, label: np.ndarray) -> list[Lever]:
    assert ctx.labels is not None and ctx.work is not None
    if not idx.size:
        return []
    mat = (label == BUSY_PRIORITY.index("gemm")) | (label == BUSY_PRIORITY.index("conv"))
    v = int(ns[mat & ctx.labels.fp32[idx]].sum())
    if not v:
        return []
    if ctx.peaks is not None:
        found = _precision_peaks(ctx.peaks, v)
        if found is None:
            return []
        gain, ev, how = found
        conf = "medium"
    else:
        gain, conf, how = v * (1 - 1 / FP32_UNKNOWN_SPEEDUP), "low", HOW["precision"]
        ev = f"{_us(v)} of FP32 GEMM/conv kernels; no peak table for this device: assumed {FP32_UNKNOWN_SPEEDUP:g}x"
    kernels = tuple(_kernels(ctx, "gemm", ctx.work.fp32) + _kernels(ctx, "conv", ctx.work.fp32))[:4]
    return [_lever(ctx, "precision", "FP32 GEMM/conv kernels", gain, conf, ev, how,
                   ("busy/gemm", "busy/conv"), kernels=kernels)]


def _precision_peaks(p: Any, v: int) -> tuple[float, str, str] | None:
    """The precision lever's gain (ns), evidence and advice from the device's peaks, naming only the formats
    the device has (its ``half_format``; TF32 where ``tf32_kind`` says so): ``v`` ns of FP32 matrix kernels at
    the fastest of them over the rate they run at now (FP32; AMD CDNA2's FP32 matrix rate, which its FP32
    GEMMs already run at). None where nothing is faster."""
    tf32 = p.tflops_tf32 if p.tf32_kind == "TF32" else 0.0
    now = max(p.tflops_fp32, p.tflops_tf32) if p.tf32_kind == "FP32 matrix" else p.tflops_fp32
    fast = max(tf32, p.tflops_half)
    if fast <= now:
        return None
    # each format's own dense peak: the gain is the 16-bit one's (autocast), TF32's said apart (a setting, no cast)
    to = p.half_format if p.tflops_half >= tf32 else "TF32"
    rates = [("FP32", p.tflops_fp32), *([(p.tf32_kind, p.tflops_tf32)] if p.tf32_kind else []),
             (p.half_format, p.tflops_half)]
    ev = (f"{_us(v)} of FP32 GEMM/conv kernels; {p.source} (dense): {', '.join(f'{k} {r:g}' for k, r in rates)} "
          f"TFLOP/s; the gain assumes {to}")
    if now > p.tflops_fp32:
        ev += " against the FP32 matrix rate (this device's FP32 GEMMs run on its matrix cores as they are)"
    if to != "TF32" and now < tf32 < p.tflops_half:
        ev += f" (TF32 alone: up to {_us(v * (1 - now / tf32))})"
    return v * (1 - now / fast), ev, PRECISION_HOW[p.half_format] + (TF32_HOW if tf32 > now else "")


def _decode_tokens(ctx: Context) -> int | None:
    """The most tokens a step serves where every step of the trace is a decode step that says how many (its
    name's tokens, else its batch: one token per sequence); None otherwise (prefill, mixed, no count)."""
    steps = step_model(ctx.trace).steps
    counts = [s.info.tokens if s.info.tokens is not None else s.info.batch for s in steps if s.info.phase == "decode"]
    if not steps or len(counts) != len(steps) or any(c is None or c <= 0 for c in counts):
        return None
    return max(c for c in counts if c is not None)


def _no_flop_model(ctx: Context) -> str:
    """Why the GEMMs have no FLOP model: no peaks for the device; ops that launched them (not in a graph replay)
    where the trace records no input shapes at all (the profile ran without ``record_shapes``); else no op with
    recorded shapes launched them (graph replays, compiled regions)."""
    if ctx.peaks is None:
        return "no peaks for this device"
    w = ctx.work
    assert w is not None
    eager = (w.cls == BUSY_PRIORITY.index("gemm")) & ~w.graph & (w.op_name != "")
    shaped = ctx.trace.con.execute("SELECT count(*) FROM shapes WHERE input_dims IS NOT NULL").fetchall()[0][0]
    if eager.any() and not shaped:
        c: Counter[str] = Counter()
        for op, s, e in zip(w.op_name[eager].tolist(), w.acts.start[eager].tolist(), w.acts.end[eager].tolist()):
            c[op] += e - s
        return (f"their ops ({', '.join(_top(c))}) ran with no input shapes recorded (the profile's record_shapes "
                "was off): no FLOP model")
    return "no op with recorded shapes launched them (graph replays, compiled regions): no FLOP model"


def _unmodelled_gemm(ctx: Context, gemm: int, kernels: tuple[str, ...]) -> Lever:
    """The GEMM lever where no op with a FLOP model launched the GEMMs (graph replays, compiled regions): the
    stated fallback share of their time, confidence low. Where every step is a decode step whose tokens are
    under the device's ridge point (16-bit peak over bandwidth, FLOP per byte), the GEMMs stream their
    weights (a 16-bit weight read once serves at most that many tokens: about that many FLOP per byte): named
    ``memory_bound``, whose advice is fewer bytes per token, not GEMM tuning."""
    ev = f"GEMMs take {_us(gemm)} of a device-bound window; {_no_flop_model(ctx)}"
    reach = f"the gain assumes {100 * GEMM_UNKNOWN_SHARE:.0f}% of this time is reachable"
    tokens = _decode_tokens(ctx) if ctx.peaks is not None and ctx.peaks.gbps > 0 else None
    ridge = ctx.peaks.tflops_half * 1e3 / ctx.peaks.gbps if tokens is not None else 0.0
    if tokens is not None and tokens < ridge:
        ev += (f"; every step decodes at most {tokens} tokens, so a 16-bit weight read once serves at most {tokens} "
               f"of them (about {tokens} FLOP per byte), under the device's ridge point of {ridge:.0f} FLOP per byte "
               f"({ctx.peaks.source}): the GEMMs are memory-bound, which no GEMM tuning beats; {reach}")
        return _lever(ctx, "memory_bound", "memory-bound GEMMs", gemm * GEMM_UNKNOWN_SHARE, "low", ev,
                      HOW["memory_bound"], ("busy/gemm",), kernels=kernels)
    return _lever(ctx, "gemm", "GEMM kernels", gemm * GEMM_UNKNOWN_SHARE, "low", f"{ev}: {reach}", HOW["gemm"],
                  ("busy/gemm",), kernels=kernels)


def _gemm(ctx: Context) -> list[Lever]:
    """GEMM tuning over every GEMM of the device-bound steps (eager, compiled, replayed): ops with a FLOP
    model at their roofline's efficiency, kernels of the same names as theirs (a replay of those ops) at
    the same efficiency, the rest at the stated fallback; GEMMs mostly memory-bound near the bandwidth
    roofline are named as such (``memory_bound``: tuning cannot beat the bandwidth)."""
    busy = {k: ctx.leaf(k) for k in LEAVES if k.startswith("busy/")}
    gemm = busy["busy/gemm"]
    if not gemm or gemm < max(busy.values()) or 2 * sum(busy.values()) < ctx.window_ns:
        return []
    known = [r for r in ctx.roofline_rows if op_class(r.name) == "matmul" and "conv" not in r.name
             and r.roofline_us is not None]
    kernels = tuple(_kernels(ctx, "gemm"))
    split = _gemm_coverage(ctx, {r.name for r in known})
    if not known or not split.known_ns:
        return [_unmodelled_gemm(ctx, gemm, kernels)]
    time = sum(r.time_us for r in known)
    eff = min(sum(r.roofline_us or 0.0 for r in known) / time, 1.0) if time else 1.0
    # the leaf's share each way: GEMMs of modelled ops (and kernels of their names) at eff, the rest fallback
    modelled = (split.known_ns + split.same_name_ns) / split.total_ns
    share = modelled * (1 - eff) + (1 - modelled) * GEMM_UNKNOWN_SHARE
    pct = ", ".join(f"{r.name} {r.pct_of_roofline:.0f}%" for r in known[:3] if r.pct_of_roofline is not None)
    ev = (f"GEMMs take {_us(gemm)} of a device-bound window; {_us(split.known_ns)} of the trace's {_us(split.total_ns)} "
          f"of GEMM kernels ran under ops with a FLOP model, at {100 * eff:.0f}% of their roofline ({pct})")
    if split.same_name_ns:
        ev += f"; {_us(split.same_name_ns)} more (replayed or compiled) are the same kernels, taken at that efficiency"
    rest = split.total_ns - split.known_ns - split.same_name_ns
    if rest > 0:
        ev += f"; the other {_us(rest)} have no model: {100 * GEMM_UNKNOWN_SHARE:.0f}% of their time assumed reachable"
    ev += "; the gain takes the modelled GEMMs to their roofline, an upper bound that tuned kernels seldom reach"
    streaming = [r for r in known if r.bound == "memory" and (r.pct_of_roofline or 0.0) >= MEMORY_BOUND_PCT]
    memory = sum(r.time_us for r in streaming)
    if memory >= time / 2:
        # the bandwidth they reach: their bytes at peak bandwidth over their time, weighted by time
        reach = sum((r.pct_of_roofline or 0.0) * r.time_us for r in streaming) / memory
        ev += (f". {100 * memory / time:.0f}% of that time is memory-bound: the weights stream at {reach:.0f}% of the "
               "device's memory bandwidth, which no GEMM tuning beats")
        return [_lever(ctx, "memory_bound", "memory-bound GEMMs", gemm * share, "medium", ev, HOW["memory_bound"],
                       ("busy/gemm",), ops=tuple(r.name for r in known[:3]), kernels=kernels)]
    return [_lever(ctx, "gemm", "GEMM kernels", gemm * share, "medium", ev, HOW["gemm"], ("busy/gemm",),
                   ops=tuple(r.name for r in known[:3]), kernels=kernels)]


@dataclass(frozen=True)
class _GemmSplit:
    total_ns: int        # every GEMM kernel of the trace
    known_ns: int        # launched by an op with a FLOP model
    same_name_ns: int    # not, but named as a kernel such an op launched (its replay, its compiled form)


def _gemm_coverage(ctx: Context, modelled_ops: set[str]) -> _GemmSplit:
    """How the trace's GEMM kernel time splits by what models it (see :class:`_GemmSplit`)."""
    w = ctx.work
    assert w is not None
    g = w.cls == BUSY_PRIORITY.index("gemm")
    dur = (w.acts.end - w.acts.start)[g]
    ops, names = w.op_name[g], w.name[g]
    by_op = np.fromiter((o in modelled_ops for o in ops.tolist()), dtype=bool, count=ops.size)
    seen = set(names[by_op].tolist())
    same = ~by_op & np.fromiter((n in seen for n in names.tolist()), dtype=bool, count=names.size)
    return _GemmSplit(max(int(dur.sum()), 1), int(dur[by_op].sum()), int(dur[same].sum()))


def fusion_levers(ctx: Context, draws: tuple[str, ...], attention_draws: tuple[str, ...]) -> list[Lever]:
    """The advisor's fusion candidates as ``fusion:<pattern>`` levers (eager attention as
    ``attention_kernel``), each at most its predicted saving and its leaves."""
    out = []
    for c in ctx.candidates:
        attention = c.pattern.startswith("attention")
        kind = "attention_kernel" if attention else f"fusion:{SLUG.get(c.pattern, 'pointwise')}"
        ev = f"{c.instances} instance(s), {c.kernels_per_instance:g} kernels each, {_us(c.device_us * 1e3)} now; " \
             + _saving_evidence(c)
        if ctx.cpu:
            ev += " (an upper bound on a CPU, where these ops are seldom memory-bound: measure the fix)"
        out.append(_lever(ctx, kind, f"{c.pattern} in {c.scope}", c.predicted_saving_us * 1e3, c.confidence, ev,
                          c.recommendation, attention_draws if attention else draws, ops=tuple(c.ops)))
    return out


def _saving_evidence(c: Any) -> str:
    """What a fusion candidate's predicted saving comes from: the model it used (``c.saving_model``, a key of
    ``advice.records.SAVING_MODELS``: the memory traffic where shapes gave the bytes, else the rule it fell back
    to) and what that model assumes."""
    from ..advice.records import SAVING_MODELS

    name, assumes = SAVING_MODELS[c.saving_model]
    moved = f" ({c.bytes_now / 1e6:.1f} -> {c.bytes_fused / 1e6:.1f} MB)" if c.saving_model == "memory traffic" else ""
    return f"{name}{moved} predicts {_us(c.predicted_saving_us * 1e3)} saved: {assumes}"


def no_device_data(trace: Trace) -> Lever | None:
    """The lever for a trace with launches and no device activity (it claims no gain)."""
    from ..health import COUNTER_MODE_NEXT, counter_mode_text, counter_ranges

    (n,), = trace.con.execute(f"SELECT count(*) FROM events WHERE kind = 'runtime' AND {launch_call_sql('name')}"
                              ).fetchall()
    ranges = counter_ranges(trace)
    if ranges:   # a counter capture: the device ran, the profiler counted rather than timed
        return Lever("no_device_data", "the trace", 0.0, "high", f"{n:,} launch call(s) but no kernel, copy or "
                     f"memset event, and {counter_mode_text(ranges)}: the trace holds no device time", COUNTER_MODE_NEXT, ())
    return Lever("no_device_data", "the trace", 0.0, "high",
                 f"{n:,} launch call(s) but no kernel, copy or memset event: device activity was not recorded",
                 HOW["no_device_data"], ())


def rank_levers(ctx: Context) -> tuple[tuple[Lever, ...], tuple[Lever, ...], float, float]:
    """(ranked levers, small items, combined gain in µs, the part of it outside the trace)."""
    levers = device_levers(ctx) if not ctx.cpu else fusion_levers(ctx, CPU_FUSION_DRAWS, CPU_FUSION_DRAWS)
    return rank(levers, ctx.steady.leaves, ctx.window_ns)


def _shared(lv: Lever, window_ns: int, span_ns: int) -> Lever:
    """``lv`` with its share: of the device window, or of the whole span where it draws the unrecorded wait, and
    which of the two it is where they differ (``share_of``: every renderer says it)."""
    of_span = UNRECORDED_LEAF in lv.draws
    base = span_ns if of_span else window_ns
    return replace(lv, share_pct=round(100 * lv.gain_us * 1e3 / base, 2) if base else 0.0,
                   share_of=("the span" if of_span else "the device window") if window_ns < span_ns else "")


def rank(levers: list[Lever], leaves: dict[str, int], window_ns: int) -> tuple[tuple[Lever, ...], tuple[Lever, ...],
                                                                              float, float]:
    """Sort by gain, those whose cause is outside the trace after every other, fold the small ones (under
    1% of ``window_ns``: the device window, the span less its unrecorded wait), and pull them all in rank order, each
    taking at most what its leaves still hold (no time counted twice): the combined gain, and the part of
    it that the levers graded outside the trace take (µs)."""
    levers = sorted((_shared(lv, window_ns, window_ns + leaves.get(UNRECORDED_LEAF, 0)) for lv in levers),
                    key=lambda lv: (lv.kind != "no_device_data", lv.grade == "outside the trace", -lv.gain_us, lv.kind,
                                    lv.target))
    small_us = max(SMALL_PCT / 100 * window_ns / 1e3, SMALL_US)
    ranked = tuple(lv for lv in levers if lv.kind == "no_device_data" or lv.gain_us >= small_us)
    small = tuple(lv for lv in levers if lv not in ranked)
    left = dict(leaves)
    combined = outside = 0
    for lv in levers:
        want = round(lv.gain_us * 1e3)
        for i, k in enumerate(lv.draws):
            cap = round(lv.caps[i] * 1e3) if i < len(lv.caps) else want
            take = min(want, left.get(k, 0), cap)
            left[k] = left.get(k, 0) - take
            want -= take
            combined += take
            outside += take if lv.grade == "outside the trace" else 0
    return ranked, small, round(combined / 1e3, 3), round(outside / 1e3, 3)


__all__ = ["Context", "rank", "rank_levers"]
