"""The Python call tree (analysis/calltree.py): per call path, calls, total, self and Python time equal a
reading of the raw JSON by a plain stack walk (below, nothing from profuse); the cut tree's self times add
up to the roots' totals; the console section fits 80 columns. On the real traces that hold
``python_function`` events and on one recorded here with torch.profiler(with_stack=True)."""
from __future__ import annotations

import io
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import H200_TRACES, TRACES, trace_path
from oracle import category, exact_events

import profuse
from profuse.analysis.calltree import call_tree, split_name
from profuse.analysis.event_detail import event_detail, kernel_launches
from profuse.payloads.calltree import call_tree_of

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation",
                         "mtia_ccp_events"})
OVERHANG_NS = 1000  # docs/correlation.md: a call may end up to 1 µs after its parent (µs rounding) and stay in it


def _has_python(path: Path) -> bool:
    import gzip

    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        return '"python_function"' in fh.read()


PY_TRACES = [p for p in [*sorted(TRACES.glob("*.json.gz")), *H200_TRACES] if _has_python(p)]


# ---- the oracle: the raw JSON, a stack walk per thread -------------------------------------------------

def _ns(v: Decimal | float | int) -> int:
    return int(Decimal(str(v)) * 1000)


def _union_in(children: list[tuple[int, int]], lo: int, hi: int) -> int:
    """The length of the union of intervals, each clipped to [lo, hi)."""
    total, reach = 0, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in children):
        if e <= s:
            continue
        if reach is None or s >= reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def _parents(events: list[dict]) -> dict[int, int | None]:
    """Each host event's parent: the latest-started event still open on its thread that holds it (a
    zero-length event 1 ns long; an end up to OVERHANG_NS past the holder's still inside)."""
    parent: dict[int, int | None] = {}
    for e in sorted(events, key=lambda e: (e["s"], -e["e1"], e["order"])):
        open_ = e["thread_open"]
        open_[:] = [o for o in open_ if o["e1"] > e["s"]]
        parent[e["order"]] = next((o["order"] for o in reversed(open_) if e["e1"] <= o["e1"] + OVERHANG_NS), None)
        open_.append(e)
    return parent


# frames that block rather than work, written out here by file and function (the stdlib's: torch's
# streams.py(..): wait is a device-side wait, enqueued, and returns at once), or by the built-in's words
_BLOCKING_FUNCTIONS = {("threading.py", "wait"), ("queue.py", "get"), ("selectors.py", "select")}
_BLOCKING_BUILTINS = ("epoll", "select.poll", "select.select", "time.sleep", "function sleep>", "'acquire' of '_thread",
                      "built-in method acquire of _thread", "method 'recv", "built-in method recv", "'accept' of",
                      "built-in method accept of", "built-in method run_backward of")


def _blocks(name: str) -> bool:
    where, _, function = name.rpartition(": ")
    if where.endswith(")") and "(" in where:
        return (where[:where.rindex("(")].rsplit("/", 1)[-1], function) in _BLOCKING_FUNCTIONS
    return any(w in name.lower() for w in (b.lower() for b in _BLOCKING_BUILTINS))


def oracle_tree(path: Path) -> dict[tuple[str, ...], tuple[int, int, int, int, int]]:
    """Call path -> (calls, total ns, self ns, python ns, waiting ns), read from the file alone."""
    xs = exact_events(str(path))
    device_threads = {(e.get("pid"), e.get("tid")) for e in xs if category(e) in DEVICE_CATS}
    threads: dict[tuple, list] = defaultdict(list)
    host = []
    for e in xs:
        key = (e.get("pid"), e.get("tid"))
        if category(e) in DEVICE_CATS or key in device_threads:
            continue
        s, d = _ns(e["ts"]), _ns(e["dur"])
        h = {"order": e["order"], "s": s, "e": s + d, "e1": s + max(d, 1), "py": category(e) == "python_function",
             "name": e.get("name") or "", "thread_open": threads[key]}
        host.append(h)
    parent = _parents(host)
    by_order = {h["order"]: h for h in host}
    kids: dict[int, list[dict]] = defaultdict(list)
    for o, p in parent.items():
        if p is not None:
            kids[p].append(by_order[o])

    frames = [h for h in host if h["py"]]
    # a frame's Python parent: the innermost frame that holds it, by the same stack walk over the frames
    # alone (a record_function begun in a frame that outlives it holds later frames but is no frame)
    frame_threads: dict[int, list] = defaultdict(list)
    up = _parents([dict(f, thread_open=frame_threads[id(f["thread_open"])]) for f in frames])
    py_kids: dict[int, list[dict]] = defaultdict(list)
    for f in frames:
        if up[f["order"]] is not None:
            py_kids[up[f["order"]]].append(f)
    path_of: dict[int, tuple[str, ...]] = {}

    def path(o: int) -> tuple[str, ...]:
        if o not in path_of:
            p = up[o]
            path_of[o] = (path(p) if p is not None else ()) + (by_order[o]["name"],)
        return path_of[o]

    out: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for f in frames:
        o, lo, hi = f["order"], f["s"], f["e"]
        row = out[path(o)]
        row[0] += 1
        row[1] += hi - lo
        own = hi - lo - sum(k["e"] - k["s"] for k in py_kids[o])   # total less the child frames' totals
        row[2] += own
        alone = min(own, hi - lo - _union_in([(k["s"], k["e"]) for k in kids[o]], lo, hi))
        row[4 if _blocks(f["name"]) else 3] += alone   # a blocked frame's time is waiting, not Python
    return {k: tuple(v) for k, v in out.items()}


