"""The diagnosis's host intervals coded by hash and its searches from the answer before (issue 44), checked against
the rules they replace, kept below verbatim as the oracles: the names' codes against the binary search of the
listed hashes (analysis/_codes.py) and against the names joined in DuckDB (the fallback, on every shared trace),
and the sorted searches (analysis/diagnosis/budget.py search_sorted, which the time budget's cuts and the levers'
holders use) against numpy's, in C and in numpy, on hand-built values: repeats, values before, between and after
the array, the smallest integer, queries out of order."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id
from test_diag_speed import _check_host, _work

import profuse
from profuse.analysis import _codes
from profuse.analysis._codes import hash_codes
from profuse.analysis.diagnosis import budget
from profuse.analysis.diagnosis.budget import search_sorted

# --- the previous rules, kept here as the oracles --------------------------------------------------------------


def old_hash_codes(name_hashes: np.ndarray, frame_hashes: np.ndarray) -> np.ndarray | None:
    """analysis/_codes.py hash_codes before the slot table: a binary search of the listed hashes per row."""
    if not name_hashes.size:
        return np.zeros(0, dtype=np.int64) if not frame_hashes.size else None
    order = np.argsort(name_hashes)
    known = name_hashes[order]
    if bool((known[1:] == known[:-1]).any()):
        return None
    at = np.minimum(np.searchsorted(known, frame_hashes), known.size - 1)
    if not bool((known[at] == frame_hashes).all()):
        return None
    return order[at].astype(np.int64)


def _same(got: np.ndarray | None, want: np.ndarray | None) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return got.dtype == np.int64 and got.tolist() == want.tolist()


# --- hash codes --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scanner", ["1", "0"])   # "1": the slot table looked up in C; "0": by numpy
def test_hash_codes_are_the_binary_search_of_the_listed_hashes(scanner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    rng = np.random.default_rng(44)
    for trial in range(400):
        # GIVEN listed hashes (few to thousands: the slot table, and past its bound the search) and rows' hashes,
        # some with a listed hash repeated or a row's hash not listed
        n = int(rng.choice([1, 2, 3, 17, 326, 1500, 3000]))
        listed = rng.integers(0, 2 ** 63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(rng.integers(0, 2))
        if trial % 7 == 1 and n > 1:
            listed[-1] = listed[0]                          # two values share a hash
        rows = listed[rng.integers(0, n, int(rng.integers(0, 2000)))]
        if trial % 5 == 2 and rows.size:
            rows[int(rng.integers(0, rows.size))] ^= np.uint64(1 << 40)   # a row's hash not listed
        # WHEN they are coded, THEN the codes (or None) are the binary search's
        assert _same(hash_codes(listed, rows), old_hash_codes(listed, rows)), trial


@pytest.mark.parametrize("scanner", ["1", "0"])
def test_hash_codes_on_hashes_alike_in_their_low_bits(scanner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    # GIVEN listed hashes equal in their low and middle bits (no slot field near the bottom tells them apart),
    # small ones, and hashes that differ only in their top bit
    low = np.asarray([(i << 50) | 0xABCDEF for i in range(40)], dtype=np.uint64)
    small = np.asarray([10, 20, 30], dtype=np.uint64)
    top = np.asarray([5, 5 | (1 << 63)], dtype=np.uint64)
    for listed in (low, small, top):
        rows = np.concatenate([listed[::-1], listed, listed[:1]])
        # WHEN coded, THEN each row's code is its hash's position among the listed, as the search gives it
        assert _same(hash_codes(listed, rows), old_hash_codes(listed, rows))
        assert hash_codes(listed, rows).tolist() == [int(np.flatnonzero(listed == h)[0]) for h in rows]  # type: ignore[union-attr]
    # and a table for many values would be too sparse: the search codes them
    assert _codes._slot_table(np.arange(5000, dtype=np.uint64) * np.uint64(2 ** 40)) is None
    assert hash_codes(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.uint64)) is None


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_host_intervals_joined_in_duckdb_are_the_hashed_ones(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace whose host names, as if two shared a hash, are joined to their codes in DuckDB
    with profuse.load(path, cache=False) as tr:
        if tr.cpu_only:
            pytest.skip("no device: the device budget does not run")
        hashed = _work(tr)
        monkeypatch.setattr(budget, "hash_codes", lambda *_a: None)
        joined = _work(tr)
        # WHEN both reads are compared with the query with a string per row, THEN each is its rows, in its order
        _check_host(tr, joined)
        _check_host(tr, hashed)
        assert joined.host_code.tolist() == hashed.host_code.tolist() and joined.host_names == hashed.host_names


# --- sorted searches ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scanner", ["1", "0"])
def test_search_sorted_is_numpys(scanner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)   # "0": the numpy twin
    rng = np.random.default_rng(45)
    lo64 = np.iinfo(np.int64).min
    for trial in range(1500):
        # GIVEN sorted times with repeats, and queries before, between, on and after them, mostly in order,
        # sometimes not, sometimes the smallest integer
        a = np.sort(rng.integers(-50, 50, int(rng.integers(0, 40)))).astype(np.int64)
        v = rng.integers(-70, 70, int(rng.integers(0, 60))).astype(np.int64)
        if trial % 3:
            v.sort()
        if trial % 11 == 0 and v.size:
            v[0] = lo64
        if trial % 13 == 0 and a.size:
            a[0] = lo64
        for side in ("left", "right"):
            # WHEN searched, THEN each answer is numpy's searchsorted's
            got = search_sorted(a, v, side)  # type: ignore[arg-type]
            assert got.dtype == np.int64 and got.tolist() == np.searchsorted(a, v, side=side).tolist(), (trial, side)


def test_covered_by_the_searches_on_a_real_trace() -> None:
    # GIVEN a real trace's cuts and the runs its time budget paints on them
    from conftest import trace_path

    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        steps = np.zeros(0, dtype=np.int64)
        w = budget.device_work(tr, set(), steps, steps)
        cuts = budget.labels(w).cuts
    for runs in (budget.merge_runs(w.host_ts, w.host_end), budget.merge_runs(w.acts.start, w.acts.end)):
        # WHEN each cut is looked up, THEN it is covered exactly where a run holds it (one search per cut)
        i = np.searchsorted(runs[0], cuts, side="right") - 1
        want = (i >= 0) & (cuts < runs[1][np.clip(i, 0, None)])
        assert budget.covered(runs, cuts).tolist() == want.tolist()
