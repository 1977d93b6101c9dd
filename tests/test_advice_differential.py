"""The set-based advice passes against the row-at-a-time oracle, on every shared trace.

tests/advice_oracle holds fusion, scopes, interruptions, roofline and busy as they were before they
were made set-based (plain Python over one row at a time). Here both run on the same loaded tables
and must agree: the same fusion candidates (pattern, scope, shape, instances, ops, scope ids, bytes,
intermediates, confidence) with the same predicted savings to 1e-6; the same interruption rows; the
same roofline rows; the same device-wide and per-step busy time.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from advice_oracle import busy as oracle_busy
from advice_oracle import fusion as oracle_fusion
from advice_oracle import interruptions as oracle_interruptions
from advice_oracle import roofline as oracle_roofline
from conftest import ALL_TRACES

import profuse
from profuse.analysis import busy, fusion, interruptions, roofline

TOL = 1e-6
EVERY = 10**9   # a top= large enough to keep every row


def same(new: Any, old: Any, where: str) -> None:
    """Field by field equality; floats to TOL (relative for large values)."""
    if is_dataclass(new) and is_dataclass(old):
        assert [f.name for f in fields(new)] == [f.name for f in fields(old)], where
        for f in fields(new):
            same(getattr(new, f.name), getattr(old, f.name), f"{where}.{f.name}")
    elif isinstance(new, (list, tuple)) and isinstance(old, (list, tuple)):
        assert len(new) == len(old), f"{where}: {len(new)} items vs {len(old)}"
        for i, (a, b) in enumerate(zip(new, old)):
            same(a, b, f"{where}[{i}]")
    elif isinstance(new, dict) and isinstance(old, dict):
        assert new.keys() == old.keys(), where
        for k in new:
            same(new[k], old[k], f"{where}[{k!r}]")
    elif isinstance(new, float) or isinstance(old, float):
        assert new is not None and old is not None, f"{where}: {new!r} vs {old!r}"
        assert math.isclose(float(new), float(old), rel_tol=TOL, abs_tol=TOL), f"{where}: {new!r} vs {old!r}"
    else:
        assert new == old, f"{where}: {new!r} vs {old!r}"


@pytest.fixture(scope="module")
def loaded() -> Iterator[dict[Path, profuse.Trace]]:
    """Every shared trace, loaded once (uncached: the tables are the same either way)."""
    out = {p: profuse.load(p, cache=False) for p in ALL_TRACES}
    yield out
    for t in out.values():
        t.close()


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_fusion_matches_oracle(loaded: dict[Path, profuse.Trace], path: Path) -> None:
    trace = loaded[path]
    new, old = fusion.fusion_candidates(trace), oracle_fusion.fusion_candidates(trace)
    key = lambda c: (c.pattern, c.scope, c.shape, tuple(c.scope_ids))
    same(sorted(new, key=key), sorted(old, key=key), f"{path.name} fusion")
    assert [c.predicted_saving_us for c in new] == sorted((c.predicted_saving_us for c in new), reverse=True)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_interruptions_match_oracle(loaded: dict[Path, profuse.Trace], path: Path) -> None:
    trace = loaded[path]
    new = interruptions.interruptions(trace, top=EVERY)
    old = oracle_interruptions.interruptions(trace, top=EVERY)
    key = lambda r: r.scope
    same([asdict(r) for r in sorted(new, key=key)], [asdict(r) for r in sorted(old, key=key)],
         f"{path.name} interruptions")
    # the default top 15 keeps the same (largest idle) rows
    assert [r.idle_us for r in interruptions.interruptions(trace)] == pytest.approx(
        [r.idle_us for r in oracle_interruptions.interruptions(trace)], rel=TOL, abs=TOL)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_roofline_matches_oracle(loaded: dict[Path, profuse.Trace], path: Path) -> None:
    trace = loaded[path]
    # the trace's own peaks, or a datasheet device's where it names none, so every trace is modelled
    peaks = roofline.device_peaks(trace) or roofline.Peaks(312.0, 19.5, 2039.0, "datasheet: A100", 156.0)
    new, old = roofline.roofline(trace, peaks, top=EVERY), oracle_roofline.roofline(trace, peaks, top=EVERY)
    key = lambda r: r.name
    same([asdict(r) for r in sorted(new, key=key)], [asdict(r) for r in sorted(old, key=key)], f"{path.name} roofline")


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_busy_matches_oracle(loaded: dict[Path, profuse.Trace], path: Path) -> None:
    trace = loaded[path]
    same(busy.device_busy(trace), oracle_busy.device_busy(trace), f"{path.name} device busy")
    same(busy.steps_busy(trace), oracle_busy.steps_busy(trace), f"{path.name} steps")


def test_every_pass_finds_something_somewhere(loaded: dict[Path, profuse.Trace]) -> None:
    """The comparison is not vacuous: across the shared traces each pass has rows to compare."""
    traces = list(loaded.values())
    assert sum(len(fusion.fusion_candidates(t)) for t in traces) >= 10
    assert sum(len(interruptions.interruptions(t)) for t in traces) >= 10
    assert sum(len(roofline.roofline(t, roofline.Peaks(312.0, 19.5, 2039.0, "x", 156.0))) for t in traces) >= 10
    assert sum(len(busy.steps_busy(t)) for t in traces) >= 3
