"""Expected numbers for tests, computed from a trace file with plain gzip + json.

Nothing here imports profuse. Each rule is written the slow, obvious way from docs/correlation.md
and docs/schema.md (brute-force interval tests instead of nesting passes), so a test that compares
profuse with these answers compares two independent readings of the same trace.

- A host event *holds* a time t when it runs on the same (pid, tid) and ts <= t < ts + dur (a
  zero-length event counts as 1 ns long); the innermost holder starts last, then is the shortest,
  then comes later in the file.
- A device event (kernel, memcpy, memset) is launched by the runtime call with its correlation id;
  its op is the innermost cpu_op or user_annotation holding that call's start; its module is the
  innermost ``nn.Module: X`` python scope holding that call's start (a graph replay's kernels so
  take the module of their graph launch).
"""
from __future__ import annotations

import gzip
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

Event = dict[str, Any]

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
OP_CATS = frozenset({"cpu_op", "user_annotation"})
MODULE_PREFIX = "nn.Module: "
_MODULE_LABEL = re.compile(r"nn\.Module: (?P<cls>.+?)(?:_\d+)?")
_ONE_NS_US = 0.001


def complete_events(path: Path | str) -> list[Event]:
    """The trace's complete (``"ph": "X"``) events in file order, each a copy with its position as ``order``."""
    return list(_complete_events(str(path)))


@lru_cache(maxsize=4)
def _complete_events(path: str) -> tuple[Event, ...]:
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as fh:
        doc = json.load(fh)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    return tuple(dict(e, order=i) for i, e in enumerate(xs))


def category(e: Event) -> str:
    """The event's category in lower case ('' when absent)."""
    return str(e.get("cat") or "").lower()


def is_device(e: Event) -> bool:
    """Whether the event is device time: a kernel, memory copy or memory set."""
    return category(e) in DEVICE_CATS


def is_module(e: Event) -> bool:
    """Whether the event is an ``nn.Module: X`` python scope."""
    return category(e) == "python_function" and str(e.get("name", "")).startswith(MODULE_PREFIX)


def module_class(label: str) -> str:
    """'nn.Module: LlamaRMSNorm_0' -> 'LlamaRMSNorm' (the instance number dropped)."""
    m = _MODULE_LABEL.fullmatch(label)
    return m.group("cls") if m else label


def same_thread(a: Event, b: Event) -> bool:
    """Whether two events were recorded on the same (pid, tid)."""
    return (a.get("pid"), a.get("tid")) == (b.get("pid"), b.get("tid"))


def holds(outer: Event, t: float) -> bool:
    """Whether ``outer`` runs at time t (µs): ts <= t < ts + dur, a zero-length event 1 ns long."""
    return bool(outer["ts"] <= t < outer["ts"] + max(outer["dur"], _ONE_NS_US))


def innermost(found: list[Event]) -> Event | None:
    """The innermost of events that all hold one time: latest start, then shortest, then later in file."""
    return max(found, key=lambda o: (o["ts"], -o["dur"], o["order"])) if found else None


def innermost_around(events: list[Event], e: Event, keep: Any) -> Event | None:
    """The innermost event other than ``e`` on e's thread, for which ``keep`` is true, holding e's start."""
    return innermost([o for o in events if o is not e and keep(o) and same_thread(o, e) and holds(o, e["ts"])])


def launches(events: list[Event]) -> dict[Any, Event]:
    """Runtime calls by correlation id."""
    return {e["args"]["correlation"]: e for e in events
            if category(e) in RUNTIME_CATS and "correlation" in (e.get("args") or {})}


def launch_of(device_event: Event, by_correlation: dict[Any, Event]) -> Event | None:
    """The runtime call that carries the device event's correlation id, if it is in the trace."""
    return by_correlation.get((device_event.get("args") or {}).get("correlation"))


def op_of(events: list[Event], launch: Event) -> Event | None:
    """The innermost cpu_op or user_annotation holding a launch call's start."""
    return innermost_around(events, launch, lambda o: category(o) in OP_CATS)


def module_around(events: list[Event], e: Event) -> Event | None:
    """The innermost ``nn.Module`` scope (other than e) holding e's start."""
    return innermost_around(events, e, is_module)


def device_events_by_module_class(path: Path | str) -> dict[str, int]:
    """Device events per nn.Module class around their launch call, when the call runs inside an op
    (device event -> launch -> module)."""
    events = complete_events(path)
    by_corr = launches(events)
    out: dict[str, int] = {}
    for d in filter(is_device, events):
        launch = launch_of(d, by_corr)
        op = op_of(events, launch) if launch is not None else None
        module = module_around(events, launch) if op is not None and launch is not None else None
        if module is not None:
            cls = module_class(module["name"])
            out[cls] = out.get(cls, 0) + 1
    return out


def calls_by_name(path: Path | str, name: str, cats: frozenset[str] = OP_CATS) -> int:
    """How many complete events of those categories carry exactly this name."""
    return sum(1 for e in complete_events(path) if e.get("name") == name and category(e) in cats)


def module_calls(path: Path | str, cls: str) -> int:
    """How many times an nn.Module of this class ran (its python scopes in the trace)."""
    return sum(1 for e in complete_events(path) if is_module(e) and module_class(e["name"]) == cls)


def multi_kernel_norm_ops(path: Path | str, cls: str) -> int:
    """Norm ops (name containing 'norm') that run directly in a module of class ``cls`` and launch,
    themselves or through the ops under them, two device events or more; counted once per call.

    "Directly": the op's innermost scope (nn.Module or user_annotation) is that module call, and no
    cpu_op around it runs inside the same call."""
    events = complete_events(path)
    by_corr = launches(events)
    launched = [x for x in (launch_of(d, by_corr) for d in filter(is_device, events)) if x is not None]

    def scope_of(e: Event) -> Event | None:
        return innermost_around(events, e, lambda o: is_module(o) or category(o) == "user_annotation")

    count = 0
    for call in (e for e in events if is_module(e) and module_class(e["name"]) == cls):
        for op in (e for e in events if category(e) == "cpu_op" and same_thread(e, call) and holds(call, e["ts"])):
            if scope_of(op) is not call or "norm" not in str(op["name"]).lower():
                continue
            parent = innermost_around(events, op, lambda o: category(o) == "cpu_op")
            if parent is not None and scope_of(parent) is call:
                continue
            if sum(1 for x in launched if same_thread(x, op) and holds(op, x["ts"])) >= 2:
                count += 1
    return count


