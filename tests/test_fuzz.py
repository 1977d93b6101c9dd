"""Fuzzing the trace boundary: >= 700 seeded mutants of real traces through the CLI.

The fourth round's structure-aware families (tests/fuzz_corpus.py ``Round4``): flows to missing or cyclic
events, one correlation id on several devices, nested/overlapping/out-of-order/zero-length steps, graph
launches without kernels, extreme figures, hostile unicode, lying deviceProperties, malformed memory
events, device and host times in mixed units, top-level shapes, gzip oddities and 10^6 tiny events.

Every mutant must end in exit 0 (with sane numbers) or exit 2 (one line naming the file), never a
traceback, a hang or a memory blow-up. Most run in-process for speed; the ones that could hang or
eat memory on a broken build (FIFOs, /dev/zero, decompression bombs) run in a child process with a
timeout, an address-space limit, and their peak RSS measured.

Set PROFUSE_FUZZ_TABLE=<file> to also write the outcome table there.
"""
from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz_corpus import Case, build_corpus, build_overlaps

from profuse.cli import main

CASE_TIMEOUT_S = 60          # a hang, not a speed target: the slowest mutant takes well under a second
CHILD_RSS_LIMIT = 1 << 30    # peak RSS of a child that meets a bomb or a device file
CHILD_AS_LIMIT = 6 << 30     # address space of such a child, so a broken build cannot take the machine down
INPROCESS_RSS_GROWTH = 768 << 20

