"""Trace health: what the trace itself holds and lacks, so a reader knows how far to trust each figure.

One record (:class:`Health`) every renderer shows (the JSON report's ``health``, the console's "Trace
health", the Overview's card), from the loaded tables; each rule is stated in docs/advisor.md
("Trace health"):

- **device activity requested and recorded**: launch calls (the device vocabulary's) and device
  activities (kernels, copies, memsets);
- **linked**: device activities whose launch call the trace holds (by correlation, flow, external id
  or graph replay), and those without one, per reason;
- **launches without activity**: launch calls no device activity names (dropped at the start of a
  capture, or device activity not requested for them);
- **same-stream overlaps**: a device activity starting before an earlier one on the same device and
  stream ended (a stream runs one at a time: a clock or recording artefact);
- **outside the window**: device activities starting before the first host event, or ending after the
  last one (launched before the capture; run on after it);
- **clock offset**: the least time from a launch call's start to its activity's start; where negative,
  the device clock runs behind the host's by at least its size (``device_behind_us``, a positive
  figure); every launched activity starting over 100 µs after its call ended, it may run ahead;
- **steps**: how many, found how (``ProfilerStep#N`` marks, a serving engine's step names, or none:
  the active window);
- **Python stacks**: the capture's ``python_function`` events, whose recording the host time includes.

Each finding says what it changes in the diagnosis and how to capture better.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from .._progress import timed
from ..trace.vocabulary import launch_call_sql
from ..units import fmt_us

if TYPE_CHECKING:  # the records decode from a stored report without the trace or the step model
    import numpy as np

    from ..trace import Trace
    from .device_events import DeviceEvents
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

UNLINKED_WARN_SHARE = 0.01  # device activities without their launch: over this share, a finding
PYTHON_PER_OP_WARN = 2.0    # Python frames per op over this: stacks dominate the capture's own cost


@dataclass(frozen=True)
class Finding:
    """One thing the trace lacks or gets wrong: what, what it changes in the diagnosis, how to capture
    better next time."""

    key: str
    text: str
    effect: str
    fix: str


@dataclass(frozen=True)
class Health:
    """What the trace holds and lacks (the module docstring states each count's rule)."""

    launch_calls: int
    device_activities: int
    linked: int                          # device activities whose launch call the trace holds
    without_launch: dict[str, int]       # the rest, per reason (events.unlinked)
    launches_without_activity: int
    idle_launch_names: dict[str, int]    # those launch calls per name
    same_stream_overlaps: int
    before_window: int                   # device activities starting before the first host event
    after_window: int                    # ... ending after the last one
    device_behind_us: float | None       # how far at least the device clock runs behind the host's (None: not seen)
    all_late_us: float | None            # the least wait where every launched activity waited over 100 µs
    steps: int
    steps_from: str                      # ProfilerStep marks | serving steps (sglang, vllm: sorted) | none: ...
    python_events: int
    ops: int
    findings: list[Finding] = field(default_factory=list)
    counter_ranges: int = 0              # CUPTI range-profiler events, counted where launches have no activity


def _overlaps(d: DeviceEvents) -> int:
    """Device activities starting before an earlier one on their device and stream ended (by start, then id)."""
    from .busy import reach_before

    m = d.has_stream
    dev, stream, ts, end, ids = np.where(d.has_device, d.device, -1)[m], d.stream[m], d.ts[m], (d.ts + d.dur)[m], d.id[m]
    if not ts.size:
        return 0
    order = np.lexsort((ids, ts, stream, dev))
    dev, stream, ts, end = dev[order], stream[order], ts[order], end[order]
    new = np.concatenate([[True], (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])])
    _, before = reach_before(np.cumsum(new), ts, end)
    return int(np.count_nonzero(ts < before))


_HOST_KINDS = ("cpu_op", "annotation", "python", "runtime", "sync")


def _counts(trace: Trace) -> dict[str, int | None]:
    """The counts of the events table the record needs beside the launch calls: device activities, linked
    ones apart (:func:`device_counts`); in one scan (per kind) Python frames, ops, and the host events' first
    start and last end."""
    from .optable import device_counts

    per_kind = {k: (int(n), lo, hi) for k, n, lo, hi in trace.con.execute(
        "SELECT kind, count(*), min(ts), max(ts + dur) FROM events GROUP BY kind").fetchall()}
    host = [v for k, v in per_kind.items() if k in _HOST_KINDS and v[1] is not None]   # ts, dur: never NULL
    out: dict[str, int | None] = {
        "python": per_kind.get("python", (0, None, None))[0], "ops": per_kind.get("cpu_op", (0, None, None))[0],
        "lo": min(int(v[1]) for v in host) if host else None, "hi": max(int(v[2]) for v in host) if host else None}
    devices = device_counts(trace)
    out.update(devices=devices.activities, linked=devices.launched)
    return out


