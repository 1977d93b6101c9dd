"""Load-speed benchmark: profuse (compiled scanner and msgspec reference paths) vs HTA, one run.

    python benchmarks/bench_load.py [--reps 3] [--big-gb 1.0] [--no-hta] [--no-big] [--json out.json]

Every figure is the minimum of --reps runs, each in its own subprocess (so peak RSS is its own;
the RSS shown is the largest of the runs); each in-process timer starts 0.5 s after its imports (see
settle()), and every run, of every tool, starts with its trace file in the page cache (see
in_page_cache()). The scanner floor is what the load itself does before any table: read_trace and
scan_document (no msgspec pass over the document). Prints seconds, MB/s, ratios against HTA and the bare
decode measured in the same run, and which of issue 10's targets hold. Not a test: these machines
are shared and noisy, so it reports, never fails.

Inputs (decompressed from tests/data/traces): the 216k-event V100 trace (52 MB), the H100 ViT trace,
the MTIA trace, the ViT and BERT traces (shapes, Python scopes, memory events) repeated to ~50 MB
(vit50, bert50) and ~1 GB (vit1g, bert1g; not with --no-big), and a synthetic trace of at least
--big-gb GB made by repeating the V100 one with shifted times and ids. ``--rows FILE`` writes issue
23's rows (benchmarks/_rows.py) for make bench. HTA runs in its own virtual environment (benchmarks/.hta-venv), created on
first use; if it cannot be installed its rows say so.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from _bytecode import current_bytecode
from _rows import Row, write_rows

HERE = Path(__file__).resolve().parent

REPO = HERE.parent
SHARED = REPO / "tests" / "data" / "traces"
SRC = SHARED / "v100_rank1_of2_216k_events.json.gz"
INPUTS = {"v100_216k": "v100_rank1_of2_216k_events.json.gz", "h100_vit": "h100_vit_falconsai.json.gz",
          "mtia": "mtia_inference.json.gz"}
PROFUSE_BIN = Path(sys.executable).with_name("profuse")
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench"))
HTA_VENV = HERE / ".hta-venv"

CHILD_PRELUDE = """
import json, resource, sys, time
path = sys.argv[1]
def settle():
    # timed as in a process whose imports are done: right after `import numpy` OpenBLAS's threads spin
    # for a while (measured here: 0.05 s of CPU in the next 0.25 s, none after), taking a core from
    # whatever is timed then; every child (profuse, the scanner, msgspec, HTA) waits the same
    time.sleep(0.5)
