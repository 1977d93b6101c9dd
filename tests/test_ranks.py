"""Many ranks: one report over a distributed run, on a process pool and on a real Ray cluster.

Rank sets are built from the real A100 NCCL trace with a known straggler delay and known clock
offsets (see rank_sets.py), so every expected straggler, wait and offset is known by construction;
the two real sampled ranks in multirank/ are checked against a plain json/gzip computation.
"""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from conftest import REPO, TRACES, trace_path
from rank_sets import build_set, comm_kernels

from profuse.cli import main
from profuse.ranks import run_ranks
from profuse.ranks.discover import discover

NCCL = "a100_nccl_rank0_of2.json.gz"
N = 4
STRAGGLER = 2
DELAY_US = 5000.0
COLLECTIVE = 8                      # the 9th collective kernel of the trace, in time order
OFFSETS_US = {1: 1234567.0, 3: -777.0}


@pytest.fixture(scope="module")
def injected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("injected")
    build_set(trace_path(NCCL), folder, N, straggler=STRAGGLER, delay_us=DELAY_US, collective=COLLECTIVE,
              offsets_us=OFFSETS_US)
    return folder


def _target_call() -> tuple[str, int]:
    """(type, k) of the injected collective: its kernel name and how many of that type precede it."""
    kernels = comm_kernels(json.load(gzip.open(trace_path(NCCL))))
    name = kernels[COLLECTIVE]["name"]
    kind = name.split("_")[1]  # ncclKernel_AllReduce_... -> AllReduce
    return kind, sum(1 for k in kernels[:COLLECTIVE] if k["name"].split("_")[1] == kind)


def test_injected_straggler_and_clock_offsets(injected: Path, tmp_path: Path) -> None:
    doc = run_ranks(str(injected), engine="local", workers=2, work_dir=tmp_path / "work").doc
    assert doc.schema == "profuse.ranks/1"
    assert doc.rank_source == "distributedInfo"
    assert [r.rank for r in doc.ranks] == list(range(N))
    top = doc.stragglers[0]
    assert top.rank == STRAGGLER
    expected_wait = DELAY_US * (N - 1)  # each other rank waited DELAY_US
    assert abs(top.wait_caused_us - expected_wait) <= 0.1 * expected_wait
    assert all(s.wait_caused_us < 0.01 * expected_wait for s in doc.stragglers[1:])
    kind, k = _target_call()
    call = next(c for c in doc.collectives if c.name == kind and c.seq == k)
    assert call.last_arriver == STRAGGLER
    assert abs(call.skew_us - DELAY_US) <= 0.1 * DELAY_US
    assert call.arrivals_us is not None and abs(call.arrivals_us[STRAGGLER] - DELAY_US) <= 0.1 * DELAY_US
    # every rank's clock offset recovered (to a µs: the copies' times are µs floats)
    got = {o.rank: o.offset_us for o in doc.clock.offsets}
    for r in range(N):
        assert got[r] == pytest.approx(OFFSETS_US.get(r, 0.0), abs=1.0)
    assert doc.unmatched_rank_events == 0
    n_coll = len(comm_kernels(json.load(gzip.open(trace_path(NCCL)))))
    assert len(doc.collectives) == n_coll
    # the same trace N times: every fusion candidate is found on all N ranks, merged into one row
    assert doc.fusion and all(f.ranks == N for f in doc.fusion)