def compiled_region_kernel_names(path: Path | str, region: str) -> set[str]:
    """Names of the inductor kernels (cpu_ops named triton_* / cpp_fused*) whose innermost enclosing
    cpu_op is a ``region`` call."""
    events = complete_events(path)
    names = set()
    for e in events:
        if category(e) == "cpu_op" and str(e["name"]).startswith(("triton_", "cpp_fused")):
            parent = innermost_around(events, e, lambda o: category(o) == "cpu_op")
            if parent is not None and parent["name"] == region:
                names.add(e["name"])
    return names


def compiled_region_names(path: Path | str) -> list[str]:
    """Distinct names of the ``Torch-Compiled Region`` cpu_ops, sorted."""
    return sorted({e["name"] for e in complete_events(path)
                   if category(e) == "cpu_op" and str(e["name"]).startswith("Torch-Compiled Region")})


_INDUCTOR_OP = re.compile(r"(?:graph_\d+_)?(?:triton_|cpp_fused)")


def is_compiled_region(e: Event) -> bool:
    """A compiled region call: a ``Torch-Compiled Region`` cpu_op, or a compiled backward (``CompiledFunctionBackward``)."""
    name = str(e.get("name", ""))
    return category(e) == "cpu_op" and (name.startswith("Torch-Compiled Region") or name == "CompiledFunctionBackward")


def outermost_region_holding(events: list[Event], e: Event) -> Event | None:
    """The outermost compiled region call on e's thread whose interval holds e's start (``events`` may
    be the region calls alone)."""
    found = [r for r in events if r is not e and is_compiled_region(r) and same_thread(r, e) and holds(r, e["ts"])]
    return min(found, key=lambda r: (r["ts"], -r["dur"], r["order"])) if found else None


def compiled_region_device(path: Path | str) -> dict[str, tuple[int, float]]:
    """Per compiled region name: (device events, their µs) whose launch call (by correlation id)
    starts inside one of its calls, at any depth; graph replays share their launch's correlation id."""
    events = complete_events(path)
    by_corr = launches(events)
    regions = [e for e in events if is_compiled_region(e)]
    out: dict[str, tuple[int, float]] = {}
    for d in filter(is_device, events) if regions else ():
        launch = launch_of(d, by_corr)
        region = outermost_region_holding(regions, launch) if launch is not None else None
        if region is not None:
            n, us = out.get(region["name"], (0, 0.0))
            out[region["name"]] = (n + 1, us + float(d["dur"]))
    return out


def compiled_region_inductor_ops(path: Path | str) -> dict[str, dict[str, tuple[int, float]]]:
    """Per compiled region name: the inductor kernel cpu_ops (``triton_*``, ``[graph_N_]cpp_fused*``)
    that start inside one of its calls at any depth, each with (calls, total µs of the cpu_op)."""
    events = complete_events(path)
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for e in events:
        if category(e) == "cpu_op" and _INDUCTOR_OP.match(str(e["name"])):
            region = outermost_region_holding(events, e)
            if region is not None:
                per = out.setdefault(region["name"], {})
                n, us = per.get(e["name"], (0, 0.0))
                per[e["name"]] = (n + 1, us + float(e["dur"]))
    return out


# --- memory (profile_memory=True): torch's key_averages() rules, from torch/autograd/profiler.py --------
# An op's memory is the sum of ``Bytes`` of every ``[memory]`` instant with op.ts <= t <= op.ts + dur, on
# any thread; CPU memory is Device Type 0, 2, 5 (CPU, MKLDNN, IDEEP), device memory 1, 6, 12, 20 (CUDA, HIP,
# XPU, PrivateUse1). Self memory is that minus the memory of the op's direct children in the op table
# (the innermost op-table event on the same thread holding the child's start). Times are read as decimals,
# so no float rounding decides a boundary.
TABLE_CATS = frozenset({"cpu_op", "operator", "user_annotation", "cuda_runtime", "runtime", "cuda_driver",
                        "hip_runtime", "mtia_runtime", "privateuse1_runtime", "privateuse1_driver", "cuda_sync"})
CPU_MEM_TYPES = frozenset({0, 2, 5})
DEVICE_MEM_TYPES = frozenset({1, 6, 12, 20})


def _decimal_doc(path: str) -> Any:
    from decimal import Decimal
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as fh:
        return json.load(fh, parse_float=Decimal)