def profuse_paths(tree) -> dict[tuple[str, ...], tuple[int, float, float, float, float]]:
    """Call path -> (calls, total, self, python, waiting µs) of an uncut tree."""
    paths: dict[int, tuple[str, ...]] = {}
    out = {}
    for n in tree.nodes:
        assert not n.folded, "an uncut tree folds nothing"
        paths[n.id] = (paths[n.parent] if n.parent >= 0 else ()) + (n.name,)
        out[paths[n.id]] = (n.calls, n.total_us, n.self_us, n.python_us, n.waiting_us)
    return out


def _close(a: float, b_ns: int) -> bool:
    return abs(a - b_ns / 1e3) <= 0.0015  # µs rounded to the ns once


# ---- the tests -------------------------------------------------------------------------------------------

def test_the_shared_traces_with_python_events_are_found():
    names = {p.name for p in PY_TRACES}
    assert {"h100_bert_small.json.gz", "mi300_normalization_layers.json.gz"} <= names, names


def test_a_helper_thread_blocked_in_a_wait_is_waiting_not_python():
    # GIVEN the ViT trace, whose tqdm monitor thread sits in threading's wait for 8.14 ms of its 16.26 ms of frames
    path = trace_path("h100_vit_falconsai.json.gz")
    expected = oracle_tree(path)
    waiting = sum(v[4] for v in expected.values())
    assert waiting > 8_000_000
    with profuse.load(path) as trace:
        tree = call_tree(trace)
    # THEN that time is the tree's waiting, out of its Python time, and the wait's own node has no Python time
    assert tree.waiting_us == pytest.approx(waiting / 1e3, abs=0.01)
    assert tree.python_us == pytest.approx(sum(v[3] for v in expected.values()) / 1e3, abs=0.01)
    [blocked] = [n for n in tree.nodes if n.name == "threading.py(359): wait"]
    assert blocked.self_us > 8000 and blocked.python_us == 0
    assert blocked.waiting_us == pytest.approx(blocked.self_us, abs=0.002)