def done(seconds, **extra):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(dict(seconds=seconds, peak_rss=rss, **extra)))
"""

FLOOR = CHILD_PRELUDE + """
import msgspec
from profuse.trace._decode import Event
settle()
t = time.perf_counter()
data = open(path, 'rb').read()
top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
events = msgspec.json.decode(top['traceEvents'], type=list[Event])
done(time.perf_counter() - t, events=len(events))
"""

PROFUSE = CHILD_PRELUDE + """
import profuse
import profuse.trace.build  # imports outside the timer, as for HTA (profuse imports them lazily)
settle()
t = time.perf_counter()
tr = profuse.load(path)
n = tr.meta['events']
usable = time.perf_counter() - t
tr.wait_for_cache()
done(usable, events=n, from_cache=tr.from_cache, cache_written=time.perf_counter() - t)
"""

SCANNER = CHILD_PRELUDE + """
from profuse.trace import _decode, _native
assert _native.available(), 'the compiled scanner is not built'
settle()
t = time.perf_counter()
data, _ = _decode.read_trace(path, map_ok=True)  # as the load reads (maps) and scans: no msgspec pass
fast = _native.scan_document(data)
assert fast is not None and fast[1] is not None, 'the scanner did not accept this trace'
done(time.perf_counter() - t, events=fast[0].n)
"""

BASELINE = CHILD_PRELUDE + """
import profuse, msgspec, duckdb, numpy
done(0.0)
"""

HTA = CHILD_PRELUDE + """
import logging, os
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
settle()
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=os.path.dirname(path))
df = next(iter(ta.t.traces.values()))
done(time.perf_counter() - t, events=len(df))
"""


def in_page_cache(path: Path) -> None:
    """Read ``path`` through, untimed, so that the run after it reads the file from the page cache.

    These machines page out page cache that looks idle for about a minute (DAMON, a 'pageout' scheme of
    age >= 12 x 5 s, up to 128 MB/s), so without this a run could read part of its trace from disk:
    after a `make bench`, 25 of vit50's 48 MB and 724 of vit1g's 968 MB were still cached (fincore), and
    the scanner alone took 120-146 ms on vit50 evicted (posix_fadvise DONTNEED) against 91-95 ms cached,
    6.6 s on the 1 GB synthetic against 3.5-4.1 s. Every tool's runs (profuse, the floors, HTA) get the
    same, so the figures compare parsing, not disks."""
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


def child(code: str, path: Path, python: str = sys.executable, env: dict[str, str] | None = None,
          before: Callable[[], None] | None = None, reps: int = 1) -> dict:
    """The fastest of ``reps`` runs of ``code`` in a fresh interpreter (largest peak RSS of them), each
    with ``path`` in the page cache."""
    best: dict = {}
    for _ in range(reps):
        if before:
            before()
        in_page_cache(path)
        out = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True,
                             env={**os.environ, **(env or {})})
        if out.returncode != 0:
            return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rss = max(r["peak_rss"], best.get("peak_rss", 0))
        if not best or r["seconds"] < best["seconds"]:
            best = r
        best["peak_rss"] = rss
    return best


def process(argv: list[str], env: dict[str, str] | None = None, reps: int = 1,
            before: Callable[[], None] | None = None, reads: Path | None = None) -> dict:
    """Whole-process wall time (fastest of ``reps``), the CPU seconds of that run, and the peak RSS of
    a command; each run with the file it ``reads`` in the page cache."""
    best: dict = {}
    for _ in range(reps):
        if before:
            before()
        if reads is not None:
            in_page_cache(reads)
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 2) or (code == 2 and "--help" not in argv):
            err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
            return {"error": err.splitlines()[-1] if err else f"exit {code}"}
        rss = max(usage.ru_maxrss * 1024, best.get("peak_rss", 0))
        if not best or seconds < best["seconds"]:
            best = {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime}
        best["peak_rss"] = rss
    return best


def shared_trace(key: str, file: str | None = None) -> Path:
    """A shared trace (``file``, else ``INPUTS[key]``) decompressed into a folder of its own (HTA reads
    every trace of a folder)."""
    folder = WORK / key
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.json"
    if not path.exists():
        path.write_bytes(gzip.decompress((SHARED / (file or INPUTS[key])).read_bytes()))
    return path


def finish(targets: list[tuple[str, bool | None, str]], results: dict, json_path: str | None, *,
           decimals: int = 1) -> None:
    """The closing lines of a benchmark: load average, which targets hold, and the raw JSON if asked."""
    print(f"\nload average at end: {' '.join(f'{x:.{decimals}f}' for x in os.getloadavg())}")
    print("targets (issue 10), min of runs, same machine and run:")
    for what, ok, figure in targets:
        print(f"  {'HOLDS ' if ok else 'MISSED' if ok is not None else 'n/a   '} {what}: {figure}")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))


def big_trace(gb: float) -> Path:
    """Repeat the 216k-event trace, shifting times past the previous copy and every id."""
    folder = WORK / f"big{gb:g}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "big_rank1.json"
    if path.exists():
        return path
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    events = doc.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e["dur"] for e in xs) - t0 + 1000
    id_shift = 1 + max(max((e.get("args") or {}).get("correlation", 0) or 0,
                           (e.get("args") or {}).get("External id", 0) or 0, e.get("id", 0) or 0)
                       for e in events if isinstance(e.get("id", 0), int))
    raw_size = len(json.dumps(events))
    copies = max(1, int(gb * 1e9 / raw_size) + 1)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        head = json.dumps(doc)[:-1]
        fh.write(head + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            for e in events:
                if c and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if "ts" in e2 and c:
                    e2["ts"] = e2["ts"] + c * span
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += c * id_shift
                args = e2.get("args")
                if args and c:
                    args = dict(args)
                    for k in ("correlation", "External id"):
                        if isinstance(args.get(k), int):
                            args[k] += c * id_shift
                    e2["args"] = args
                fh.write(("" if first else ",\n") + "  " + json.dumps(e2))
                first = False
        fh.write("\n]}\n")
    os.replace(tmp, path)
    return path


SCALED = {"vit": "h100_vit_falconsai.json.gz", "bert": "h100_bert_small.json.gz"}
SCALED_MB = {"50": 50, "1g": 1000, "3g": 3000, "6g": 6000, "10g": 10000}
SCALED_INPUTS = ("vit50", "bert50")  # measured always
SCALED_BIG = ("vit1g", "bert1g")  # not with --no-big
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")


def _ns(ts: int | float) -> int:
    """A Kineto time in us as integer ns, exactly (its text has at most 3 fraction digits)."""
    ns = Decimal(repr(ts)) * 1000
    if ns != ns.to_integral_value():
        raise ValueError(f"time {ts!r} has more than 3 fraction digits")
    return int(ns)


def _template(e: dict) -> tuple[str, list[tuple[str, int]]]:
    """``e`` as a ``str.format`` template whose fields are its time and ids, and those fields'
    (kind, base value): kind "ts" / "ts_int" (integer ns, written back as us) or "id" (shifted per copy)."""
    fields: list[tuple[str, int]] = []
    e2 = dict(e)
    if isinstance(e2.get("ts"), (int, float)):
        fields.append(("ts_int" if isinstance(e2["ts"], int) else "ts", _ns(e2["ts"])))
        e2["ts"] = f"@@{len(fields) - 1}@@"
    if isinstance(e2.get("id"), int):
        fields.append(("id", e2["id"]))
        e2["id"] = f"@@{len(fields) - 1}@@"
    args = e2.get("args")
    if args:
        args = dict(args)
        for k in ID_ARGS:
            if isinstance(args.get(k), int) and not isinstance(args[k], bool):
                fields.append(("id", args[k]))
                args[k] = f"@@{len(fields) - 1}@@"
        e2["args"] = args
    text = json.dumps(e2).replace("{", "{{").replace("}", "}}")
    for k in range(len(fields)):
        text = text.replace(f'"@@{k}@@"', f"{{{k}}}")
    return text, fields


def scaled_trace(key: str) -> Path:
    """A shared trace with shapes, Python scopes and memory events (``vit50``: h100_vit_falconsai to
    ~50 MB, ``bert1g``: h100_bert_small to ~1 GB, ...) made by repeating its events with times shifted
    past the previous copy and every id (flow id, correlation, External id, Python id and parent id)
    shifted past the largest; metadata events once; memory addresses as they are. Built once into
    the shared bench folder, atomically."""
    m = re.fullmatch(r"([a-z]+)(50|1g|3g|6g|10g)", key)
    assert m and m[1] in SCALED, key
    folder = WORK / key
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.json"
    if path.exists():
        return path
    doc = json.loads(gzip.decompress((SHARED / SCALED[m[1]]).read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    t0 = min(_ns(e["ts"]) for e in timed)
    span = max(_ns(e["ts"]) + _ns(e.get("dur", 0) or 0) for e in timed) - t0 + 1_000_000
    span += -span % 1000  # whole us, so integer times stay integers
    id_shift = 1 + max(v for e in events for v in
                       [e.get("id") if isinstance(e.get("id"), int) else 0,
                        *((e.get("args") or {}).get(k) or 0 for k in ID_ARGS)] if isinstance(v, int))
    templates = [(e.get("ph") == "M", *_template(e)) for e in events]
    copies = max(1, round(SCALED_MB[m[2]] * 1e6 / len(json.dumps(events))))
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        sep = ""
        for c in range(copies):
            for meta, text, fields in templates:
                if c and meta:
                    continue
                vals = [str(v + c * id_shift) if kind == "id" else
                        str((v + c * span) // 1000) if kind == "ts_int" else repr((v + c * span) / 1000)
                        for kind, v in fields]
                fh.write(sep + text.format(*vals))
                sep = ",\n"
        fh.write("\n]}\n")
    os.replace(tmp, path)
    return path


def hta_python() -> str | None:
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        print("creating the HTA environment (pip install HolisticTraceAnalysis) ...", file=sys.stderr)
        venv.create(HTA_VENV, with_pip=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"HTA could not be installed: {r.stderr.strip()[-300:]}", file=sys.stderr)
            return None
    return str(py)


HTA_PROCESS = """
import logging, os, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=os.path.dirname(sys.argv[1]))
"""


def measure(path: Path, hta_py: str | None, reps: int, hta_reps: int) -> dict[str, dict]:
    cache = Path(tempfile.mkdtemp(prefix="profuse-bench-cache-"))
    env = {"PROFUSE_CACHE_DIR": str(cache)}
    ref = {**env, "PROFUSE_SCANNER": "0"}

    def clear() -> None:
        for f in [*path.parent.glob("*.profuse.duckdb*"), *cache.glob("**/*.profuse.duckdb*")]:
            f.unlink()

    report = [str(PROFUSE_BIN), "report", str(path), "--format", "json"]
    rows = {"baseline (imports)": child(BASELINE, path, env=env),
            "bare msgspec decode (floor)": child(FLOOR, path, env=env, reps=reps),
            "scanner alone (read+scan)": child(SCANNER, path, env=env, reps=reps),
            "profuse cold load": child(PROFUSE, path, env=env, before=clear, reps=reps),
            "profuse cold, msgspec path": child(PROFUSE, path, env=ref, before=clear, reps=reps),
            "profuse cached load": child(PROFUSE, path, env=env, reps=reps),
            "report --no-cache (process)": process([*report, "--no-cache"], env=env, reps=reps, reads=path),
            "report cached (process)": process(report, env=env, reps=reps, reads=path),
            }
    if hta_py:
        rows["HTA TraceAnalysis"] = child(HTA, path, python=hta_py, reps=hta_reps)
        rows["HTA (process)"] = process([hta_py, "-c", HTA_PROCESS, str(path)], reps=hta_reps, reads=path)
    else:
        rows["HTA TraceAnalysis"] = {"error": "HTA not installed"}
    return rows


def show(name: str, path: Path, rows: dict[str, dict], targets: list[tuple[str, bool | None, str]]) -> None:
    mb = path.stat().st_size / 1e6
    base_rss = rows["baseline (imports)"].get("peak_rss", 0)
    print(f"\n{name}: {path.name}, {mb:,.1f} MB of JSON")
    print(f"{'measurement':30} {'seconds':>9} {'MB/s':>8} {'peak RSS':>10} {'RSS/JSON':>9} {'events':>10}")
    for label, r in rows.items():
        if "error" in r:
            print(f"{label:30} failed: {r['error']}")
            continue
        if "seconds" not in r:  # not run (e.g. --big-hta-reps 0)
            print(f"{label:30} not run")
            continue
        s = r["seconds"]
        rate = f"{mb / s:8.0f}" if s else f"{'-':>8}"
        print(f"{label:30} {s:9.3f} {rate} {r['peak_rss'] / 1e6:8.0f}MB {r['peak_rss'] / (mb * 1e6):8.2f}x "
              f"{r.get('events', ''):>10}")
    print(f"(baseline RSS of the interpreter with profuse, duckdb and numpy imported: {base_rss / 1e6:.0f} MB)")

    def sec(label: str) -> float | None:
        return rows.get(label, {}).get("seconds")

    cold, scan, hta = sec("profuse cold load"), sec("scanner alone (read+scan)"), sec("HTA TraceAnalysis")
    ref, floor = sec("profuse cold, msgspec path"), sec("bare msgspec decode (floor)")
    rep, rep_cached, hta_proc = sec("report --no-cache (process)"), sec("report cached (process)"), sec("HTA (process)")
    rss = rows["profuse cold load"].get("peak_rss")

    def check(what: str, ok: bool | None, figure: str) -> None:
        targets.append((f"{name}: {what}", ok, figure))
        print(f"  {'HOLDS ' if ok else 'MISSED' if ok is not None else 'n/a   '} {what}: {figure}")

    if cold and ref:
        print(f"  cold load, scanner vs msgspec path: {ref / cold:.2f}x faster")
    if cold and floor:
        print(f"  cold load / bare msgspec decode: {cold / floor:.2f}x")
    check("cold load >= 10x HTA", hta / cold >= 10 if cold and hta else None,
          f"{hta / cold:.1f}x" if cold and hta else "HTA not measured")
    check("cold load within 2x of the scanner alone", cold / scan <= 2 if cold and scan else None,
          f"{cold / scan:.2f}x" if cold and scan else "-")
    check("report --no-cache process >= 4x HTA process", hta_proc / rep >= 4 if rep and hta_proc else None,
          f"{hta_proc / rep:.1f}x ({rep:.2f} s vs {hta_proc:.2f} s)" if rep and hta_proc else "HTA not measured")
    check("cached report process <= 0.35 s", rep_cached <= 0.35 if rep_cached else None,
          f"{rep_cached:.3f} s" if rep_cached else "-")
    if rss:
        check("cold peak RSS <= 3x raw + 150 MB", rss <= 3 * mb * 1e6 + 150e6,
              f"{rss / 1e6:.0f} MB vs {(3 * mb * 1e6 + 150e6) / 1e6:.0f} MB allowed ({rss / (mb * 1e6):.2f}x raw)")
    if mb > 500 and cold:
        check("1 GB cold load <= 5 s", cold <= 5 * mb / 1000, f"{cold:.2f} s for {mb:,.0f} MB")
        if rss:
            check("1 GB cold peak RSS <= 3x raw", rss <= 3 * mb * 1e6, f"{rss / (mb * 1e6):.2f}x")


def issue23_rows(name: str, path: Path, rows: dict[str, dict], bare: float | None = None) -> list[Row]:
    """Issue 23's rows for one input: cold load MB/s and against HTA and the scanner alone (both
    measured in this run), its peak RSS, the cold report process (beside ``bare``, the
    seconds of ``python -c pass`` in this run), and 5 s for 1 GB."""
    mb = path.stat().st_size / 1e6
    sec = {k: v.get("seconds") for k, v in rows.items()}
    cold, scan, hta = sec.get("profuse cold load"), sec.get("scanner alone (read+scan)"), sec.get("HTA TraceAnalysis")
    rep, hta_proc = sec.get("report --no-cache (process)"), sec.get("HTA (process)")
    rss = rows.get("profuse cold load", {}).get("peak_rss")
    scan_mbs = f"scanner alone {mb / scan:.0f} MB/s ({scan:.3f} s)" if scan else "scanner alone not measured"
    hta_s = f"HTA {hta:.2f} s" if hta else "HTA not measured"
    bare_s = f"; python -c pass {bare:.3f} s" if bare else ""

    def row(what: str, ok: bool | None, figure: str, target: str, baseline: str = "") -> Row:
        return Row(f"{name} ({mb:,.0f} MB): {what}", figure if ok is not None else figure or "not measured",
                   target, ok, baseline)

    out = [row("cold load", mb / cold >= 200 if cold else None, f"{mb / cold:.0f} MB/s" if cold else "",
               ">= 200 MB/s", scan_mbs),
           row("cold load vs HTA", hta / cold >= 10 if cold and hta else None,
               f"{hta / cold:.1f}x" if cold and hta else "", ">= 10x HTA", hta_s),
           row("cold load / scanner alone", cold / scan <= 1.3 if cold and scan else None,
               f"{cold / scan:.2f}x" if cold and scan else "", "<= 1.3x", scan_mbs),
           row("cold peak RSS", rss <= 3 * mb * 1e6 + 100e6 if rss else None,
               f"{rss / 1e6:.0f} MB ({rss / (mb * 1e6):.2f}x raw)" if rss else "", "<= 3x raw + 100 MB"),
           row("cold report, whole process", hta_proc / rep >= 4 if rep and hta_proc else None,
               f"{rep:.3f} s" if rep else "", ">= 4x HTA process",
               (f"HTA process {hta_proc:.2f} s" if hta_proc else "HTA not measured") + bare_s)]
    # the cached report's row is bench_report.py's (it warms the report's own entry first; here a single
    # run on a 1 GB input is the first report from the tables, not a cached one)
    if mb > 500:
        out.append(row("1 GB cold load", cold <= 5 * mb / 1000 if cold else None,
                       f"{cold:.2f} s" if cold else "", "<= 5 s per GB", scan_mbs))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="runs per measurement; the fastest counts (default 3)")
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--big-reps", type=int, default=1, help="runs per measurement on the big trace (default 1)")
    ap.add_argument("--big-hta-reps", type=int, default=1, help="HTA runs on the big trace (each takes minutes)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--only", choices=sorted([*INPUTS, *SCALED_INPUTS, *SCALED_BIG]), action="append",
                    help="measure only these inputs")
    ap.add_argument("--json", help="also write the raw measurements here")
    ap.add_argument("--rows", help="write issue 23's rows here (benchmarks/_rows.py) for make bench")
    args = ap.parse_args()
    current_bytecode()
    if not SRC.exists():
        print(f"missing {SRC}", file=sys.stderr)
        return 2
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
          "(figures from a busy shared machine are noisy)")
    hta_py = None if args.no_hta else hta_python()
    if not args.no_hta and hta_py is None:
        print("HTA could not be installed: its rows are missing from this run", file=sys.stderr)
    results: dict[str, dict] = {}
    targets: list[tuple[str, bool | None, str]] = []
    help_run = process([str(PROFUSE_BIN), "--help"], reps=max(args.reps, 3))
    bare = process([sys.executable, "-c", "pass"], reps=max(args.reps, 3))
    print(f"profuse --help (process): {help_run.get('seconds', float('nan')):.3f} s; bare interpreter "
          f"{bare.get('seconds', float('nan')):.3f} s")
    targets.append(("profuse --help <= 0.1 s", help_run.get("seconds", 9) <= 0.1, f"{help_run.get('seconds', 0):.3f} s"))
    results["help"] = {"profuse --help": help_run, "python -c pass": bare}
    rows: list[Row] = []
    keys = args.only or [*INPUTS, *SCALED_INPUTS, *([] if args.no_big else SCALED_BIG)]
    for key in keys:
        path = shared_trace(key) if key in INPUTS else scaled_trace(key)
        big = key in SCALED_BIG
        results[key] = measure(path, hta_py, args.big_reps if big else args.reps,
                               args.big_hta_reps if big else args.reps)
        show(key, path, results[key], targets)
        rows += issue23_rows(key, path, results[key], bare.get("seconds"))
    if not args.no_big:
        big = big_trace(args.big_gb)
        results["synthetic_big"] = measure(big, hta_py, args.big_reps, args.big_hta_reps)
        show(f"synthetic >= {args.big_gb:g} GB", big, results["synthetic_big"], targets)
        rows += issue23_rows(f"synthetic {args.big_gb:g} GB", big, results["synthetic_big"], bare.get("seconds"))
    finish(targets, results, args.json)
    print("issue 23 rows:")
    for r in rows:
        print(f"  {'HOLDS ' if r.holds else 'MISSED' if r.holds is not None else 'n/a   '} {r.measure}: "
              f"{r.figure} (target {r.target}{'; ' + r.baseline if r.baseline else ''})")
    write_rows(rows, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