def _launches(trace: Trace) -> tuple[int, dict[str, int]]:
    """Launch calls (the launch test once per distinct runtime call name), and those that no event names
    as its launch per name, most first."""
    rows = trace.con.execute(f"""
        WITH used AS (SELECT DISTINCT launch AS id FROM events WHERE launch IS NOT NULL)
        SELECT name, calls, idle FROM (
            SELECT l.name, count(*) AS calls, count(*) FILTER (WHERE u.id IS NULL) AS idle
            FROM events l LEFT JOIN used u ON u.id = l.id WHERE l.kind = 'runtime' GROUP BY l.name)
        WHERE {launch_call_sql('name')} ORDER BY idle DESC, name""").fetchall()
    return sum(int(n) for _, n, _ in rows), {str(name): int(idle) for name, _, idle in rows if idle}


def _window(trace: Trace, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Device activities starting before the host's first start ``lo``, and ending after its last end ``hi``."""
    from .device_events import device_events

    if lo is None or hi is None:
        return 0, 0
    d = device_events(trace)
    return int(np.count_nonzero(d.ts < lo)), int(np.count_nonzero(d.ts + d.dur > hi))


def _without(d: DeviceEvents) -> dict[str, int]:
    """Device activities with no launch call, per reason (``no_launch`` where none is recorded), most first."""
    reasons = Counter("no_launch" if r is None else str(r) for r in d.unlinked[~d.has_launch].tolist())
    return dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))


def _queued_min_us() -> float:
    """The budget's: a launch is picked up within tens of µs (imported when asked: the records stay light)."""
    from .busy import QUEUED_MIN_US

    return QUEUED_MIN_US


def _clock(d: DeviceEvents) -> tuple[float | None, float | None]:
    """(How far at least the device clock runs behind, the least wait where every launched activity waited long):
    over the activities whose launch call the trace holds, linked other than by a graph replay."""
    m = d.launched & d.not_graph
    if not m.any():
        return None, None
    least_start, least_wait = int((d.ts - d.launch_ts)[m].min()), int((d.ts - (d.launch_ts + d.launch_dur))[m].min())
    behind = -least_start / 1e3 if least_start < 0 else None
    late = least_wait / 1e3 if least_wait > _queued_min_us() * 1000 else None
    return behind, late


def _steps(trace: Trace) -> tuple[int, str]:
    from .steps import step_model

    steps = step_model(trace).steps
    if not steps:
        return 0, "none: the active window"
    named = sorted({e for s in steps for e in s.info.engines})
    return len(steps), "ProfilerStep marks" if named == ["profiler"] else f"serving steps ({', '.join(named)})"


@timed("health")
def trace_health(trace: Trace) -> Health:
    """The trace's health record (see the module docstring)."""
    from .device_events import device_events

    c = _counts(trace)
    d = device_events(trace)
    launches, idle_names = _launches(trace)
    before, after = _window(trace, c["lo"], c["hi"])
    behind, late = _clock(d)
    steps, how = _steps(trace)
    h = Health(launches, int(c["devices"] or 0), int(c["linked"] or 0), _without(d),
               sum(idle_names.values()), idle_names,
               _overlaps(d), before, after, behind, late, steps, how, int(c["python"] or 0), int(c["ops"] or 0),
               counter_ranges=counter_ranges(trace) if launches and not c["devices"] else 0)
    h.findings.extend(findings(h, cpu_only=trace.cpu_only))
    return h


# CUPTI's range profiler (torch.profiler's experimental_config with profiler_metrics) writes one event of this
# category per profiled kernel, holding its counters, and records no kernel activity: launches, no kernels
COUNTER_RANGE_CAT = "cuda_profiler_range"
COUNTER_MODE_NEXT = ("for timing, capture again without profiler_metrics (experimental_config): "
                     "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]); keep this "
                     "capture for the counters it holds")


def counter_ranges(trace: Trace) -> int:
    """The trace's CUPTI range-profiler events (:data:`COUNTER_RANGE_CAT`): asked only of a trace with launches
    and no device activity, the one case they explain."""
    (n,), = trace.con.execute("SELECT count(*) FROM events WHERE cat = ?", [COUNTER_RANGE_CAT]).fetchall()
    return int(n)


