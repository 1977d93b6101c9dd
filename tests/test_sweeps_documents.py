"""Whole report documents made with today's sweeps and with the previous rules in their place, on every
shared trace: the call tree's covered time (calltree._covered against the per-group Python merge it
replaced, tests/test_sweeps_passes.py) and the blocking calls' sites (levers._sync_sites against one
correlated subquery per call, tests/test_sweeps.py). The diagnosis's _cpu_other has its own whole-report
tests (tests/test_sweeps_levers.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ALL_TRACES, trace_id
from test_sweeps import _document, sync_sites_by_sql
from test_sweeps_passes import covered_before

from profuse.analysis import calltree
from profuse.analysis.diagnosis import levers


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_the_report_is_the_same_with_the_previous_rules(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the report document of a real trace made with the sweeps
    now = _document(path)
    # WHEN it is made again with the previous rules in their place
    calls: list[int] = []

    def covered(*args, overwrite=False):   # the previous rule never writes into its arguments
        calls.append(1)
        return covered_before(*args)

    monkeypatch.setattr(calltree, "_covered", covered)
    monkeypatch.setattr(levers, "_sync_sites", sync_sites_by_sql)
    before = _document(path)
    # THEN the two documents are the same, field for field, and a trace with a call tree made it by the
    # previous rule
    assert now == before
    assert calls or "calltree" not in now