def test_cross_rank_savings_are_per_rank_and_per_step_never_summed(injected: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Ranks run in parallel: a candidate every rank has saves what one rank saves (the median over the
    ranks), and per step that divided by the rank's profiled steps, not N times it (issue 18 item 6)."""
    doc = run_ranks(str(injected), engine="local", workers=2, work_dir=tmp_path / "work").doc
    # one rank's savings, from the single-trace report of the source trace
    assert main(["report", str(trace_path(NCCL)), "--format", "json", "--no-cache"]) == 0
    single: dict[tuple[str, str], float] = {}
    for c in json.loads(capsys.readouterr().out)["fusion_candidates"]:
        single[(c["pattern"], c["scope"])] = single.get((c["pattern"], c["scope"]), 0.0) + c["predicted_saving_us"]
    raw = json.load(gzip.open(trace_path(NCCL)))["traceEvents"]
    steps = sum(1 for e in raw if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps > 0 and {(f.pattern, f.scope) for f in doc.fusion} == set(single)
    for f in doc.fusion:
        one = single[(f.pattern, f.scope)]
        assert "predicted_saving_us" not in f.__struct_fields__  # the old key held the sum over ranks
        assert f.saving_per_rank_us == pytest.approx(one, abs=0.01)
        assert f.step_saving_us == pytest.approx(one / steps, abs=0.01)


def test_real_sampled_ranks_match_plain_json(tmp_path: Path) -> None:
    """multirank/: two real ranks; offsets, skews and last arrivers as a plain json reading gives them."""
    folder = TRACES / "multirank"
    kernels = {}
    for r, f in enumerate(sorted(folder.glob("*.json.gz"))):
        d = json.load(gzip.open(f))
        assert d["distributedInfo"]["rank"] == r
        kernels[r] = comm_kernels(d)
    assert len(kernels[0]) == len(kernels[1]) > 0
    offset = statistics.median((b["ts"] + b["dur"]) - (a["ts"] + a["dur"]) for a, b in zip(kernels[0], kernels[1]))
    doc = run_ranks(str(folder), engine="local", workers=1, work_dir=tmp_path).doc
    assert doc.clock.offsets[1].offset_us == pytest.approx(offset, abs=0.001)
    wait = {0: 0.0, 1: 0.0}
    for a, b, c in zip(kernels[0], kernels[1], doc.collectives):
        lag = (b["ts"] - offset) - a["ts"]
        assert c.skew_us == pytest.approx(abs(lag), abs=0.002)
        assert c.last_arriver == (1 if lag > 0 else 0 if lag < 0 else None)
        wait[1 if lag > 0 else 0] += abs(lag)
    for s in doc.stragglers:
        assert s.wait_caused_us == pytest.approx(wait[s.rank], abs=0.01)
    # ranks table: device time is the sum of device-time events, as json gives it
    for r, f in enumerate(sorted(folder.glob("*.json.gz"))):
        d = json.load(gzip.open(f))
        dev = sum(e["dur"] for e in d["traceEvents"] if e.get("ph") == "X"
                  and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset"))
        assert doc.ranks[r].device_us == pytest.approx(dev, rel=1e-6)


def test_rank_idle_is_the_reports_and_leaves_unrecorded_waits_out(tmp_path: Path) -> None:
    """A rank's busy, idle and unrecorded time are its report's device busy: sglang's 463 ms wait before any
    recorded work (oracle.queued_split_us, from the raw JSON) is unrecorded, not idle, in the ranks table too."""
    import oracle

    folder = tmp_path / "set"
    folder.mkdir()
    names = ["mi300_sglang_decode_cudagraph.json.gz", "mi300_bert_small.json.gz"]
    for r, name in enumerate(names):
        shutil.copy(trace_path(name), folder / f"rank{r}.json.gz")
    doc = run_ranks(str(folder), engine="local", workers=1, work_dir=tmp_path / "work").doc
    for row, name in zip(doc.ranks, names):
        path = trace_path(name)
        device = [(e["ts"], e["ts"] + e["dur"]) for e in oracle.exact_events(str(path)) if oracle.is_device_time(e)]
        lo, hi = min(s for s, _ in device), max(e for _, e in device)
        runs: list[tuple[float, float]] = []
        oracle.queued_split_us(path, oracle.step_spans(path), runs)
        waits = sum(max(0.0, min(float(e), float(hi)) - max(float(s), float(lo))) for s, e in runs)
        busy = float(oracle.union_us(device))
        # (the oracle's float µs at epoch-scale ns timestamps are good to a quarter µs: 1 µs a run, as test_busy)
        assert row.busy_us == pytest.approx(busy, abs=0.01)
        assert row.unrecorded_us == pytest.approx(waits, abs=1.0 * max(len(runs), 1))
        assert row.idle_us == pytest.approx(float(hi - lo) - busy - waits, abs=1.0 * max(len(runs), 1))
        assert (waits > 400_000) == (name == names[0])
    # a ranks document saved before the column existed still reads back (the field is then unknown)
    from profuse.payloads.ranks import ranks_payload

    saved = json.loads(msgspec.json.encode(doc))
    for row in saved["ranks"]:
        del row["unrecorded_us"]
    assert [r.unrecorded_us for r in ranks_payload(saved).ranks] == [None, None]


def test_rank_names_from_file_names_then_order(tmp_path: Path) -> None:
    src = trace_path(NCCL)
    a = tmp_path / "a"
    a.mkdir()
    for r in (3, 0, 7):  # every copy says distributedInfo.rank 0: the file names decide
        shutil.copy(src, a / f"run_rank_{r}.json.gz")
    rs = discover(str(a))
    assert rs.rank_source == "file name"
    assert [(t.rank, t.path.name) for t in rs.traces] == [(0, "run_rank_0.json.gz"), (3, "run_rank_3.json.gz"),
                                                           (7, "run_rank_7.json.gz")]
    b = tmp_path / "b"
    b.mkdir()
    for name in ("x.json.gz", "y.json.gz"):
        shutil.copy(src, b / name)
    rs = discover(str(b))
    assert rs.rank_source == "order" and [t.path.name for t in rs.traces] == ["x.json.gz", "y.json.gz"]
    rs = discover(str(TRACES / "multirank" / "*.json.gz"))  # a glob
    assert rs.rank_source == "distributedInfo" and [t.rank for t in rs.traces] == [0, 1]


def test_map_records_pickle_and_a_finished_rank_is_reused(tmp_path: Path) -> None:
    """A map task and its result cross process boundaries (the pool pickles them, Ray too); a rank
    folder's done.json, as the map writes it or as plain JSON, makes the next map of it cached."""
    import pickle

    from profuse.ranks.maptask import DONE, TABLES_VERSION, MapTask, map_rank

    task = MapTask(rank=0, path=str(trace_path(NCCL)), out=str(tmp_path), cache=False)
    assert pickle.loads(pickle.dumps(task)) == task
    assert pickle.loads(pickle.dumps(msgspec.structs.replace(task, decode_workers=1))).decode_workers == 1
    first = map_rank(task)
    assert first.error is None and not first.cached and first.summary is not None
    assert first.rank == 0 and first.path == task.path and first.summary.tables_version == TABLES_VERSION
    assert first.summary.collectives == len(comm_kernels(json.load(gzip.open(trace_path(NCCL)))))
    assert pickle.loads(pickle.dumps(first)) == first
    done = tmp_path / "rank=0" / DONE
    again = map_rank(task)
    assert again.cached and again.summary == first.summary
    done.write_text(json.dumps(msgspec.to_builtins(first.summary)))  # as json.dumps wrote it before the records
    assert map_rank(task).cached
    done.write_text(json.dumps({**msgspec.to_builtins(first.summary), "tables_version": TABLES_VERSION - 1}))
    rebuilt = map_rank(task)
    assert not rebuilt.cached and rebuilt.summary == first.summary


def test_cli_report_on_a_folder(injected: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = ["--work-dir", str(tmp_path / "work"), "--workers", "2"]
    assert main(["report", str(injected), "--format", "json", *work]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "profuse.ranks/1" and doc["stragglers"][0]["rank"] == STRAGGLER
    assert main(["report", str(injected), *work]) == 0
    out = capsys.readouterr().out
    assert "Stragglers" in out and "Collective skew" in out and "Step time per rank" in out
    html_out = tmp_path / "ranks.html"
    assert main(["report", str(injected), "--format", "html", "-o", str(html_out), *work]) == 0
    page = html_out.read_text()
    # the shared front end over the embedded document (tests/test_ranks_explorer.py opens it in a browser)
    tag = '<script type="application/json" id="profuse-data">'
    start = page.index(tag) + len(tag)
    embedded = json.loads(page[start:page.index("</script>", start)])
    assert embedded["ranks"] == doc and [r["rank"] for r in embedded["runs"]] == list(range(N))


def test_bad_rank_trace_is_one_line_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(trace_path(NCCL), folder / "rank-0.json.gz")
    bad = folder / "rank-1.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": '))
    work = tmp_path / "work"
    assert main(["report", str(folder), "--work-dir", str(work), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "Traceback" not in err[0]
    # the good rank's tables are kept for the next run; nothing half-written for the bad one
    sets = list(work.iterdir())
    assert len(sets) == 1
    assert sorted(p.name for p in sets[0].iterdir()) == ["rank=0"]


RSS_CHILD = """
import json, resource, sys
from profuse.ranks import run_ranks
if __name__ == "__main__":
    r = run_ranks(sys.argv[1], engine="local", workers=2, work_dir=sys.argv[2])
    assert len(r.doc.ranks) == int(sys.argv[3])
    print(json.dumps({"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_coordinator_memory_does_not_grow_with_ranks(tmp_path: Path) -> None:
    """Peak RSS of the coordinator (the process running the report, not its workers) for 16 ranks
    is at most 1.5x that for one rank."""
    script = tmp_path / "coordinator.py"
    script.write_text(RSS_CHILD)

    def peak(n: int) -> int:
        folder = tmp_path / f"ranks{n}"
        folder.mkdir()
        for r in range(n):
            shutil.copy(trace_path(NCCL), folder / f"rank-{r}.json.gz")
        out = subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / f"work{n}"), str(n)],
                             capture_output=True, text=True, timeout=600, cwd=REPO)
        assert out.returncode == 0, out.stderr[-2000:]
        return int(json.loads(out.stdout.strip().splitlines()[-1])["rss"])

    one, sixteen = peak(1), peak(16)
    assert sixteen <= 1.5 * one, (one, sixteen)


@pytest.fixture(scope="module")
def ray_cluster():
    from ray_cluster import RayCluster

    cluster = RayCluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_ray_cluster_of_two_nodes_gives_the_local_json(injected: Path, ray_cluster, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A real Ray head plus a second node (``ray start``); the map runs on both; same JSON as local."""
    from ray_cluster import AUTH_MODE

    from profuse.report.ranks import render_ranks_json

    local = run_ranks(str(injected), engine="local", workers=2, work_dir=tmp_path / "local")
    monkeypatch.setenv("RAY_AUTH_MODE", AUTH_MODE)
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)  # joins the cluster, does not start one
    on_ray = run_ranks(str(injected), engine="ray", work_dir=tmp_path / "ray")
    assert not any(m.cached for m in on_ray.maps)
    assert len({m.node for m in on_ray.maps}) == 2, on_ray.maps
    assert render_ranks_json(on_ray.doc) == render_ranks_json(local.doc)
    # the command line, with --ray-address, prints the same document
    monkeypatch.delenv("RAY_ADDRESS")
    assert main(["report", str(injected), "--format", "json", "--engine", "ray", "--ray-address", ray_cluster.address,
                 "--work-dir", str(tmp_path / "ray")]) == 0
    assert json.loads(capsys.readouterr().out) == msgspec.to_builtins(local.doc)


def test_diff_two_rank_folders(injected: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A: the trace N times as it is; B: the injected set. Only B's waiting ranks spent DELAY_US more in
    communication, and only B has waits."""
    base = tmp_path / "base"
    base.mkdir()
    for r in range(N):
        shutil.copy(trace_path(NCCL), base / f"rank-{r}.json.gz")
    work = ["--work-dir", str(tmp_path / "work"), "--workers", "2"]
    assert main(["diff", str(base), str(injected), "--format", "json", *work]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "profuse.ranks-diff/1"
    assert d["a"]["wait_us_total"] == 0 and d["a"]["top_straggler"] is None
    assert d["b"]["wait_us_total"] == pytest.approx(DELAY_US * (N - 1), rel=0.1)
    assert d["b"]["top_straggler"] == STRAGGLER
    for row in d["per_rank"]:
        waited = DELAY_US if row["rank"] != STRAGGLER else 0.0
        assert row["delta_comm_us"] == pytest.approx(waited, abs=0.01 * DELAY_US)
    assert main(["diff", str(base), str(injected), *work]) == 0
    assert "largest step-time change" in capsys.readouterr().out
    # a rank folder against one trace is a user error
    assert main(["diff", str(base), str(trace_path(NCCL))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(base) in err[0]


def test_unreachable_ray_address_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ray_cluster import free_port

    port = free_port()  # nothing listens there
    code = main(["report", str(TRACES / "multirank"), "--engine", "ray", "--ray-address", f"127.0.0.1:{port}",
                 "--work-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"127.0.0.1:{port}" in err[0]


def test_html_and_console_show_hostile_names_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    hostile = '<img src=x onerror="window.x=1">[bold]'
    for r in range(2):
        shutil.copy(trace_path(NCCL), folder / f"{hostile}_rank_{r}.json.gz")
    work = ["--work-dir", str(tmp_path / "work"), "--workers", "2"]
    out = tmp_path / "r.html"
    assert main(["report", str(folder), "--format", "html", "-o", str(out), *work]) == 0
    page = out.read_text()
    # the name travels as JSON data only (\u003c-escaped), which the front end shows through textContent
    tag = '<script type="application/json" id="profuse-data">'
    start = page.index(tag) + len(tag)
    assert "<img" not in page and "\\u003cimg src=x" in page[start:page.index("</script>", start)]
    embedded = json.loads(page[start:page.index("</script>", start)])
    assert [Path(r["path"]).name for r in embedded["ranks"]["ranks"]] == [f"{hostile}_rank_{r}.json.gz" for r in range(2)]
    capsys.readouterr()
    assert main(["report", str(folder), *work]) == 0
    assert f"{hostile}_rank_0.json.gz" in capsys.readouterr().out  # printed as text, not rich markup


def test_ray_without_address_starts_and_stops_a_local_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray_cluster import AUTH_MODE

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", AUTH_MODE)
    folder = TRACES / "multirank"
    local = run_ranks(str(folder), engine="local", workers=1, work_dir=tmp_path / "local")
    on_ray = run_ranks(str(folder), engine="ray", work_dir=tmp_path / "ray")
    assert not ray.is_initialized()  # the instance it started is shut down
    assert not any(m.cached for m in on_ray.maps) and len(on_ray.maps) == 2
    assert on_ray.doc == local.doc


def test_cli_engine_choices_are_the_engines():
    # the CLI names them itself so --help imports no engine; the two lists must not drift apart
    from profuse.cli.ranks import ENGINES as cli_engines
    from profuse.ranks.engine import ENGINES

    assert cli_engines == ENGINES
