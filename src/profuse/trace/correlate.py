"""Correlation: nesting on each thread, device event -> launch -> op -> module, time attribution.

:func:`correlate` runs every rule of docs/correlation.md over a trace's decoded events and returns
the ``events`` table's columns. All of it is vectorised numpy over whole columns; no per-event
Python on the hot path. Conventions: ids are row positions; -1 means none.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _native, compiled
from ._columns import packed_order
from .arrays import distinct
from .event_columns import NONE, DecodedEvents, EventColumns, Flows, kind_mask, narrowed, row_type
from .schema import DEVICE_KINDS, DEVICE_TIME_KINDS, KIND_CODE, TABLE_KINDS
from .vocabulary import is_graph_launch

__all__ = ["LINK_HOW", "NONE", "UNLINKED", "Attribution", "Flows", "Links", "Reusable", "attribute", "correlate",
           "correlated", "device_threads", "link_device_events", "name_flags", "nearest_ancestor", "nested_in_own_name",
           "nested_in_own_name_of", "nesting", "nesting_in_order", "unmatched_flows"]

_accel = compiled.accel  # tests turn it off here
MODULE_PREFIX = "nn.Module: "
OVERHANG_NS = 1000  # a call may end this much after its parent (µs rounding) and still be its child


@dataclass(frozen=True)
class Reusable:
    """What :func:`correlated` worked out on the way that the memory tables ask again (trace/memory.py)."""

    host_order: np.ndarray    # the nested host events' ids by thread, start, the longer first, then id
    table_parent: np.ndarray  # each event's nearest op-table ancestor (not itself), or -1


def correlate(events: DecodedEvents) -> EventColumns:
    """Every correlation rule (docs/correlation.md) over one trace: the ``events`` table's columns."""
    return correlated(events)[0]


def correlated(events: DecodedEvents) -> tuple[EventColumns, Reusable]:
    """:func:`correlate`, and what it worked out on the way that the memory tables use again."""
    kind, n = events.kind, len(events)
    row = row_type(n)  # ids of events and counts of them: int32 where the trace's events fit it, from the start
    is_device = kind_mask(kind, *DEVICE_KINDS)
    host = ~is_device & ~device_threads(kind, events.thread, len(events.pid_of_thread),
                                       events.pid_of_thread)[events.thread]
    parent, depth, host_order = nesting_in_order(events.thread, events.ts, events.dur, host, index=row)
    op_of_host = nearest_ancestor(parent, kind_mask(kind, "cpu_op", "annotation"), include_self=True, index=row)
    graph_launch = name_flags(events.names, is_graph_launch)[events.name]
    links = link_device_events(kind=kind, graph_launch=graph_launch, thread=events.thread, ts=events.ts,
                               correlation=events.correlation, external_id=events.external_id,
                               op_of_host=op_of_host, flows=events.flows, has_host=bool(host.any()), index=row)
    is_module = module_scopes(events)
    is_scope = is_module | (kind == KIND_CODE["annotation"])
    table_parent = nearest_ancestor(parent, kind_mask(kind, *TABLE_KINDS), include_self=False, index=row)
    sums = _narrow_sums(attribute(kind=kind, dur=events.dur, parent=parent, device_op=links.op,
                                  table_parent=table_parent, index=row))
    device, stream = _device_and_stream(events, is_device)
    thread = events.thread.astype(np.int32, copy=False)
    columns = EventColumns(
        id=np.arange(n, dtype=row), kind=kind.astype(np.int32), cat=events.cat, name=events.name,
        ts=events.ts, dur=events.dur, pid=thread, tid=thread,
        thread=thread, device=device, stream=stream, correlation=events.correlation,
        external_id=events.external_id, parent=parent, depth=depth.astype(row, copy=False),
        op=np.where(host, op_of_host, links.op).astype(row, copy=False),
        module=_enclosing_or_launchers(parent, is_module, host, links),
        scope=_enclosing_or_launchers(parent, is_scope, host, links),
        parent_op=nearest_ancestor(parent, kind == KIND_CODE["cpu_op"], include_self=False, index=row),
        launch=links.launch, link=links.how.astype(np.int32), unlinked=links.unlinked.astype(np.int32),
        self_cpu=sums.self_cpu, self_device=sums.self_device, device_total=sums.device_total,
        kernels=sums.kernels, kernels_total=sums.kernels_total, seq=events.seq,
        python_id=events.python_id, python_parent_id=events.python_parent_id, bytes=events.nbytes,
        flops=events.flops)
    return columns, Reusable(host_order=host_order, table_parent=table_parent)