def memory_events(path: Path | str) -> list[Event]:
    """The ``[memory]`` instant events, each with ``ns`` (its time in integer ns)."""
    doc = _decimal_doc(str(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [dict(e, ns=int(e["ts"] * 1000)) for e in events
            if isinstance(e, dict) and e.get("ph") in ("i", "I") and e.get("name") == "[memory]"]


def op_memory_by_name(path: Path | str) -> dict[str, tuple[int, int, int, int]]:
    """Op name -> (cpu_mem, self_cpu_mem, device_mem, self_device_mem) summed over its calls."""
    doc = _decimal_doc(str(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    mem = sorted((int(e["ts"] * 1000), e["args"]["Bytes"], e["args"]["Device Type"]) for e in events
                 if isinstance(e, dict) and e.get("ph") in ("i", "I") and e.get("name") == "[memory]")
    import bisect
    times = [m[0] for m in mem]
    ops = [dict(e, start=int(e["ts"] * 1000), end=int(e["ts"] * 1000) + int(e.get("dur", 0) * 1000), order=i)
           for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X" and category(e) in TABLE_CATS]
    for o in ops:
        inside = mem[bisect.bisect_left(times, o["start"]):bisect.bisect_right(times, o["end"])]
        o["cpu"] = sum(b for _, b, t in inside if t in CPU_MEM_TYPES)
        o["dev"] = sum(b for _, b, t in inside if t in DEVICE_MEM_TYPES)
        o["child_cpu"] = o["child_dev"] = 0
    by_thread: dict[Any, list[Event]] = {}
    for o in ops:
        by_thread.setdefault((o.get("pid"), o.get("tid")), []).append(o)
    for group in by_thread.values():
        # a sweep in (start, longest first, file order): the innermost open op holding a start is its parent
        stack: list[Event] = []
        for o in sorted(group, key=lambda o: (o["start"], -(o["end"] - o["start"]), o["order"])):
            while stack and max(stack[-1]["end"], stack[-1]["start"] + 1) <= o["start"]:
                stack.pop()
            if stack:
                stack[-1]["child_cpu"] += o["cpu"]
                stack[-1]["child_dev"] += o["dev"]
            stack.append(o)
    out: dict[str, list[int]] = {}
    for o in ops:
        row = out.setdefault(o.get("name") or "", [0, 0, 0, 0])
        row[0] += o["cpu"]
        row[1] += o["cpu"] - o["child_cpu"]
        row[2] += o["dev"]
        row[3] += o["dev"] - o["child_dev"]
    return {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}


def op_self_cpu_us(path: Path | str) -> dict[str, Any]:
    """Op name -> self CPU time (µs, exact) summed over its calls: each op-table call (``TABLE_CATS``) less the
    durations of its direct children in the op table, never below 0 (children overlapping or outlasting it).
    A call's parent is, brute force over its thread's op-table calls, the innermost one holding its start
    among those outer to it: starting earlier, or as early and longer, or as long and earlier in the file."""
    events = [e for e in exact_events(str(path)) if category(e) in TABLE_CATS]
    by_thread: dict[tuple[Any, Any], list[Event]] = {}
    for e in events:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    children: dict[int, Any] = {}
    for group in by_thread.values():
        for e in group:
            rank = (e["ts"], -e["dur"], e["order"])
            outer = [o for o in group if (o["ts"], -o["dur"], o["order"]) < rank and holds(o, e["ts"])]
            if outer:
                parent = innermost(outer)
                assert parent is not None
                children[parent["order"]] = children.get(parent["order"], 0) + e["dur"]
    out: dict[str, Any] = {}
    for e in events:
        name = e.get("name") or ""
        out[name] = out.get(name, 0) + max(e["dur"] - children.get(e["order"], 0), 0)
    return out


def peak_allocated_by_device(path: Path | str) -> dict[tuple[int, int], int]:
    """(Device Type, Device Id) -> the largest ``Total Allocated`` its memory events report."""
    out: dict[tuple[int, int], int] = {}
    for e in memory_events(path):
        a = e["args"]
        key = (a["Device Type"], a["Device Id"])
        out[key] = max(out.get(key, a["Total Allocated"]), a["Total Allocated"])
    return out


# --- the diagnosis (docs/advisor.md "Diagnosis"): steps, spans, busy time, copies -------------------

STEP_NAME = re.compile(r"^(ProfilerStep#\d+|execute_(\d+_)?context_\d+|step\[[A-Z_]+)")
# what the model's work is when a trace has no steps: ops, runtime calls and syncs, device time
WORK_CATS = frozenset({"cpu_op", "operator", "cuda_sync"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "mtia_runtime",
                         "privateuse1_runtime", "privateuse1_driver"})
_MTIA_NOT_WORK = ("event", "barrier", "fence", "noop")


def is_device_time(e: Event) -> bool:
    """Kernels, copies and memsets; on MTIA every command-processor event but event records/waits
    and barriers (docs/schema.md)."""
    if category(e) == "mtia_ccp_events":
        low = str(e.get("name", "")).lower()
        return not (low.startswith("event_") or low in _MTIA_NOT_WORK)
    return category(e) in DEVICE_CATS


def step_annotations(path: Path | str) -> list[Event]:
    """The outermost step annotations (ProfilerStep#N, vLLM execute_*, sglang step[...]) of each
    thread, by start: one nested in another on its thread is not a step of its own."""
    found = [e for e in exact_events(str(path))
             if category(e) == "user_annotation" and STEP_NAME.match(str(e.get("name", "")))]
    return sorted((s for s in found if not any(o is not s and same_thread(o, s) and o["ts"] <= s["ts"]
                                               and s["ts"] + s["dur"] <= o["ts"] + o["dur"]
                                               and (o["ts"], -o["dur"], o["order"]) < (s["ts"], -s["dur"], s["order"])
                                               for o in found)), key=lambda s: (s["ts"], s["order"]))


def union_us(intervals: list[tuple[Any, Any]]) -> Any:
    """Length of the union of [start, end) intervals, by sorting and sweeping."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def op_totals_once(path: Path | str, name: str) -> tuple[Any, Any]:
    """An op's CPU total and device total (µs) with each moment once: per thread, the union of its calls
    (cpu_op or user_annotation named ``name``); the device time of every device event whose launch call
    (by correlation) lies inside one of those calls on the call's thread, each event once."""
    events = list(exact_events(str(path)))
    calls = [e for e in events if category(e) in OP_CATS and e.get("name") == name]
    by_thread: dict[tuple[Any, Any], list[tuple[Any, Any]]] = {}
    for c in calls:
        by_thread.setdefault((c.get("pid"), c.get("tid")), []).append((c["ts"], c["ts"] + c["dur"]))
    cpu = sum(union_us(iv) for iv in by_thread.values())
    starts = _launch_starts(events)
    device = 0
    for d in events:
        call = starts.get((d.get("args") or {}).get("correlation")) if is_device_time(d) else None
        if call is not None and any(same_thread(c, call) and c["ts"] <= call["ts"]
                                    and call["ts"] + call["dur"] <= c["ts"] + c["dur"] for c in calls):
            device += d["dur"]
    return cpu, device


def kernels_under_op(path: Path | str, name: str) -> dict[str, tuple[int, Any]]:
    """Per kernel name, the device activities under an op name and their µs (exact): those whose launch call (by
    correlation) lies inside a call (cpu_op or user_annotation) named ``name`` on the call's thread, each once
    however many such calls hold it (``op_totals_once``'s device rule, by kernel name)."""
    events = list(exact_events(str(path)))
    calls = [e for e in events if category(e) in OP_CATS and e.get("name") == name]
    starts = _launch_starts(events)
    out: dict[str, tuple[int, Any]] = {}
    for d in events:
        call = starts.get((d.get("args") or {}).get("correlation")) if is_device_time(d) else None
        if call is not None and any(same_thread(c, call) and c["ts"] <= call["ts"]
                                    and call["ts"] + call["dur"] <= c["ts"] + c["dur"] for c in calls):
            n, us = out.get(d["name"], (0, 0))
            out[d["name"]] = (n + 1, us + d["dur"])
    return out


def kernels_under_module_class(path: Path | str, cls: str) -> dict[str, tuple[int, Any]]:
    """Per kernel name, the device activities under an nn.Module class and their µs (exact): those whose launch
    call's start (by correlation) some ``nn.Module: cls`` frame on the call's thread holds, each once however many
    frames of the class hold it (``device_us_by_module_class``'s rule, for one class, by kernel name)."""
    events = list(exact_events(str(path)))
    frames = [e for e in events if is_module(e) and module_class(e["name"]) == cls]
    starts = _launch_starts(events)
    out: dict[str, tuple[int, Any]] = {}
    for d in events:
        call = starts.get((d.get("args") or {}).get("correlation")) if is_device_time(d) else None
        if call is not None and any(same_thread(m, call) and holds(m, call["ts"]) for m in frames):
            n, us = out.get(d["name"], (0, 0))
            out[d["name"]] = (n + 1, us + d["dur"])
    return out


def queue_delay_us(path: Path | str, scope: str) -> float:
    """The mean over the instances of an annotation ``scope`` (each launching device activities) of the mean
    queue delay of the activities whose launch call starts inside the instance: from the call's end to the
    activity's start, 0 where it started before the call ended; an activity that starts before its call
    starts (clock skew) is left out."""
    events = list(exact_events(str(path)))
    starts = _launch_starts(events)
    acts = [(d, starts[(d.get("args") or {}).get("correlation")]) for d in events
            if is_device_time(d) and (d.get("args") or {}).get("correlation") in starts]
    means = []
    for inst in (e for e in events if category(e) == "user_annotation" and e.get("name") == scope):
        lo, hi = inst["ts"], inst["ts"] + inst["dur"]
        mine = [max(float(d["ts"] - (c["ts"] + c["dur"])), 0.0) for d, c in acts
                if lo <= c["ts"] < hi and d["ts"] >= c["ts"]]
        if mine:
            means.append(sum(mine) / len(mine))
    return sum(means) / len(means)


def _launch_starts(events: list[Event]) -> dict[Any, Event]:
    return {e["args"]["correlation"]: e for e in events
            if category(e) in LAUNCH_CATS and "correlation" in (e.get("args") or {})}


@lru_cache(maxsize=2)
def exact_events(path: str) -> tuple[Event, ...]:
    """complete_events with ts and dur read exactly (decimal text, kept as Decimal µs): traces with
    ns-resolution timestamps lose digits as floats."""
    from decimal import Decimal

    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as fh:
        doc = json.load(fh, parse_float=Decimal)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    return tuple(dict(e, order=i) for i, e in enumerate(xs))


def step_spans(path: Path | str) -> list[tuple[str, float, float, float]]:
    """(name, start, end, busy) in µs for each step: from its start to the later of its end and the
    end of the last device activity whose launch call starts inside it (on its own thread first,
    else any thread), less what earlier steps' intervals already hold (the union, taken in start
    order); busy is the union of every device activity (any step's) inside that span.
    Without steps, one entry: the active window (first start to last end of ops, runtime calls and
    device activity; of any event where there are none)."""
    events = list(exact_events(str(path)))
    device = [e for e in events if is_device_time(e)]
    by_corr = _launch_starts(events)
    steps = step_annotations(path)
    spans = []
    if not steps:
        work = [e for e in events if category(e) in WORK_CATS | LAUNCH_CATS or is_device_time(e)] or events
        lo = min(e["ts"] for e in work)
        hi = max(e["ts"] + e["dur"] for e in work)
        spans.append(("whole trace", lo, hi))
    for s in steps:
        end = s["ts"] + s["dur"]
        for d in device:
            launch = by_corr.get((d.get("args") or {}).get("correlation"))
            if launch is None or (not holds(s, launch["ts"]) and not _held_elsewhere(steps, s, launch)):
                continue
            if not same_thread(s, launch) and any(same_thread(o, launch) and holds(o, launch["ts"]) for o in steps):
                continue
            end = max(end, d["ts"] + d["dur"])
        spans.append((s["name"], s["ts"], end))
    spans = _without_overlap(spans)
    out = []
    for name, lo, hi in spans:
        busy = union_us([(max(d["ts"], lo), min(d["ts"] + d["dur"], hi)) for d in device
                         if d["ts"] < hi and d["ts"] + d["dur"] > lo])
        out.append((name, float(lo), float(hi), float(busy)))
    return out


def _without_overlap(spans: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """Each span (in start order) less the time that spans before it reach: [max(start, reach), ...)."""
    out: list[tuple[str, Any, Any]] = []
    reach = None
    for name, lo, hi in spans:
        if reach is not None and lo < reach:
            lo = reach
        hi = hi if hi > lo else lo
        out.append((name, lo, hi))
        reach = hi if reach is None or hi > reach else reach
    return out


def _held_elsewhere(steps: list[Event], s: Event, launch: Event) -> bool:
    """A launch on a thread that runs no step: it belongs to the innermost step (any thread) holding it."""
    if any(same_thread(o, launch) for o in steps):
        return False
    holders = [o for o in steps if o["ts"] <= launch["ts"] < o["ts"] + o["dur"]]
    return innermost(holders) is s


def _cpu_only(events: list[Event]) -> bool:
    """No device: neither device activity nor a runtime call."""
    return not any(is_device_time(e) or category(e) in LAUNCH_CATS for e in events)


def _span_work(path: Path | str, spans: list[tuple[str, float, float, float]]) -> list[Any]:
    """What each span is busy with: its device busy time (step_spans'); on a CPU-only trace the union of
    the ops and annotations (not a step's own) that start in it, clipped to it."""
    events = list(exact_events(str(path)))
    if not _cpu_only(events):
        return [busy for *_r, busy in spans]
    ops = [e for e in events if category(e) in OP_CATS and not STEP_NAME.match(str(e.get("name", "")))]
    return [union_us([(o["ts"], min(o["ts"] + o["dur"], hi)) for o in ops if lo <= o["ts"] < hi])
            for _n, lo, hi, _b in spans]


def steady_spans(path: Path | str) -> list[tuple[str, float, float, float]]:
    """The step spans without a warm-up first step: over 3x the median of the others' spans, while the
    others are busy at all (device time; op time on a CPU-only trace). A first step that alone holds the
    work is kept."""
    spans = step_spans(path)
    if len(spans) >= 2:
        others = sorted(hi - lo for _n, lo, hi, _b in spans[1:])
        mid = len(others) // 2
        median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
        if spans[0][2] - spans[0][1] > 3 * median and any(w > 0 for w in _span_work(path, spans)[1:]):
            return spans[1:]
    return spans


def step_device_windows(path: Path | str) -> list[tuple[str, float, float, float, int]]:
    """The step table of a device trace, per step span (step_spans): every device activity that runs in the
    span (any step's, launched or not), clipped to it. (name, window: its first start to its last end,
    busy: their union, unrecorded: the unrecorded waits (queued_split_us over every span) inside the
    window, activities: how many start in the span)."""
    events = list(exact_events(str(path)))
    device = [e for e in events if is_device_time(e)]
    spans = step_spans(path)
    runs: list[tuple[float, float]] = []
    queued_split_us(path, spans, runs)
    out = []
    for name, lo, hi, _busy in spans:
        clipped = [(max(float(d["ts"]), lo), min(float(d["ts"] + d["dur"]), hi)) for d in device
                   if float(d["ts"]) < hi and float(d["ts"] + d["dur"]) > lo]
        clipped = [(s, e) for s, e in clipped if e > s]
        count = sum(1 for d in device if lo <= float(d["ts"]) < hi)
        if not clipped:
            out.append((name, 0.0, 0.0, 0.0, count))
            continue
        w_lo, w_hi = min(s for s, _ in clipped), max(e for _, e in clipped)
        waits = sum(max(0.0, min(e, w_hi) - max(s, w_lo)) for s, e in runs)
        out.append((name, w_hi - w_lo, float(union_us(clipped)), waits, count))
    return out


def copy_only_op_names(path: Path | str) -> set[str]:
    """Names of ops every call of which launched device work (itself or under it: launch calls on its
    thread inside it) and all of it memcpy/memset, never a kernel."""
    events = complete_events(path)
    kinds: dict[Any, set[str]] = {}
    for d in events:
        if is_device_time(d) and "correlation" in (d.get("args") or {}):
            kinds.setdefault(d["args"]["correlation"], set()).add("kernel" if category(d) in ("kernel", "mtia_ccp_events")
                                                                   else "copy")
    by_thread: dict[tuple[Any, Any], list[tuple[float, set[str]]]] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if category(e) in LAUNCH_CATS and corr in kinds:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((e["ts"], kinds[corr]))
    for v in by_thread.values():
        v.sort(key=lambda x: x[0])
    verdict: dict[str, bool] = {}
    import bisect
    for op in events:
        if category(op) != "cpu_op":
            continue
        launches_ = by_thread.get((op.get("pid"), op.get("tid")), [])
        starts = [t for t, _ in launches_]
        i, j = bisect.bisect_left(starts, op["ts"]), bisect.bisect_left(starts, op["ts"] + op["dur"])
        seen = set().union(*(k for _t, k in launches_[i:j])) if j > i else set()
        if not seen:
            continue
        verdict[op["name"]] = verdict.get(op["name"], True) and seen == {"copy"}
    return {n for n, only in verdict.items() if only}


def graph_replayed_kernel_time(path: Path | str) -> dict[str, float]:
    """µs per kernel name of the kernels whose correlation id is that of a graph launch call."""
    events = complete_events(path)
    graph = {(e.get("args") or {}).get("correlation") for e in events
             if category(e) in LAUNCH_CATS and "GraphLaunch" in str(e.get("name", ""))}
    out: dict[str, float] = {}
    for d in events:
        if category(d) == "kernel" and (d.get("args") or {}).get("correlation") in graph:
            out[d["name"]] = out.get(d["name"], 0.0) + d["dur"]
    return out


QUEUED_MIN_US = 100  # docs/advisor.md: launched work that waits longer than this to start is `queued`


UNRECORDED_SHARE = 0.5  # docs/advisor.md: a wait this share of its step's recorded device time is not shown idle


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of [start, end) intervals as disjoint intervals, touching ones joined."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint intervals ``a`` less disjoint intervals ``b``."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def queued_split_us(path: Path | str, spans: list[tuple[str, float, float, float]],
                    runs: list[tuple[float, float]] | None = None) -> tuple[float, float]:
    """(idle/queued, unrecorded/wait) µs inside ``spans``: where launched work waits to start (from its
    launch call's end, found by correlation id, to its start, where that is over QUEUED_MIN_US) and no
    device activity runs; a run of such time that ends by the span's first device activity, or is at
    least UNRECORDED_SHARE of the span's busy time long, is the trace's unrecorded wait, the rest queued.
    ``runs``, where given, receives each unrecorded run (start, end) in µs."""
    events = list(exact_events(str(path)))
    device = [e for e in events if is_device_time(e)]
    by_corr = _launch_starts(events)
    waits = []
    for d in device:
        launch = by_corr.get((d.get("args") or {}).get("correlation"))
        if launch is not None and float(d["ts"]) - float(launch["ts"] + launch["dur"]) > QUEUED_MIN_US:
            waits.append((float(launch["ts"] + launch["dur"]), float(d["ts"])))
    busy_all = [(float(d["ts"]), float(d["ts"] + d["dur"])) for d in device]
    queued = unrecorded = 0.0
    for _name, lo, hi, _busy in spans:
        def inside(xs: list[tuple[float, float]]) -> list[tuple[float, float]]:
            return [(max(s, lo), min(e, hi)) for s, e in xs if s < hi and e > lo]
        busy = _merged(inside(busy_all))
        busy_us = sum(e - s for s, e in busy)
        first = busy[0][0] if busy else float("inf")
        for s, e in _minus(_merged(inside(waits)), busy):
            if e <= first or e - s >= UNRECORDED_SHARE * busy_us:
                unrecorded += e - s
                if runs is not None:
                    runs.append((s, e))
            else:
                queued += e - s
    return queued, unrecorded


# a copy's direction, as docs/advisor.md reads it: the event's own args.direction, else its name, else its
# launch call's name (by correlation id); none of them: unknown (never device to device)
COPY_DIRECTIONS = {"HOST_TO_DEVICE": "h2d", "DEVICE_TO_HOST": "d2h", "DEVICE_TO_DEVICE": "d2d"}
_COPY_WORDS = (("h2d", ("HtoD", "Host -> Device")), ("d2h", ("DtoH", "Device -> Host")),
               ("d2d", ("DtoD", "Device -> Device", "PtoP")))
COPY_ORDER = ("h2d", "d2h", "d2d", "unknown")  # the budget's priority among copies


def is_copy(e: Event) -> bool:
    """A memcpy: Kineto's gpu_memcpy, or an MTIA command-processor DMA (``dma_request``)."""
    if category(e) == "mtia_ccp_events":
        return str(e.get("name", "")).lower().startswith("dma")
    return category(e) in ("gpu_memcpy", "memcpy")


def copy_direction(e: Event, launch: Event | None) -> str:
    recorded = (e.get("args") or {}).get("direction")
    if recorded in COPY_DIRECTIONS:
        return COPY_DIRECTIONS[recorded]
    for text in (str(e.get("name", "")), str((launch or {}).get("name", ""))):
        for way, words in _COPY_WORDS:
            if any(w in text for w in words):
                return way
    return "unknown"


def exposed_copy_us(path: Path | str) -> dict[str, float]:
    """The budget's ``busy/memcpy_<direction>`` leaves (µs), summed over the steady spans: each direction's
    copies, clipped to the span, where no other device activity runs (every device-time event that is not a
    copy or memset: compute and communication come first) nor a copy of a direction before it (COPY_ORDER)."""
    from decimal import Decimal

    events = list(exact_events(str(path)))
    by_corr = _launch_starts(events)
    device = [e for e in events if is_device_time(e)]
    ways: dict[str, list[tuple[Any, Any]]] = {w: [] for w in COPY_ORDER}   # exact µs (Decimal)
    above: list[tuple[Any, Any]] = []
    for d in device:
        iv = (d["ts"], d["ts"] + d["dur"])
        if is_copy(d):
            ways[copy_direction(d, by_corr.get((d.get("args") or {}).get("correlation")))].append(iv)
        elif category(d) not in ("gpu_memset", "memset"):
            above.append(iv)
    out = dict.fromkeys(COPY_ORDER, 0.0)
    for _name, start, end, _busy in steady_spans(path):
        lo, hi = Decimal(repr(start)), Decimal(repr(end))

        def inside(xs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
            return _merged([(max(s, lo), min(e, hi)) for s, e in xs if s < hi and e > lo])
        before = inside(above)
        for way in COPY_ORDER:
            out[way] += float(sum(e - s for s, e in _minus(inside(ways[way]), before)))
            before = _merged(before + inside(ways[way]))
    return out


def device_us_by_module_class(path: Path | str) -> dict[str, float]:
    """µs of device time per nn.Module class: each device activity (graph replays included: their
    kernels carry the graph launch's correlation id) counts once for every class of the module frames
    on its launch call's thread that hold the call's start."""
    events = complete_events(path)
    by_corr = _launch_starts(events)
    frames: dict[tuple[Any, Any], list[Event]] = {}
    for e in events:
        if is_module(e):
            frames.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    out: dict[str, float] = {}
    for d in events:
        if not is_device_time(d):
            continue
        launch = by_corr.get((d.get("args") or {}).get("correlation"))
        if launch is None:
            continue
        around = [m for m in frames.get((launch.get("pid"), launch.get("tid")), ()) if holds(m, launch["ts"])]
        for cls in {module_class(m["name"]) for m in around}:
            out[cls] = out.get(cls, 0.0) + float(d["dur"])
    return out


# --- trace health (docs/advisor.md "Trace health") ---------------------------------------------------

HOST_CATS = frozenset({"cpu_op", "operator", "user_annotation", "python_function", "cuda_sync"}) | LAUNCH_CATS
LAUNCH_WORDS = ("launch", "async", "runfunction", "enqueue", "nrt_execute", "nrt_model_submit")


def health_counts(path: Path | str) -> dict[str, int]:
    """The trace-health counts from the raw JSON: launch calls (a launch-category event whose name holds a
    launch word), device activities, those whose correlation id a launch-category event carries, launch
    calls whose correlation no device-side event carries, same-stream overlaps (an activity starting before
    an earlier one on its device and stream ended), activities starting before the first host event or
    ending after the last, Python frames."""
    events = list(exact_events(str(path)))
    device = [e for e in events if is_device_time(e)]
    launch_corr = {(e.get("args") or {}).get("correlation") for e in events if category(e) in LAUNCH_CATS}
    launch_corr.discard(None)
    launches = [e for e in events if category(e) in LAUNCH_CATS
                and any(w in str(e.get("name", "")).lower() for w in LAUNCH_WORDS)]
    # any device-side event answers a launch (an MTIA waitOnEvent's event_wait is not device time, but ran)
    device_corr = {(d.get("args") or {}).get("correlation") for d in events
                   if category(d) in DEVICE_CATS or category(d) == "mtia_ccp_events"}
    overlaps = 0
    by_stream: dict[tuple[Any, Any], list[Event]] = {}
    for d in device:
        a = d.get("args") or {}
        if a.get("stream") is not None:
            by_stream.setdefault((a.get("device"), a.get("stream")), []).append(d)
    for ds in by_stream.values():
        reach = None
        for d in sorted(ds, key=lambda e: (e["ts"], e["order"])):
            if reach is not None and d["ts"] < reach:
                overlaps += 1
            reach = d["ts"] + d["dur"] if reach is None else max(reach, d["ts"] + d["dur"])
    host = [e for e in events if category(e) in HOST_CATS]
    lo = min((e["ts"] for e in host), default=None)
    hi = max((e["ts"] + e["dur"] for e in host), default=None)
    return {
        "launch_calls": len(launches),
        "device_activities": len(device),
        "linked_by_correlation": sum(1 for d in device if (d.get("args") or {}).get("correlation") in launch_corr),
        "launches_without_activity": sum(1 for e in launches if (e.get("args") or {}).get("correlation")
                                         not in device_corr) if device else len(launches),
        "same_stream_overlaps": overlaps,
        "before_window": sum(1 for d in device if lo is not None and d["ts"] < lo),
        "after_window": sum(1 for d in device if hi is not None and d["ts"] + d["dur"] > hi),
        "python_events": sum(1 for e in events if category(e) == "python_function"),
    }


# FP32 matrix kernels by name where the trace records no input types: single-precision cuBLAS/cuDNN names
# (cuBLAS's <arch>_sgemm_*, cuDNN's <arch>_scudnn_*: the s is single precision; cuBLASLt's f32f32_f32), less
# what a name proves is not FP32 math (TF32, Ampere's tensor-op s1688, a 16-bit template argument)
_FP32_NAMES = ("sgemm", "scudnn", "f32f32_f32")
_NOT_FP32 = ("tf32", "s1688", "bf16", "bfloat16", "half", "f16", "fp8", "int8", "hgemm")


def fp32_matrix_kernel_us(path: Path | str) -> float:
    """µs of kernels whose names say FP32 GEMM/conv math, from the raw JSON."""
    total = 0.0
    for e in complete_events(path):
        low = str(e.get("name", "")).lower()
        if category(e) == "kernel" and any(n in low for n in _FP32_NAMES) and not any(n in low for n in _NOT_FP32):
            total += float(e["dur"])
    return total


# --- stalls (docs/advisor.md "The budget"): the idle a named stall holds, from the raw JSON -------------

def _idle_inside(path: Path | str, keep: Any) -> float:
    """µs of the steady spans inside events ``keep`` accepts (unioned) where no device activity runs."""
    events = list(exact_events(str(path)))
    busy = _merged([(float(d["ts"]), float(d["ts"] + d["dur"])) for d in events if is_device_time(d)])
    held = _merged([(float(e["ts"]), float(e["ts"] + e["dur"])) for e in events if keep(e)])
    total = 0.0
    for _name, lo, hi, _busy in steady_spans(path):
        inside = [(max(s, lo), min(e, hi)) for s, e in held if s < hi and e > lo]
        total += sum(e - s for s, e in _minus(_merged(inside), busy))
    return total


GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")


def graph_launch_idle_us(path: Path | str) -> float:
    """Idle time of the steady spans inside graph launch calls, whatever their length."""
    return _idle_inside(path, lambda e: str(e.get("name", "")).startswith(GRAPH_LAUNCH_NAMES))


def blocked_launches(path: Path | str) -> tuple[int, float]:
    """(how many, idle µs inside them) of the kernel launch calls over 1 ms (a blocked launch: a module's first
    load, a full launch queue; never launch work) that hold idle time of the steady spans."""
    def blocked(e: Event) -> bool:
        return category(e) in LAUNCH_CATS and "launchkernel" in str(e.get("name", "")).lower() and e["dur"] > 1000

    calls = [e for e in exact_events(str(path)) if blocked(e)]
    held = [e for e in calls if _idle_inside(path, lambda x, e=e: x is e) > 0]
    return len(held), _idle_inside(path, blocked)


def launch_cpu_us(path: Path | str, lo: float, hi: float) -> float:
    """The durations of the launch calls starting in [lo, hi) that launched a device activity, summed: a
    plain call of at most 1 ms, a graph launch of any length (a longer plain call blocked)."""
    events = list(exact_events(str(path)))
    launched = {(d.get("args") or {}).get("correlation") for d in events if is_device_time(d)}
    return sum(float(e["dur"]) for e in events if category(e) in LAUNCH_CATS and lo <= e["ts"] < hi
               and (e.get("args") or {}).get("correlation") in launched
               and (e["dur"] <= 1000 or str(e["name"]).startswith(GRAPH_LAUNCH_NAMES)))


def input_wait_us(path: Path | str) -> float:
    """Idle time inside a DataLoader iterator's ``__next__`` (an annotation or Python frame naming both)."""
    return _idle_inside(path, lambda e: "dataloader" in str(e.get("name", "")).lower()
                        and "__next__" in str(e.get("name", "")))


WAIT_FRAMES = ("epoll", "select.poll", "select.select", "): select", "time.sleep", "function sleep>", "'acquire' of",
               "method acquire of _thread", "): wait", "queue.py(", "method 'recv", "built-in method recv",
               "'accept' of", "built-in method accept of", "built-in method run_backward of")


def waiting_frame_us(path: Path | str, busy_ops: tuple[str, ...] = ("cpu_op",)) -> float:
    """A CPU-only step's time inside Python frames that wait (an event loop's poll, a sleep, a lock), less
    the ops running inside them."""
    def waiting(e: Event) -> bool:
        return category(e) == "python_function" and any(w in str(e.get("name", "")) for w in WAIT_FRAMES)

    events = list(exact_events(str(path)))
    ops = _merged([(float(e["ts"]), float(e["ts"] + e["dur"])) for e in events if category(e) in busy_ops])
    total = 0.0
    for _name, lo, hi, _busy in steady_spans(path):
        inside = [(max(float(e["ts"]), lo), min(float(e["ts"] + e["dur"]), hi)) for e in events
                  if waiting(e) and float(e["ts"]) < hi and float(e["ts"] + e["dur"]) > lo]
        total += sum(e - s for s, e in _minus(_merged(inside), ops))
    return total


def kernel_us_of_ops(path: Path | str, op_names: list[str], skip_first_of: str | None = None) -> float:
    """µs of the kernels launched (by correlation) by ops of these names, in trace order, each op once; the
    first op named ``skip_first_of`` left out (a counter increment the fusion leaves out)."""
    events = list(exact_events(str(path)))
    by_corr = _launch_starts(events)
    ops = [e for e in events if category(e) == "cpu_op"]
    skipped = False
    chosen = []
    for o in ops:
        if o["name"] == skip_first_of and not skipped:
            skipped = True
            continue
        if o["name"] in op_names:
            chosen.append(o)
    total = 0.0
    for d in (e for e in events if is_device_time(e)):
        launch = by_corr.get((d.get("args") or {}).get("correlation"))
        if launch is not None and any(o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] for o in chosen):
            total += float(d["dur"])
    return total


def op_runs(path: Path | str, scope: str, names: tuple[str, ...]) -> list[tuple[int, float, bool]]:
    """Each run of top-level ops named ``names``, one right after another, inside an annotation named ``scope``
    (on its thread; a top-level op is a cpu_op inside no other cpu_op there): (the kernels their runtime calls
    launched, those kernels' µs, whether any of the ops recorded input shapes)."""
    events = list(exact_events(str(path)))
    by_corr = _launch_starts(events)
    device = [d for d in events if is_device_time(d)]
    out = []
    for a in (e for e in events if category(e) == "user_annotation" and e["name"] == scope):
        inside = [o for o in events if category(o) == "cpu_op" and same_thread(o, a) and holds(a, o["ts"])]
        top = sorted((o for o in inside if not any(p is not o and p["ts"] <= o["ts"] and o["ts"] + o["dur"]
                                                   <= p["ts"] + p["dur"] and (p["dur"] > o["dur"] or p["order"] < o["order"])
                                                   for p in inside)), key=lambda o: (o["ts"], o["order"]))
        for i in range(len(top) - len(names) + 1):
            run = top[i:i + len(names)]
            if tuple(o["name"] for o in run) != names:
                continue
            kernels = [d for d in device if (launch := by_corr.get((d.get("args") or {}).get("correlation")))
                       is not None and same_thread(launch, a) and any(holds(o, launch["ts"]) for o in run)]
            out.append((len(kernels), float(sum(d["dur"] for d in kernels)),
                        any((o.get("args") or {}).get("Input Dims") for o in run)))
    return out


SGLANG_MODES = {"DRAFT_EXTEND": "draft", "DRAFT_EXTEND_V2": "draft", "TARGET_VERIFY": "verify", "DECODE": "decode",
                "EXTEND": "prefill"}


def serving_steps(path: Path | str) -> dict[str, int]:
    """Steps per serving phase, from sglang's ``step[MODE ...]`` annotation names."""
    out: dict[str, int] = {}
    for s in step_annotations(path):
        m = re.match(r"step\[([A-Z0-9_]+)", str(s["name"]))
        if m and m.group(1) in SGLANG_MODES:
            out[SGLANG_MODES[m.group(1)]] = out.get(SGLANG_MODES[m.group(1)], 0) + 1
    return out


def gemm_kernel_split_us(path: Path | str) -> tuple[float, float, float]:
    """(all GEMM kernels, those an op with recorded Input Dims launched, those of the same names launched
    otherwise: a graph replay) in µs, from the raw JSON; a GEMM kernel names gemm or gemv, or is cuBLAS's
    nvjet, CUTLASS, xmma or Tensile's Cijk_."""
    events = list(exact_events(str(path)))
    by_corr = _launch_starts(events)
    shaped = [e for e in events if category(e) == "cpu_op" and (e.get("args") or {}).get("Input Dims")]
    gemm = re.compile(r"gem[mv]|nvjet|cutlass|xmma|^cijk_", re.I)
    kernels = [d for d in events if category(d) == "kernel" and gemm.search(str(d["name"]))]

    def modelled(d: Event) -> bool:
        launch = by_corr.get((d.get("args") or {}).get("correlation"))
        return launch is not None and any(o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] and same_thread(o, launch)
                                          for o in shaped)

    by_op = [d for d in kernels if modelled(d)]
    names = {d["name"] for d in by_op}
    same = [d for d in kernels if not modelled(d) and d["name"] in names]
    return (sum(float(d["dur"]) for d in kernels), sum(float(d["dur"]) for d in by_op),
            sum(float(d["dur"]) for d in same))


def refill_launch_us(path: Path | str, call: str) -> float:
    """After each ``call`` (a blocking runtime call), the idle launch work until the next device activity:
    from the start of the first op that launches after it to that launch call's end, where the device runs
    nothing (docs/advisor.md: the drained queue's refill)."""
    events = list(exact_events(str(path)))
    device = sorted((float(d["ts"]), float(d["ts"] + d["dur"])) for d in events if is_device_time(d))
    launches = sorted((e for e in events if category(e) in LAUNCH_CATS and e["name"] != call
                       and "correlation" in (e.get("args") or {})), key=lambda e: e["ts"])
    ops = [e for e in events if category(e) == "cpu_op"]
    total = 0.0
    for c in (e for e in events if e["name"] == call):
        end = float(c["ts"] + c["dur"])
        nxt = next((d for d in device if d[0] >= end), None)
        first = next((ln for ln in launches if float(ln["ts"]) >= end), None)
        if nxt is None or first is None:
            continue
        op = next((o for o in ops if o["ts"] <= first["ts"] <= o["ts"] + o["dur"]), first)
        lo, hi = float(op["ts"]), min(float(first["ts"] + first["dur"]), nxt[0])
        total += max(hi - lo, 0.0)
    return total
