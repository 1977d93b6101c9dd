"""A report analyses on two threads (analysis/beside.py): the results are those of the same analyses run one
after another, a result remembered per trace is built once whichever thread asks first, each thread queries
the trace on a connection of its own, and ``--timings`` nests the phases run beside in the caller's."""
from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
import pytest
from conftest import SHARED, trace_path

import profuse
from profuse import _progress
from profuse.analysis import op_table, summarize
from profuse.analysis._memo import once_per_trace
from profuse.analysis.advice.findings import trace_findings
from profuse.analysis.beside import beside, now
from profuse.analysis.health import trace_health
from profuse.analysis.memory import memory_section
from profuse.payloads.build import overview_of
from profuse.payloads.calltree import call_tree_of
from profuse.payloads.report import Analysed, analyse, report_view

TRACES = sorted(p.name for p in (SHARED / "traces").glob("*.json.gz"))


@pytest.mark.parametrize("name", TRACES)
def test_two_threads_give_the_document_of_one(name: str) -> None:
    # GIVEN each shared trace loaded twice (nothing remembered from one load to the other)
    with profuse.load(trace_path(name), cache=False) as one, profuse.load(trace_path(name), cache=False) as two:
        # WHEN one is analysed in turn on this thread, the other by analyse (its sections beside, on another)
        seq = Analysed(summarize(one), op_table(one), trace_findings(one, submit=now), memory_section(one),
                       trace_health(one), call_tree_of(one))
        par = analyse(two)
        # THEN the documents every renderer reads are the same
        assert report_view(par, keep_metadata=True).document == report_view(seq, keep_metadata=True).document


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_bert_small.json.gz", "a100_event_sync.json.gz"])
def test_the_overview_computes_its_advice_beside_as_in_turn(name: str) -> None:
    # GIVEN a shared trace loaded twice (nothing remembered from one load to the other)
    with profuse.load(trace_path(name), cache=False) as one, profuse.load(trace_path(name), cache=False) as two:
        # WHEN the explorer's Overview computes its advice (its sections beside the diagnosis), and another is
        # built from advice computed in turn on this thread
        beside_ov = overview_of(one, keep_metadata=True)
        seq_ov = overview_of(two, advice=trace_findings(two, submit=now), keep_metadata=True)
        # THEN the two are the same, advice included
        assert beside_ov.advice is not None and msgspec.to_builtins(beside_ov) == msgspec.to_builtins(seq_ov)