def nested_in_own_name(columns: EventColumns, table_parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nested_in_own_name_of` over a trace's correlated columns."""
    return nested_in_own_name_of(columns.kind, columns.depth, columns.name, table_parent)


def nested_in_own_name_of(kind: np.ndarray, depth: np.ndarray, name: np.ndarray,
                          table_parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the op-table calls (TABLE_KINDS, nested on their thread) with an op-table ancestor of the same
    name (``table_parent``: each event's nearest op-table ancestor; Python frames between pass), at any depth:
    torch records an overload dispatching to another under one name (``aten::sum`` in ``aten::sum``,
    ``aten::copy_`` in ``aten::copy_``), an annotation can open again inside itself, and a call can come back
    under another (``aten::copy_`` in ``aten::to`` in ``aten::copy_``). Their time and device total are in the
    call around them: the op table counts them once (the ``nested_calls`` table; analysis/optable.py). Their
    ids (ascending), and each one's nearest such ancestor, the call around it (ids are row numbers: 0..n-1).
    One step up the chains at a time, for the calls not yet placed: as many steps as the op-table depth; past
    the first, only the calls of a name that holds another call somewhere (the others have no ancestor of it)."""
    table = kind_mask(kind, *TABLE_KINDS) & (depth >= 0)
    calls = np.flatnonzero(table & (table_parent >= 0))
    own, above = name[calls], table_parent[calls]
    if name.dtype.kind in "iu":   # name codes: a flag per code
        holds = np.zeros(int(name.max()) + 1 if name.size else 0, dtype=bool)
        holds[name[above]] = True
        holder = holds[own]
    else:
        holder = np.isin(own, name[above])
    found: list[tuple[np.ndarray, np.ndarray]] = []
    while calls.size:
        same = name[above] == own
        found.append((calls[same], above[same]))
        up = table_parent[above]
        go = ~same & (up >= 0) & holder
        calls, own, above, holder = calls[go], own[go], up[go], holder[go]
    ids = np.concatenate([c for c, _ in found]).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    around = np.concatenate([a for _, a in found]).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    return ids[order], around[order]


def _narrow_sums(attr: Attribution) -> Attribution:
    """``attr`` with its time sums int32 where every one of a column fits (under 2.1 s: an op's sums nearly
    always), as the ids are: nothing in the load reads them again, and 3 x 8 B per event held through the
    events' insert was the load's peak on a big trace (with the memory tables beside it). Each int64 column
    is let go before the next is narrowed, and before correlate makes its last columns."""
    times = [attr.self_cpu, attr.self_device, attr.device_total]
    kernels, kernels_total = attr.kernels, attr.kernels_total
    del attr
    for i in range(len(times)):
        times[i] = narrowed(times[i])
    return Attribution(times[0], times[1], times[2], kernels, kernels_total)


def device_threads(kind: np.ndarray, thread: np.ndarray, count: int,
                   pid_of_thread: np.ndarray | None = None) -> np.ndarray:
    """A flag per thread number: it carries device events (its host-kind events are not nested either), or it
    holds nothing but ``sync`` records in a process (``pid_of_thread``: a number, -1 for none) whose other
    threads carry device events: CUPTI's device-side synchronisation records (Kineto's ``cuda_sync``: a
    ``Context Sync`` on a row of its own, tid -1, beside the streams' ``Stream Sync``), not host calls."""
    out = np.zeros(count, dtype=bool)
    out[thread[kind_mask(kind, *DEVICE_KINDS)]] = True
    if pid_of_thread is None or not out.any():
        return out
    sync = kind_mask(kind, "sync")
    if sync.any():
        held = np.bincount(thread[sync], minlength=count)
        only_sync = (held > 0) & (held == np.bincount(thread, minlength=count))
        device_pids = pid_of_thread[out & (pid_of_thread >= 0)]
        out |= only_sync & (pid_of_thread >= 0) & np.isin(pid_of_thread, device_pids)
    return out


def name_flags(names: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """``test`` of each distinct name, so a per-event test costs one index instead of a string op."""
    return np.array([isinstance(s, str) and test(s) for s in names] or [False], dtype=bool)


def module_scopes(events: DecodedEvents) -> np.ndarray:
    """Per event: a ``python_function`` event named ``nn.Module: X`` (a module scope)."""
    named = name_flags(events.names, lambda s: s.startswith(MODULE_PREFIX))
    flags: np.ndarray = (events.kind == KIND_CODE["python"]) & named[events.name]
    return flags


def _enclosing_or_launchers(parent: np.ndarray, accept: np.ndarray, host: np.ndarray, links: Links) -> np.ndarray:
    """Host events: the innermost enclosing ``accept`` event; device events: the innermost one holding
    their launch call (so a graph replay inherits the scope of its graph launch, even one that sits in a
    module inside the launching op), else, linked by external id only, the one holding their op. Ids of
    ``parent``'s integer type where it is int32 (:func:`nearest_ancestor`'s ``index``), else int64."""
    index = _index_of(parent)
    holding = nearest_ancestor(parent, accept, include_self=True, index=index)
    if not compiled.enabled() or _accel is None:
        return _enclosing_numpy(holding, parent, host, links).astype(index, copy=False)
    out = np.empty(len(parent), dtype=index)
    parent, launch, op = (np.ascontiguousarray(a, dtype=index) for a in (parent, links.launch, links.op))
    _accel.enclosing(holding, parent, np.ascontiguousarray(host, dtype=bool), launch, op, out, np.dtype(index).itemsize)
    return out


def _index_of(ids: np.ndarray) -> type[np.signedinteger[Any]]:
    """int32 for ids given as int32, else int64: the integer type of the ids worked out from them."""
    return np.int32 if ids.dtype == np.int32 else np.int64


def _enclosing_numpy(holding: np.ndarray, parent: np.ndarray, host: np.ndarray, links: Links) -> np.ndarray:
    """:func:`_enclosing_or_launchers` from ``holding`` by numpy alone."""
    of_host = np.where(parent >= 0, holding[np.maximum(parent, 0)], NONE)  # include_self=False, from it
    src = np.where(links.launch >= 0, links.launch, links.op)
    of_launcher = np.where(src >= 0, holding[np.clip(src, 0, None)], NONE)
    return np.where(host, of_host, of_launcher)


def _device_and_stream(events: DecodedEvents, is_device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Device index and stream of device events (from args, else the pid and tid when they are numbers),
    -1 for the others: worked out for the device events alone (a few % of a trace's events); each as int32
    where every one fits it (:func:`~profuse.trace.event_columns.narrowed`), made so at once."""
    dev = np.flatnonzero(is_device)
    thread, given_device, given_stream = events.thread[dev], events.device[dev], events.stream[dev]
    out = []
    for given, of_thread in ((given_device, events.pid_of_thread), (given_stream, events.tid_of_thread)):
        values = narrowed(np.where(given < 0, of_thread[thread], given))
        column = np.full(len(is_device), NONE, dtype=values.dtype)
        column[dev] = values
        out.append(column)
    return out[0], out[1]


def nesting(thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent and depth of each masked event among the masked events on its thread (see
    :func:`nesting_in_order`)."""
    parent, depth, _ = nesting_in_order(thread, ts, dur, mask)
    return parent, depth


def nesting_in_order(thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, mask: np.ndarray, *,
                     index: type[np.signedinteger[Any]] = np.int64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parent and depth of each masked event among the masked events on its thread, and the masked events'
    ids in the order they were nested: by thread, start, the longer first, then id (on a thread, events of
    one start by depth, the outer first). Parents and ids are of the integer type ``index`` (int32 where
    the caller knows the events' ids fit it); depths int32.

    Zero-length events count as 1 ns so that an event ending exactly where the next starts is its
    sibling, not its parent. An event ending at most OVERHANG_NS after its parent (µs rounding) stays
    in it; one outliving it by more belongs to the nearest ancestor that holds it. The compiled
    extension does this in one stack pass; without it, a vectorised count that handles properly
    nested threads, and a Python stack for the others.
    """
    n = len(ts)
    parent = np.full(n, NONE, dtype=index)
    depth = np.full(n, NONE, dtype=np.int32)
    # every event masked (a call tree's frames): the columns themselves, not a copy of each through the mask
    idx = None if mask.all() else np.flatnonzero(mask)
    if (n if idx is None else idx.size) == 0:
        return parent, depth, np.zeros(0, dtype=index)
    # the threads in their own integer type (packed_order widens what it keys); each end made in one array
    th = thread if idx is None else thread[idx]
    start = (ts if idx is None else ts[idx]).astype(np.int64, copy=False)
    end = (dur if idx is None else dur[idx]).astype(np.int64, copy=idx is None)   # a fresh array: worked in place
    np.maximum(end, 1, out=end)
    end += start
    np.negative(end, out=end)
    order = packed_order(th, start, end)  # by thread, start, the longer first (end negated), then position
    np.negative(end, out=end)
    ids = (order if idx is None else idx[order]).astype(index, copy=False)
    del idx
    # the compiled pass reads the events' own columns by id: no sorted copies, nothing per event to scatter back
    if _native.nest_ids(ids, thread, ts, dur, parent, depth, OVERHANG_NS):
        return parent, depth, ids
    th, start, end = th[order].astype(np.int64, copy=False), start[order], end[order]
    del order
    t0 = start.min()
    span = int(max(end.max() - t0, 1)) + 1
    if (int(th.max()) + 1) * span >= 2**62:  # (thread, time) keys would overflow: nest thread by thread
        return (*_nesting_by_thread(th, start, end, ids, parent, depth), ids)
    par_sorted, d = _counted_nesting(th, start, end, ids, t0, span, n)
    parent[ids] = par_sorted
    depth[ids] = d.astype(np.int32)
    return parent, depth, ids


def _counted_nesting(th: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray, t0: int, span: int,
                     n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nesting`'s numpy path over events sorted by thread, start and the longer first: each
    event's depth from the events started and ended before it, its parent the latest earlier event on
    its thread one level up; threads with improper overlaps are redone with a stack. (parent, depth)
    in the sorted order."""
    key_start = th * span + (start - t0)
    key_end = np.sort(th * span + (end - t0))
    first_of_thread = np.searchsorted(th, th, side="left")
    started_before = np.arange(len(ids)) - first_of_thread
    ended_before = np.searchsorted(key_end, key_start, side="right") - np.searchsorted(key_end, th * span, side="left")
    d = (started_before - ended_before).astype(np.int64, copy=False)
    d = np.maximum(d, 0)
    # parent = the latest earlier event on the same thread one level up
    dmax = int(d.max()) + 1
    m = len(ids)
    key = (th * dmax + d) * m + np.arange(m)
    sorted_key = np.sort(key)
    probe = (th * dmax + (d - 1)) * m + np.arange(m)
    pos = np.searchsorted(sorted_key, probe, side="left") - 1
    ok = (d > 0) & (pos >= 0)
    cand = np.where(ok, sorted_key[np.clip(pos, 0, None)], 0)
    ok &= (cand // m) == (th * dmax + d - 1)
    par_sorted = np.where(ok, ids[cand % m], NONE)
    # Improper overlaps (a record_function that starts inside a Python call and outlives it) break
    # the counting above: an event then gets a parent that ended before it started. Redo those
    # threads with an explicit stack, which handles them.
    pos_of = np.full(n, -1, dtype=np.int64)
    pos_of[ids] = np.arange(m)
    has = par_sorted >= 0
    bad = np.zeros(m, dtype=bool)
    parent_end = end[pos_of[par_sorted[has]]]
    bad[has] = (start[has] >= parent_end) | (end[has] > parent_end)  # any overhang: the count may be off
    for t in distinct(th[bad]).tolist():
        sel = np.flatnonzero(th == t)
        p_loc, d_loc = _stack_nesting(start[sel], end[sel])
        par_sorted[sel] = np.where(p_loc >= 0, ids[sel][np.clip(p_loc, 0, None)], NONE)
        d[sel] = d_loc
    return par_sorted, d


def _nesting_by_thread(th: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray,
                       parent: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nesting with an explicit stack per thread, for traces whose times are too far apart to key."""
    bounds = np.flatnonzero(np.diff(th)) + 1
    for sel in np.split(np.arange(len(ids)), bounds):
        p_loc, d_loc = _stack_nesting(start[sel], end[sel])
        parent[ids[sel]] = np.where(p_loc >= 0, ids[sel][np.clip(p_loc, 0, None)], NONE)
        depth[ids[sel]] = d_loc.astype(np.int32)
    return parent, depth


def _stack_nesting(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent (local index) and depth by a stack, for one thread's events in start order."""
    n = len(start)
    parent = np.full(n, NONE, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    stack: list[int] = []
    s_list, e_list = start.tolist(), end.tolist()
    for i in range(n):
        si = s_list[i]
        while stack and e_list[stack[-1]] <= si:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        depth[i] = len(stack)
        stack.append(i)
    # an event that outlives its parent belongs to the nearest ancestor that holds it
    for i in range(n):
        p = parent[i]
        while p >= 0 and e_list[i] > e_list[p] + OVERHANG_NS:
            p = parent[p]
        parent[i] = p
        depth[i] = depth[p] + 1 if p >= 0 else 0  # parents start earlier, so are already final
    return parent, depth


def nearest_ancestor(parent: np.ndarray, accept: np.ndarray, include_self: bool, *,
                     index: type[np.signedinteger[Any]] = np.int64) -> np.ndarray:
    """For each event, the closest ancestor (or itself) for which ``accept`` holds, else -1, as ``index``
    (int32 where the caller knows the events' ids fit it: half the bytes).

    The compiled extension walks each chain once (trace/_accel.c, ancestors); without it, a
    vectorised walk of every event one level per step (:func:`nearest_ancestor_numpy`).
    """
    if not compiled.enabled() or _accel is None:
        return nearest_ancestor_numpy(parent, accept, include_self).astype(index, copy=False)
    parent = np.ascontiguousarray(parent, dtype=index)
    held = np.empty(len(parent), dtype=index)  # the nearest accepted event of each and its ancestors
    _accel.ancestors(parent, np.ascontiguousarray(accept, dtype=bool), held, np.dtype(index).itemsize)
    if include_self:
        return held
    return np.where(parent >= 0, held[np.maximum(parent, 0)], NONE).astype(index, copy=False)


def nearest_ancestor_numpy(parent: np.ndarray, accept: np.ndarray, include_self: bool) -> np.ndarray:
    """:func:`nearest_ancestor` by numpy alone: every event walks up one level per step."""
    n = len(parent)
    cur = np.arange(n) if include_self else parent.copy()
    out = np.full(n, NONE, dtype=np.int64)
    active = np.flatnonzero(cur >= 0)
    while active.size:
        c = cur[active]
        hit = accept[c]
        out[active[hit]] = c[hit]
        active = active[~hit]
        nxt = parent[cur[active]]
        cur[active] = nxt
        active = active[nxt >= 0]
    return out


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[i] where keys[i] == q, for each q in query (first match), else -1."""
    if keys.size == 0 or query.size == 0:
        return np.full(query.shape, NONE, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.clip(np.searchsorted(sk, query, side="left"), 0, len(sk) - 1)
    found = sk[pos] == query
    return np.where(found, values[order][pos], NONE)


# How a device event's launch was found (``link`` column) and why one was not (``unlinked``); the
# columns hold codes into these tuples while tables are built; code 0 is NULL.
LINK_HOW = (None, "correlation", "flow", "external_id", "graph")
# "graph_replay" is kept so that code numbers stay stable; replays are linked (how = "graph") now.
UNLINKED = (None, "no_launch_in_trace", "graph_replay", "gpu_only_trace", "no_correlation", "launch_outside_op")
LINK_CODE = {h: i for i, h in enumerate(LINK_HOW) if h}
REASON_CODE = {r: i for i, r in enumerate(UNLINKED) if r}


@dataclass(frozen=True)
class Links:
    """Per event, what linking found (device events only; -1 / code 0 elsewhere)."""

    launch: np.ndarray    # device event -> runtime event
    op: np.ndarray        # device event -> op (cpu_op or annotation)
    how: np.ndarray       # int8 code into LINK_HOW
    unlinked: np.ndarray  # int8 code into UNLINKED


def link_device_events(
    *, kind: np.ndarray, graph_launch: np.ndarray, thread: np.ndarray, ts: np.ndarray,
    correlation: np.ndarray, external_id: np.ndarray, op_of_host: np.ndarray,
    flows: Flows, has_host: bool, index: type[np.signedinteger[Any]] = np.int64,
) -> Links:
    """Device event -> launch -> op (docs/correlation.md steps 2 and 3), and why a device event has none;
    the launches and ops as ``index`` (int32 where the caller knows the events' ids fit it)."""
    n = len(kind)
    launch = np.full(n, NONE, dtype=index)
    how = np.zeros(n, dtype=np.int8)
    dev = np.flatnonzero(kind_mask(kind, *DEVICE_KINDS))
    runtime = np.flatnonzero(kind == KIND_CODE["runtime"])
    # 1. correlation id
    rt_corr = correlation[runtime]
    has = rt_corr >= 0
    got = _lookup(rt_corr[has], runtime[has], correlation[dev])
    got[correlation[dev] < 0] = NONE
    launch[dev] = got
    how[dev[got >= 0]] = LINK_CODE["correlation"]
    # 2. flows (ac2g / async_gpu): start on the launch, finish on the device event, same id
    todo = dev[launch[dev] < 0]
    if todo.size and flows.ids.size:
        launch_flow = _flow_links(flows, thread, ts, runtime, todo)
        launch[todo] = launch_flow
        how[todo[launch_flow >= 0]] = LINK_CODE["flow"]
    op = np.where(launch >= 0, op_of_host[np.clip(launch, 0, None)], NONE).astype(index, copy=False)
    op[launch < 0] = NONE
    # 3. external id straight to an op
    todo = dev[(launch[dev] < 0) & (external_id[dev] >= 0)]
    if todo.size:
        ops = np.flatnonzero((kind == KIND_CODE["cpu_op"]) & (external_id >= 0))
        hit = _lookup(external_id[ops], ops, external_id[todo])
        op[todo] = hit
        how[todo[hit >= 0]] = LINK_CODE["external_id"]
    # Graph replays: Kineto gives every replayed kernel the correlation id of its graph launch call,
    # so the launch is found above; the kernels belong to the op or annotation around that launch.
    graph = graph_launch & (kind == KIND_CODE["runtime"])
    replay = dev[(launch[dev] >= 0) & graph[np.clip(launch[dev], 0, None)]]
    how[replay] = LINK_CODE["graph"]
    unlinked = np.zeros(n, dtype=np.int8)
    timed = dev[kind_mask(kind[dev], *DEVICE_TIME_KINDS)]
    lost = timed[op[timed] < 0]
    has_launch = launch[lost] >= 0
    no_ids = (correlation[lost] < 0) & (external_id[lost] < 0)
    unlinked[lost] = np.where(
        has_launch, REASON_CODE["launch_outside_op"],
        np.where(not has_host, REASON_CODE["gpu_only_trace"],
                 np.where(no_ids, REASON_CODE["no_correlation"], REASON_CODE["no_launch_in_trace"])))
    return Links(launch=launch, op=op, how=how, unlinked=unlinked)


def _flow_links(flows: Flows, thread: np.ndarray, ts: np.ndarray, runtime: np.ndarray,
                todo: np.ndarray) -> np.ndarray:
    """Device event -> launch through a flow: finish at (thread, ts) of the event, start on the launch."""
    span = int(max(ts.max(initial=0), flows.ts.max(initial=0)) - min(ts.min(initial=0), flows.ts.min(initial=0))) + 1
    t0 = min(ts.min(initial=0), flows.ts.min(initial=0))

    def key(th: np.ndarray, t: np.ndarray) -> np.ndarray:
        out: np.ndarray = th.astype(np.int64) * span + (t - t0)
        return out

    fin, start = flows.ph == 1, flows.ph == 0
    fid = _lookup(key(flows.thread[fin], flows.ts[fin]), np.flatnonzero(fin), key(thread[todo], ts[todo]))
    out = np.full(len(todo), NONE, dtype=np.int64)
    has = fid >= 0
    if not has.any():
        return out
    start_of = np.full(len(flows.id_text), NONE, dtype=np.int64)  # the last start of each flow id
    start_idx = np.flatnonzero(start)
    np.maximum.at(start_of, flows.ids[start_idx], start_idx)
    s = start_of[flows.ids[fid[has]]]
    ok = s >= 0
    launch = np.full(len(s), NONE, dtype=np.int64)
    launch[ok] = _lookup(key(thread[runtime], ts[runtime]), runtime, key(flows.thread[s[ok]], flows.ts[s[ok]]))
    out[np.flatnonzero(has)] = launch
    return out


def unmatched_flows(flows: Flows) -> int:
    """Flow ids with a start and no finish, or a finish and no start."""
    started, finished = (np.zeros(len(flows.id_text), dtype=bool) for _ in range(2))
    started[flows.ids[flows.ph == 0]] = True
    finished[flows.ids[flows.ph == 1]] = True
    return int(np.count_nonzero(started ^ finished))


@dataclass(frozen=True)
class Attribution:
    """Time attributed to each event (host events; 0 elsewhere), in ns and device-event counts."""

    self_cpu: np.ndarray
    self_device: np.ndarray
    device_total: np.ndarray
    kernels: np.ndarray
    kernels_total: np.ndarray


def attribute(
    *, kind: np.ndarray, dur: np.ndarray, parent: np.ndarray, device_op: np.ndarray,
    table_parent: np.ndarray | None = None, index: type[np.signedinteger[Any]] = np.int64,
) -> Attribution:
    """Self CPU time over the op-table tree, and device time per op (self and inclusive); times int64,
    the counts of device events as ``index`` (int32 where the caller knows the events fit it).

    ``table_parent``: each event's nearest op-table ancestor, where the caller has it already (else found
    here). The compiled extension sums in one pass and one walk up the tree per device event
    (trace/_accel.c, attribute); without it, :func:`_attribute_numpy`.
    """
    in_table = kind_mask(kind, *TABLE_KINDS)
    if table_parent is None:
        table_parent = nearest_ancestor(parent, in_table, include_self=False, index=index)
    timed = kind_mask(kind, *DEVICE_TIME_KINDS) & (device_op >= 0)
    if not compiled.enabled() or _accel is None:
        attr = _attribute_numpy(dur, in_table, table_parent, timed, device_op)
        return Attribution(attr.self_cpu, attr.self_device, attr.device_total, attr.kernels.astype(index, copy=False),
                           attr.kernels_total.astype(index, copy=False))
    n = len(kind)
    times = [np.empty(n, dtype=np.int64) for _ in range(3)]
    counts = [np.empty(n, dtype=index) for _ in range(2)]
    _accel.attribute(np.ascontiguousarray(dur, dtype=np.int64), in_table, np.ascontiguousarray(table_parent, dtype=index),
                     timed, np.ascontiguousarray(device_op, dtype=index), *times, *counts, np.dtype(index).itemsize)
    return Attribution(*times, *counts)


def _attribute_numpy(dur: np.ndarray, in_table: np.ndarray, table_parent: np.ndarray, timed_mask: np.ndarray,
                     device_op: np.ndarray) -> Attribution:
    """:func:`attribute` by numpy alone: a bincount over the whole table per level of the op-table tree."""
    n = len(dur)
    child = np.flatnonzero(in_table & (table_parent >= 0))
    children_dur = np.bincount(table_parent[child], weights=dur[child], minlength=n)
    # children that overlap one another or outlast their parent (improper nesting) can add up to more than
    # it: its self time is then 0, never negative (docs/correlation.md)
    self_cpu = np.where(in_table, np.maximum(dur - children_dur.astype(np.int64), 0), 0)
    timed = np.flatnonzero(timed_mask)
    owner = device_op[timed]
    self_device = np.bincount(owner, weights=dur[timed], minlength=n).astype(np.int64)
    kernels = np.bincount(owner, minlength=n).astype(np.int64, copy=False)
    device_total = self_device.copy()
    kernels_total = kernels.copy()
    w = dur[timed].astype(np.int64, copy=False)
    cur = table_parent[owner]
    while True:
        live = cur >= 0
        if not live.any():
            break
        cur, w = cur[live], w[live]
        device_total += np.bincount(cur, weights=w, minlength=n).astype(np.int64)
        kernels_total += np.bincount(cur, minlength=n)
        cur = table_parent[cur]
    return Attribution(self_cpu, self_device, device_total, kernels, kernels_total)
