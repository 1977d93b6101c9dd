"""Payloads the explorer (and the HTML report) send to the browser: columnar arrays, interned
strings, never HTML. Every string from a trace is data; the front end renders it as text."""
from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

import numpy as np

from ..analysis import op_table, summarize
from ..analysis.compiled import compiled_regions, source_ops
from ..analysis.diff import diff
from ..analysis.findings import trace_findings
from ..analysis.scopes import scope_instances
from ..redact import redact
from ..report.json_report import advice_dict, capture_dict
from ..trace import Trace
from ..trace.artifacts import read_artifacts

DEVICE = "('kernel', 'memcpy', 'memset', 'gpu_annotation', 'device_other')"
COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|broadcast|sendrecv", re.IGNORECASE)


class Interner:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def __call__(self, s: str | None) -> int:
        s = "" if s is None else str(s)
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.values)
            self.values.append(s)
        return i


def prepare(trace: Trace) -> None:
    """Build the timeline table once: every drawable event with its lane and row."""
    con = trace.con
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'tl' AND temporary").fetchall()[0][0]:
        return
    # Rows: ops stack by how many ops enclose them (Python frames between do not add rows); runtime
    # calls and kernels never nest, so one row each (device annotations get the row below).
    parent_op = con.execute("SELECT coalesce(parent_op, -1) FROM events ORDER BY id").fetchnumpy()
    po = next(iter(parent_op.values())).astype(np.int64)
    level = np.zeros(len(po), dtype=np.int64)
    cur = po.copy()
    while (live := cur >= 0).any():
        level[live] += 1
        cur[live] = po[cur[live]]
    con.register("_levels", {"id": np.arange(len(po), dtype=np.int64), "level": level})
    # each drawable event once, with its lane key (lk: 0 scopes, 1 ops, 2 runtime, 3 device stream;
    # a, b: thread or device and stream) and its depth within the lane
    con.execute(f"""
        CREATE TEMP TABLE tl_e AS
        WITH e AS (
            SELECT id, name, kind, ts, dur, thread, device, stream,
              CASE WHEN kind IN ('cpu_op', 'sync', 'other') THEN lv.level
                   WHEN kind = 'gpu_annotation' THEN 1 WHEN kind IN {DEVICE} OR kind = 'runtime' THEN 0
                   ELSE coalesce(depth, 0) END AS depth,
              CASE WHEN kind IN {DEVICE} THEN 3
                   WHEN kind IN ('python', 'annotation') THEN 0
                   WHEN kind IN ('cpu_op', 'sync', 'other') THEN 1
                   WHEN kind = 'runtime' THEN 2 END AS lk
            FROM events JOIN _levels lv USING (id))
        SELECT id, name, kind, ts, dur, depth, lk,
               CASE WHEN lk = 3 THEN device ELSE thread END AS a, CASE WHEN lk = 3 THEN stream ELSE 0 END AS b
        FROM e WHERE lk IS NOT NULL""")
    con.execute("""
        CREATE TEMP TABLE tl_lane_ids AS
        SELECT row_number() OVER (ORDER BY lk = 3, a, lk, b) - 1 AS lane, lk, a, b, n
        FROM (SELECT lk, a, b, count(*) AS n FROM tl_e GROUP BY ALL)""")
    con.execute("""
        CREATE TEMP TABLE tl AS
        SELECT e.id, e.name, e.kind, e.ts - (SELECT min(ts) FROM events) AS ts, e.dur, l.lane,
               dense_rank() OVER (PARTITION BY l.lane ORDER BY e.depth) - 1 AS row
        FROM tl_e e JOIN tl_lane_ids l USING (lk, a, b)
        ORDER BY e.ts""")
    con.execute("DROP TABLE tl_e")
    con.unregister("_levels")