def counter_mode_text(ranges: int) -> str:
    """What ``ranges`` range-profiler events say about a trace with no device activity."""
    return (f"{ranges:,} {COUNTER_RANGE_CAT} event(s): the capture ran CUPTI's range profiler (profiler_metrics), "
            "which records each kernel's counters in place of its time")


def findings(h: Health, *, cpu_only: bool) -> list[Finding]:
    """The health record's findings, each with its effect on the diagnosis and a better capture."""
    out: list[Finding] = []
    if h.launch_calls and not h.device_activities:
        ranges = f" ({counter_mode_text(h.counter_ranges)})" if h.counter_ranges else ""
        out.append(Finding("no_device_activity", f"{h.launch_calls:,} launch call(s) but no device activity "
                           f"recorded{ranges}", "the diagnosis makes no device claim (idle/not_recorded)",
                           COUNTER_MODE_NEXT if h.counter_ranges else
                           "profile with ProfilerActivity.CUDA (or the device's activity) and check that no other "
                           "profiler holds CUPTI/roctracer"))
    missing = sum(h.without_launch.values())
    if h.device_activities and missing > UNLINKED_WARN_SHARE * h.device_activities:
        reasons = ", ".join(f"{k} {v:,}" for k, v in h.without_launch.items())
        out.append(Finding("without_launch", f"{missing:,} of {h.device_activities:,} device activities have no launch "
                           f"call in the trace ({reasons})",
                           "their time counts as busy but belongs to no op, module or step's launch: per-op and "
                           "per-module device time miss it",
                           "start the profiler a step earlier (schedule(wait=1, warmup=1, ...)) so launches made "
                           "before the window are recorded"))
    out += _device_findings(h)
    if h.steps == 0 and not cpu_only:
        out.append(Finding("no_steps", "no step marks: the whole active window is one span",
                           "shares are of the active window, not of a step; step-to-step variation is unknown",
                           "call prof.step() each iteration (torch.profiler schedule), or wrap each step in "
                           "record_function('ProfilerStep#N')"))
    if h.python_events and h.ops and h.python_events > PYTHON_PER_OP_WARN * h.ops:
        out.append(Finding("python_stacks", f"{h.python_events:,} Python frames recorded for {h.ops:,} ops "
                           f"({h.python_events / h.ops:.1f} per op: with_stack)",
                           "host time (cpu_other, launch overhead) includes the stack tracer's own cost",
                           "capture with with_stack=False for timing; keep stacks for a short second capture"))
    return out


def _device_findings(h: Health) -> list[Finding]:
    out: list[Finding] = []
    if h.launches_without_activity and h.device_activities:
        names = ", ".join(f"{v:,} {k}" for k, v in list(h.idle_launch_names.items())[:3])
        out.append(Finding("launches_without_activity",
                           f"{h.launches_without_activity:,} launch call(s) with no device activity in the trace "
                           f"({names})",
                           "work those launches put on the device is missing from busy time and the budget",
                           "a longer warm-up before the active steps; a larger activity buffer "
                           "(TORCH_PROFILER/Kineto buffer settings) where kernels are dropped at the start"))
    if h.same_stream_overlaps:
        out.append(Finding("same_stream_overlaps", f"{h.same_stream_overlaps:,} device activities start before "
                           "the previous one on their stream ended",
                           "busy time is the union over every stream, so overlaps are not counted twice; per-"
                           "kernel times on those streams may be inflated",
                           "check the device clock source; record again without other profilers attached"))
    if h.before_window or h.after_window:
        out.append(Finding("outside_window", f"{h.before_window:,} device activities start before the first host "
                           f"event, {h.after_window:,} end after the last",
                           "those before the window have no launch in the trace; those after it are counted in "
                           "the last step's span",
                           "warm up before the profiled steps and synchronise before the profiler stops"))
    if h.device_behind_us is not None:
        out.append(Finding("clock_offset", f"a device activity starts {fmt_us(h.device_behind_us)} before its "
                           "launch call: the device clock runs behind the host's by at least that",
                           "queue delays and waits are measured against a shifted clock: queued and unrecorded "
                           "waits may be offset, skewed launches are left out of queue delays",
                           "record host and device on one clock (a recent Kineto/CUPTI), or record again"))
    if h.all_late_us is not None:
        out.append(Finding("all_late", f"every launched activity started over {_queued_min_us():g} µs after its launch "
                           f"call (the least {fmt_us(h.all_late_us)})",
                           "a device clock ahead of the host's would look the same: idle/queued and unrecorded/wait "
                           "may be launch latency, so their levers stay low confidence",
                           "record again with a recent Kineto/CUPTI; compare with torch.cuda.Event timings"))
    return out