@pytest.mark.parametrize("path", PY_TRACES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_call_path_matches_a_stack_walk_of_the_raw_json(path):
    # GIVEN a real trace with python_function events, read by the oracle straight from its JSON
    expected = oracle_tree(path)
    # WHEN profuse builds its call tree with nothing cut
    with profuse.load(path) as trace:
        tree = call_tree(trace, min_share_pct=0, max_nodes=10**9)
    got = profuse_paths(tree)
    # THEN the same call paths, each with the same calls, total, self, Python and waiting time
    assert set(got) == set(expected)
    bad = [(p[-1], got[p], expected[p]) for p in expected
           if got[p][0] != expected[p][0] or not all(_close(g, e) for g, e in zip(got[p][1:], expected[p][1:]))]
    assert not bad, bad[:5]
    assert tree.frames == sum(v[0] for v in expected.values())
    assert tree.paths == len(expected) and tree.folded_paths == 0


@pytest.mark.parametrize("path", PY_TRACES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_the_cut_tree_stays_bounded_and_its_self_times_add_up_to_the_roots(path):
    with profuse.load(path) as trace:
        whole = call_tree(trace, min_share_pct=0, max_nodes=10**9)
        tree = call_tree(trace)            # the default cut: 0.5% of the Python time, at most 200 nodes
        small = call_tree(trace, min_share_pct=0, max_nodes=10)
    for t in (whole, tree, small):
        roots = sum(n.total_us for n in t.nodes if n.parent < 0)
        # every node's self time, the "other" nodes' whole time: together exactly the roots' totals
        assert sum(n.self_us for n in t.nodes) == pytest.approx(roots, abs=0.002 * len(t.nodes))
        assert roots == pytest.approx(t.total_us, abs=0.002 * len(t.nodes))
        # each node's total is its self plus its children's totals
        below = defaultdict(float)
        for n in t.nodes:
            if n.parent >= 0:
                below[n.parent] += n.total_us
        assert all(n.total_us == pytest.approx(n.self_us + below[n.id], abs=0.002 * (1 + len(t.nodes))) for n in t.nodes)
        assert all(0 <= n.python_us + n.waiting_us <= n.self_us + 0.001 and n.waiting_us >= 0 for n in t.nodes)
        # the cut keeps the waiting time as it keeps the Python time: the "other" nodes carry what they fold
        assert sum(n.waiting_us for n in t.nodes) == pytest.approx(t.waiting_us, abs=0.002 * len(t.nodes))
        assert sum(n.python_us for n in t.nodes) == pytest.approx(t.python_us, abs=0.002 * len(t.nodes))
        # nothing dropped silently: shown paths plus folded ones are all of them
        assert sum(1 for n in t.nodes if not n.folded) + t.folded_paths == t.paths == whole.paths
    assert sum(1 for n in small.nodes if not n.folded) <= 10
    floor = tree.total_us * tree.min_share_pct / 100
    assert all(n.total_us >= floor for n in tree.nodes if not n.folded)


def test_a_profile_recorded_with_stack_gives_the_functions_that_ran(tmp_path):
    torch = pytest.importorskip("torch")

    def helper(model, x):
        return model(x).relu()

    def step(model, x):
        return helper(model, x).sum()

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(32, 64)
    out = tmp_path / "with_stack.json"
    # GIVEN five calls of step() under a record_function, profiled with Python stacks
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 with_stack=True, record_shapes=True) as prof:
        for _ in range(5):
            with torch.profiler.record_function("step"):
                step(model, x)
    prof.export_chrome_trace(str(out))
    # WHEN profuse reads it
    expected = oracle_tree(out)
    with profuse.load(out) as trace:
        tree = call_tree(trace, min_share_pct=0, max_nodes=10**9)
        got = profuse_paths(tree)
        linear = trace.con.execute("SELECT id FROM events WHERE name = 'aten::linear' LIMIT 1").fetchall()[0][0]
        detail = event_detail(trace, linear)
    # THEN every path matches the stack walk of the file
    assert set(got) == set(expected)
    assert all(got[p][0] == e[0] and all(_close(g, x) for g, x in zip(got[p][1:], e[1:])) for p, e in expected.items())
    # AND step -> helper appears as a path called five times, helper inside step (the record_function
    # between them breaks nothing)
    steps = [p for p in got if split_name(p[-1])[0] == "step" and "test_calltree.py" in p[-1]]
    assert steps and sum(got[p][0] for p in steps) == 5
    helpers = [p for p in got if split_name(p[-1])[0] == "helper" and p[:-1] in steps]
    assert sum(got[p][0] for p in helpers) == 5
    # AND an op's details give its input shapes and the Python stack it ran in, innermost first
    assert json.loads(detail.input_dims)[0] == [32, 64]
    names = [f.name for f in detail.stack]
    assert any("linear" in n for n in names[:3]) and any(split_name(n)[0] == "helper" for n in names)
    assert names.index(next(n for n in names if split_name(n)[0] == "helper")) < \
        names.index(next(n for n in names if split_name(n)[0] == "step" and "test_calltree" in n))


def test_a_record_function_that_outlives_its_frame_breaks_no_path(tmp_path):
    torch = pytest.importorskip("torch")

    def leaf(x):
        return (x * 2).sum()

    def opener(x):  # begins a record_function that outlives it, then calls leaf inside it
        rf = torch.profiler.record_function("outlives_opener")
        rf.__enter__()
        leaf(x)
        return rf

    def caller(x):
        rf = opener(x)
        (x + 1).sum()
        rf.__exit__(None, None, None)

    x = torch.randn(64, 64)
    out = tmp_path / "outlives.json"
    # GIVEN three calls of caller(), whose opener() begins a record_function that ends in caller()
    # (as torch.profiler's step() begins ProfilerStep#N inside the frame that calls it)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            caller(x)
    prof.export_chrome_trace(str(out))
    # WHEN profuse builds the call tree
    with profuse.load(out) as trace:
        tree = call_tree(trace, min_share_pct=0, max_nodes=10**9)
    got = profuse_paths(tree)
    # THEN every path matches the stack walk of the file, and no self time is negative
    expected = oracle_tree(out)
    assert set(got) == set(expected)
    assert all(got[p][0] == e[0] and all(_close(g, x) for g, x in zip(got[p][1:], e[1:])) for p, e in expected.items())
    assert all(n.self_us >= -0.0015 for n in tree.nodes), [(n.name, n.self_us) for n in tree.nodes if n.self_us < 0]
    # AND leaf() sits in opener() in caller(), as Kineto's own Python parent ids say
    fn = {p: split_name(p[-1])[0] for p in got}
    leaves = [p for p in got if fn[p] == "leaf" and "test_calltree.py" in p[-1]]
    assert leaves and sum(got[p][0] for p in leaves) == 3
    assert all(split_name(p[-2])[0] == "opener" and split_name(p[-3])[0] == "caller" for p in leaves), leaves
    events = [e for e in exact_events(str(out)) if category(e) == "python_function"]
    by_id = {(e.get("args") or {}).get("Python id"): e for e in events}
    recorded = [by_id.get(e["args"].get("Python parent id"), {}).get("name", "") for e in events
                if split_name(e["name"])[0] == "leaf" and "test_calltree.py" in e["name"]]
    assert len(recorded) == 3 and all(split_name(n)[0] == "opener" for n in recorded), recorded


def test_the_console_section_fits_80_columns_and_names_the_top_function():
    from rich.console import Console

    from profuse.report.console_calltree import render_calltree

    path = TRACES / "h100_bert_small.json.gz"
    with profuse.load(path) as trace:
        tree = call_tree_of(trace)
    buf = io.StringIO()
    render_calltree(Console(file=buf, width=80, force_terminal=False, color_system=None), tree)
    lines = buf.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(lines, key=len)
    # the largest path that is not a waiting thread: the BERT forward, with its total time
    expected = oracle_tree(path)
    fwd = max((p for p in expected if split_name(p[-1])[0] == "run_torch_profiler"), key=lambda p: expected[p][1])
    row = next(line for line in lines if "run_torch_profiler" in line)
    assert f"{expected[fwd][1] / 1e6:.2f} ms" in row
    assert "Python call tree" in buf.getvalue()


def test_no_python_events_no_tree_and_no_section():
    from rich.console import Console

    from profuse.report.console_calltree import render_calltree

    with profuse.load(TRACES / "a100_alexnet.json.gz") as trace:
        assert call_tree_of(trace) is None
        assert call_tree(trace).nodes == [] and call_tree(trace).total_us == 0
    buf = io.StringIO()
    render_calltree(Console(file=buf, width=80), None)
    assert buf.getvalue() == ""


def test_kernel_launch_configurations_match_the_kernels_args():
    path = TRACES / "h100_bert_small.json.gz"
    # the oracle: each kernel name's (grid, block) pairs with their calls, from the args as recorded
    calls: dict[str, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
    for e in exact_events(str(path)):
        a = e.get("args") or {}
        if category(e) == "kernel" and "grid" in a:
            calls[e["name"]][(tuple(a["grid"]), tuple(a["block"]))] += 1
    with profuse.load(path) as trace:
        found = kernel_launches(trace, per_name=100)
    assert set(found.kernels) == set(calls)
    for name, configs in found.kernels.items():
        assert {(tuple(json.loads(c.grid)), tuple(json.loads(c.block))): c.calls for c in configs} == calls[name]


def test_an_event_id_beyond_64_bits_is_no_event():
    # /api/0/event_detail/<41 digits> answered 500 with DuckDB's conversion error (found by review)
    from profuse.payloads.calltree import event_detail_of

    with profuse.load(trace_path("h100_bert_small.json.gz")) as trace:
        assert event_detail_of(trace, 10**40) is None and event_detail_of(trace, -(10**40)) is None