def lanes(trace: Trace) -> list[dict[str, Any]]:
    prepare(trace)
    names = {0: "scopes", 1: "ops", 2: "runtime", 3: "stream"}
    threads = {t: (pid, tid, tname) for t, pid, tid, tname in trace.con.execute(
        "SELECT thread, pid, tid, thread_name FROM threads").fetchall()}
    out = []
    for lane, lk, a, b, n, rows in trace.con.execute("""
            SELECT l.lane, l.lk, l.a, l.b, l.n, coalesce(max(t.row), 0) + 1 FROM tl_lane_ids l
            LEFT JOIN tl t USING (lane) GROUP BY ALL ORDER BY l.lane""").fetchall():
        if lk == 3:
            label = f"{trace.device_label} {a} · stream {b}"
        else:
            _pid, tid, tname = threads.get(a, ("?", "?", None))
            label = f"{tname or 'thread ' + str(tid)} · {names[lk]}"
        out.append({"lane": lane, "kind": names[lk], "label": label, "events": n, "rows": rows})
    return out


def timeline(trace: Trace, t0: float | None = None, t1: float | None = None, width: int = 1600) -> dict[str, Any]:
    """Events in [t0, t1) µs from the trace start, with level of detail: anything shorter than one
    pixel is merged, per lane and row, into blocks that carry a count and their longest member."""
    prepare(trace)
    (lo, hi), = trace.con.execute("SELECT min(ts), max(ts + dur) FROM tl").fetchall()
    lo, hi = (lo or 0) / 1e3, (hi or 0) / 1e3
    a = lo if t0 is None else max(float(t0), lo)
    b = hi if t1 is None else min(float(t1), hi)
    if b <= a:
        b = a + 1.0
    bucket_ns = max((b - a) * 1e3 / max(width, 1), 1.0)
    params = [a * 1e3, b * 1e3, bucket_ns]
    rows = trace.con.execute("""
        SELECT lane, row, ts, dur, name, id, 1 AS n, kind FROM tl
        WHERE ts < $2 AND ts + dur > $1 AND dur >= $3
        UNION ALL
        SELECT lane, row, min(ts), max(ts + dur) - min(ts), arg_max(name, dur), -1, count(*), arg_max(kind, dur)
        FROM tl WHERE ts < $2 AND ts + dur > $1 AND dur < $3
        GROUP BY lane, row, floor((ts - $1) / $3)
        ORDER BY 1, 2, 3""", params).fetchall()
    names = Interner()
    kinds = Interner()
    cols: dict[str, list[Any]] = {k: [] for k in ("lane", "row", "ts", "dur", "name", "id", "n", "kind")}
    for lane, row, ts, dur, name, eid, n, kind in rows:
        cols["lane"].append(lane)
        cols["row"].append(row)
        cols["ts"].append(round(ts / 1e3, 3))
        cols["dur"].append(round(dur / 1e3, 3))
        cols["name"].append(names(name))
        cols["id"].append(eid)
        cols["n"].append(n)
        cols["kind"].append(kinds(kind))
    return {"t0": a, "t1": b, "span": [lo, hi], "bucket_us": bucket_ns / 1e3, "names": names.values,
            "kinds": kinds.values, **cols}


def event(trace: Trace, eid: int) -> dict[str, Any] | None:
    """One event and what it is linked to: an op's launches and kernels, a kernel's launch, op chain
    and modules."""
    prepare(trace)
    con = trace.con
    found = con.execute("""SELECT e.id, e.kind, e.name, t.ts / 1e3, e.dur / 1e3, e.thread, e.launch, e.op, e.module,
                           e.link, e.unlinked, e.self_device / 1e3, e.device_total / 1e3, e.parent
                           FROM events e JOIN tl t USING (id) WHERE e.id = ?""", [eid]).fetchall()
    if not found:
        return None
    (i, kind, name, ts, dur, _thread, launch, op, module, link, unlinked, sdev, tdev, parent), = found
    out: dict[str, Any] = {"id": i, "kind": kind, "name": name, "ts": ts, "dur": dur, "self_device_us": sdev,
                           "device_total_us": tdev, "link": link, "unlinked": unlinked}
    if kind in ("cpu_op", "annotation", "python", "runtime"):
        # an op's launch calls and their device events; a launch call's own device events (a graph
        # launch: every kernel of the replay)
        within = "l.id = ?" if kind == "runtime" else (
            "l.kind = 'runtime' AND l.thread = me.thread AND l.ts >= me.ts AND l.ts < me.ts + me.dur")
        rel = con.execute(f"""
            WITH me AS (SELECT ts, dur, thread FROM events WHERE id = ?)
            SELECT l.id, l.name, tl.ts / 1e3, l.dur / 1e3, k.id, k.name, tk.ts / 1e3, k.dur / 1e3, k.link
            FROM events l, me JOIN events k ON k.launch = l.id JOIN tl ON tl.id = l.id JOIN tl tk ON tk.id = k.id
            WHERE {within} ORDER BY k.ts LIMIT 2000""", [i, i] if kind == "runtime" else [i]).fetchall()
        if kind != "runtime":
            out["launches"] = [{"id": r[0], "name": r[1], "ts": r[2], "dur": r[3]}
                               for r in {r[0]: r for r in rel}.values()]
        out["kernels"] = [{"id": r[4], "name": r[5], "ts": r[6], "dur": r[7], "launch": r[0],
                           "graph": r[8] == "graph"} for r in rel]
        out["replays"] = _replays(rel)
        if trace.cpu_only:
            out["kernels"], out["replays"] = [], []
    chain_start = op if kind in ("kernel", "memcpy", "memset") else parent
    out["launch"] = _brief(trace, launch)
    out["ops"] = _chain(trace, chain_start, ("cpu_op", "annotation"))
    out["modules"] = _modules(trace, module)
    return out