# The child writes its own peak RSS (VmHWM of the process after exec) to the file $PROFUSE_FUZZ_HWM: the
# rusage that wait4 reports also holds the high-water mark of the memory the child was forked from, so a
# large test process (after the suite's heavier tests) would make every child look large.
RUNNER = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
def hwm():
    with open("/proc/self/status") as f, open(os.environ["PROFUSE_FUZZ_HWM"], "w") as out:
        out.write(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
try:
    from profuse.cli import main
    code = main(sys.argv[2:])
finally:
    hwm()
sys.exit(code)
"""


@dataclass
class Outcome:
    case: Case
    code: int | str
    out: str
    err: str
    seconds: float
    rss: int = 0

    @property
    def verdict(self) -> str:
        """'exit 0', 'exit 2', or 'other: why'."""
        if self.code == 0:
            why = _check_ok(self)
        elif self.code == 2:
            why = _check_error(self)
        else:
            why = f"exit {self.code}"
        if why is None and self.case.subprocess and self.rss > CHILD_RSS_LIMIT:
            why = f"peak RSS {self.rss >> 20} MiB"
        return f"exit {self.code}" if why is None else f"other: {why}"


def shown(path: Path) -> str:
    """How a file name appears in a one-line error: undecodable bytes and line breaks escaped."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _check_error(o: Outcome) -> str | None:
    lines = o.err.strip().splitlines()
    if "Traceback" in o.err:
        return "traceback"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr"
    if shown(o.case.path) not in lines[0]:
        return "error does not name the file"
    return None


def _check_ok(o: Outcome) -> str | None:
    if "Traceback" in o.err:
        return "traceback on exit 0"
    try:
        doc = json.loads(o.out)
    except ValueError:
        return "exit 0 but stdout is not JSON"
    # times and memory peaks are never negative (an op's self memory may be: it frees more than it allocates)
    bad = [f"{k}={v}" for k, v in _numbers(doc) if not math.isfinite(v) or (v < 0 and (
        k.endswith(("_us", "dur")) or (k.startswith(("peak", "reserved")) and k.endswith("_bytes"))))]
    return f"impossible numbers: {', '.join(bad[:3])}" if bad else None


def _numbers(doc: Any, key: str = "") -> list[tuple[str, float]]:
    if isinstance(doc, dict):
        return [kv for k, v in doc.items() for kv in _numbers(v, str(k))]
    if isinstance(doc, list):
        return [kv for v in doc for kv in _numbers(v, key)]
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return [(key, float(doc))]
    return []


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def run_inprocess(case: Case, capsys: Any) -> Outcome:
    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        code: int | str = main(case.argv)
    except _Timeout:
        code = f"hang > {CASE_TIMEOUT_S} s"
    except BaseException as err:  # any escape is what the fuzzer looks for
        code = f"raised {type(err).__name__}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    return Outcome(case, code, out, err, time.monotonic() - start)


def run_child(case: Case, folder: Path) -> Outcome:
    """Run one case in a child with an address-space limit and a timeout; measure its peak RSS."""
    start = time.monotonic()
    out_f, err_f, hwm_f = folder / "child.out", folder / "child.err", folder / "child.hwm"
    hwm_f.unlink(missing_ok=True)
    with open(out_f, "wb") as out, open(err_f, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(CHILD_AS_LIMIT), *case.argv],
                                stdout=out, stderr=err,
                                env={**os.environ, **case.env, "PROFUSE_FUZZ_HWM": str(hwm_f)})
    timer = threading.Timer(CASE_TIMEOUT_S, proc.kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    code: int | str = proc.returncode
    if proc.returncode < 0:
        code = f"hang > {CASE_TIMEOUT_S} s" if time.monotonic() - start >= CASE_TIMEOUT_S else f"signal {-code}"
    return Outcome(case, code, out_f.read_text(errors="replace"), err_f.read_text(errors="replace"),
                   time.monotonic() - start,
                   rss=int(hwm_f.read_text()) * 1024 if hwm_f.exists() else usage.ru_maxrss * 1024)


def table(outcomes: list[Outcome]) -> str:
    families: dict[str, list[int]] = {}
    for o in outcomes:
        row = families.setdefault(o.case.family, [0, 0, 0, 0])
        v = o.verdict
        row[0] += 1
        row[1 if v == "exit 0" else 2 if v == "exit 2" else 3] += 1
    rows = [*families.items(), ("all", [sum(r[i] for r in families.values()) for i in range(4)])]
    lines = [f"{'family':<12} {'cases':>6} {'exit 0':>7} {'exit 2':>7} {'other':>6}"]
    lines += [f"{name:<12} {r[0]:>6} {r[1]:>7} {r[2]:>7} {r[3]:>6}" for name, r in rows]
    slow = sorted(outcomes, key=lambda o: -o.seconds)[:5]
    lines.append(f"total {sum(o.seconds for o in outcomes):.1f} s; slowest: " +
                 ", ".join(f"{o.case.family}/{o.case.label[:30]} {o.seconds:.1f} s" for o in slow))
    others = [o for o in outcomes if o.verdict.startswith("other")]
    lines += [f"  {o.case.family}: {o.case.label} [{' '.join(o.case.argv[:1])}] -> {o.verdict}" for o in others]
    return "\n".join(lines)


def test_fuzz_corpus(tmp_path, capsys):
    # GIVEN >= 700 seeded mutants of small real traces
    cases = build_corpus(tmp_path)
    assert len(cases) >= 700
    # WHEN each goes through the CLI (bounded children for the ones that could hang or eat memory)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    outcomes = [run_child(c, tmp_path) if c.subprocess else run_inprocess(c, capsys) for c in cases]
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    report = table(outcomes)
    with capsys.disabled():
        print("\n" + report)
    if os.environ.get("PROFUSE_FUZZ_TABLE"):
        Path(os.environ["PROFUSE_FUZZ_TABLE"]).write_text(report + "\n")
    # THEN every one ends in exit 0 with sane numbers or exit 2 with one line naming the file
    others = [o for o in outcomes if o.verdict.startswith("other")]
    assert not others, report
    assert {o.verdict for o in outcomes} == {"exit 0", "exit 2"}, "both kinds of outcome were exercised"
    refused = [o for o in outcomes if o.case.family in ("special", "bombs")]
    assert all(o.verdict == "exit 2" for o in refused), "non-regular files and bombs are refused"
    assert all("PROFUSE_MAX_TRACE_BYTES" in o.err for o in refused if o.case.family == "bombs")
    assert rss_growth < INPROCESS_RSS_GROWTH, f"in-process mutants raised peak RSS by {rss_growth >> 20} MiB"
    assert all(o.seconds < CASE_TIMEOUT_S for o in outcomes)


def test_fuzz_overlaps(tmp_path, capsys):
    # GIVEN events that overlap on one thread without nesting, children longer than their parents,
    # and graph launches whose kernels start before them
    cases = build_overlaps(tmp_path)
    outcomes = [run_inprocess(c, capsys) for c in cases]
    report = table(outcomes)
    # THEN every one ends in exit 0 with sane numbers (no negative times) or exit 2 naming the file
    assert not [o for o in outcomes if o.verdict.startswith("other")], report