def test_a_remembered_result_is_built_once_across_threads() -> None:
    # GIVEN a remembered build that holds until released, asked for by three threads at once
    calls: list[int] = []
    release = threading.Event()

    @once_per_trace
    def build(trace: object, k: int) -> list[int]:
        calls.append(k)
        release.wait(5)
        return [k]

    class Key:  # a weakly referable stand-in for a trace
        pass

    key, got = Key(), []
    threads = [threading.Thread(target=lambda: got.append(build(key, 1))) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(5)
    # THEN it ran once; every caller got that one result (the same object); other arguments build apart
    assert calls == [1] and len(got) == 3 and all(g is got[0] for g in got)
    assert build(key, 2) == [2] and calls == [1, 2]


def test_each_thread_queries_on_its_own_connection() -> None:
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        main_con = tr.con
        inside = threading.Event()
        done = threading.Event()
        seen: dict[str, object] = {}

        def other() -> None:
            # a long query on the thread's own cursor ...
            seen["con"] = tr.con
            inside.set()
            seen["n"] = tr.con.execute("SELECT count(*) FROM events a, range(2000) r").fetchall()[0][0]
            done.set()

        with beside(tr) as submit:
            got = submit(other)
            inside.wait(5)
            # ... while this thread queries the trace's own connection: neither refuses the other
            (n,), = main_con.execute("SELECT count(*) FROM events").fetchall()
            got()
        assert done.is_set() and seen["con"] is not main_con and tr.con is main_con
        assert seen["n"] == 2000 * n


def test_timings_nest_the_phases_run_beside() -> None:
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr, \
            _progress.tracking("test") as rec, _progress.phase("analyse"), beside(tr) as submit:
        def marked() -> str:
            with _progress.phase("beside"), _progress.phase("inner"):
                time.sleep(0.2)
                return threading.current_thread().name

        name = submit(marked)
        with _progress.phase("here"):
            time.sleep(0.05)
        assert name().startswith("profuse-analyse")
    # THEN the phase run on the other thread is named under the caller's, as the one run here
    assert "analyse/beside" in rec.seconds and "analyse/here" in rec.seconds
    assert "beside" not in rec.seconds and rec.stack == []
    # AND it is marked as run beside (a phase inside it, on its own thread, is not), and the caller's other is
    # the caller's time outside its own phases: the 0.2 s beside overlaps it, so it is not taken off
    assert rec.beside == {"analyse/beside"}
    table = dict(rec.table())
    assert table["analyse/other"] == pytest.approx(rec.seconds["analyse"] - rec.seconds["analyse/here"])
    text = rec.format()
    assert "  beside [beside] " in text and "inner [beside]" not in text and "here [beside]" not in text


def test_an_error_here_drops_the_calls_not_begun_and_interrupts_the_running_query() -> None:
    import duckdb

    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        started, ran = threading.Event(), []

        def long_query() -> int:
            started.set()   # minutes of work unless interrupted
            return int(tr.con.execute("SELECT count(*) FROM range(1000000) a, range(1000000) b "
                                      "WHERE (a.range * 7 + b.range) % 1000003 = 0").fetchall()[0][0])

        # GIVEN a long query running on the other thread and a call queued behind it
        with pytest.raises(KeyError), beside(tr) as submit:
            first = submit(long_query)
            queued = submit(lambda: ran.append(1))
            assert started.wait(10)
            time.sleep(0.2)
            raise KeyError("an error here")   # WHEN the caller fails
        # THEN the running query was interrupted (no result), the queued call never ran, and the trace's own
        # connection still answers
        with pytest.raises(duckdb.InterruptException):
            first()
        # (and asked for afterwards, the dropped call is not run here either)
        from concurrent.futures import CancelledError
        with pytest.raises(CancelledError):
            queued()
        assert ran == []
        assert tr.con.execute("SELECT count(*) FROM events").fetchall()[0][0] > 0


def test_a_bad_table_choice_is_refused_before_the_analyses() -> None:
    from profuse.errors import UserError

    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        with pytest.raises(UserError, match="--group-by must be one of"):
            analyse(tr, group_by="bogus")
        with pytest.raises(UserError, match="--sort must be one of"):
            analyse(tr, sort="bogus")


def test_where_no_thread_can_start_every_call_runs_here(monkeypatch) -> None:
    # GIVEN a trace's report made with the other thread, then a process where no thread can start
    # (ThreadPoolExecutor.submit raises what Python raises then; the load's writer falls back the same way)
    from concurrent.futures import ThreadPoolExecutor

    name = "h100_bert_small.json.gz"
    with profuse.load(trace_path(name), cache=False) as one:
        want = report_view(analyse(one), keep_metadata=True).document

    def refuse(self: object, fn: object, /, *args: object, **kwargs: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    here = threading.current_thread().name
    with profuse.load(trace_path(name), cache=False) as two:
        with beside(two) as submit:
            ran_on = [submit(lambda: threading.current_thread().name) for _ in range(3)]
        got = report_view(analyse(two), keep_metadata=True).document
    # THEN every call ran here, at once, and the report is the same
    assert [r() for r in ran_on] == [here] * 3
    assert got == want


def _kept_busy(submit: Any) -> tuple[threading.Event, Any]:
    """The other thread kept busy until the event returned is set; the getter of that call (its thread's name)."""
    release, started = threading.Event(), threading.Event()

    def busy() -> str:
        started.set()
        release.wait(10)
        return threading.current_thread().name

    got = submit(busy)
    assert started.wait(10)
    return release, got


def test_a_call_not_begun_over_there_runs_here_when_its_result_is_asked() -> None:
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        ran: list[str] = []

        def queued() -> int:
            ran.append(threading.current_thread().name)
            return int(tr.con.execute("SELECT count(*) FROM events").fetchall()[0][0])

        with beside(tr) as submit:
            # GIVEN the other thread busy, and a call queued behind it
            release, first = _kept_busy(submit)
            second = submit(queued)
            # WHEN the second's result is asked before the other thread is free: it runs here, at once, on this
            # thread's own connection, and answers as it would have there (asked again: the same, not run again)
            n = second()
            assert ran == [threading.current_thread().name]
            assert n == tr.con.execute("SELECT count(*) FROM events").fetchall()[0][0] and second() == n
            release.set()
            # THEN the begun call is waited for, on the other thread
            assert first().startswith("profuse-analyse")
        assert len(ran) == 1   # the queued call never ran over there too


def test_a_call_taken_back_that_fails_raises_its_error_each_time_it_is_asked() -> None:
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        runs: list[int] = []

        def failing() -> None:
            runs.append(1)
            raise ValueError("bad input")

        with beside(tr) as submit:
            release, first = _kept_busy(submit)
            second = submit(failing)   # queued behind the busy one: taken back when asked
            for _ in range(2):
                with pytest.raises(ValueError, match="bad input"):
                    second()
            release.set()
            first()
        assert runs == [1]


def test_a_call_handed_first_runs_before_those_not_begun() -> None:
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        order: list[str] = []

        def note(what: str) -> Any:
            return lambda: order.append(what) or threading.current_thread().name

        with beside(tr) as submit:
            # GIVEN the other thread busy, two calls queued behind it, then two handed first
            release, busy = _kept_busy(submit)
            later = [submit(note("a")), submit(note("b"))]
            sooner = [submit(note("c"), first=True), submit(note("d"), first=True)]
            release.set()
            deadline = time.monotonic() + 10
            while len(order) < 4 and time.monotonic() < deadline:   # asked before they ran, they would run here
                time.sleep(0.01)
            # THEN the ones handed first run next, in the order handed, then the others; all over there
            names = [get() for get in (*later, *sooner)]
        assert order == ["c", "d", "a", "b"]
        assert all(n.startswith("profuse-analyse") for n in names) and busy().startswith("profuse-analyse")