def _replays(rel: list[tuple]) -> list[dict[str, Any]]:
    """One entry per graph launch among the rows: the replay drawn as one flow to its first kernel."""
    out: dict[int, dict[str, Any]] = {}
    for lid, _lname, _lts, _ldur, kid, _kname, kts, kdur, link in rel:  # rows come in kernel start order
        if link != "graph":
            continue
        r = out.setdefault(lid, {"launch": lid, "first": kid, "kernels": 0, "ts": kts, "end": kts + kdur})
        r["kernels"] += 1
        r["end"] = max(r["end"], kts + kdur)
    return list(out.values())


def _brief(trace: Trace, eid: int | None) -> dict[str, Any] | None:
    if eid is None:
        return None
    r = trace.con.execute("SELECT e.id, e.name, e.kind, t.ts / 1e3, e.dur / 1e3 FROM events e JOIN tl t USING (id) "
                          "WHERE e.id = ?", [eid]).fetchall()
    return {"id": r[0][0], "name": r[0][1], "kind": r[0][2], "ts": r[0][3], "dur": r[0][4]} if r else None


def _chain(trace: Trace, eid: int | None, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    seen = 0
    while eid is not None and seen < 200:
        r = trace.con.execute("SELECT id, name, kind, parent, dur / 1e3 FROM events WHERE id = ?", [eid]).fetchall()
        if not r:
            break
        i, name, kind, parent, dur = r[0]
        if kind in kinds:
            out.append({"id": i, "name": name, "kind": kind, "dur": dur})
        eid, seen = parent, seen + 1
    return out


def _modules(trace: Trace, sid: int | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while sid is not None and len(out) < 100:
        r = trace.con.execute("SELECT id, name, parent, kind FROM scopes WHERE id = ?", [sid]).fetchall()
        if not r:
            break
        if r[0][3] == "module":
            out.append({"id": r[0][0], "name": r[0][1]})
        sid = r[0][2]
    return out


def overview(trace: Trace, *, keep_metadata: bool = False) -> dict[str, Any]:
    s = summarize(trace)
    advice = trace_findings(trace)
    cats = {"compute": 0.0, "memory copy": 0.0, "communication": 0.0, "idle": 0.0}
    if trace.cpu_only:
        (busy, _span), = trace.con.execute(
            "SELECT sum(dur), max(ts + dur) - min(ts) FROM events WHERE kind IN ('cpu_op', 'annotation') "
            "AND parent_op IS NULL AND (SELECT p.kind FROM events p WHERE p.id = events.parent) IS DISTINCT FROM "
            "'annotation'").fetchall()
        cats["compute"] = (busy or 0) / 1e3
        del cats["idle"]  # no device to be idle: the gaps are the host's own time, not a device's
    else:
        for name, kind, dur in trace.con.execute(
                "SELECT name, kind, sum(dur) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset') "
                "GROUP BY ALL").fetchall():
            key = "memory copy" if kind != "kernel" else "communication" if COMM.search(name) else "compute"
            cats[key] += dur / 1e3
        # device-wide: window minus the union of activity on every stream (the report's device_busy)
        busy = s.device_busy
        cats["idle"] = busy.window_us - busy.busy_us if busy is not None else 0.0
    meta = trace.meta.get("trace_meta", {})
    if not keep_metadata:
        meta = redact(meta)
    sections = advice_dict(advice)  # the same payload as `profuse report --format json`
    capture = capture_dict(s, keep_metadata=keep_metadata)
    summary = asdict(s) | {"bundle_error": capture and capture["error"]}
    return {"summary": summary, "device_label": trace.device_label, "categories": cats,
            "hotspots": sections["hotspots"], "advice": sections["fusion_candidates"],
            "interruptions": sections["interruptions"], "metadata": meta,
            "capture": capture}


def ops(trace: Trace, group_by: str = "op") -> dict[str, Any]:
    t = op_table(trace, group_by=group_by)
    cols: dict[str, list[Any]] = {k: [] for k in ("name", "shape", "calls", "self_cpu", "cpu_total", "self_device",
                                                   "device_total", "pct", "kernels")}
    for r in t.rows:
        for k, v in (("name", r.name), ("shape", r.shape or ""), ("calls", r.calls), ("self_cpu", r.self_cpu_us),
                     ("cpu_total", r.cpu_total_us), ("self_device", r.self_device_us),
                     ("device_total", r.device_total_us), ("pct", round(t.pct(r), 2)), ("kernels", r.kernels)):
            cols[k].append(round(v, 3) if isinstance(v, float) else v)
    return {"group_by": group_by, "device_label": t.device_label, "cpu_only": t.cpu_only, **cols}


def modules(trace: Trace) -> dict[str, Any]:
    """The nn.Module tree, aggregated by path of class names, with calls and device time per node."""
    insts = scope_instances(trace)
    nodes: dict[str, dict[str, Any]] = {}
    for inst in insts.values():
        if inst.kind != "module":
            continue
        path, p = [inst.name], inst.parent
        while p is not None and p in insts:
            if insts[p].kind == "module":
                path.append(insts[p].name)
            p = insts[p].parent
        key = "/".join(reversed(path))
        n = nodes.setdefault(key, {"path": key, "name": inst.name, "depth": len(path) - 1, "calls": 0,
                                   "device_us": 0.0, "cpu_us": 0.0})
        n["calls"] += 1
        n["device_us"] += inst.device_ns / 1e3
        n["cpu_us"] += inst.dur / 1e3
    rows = sorted(nodes.values(), key=lambda n: n["path"])
    for n in rows:
        n["device_us"] = round(n["device_us"], 3)
        n["cpu_us"] = round(n["cpu_us"], 3)
    return {"device_label": trace.device_label, "nodes": rows}


def compiled(trace: Trace) -> dict[str, Any]:
    s = compiled_regions(trace)
    code = read_artifacts(trace.path)
    return {"regions": [asdict(r) for r in s.regions], "graph_breaks": s.graph_breaks,
            "eager_between": s.eager_between, "code": code,
            "generated_kernels": [{"name": k, "fused_ops": source_ops(k)} for k in s.generated_kernels],
            "neffs": [asdict(n) for n in s.neffs]}


def compare(a: Trace, b: Trace) -> dict[str, Any]:
    d = diff(a, b)

    def rows(rs: list[Any]) -> list[dict[str, Any]]:
        return [{"name": r.name, "a_calls": r.a_calls, "b_calls": r.b_calls, "a_us": round(r.a_us, 3),
                 "b_us": round(r.b_us, 3), "delta_us": round(r.delta_us, 3)} for r in rs]

    return {"a": d.a_label, "b": d.b_label, "a_device_us": d.a_device_us, "b_device_us": d.b_device_us,
            "speedup": d.speedup, "same_device": d.same_device, "ops": rows(d.ops), "modules": rows(d.modules),
            "kernels_removed": rows(d.kernels_removed), "kernels_added": rows(d.kernels_added)}
