"""Distinct rows by one stable sort (trace.arrays.distinct_rows: the fusion search's distinct matches and the device
budget's distinct activity classes; issue 44: on a 10^6-op CPU trace ``np.unique(axis=0)``, which makes each row a
structured value, was most of the analysis), checked against the rule it replaced (kept below as the oracle) on
hand-built rows of every integer width, on random ones and on every shared trace's matches."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis.advice import fusion
from profuse.trace.arrays import distinct_rows

# --- the previous rule, kept here as the oracle ---------------------------------------------------------------


def distinct_rows_before(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first, back = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return first, back.ravel()


CASES = {
    "one row": np.asarray([[3, 1, 2]], dtype=np.int64),
    "all equal": np.tile(np.asarray([[1, 5]], dtype=np.int64), (7, 1)),
    "one column": np.asarray([[4], [1], [4], [0], [1]], dtype=np.int64),
    "negative and huge": np.asarray([[-1, 2**62], [-(2**63), 0], [-1, 2**62], [5, -3], [-(2**63), 0]], dtype=np.int64),
    "ties on the first column": np.asarray([[1, 9, 0], [1, 2, 7], [0, 9, 9], [1, 2, 7], [1, 2, 6]], dtype=np.int64),
    "later columns decide": np.asarray([[0, 0, 0, 2], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 1]], dtype=np.int64),
    "int8 over its whole range": np.asarray([[127, -128], [-128, 127], [127, -128], [0, 0]], dtype=np.int8),
    "uint64 past int64": np.asarray([[2**64 - 1, 3], [2**63, 3], [2**64 - 1, 3], [0, 2**63]], dtype=np.uint64),
    "uint64 high and narrow": np.asarray([[2**63 + 2, 1], [2**63 + 1, 1], [2**63 + 2, 0], [2**63 + 1, 1]],
                                         dtype=np.uint64),
    "packed to the last bit": np.asarray([[2**31 - 1, 0], [0, 2**31 - 1], [2**31 - 1, 0], [0, 0]], dtype=np.int64),
    "one bit too wide to pack": np.asarray([[2**31, 0], [0, 2**31 - 1], [2**31, 0], [0, 0]], dtype=np.int64),
}


@pytest.mark.parametrize("name", list(CASES))
def test_distinct_rows_match_np_unique_on_hand_built_rows(name: str) -> None:
    rows = CASES[name]
    first, back = distinct_rows(rows)
    want_first, want_back = distinct_rows_before(rows)
    assert first.tolist() == want_first.tolist()
    assert back.tolist() == want_back.tolist()
    assert (rows[first][back] == rows).all()   # each row's distinct row is itself


def test_distinct_rows_empty() -> None:
    first, back = distinct_rows(np.zeros((0, 3), dtype=np.int64))
    assert first.size == 0 and back.size == 0


@pytest.mark.parametrize("seed", range(5))
def test_distinct_rows_match_np_unique_on_random_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 3000)), int(rng.integers(1, 7))
    dtype = (np.int64, np.int32, np.int8, np.uint64, np.uint8)[seed]
    rows = rng.integers(0 if np.dtype(dtype).kind == "u" else -3, 4, size=(n, k)).astype(dtype)  # many repeated rows
    rows[rng.integers(0, n, n // 3), 0] = np.iinfo(dtype).max   # and a column spanning its type (packed or not)
    first, back = distinct_rows(rows)
    want_first, want_back = distinct_rows_before(rows)
    assert first.tolist() == want_first.tolist()
    assert back.tolist() == want_back.tolist()


def plain(m: fusion.Match) -> dict[str, Any]:
    return {f.name: (v.tolist() if isinstance(v := getattr(m, f.name), np.ndarray) else v) for f in dataclasses.fields(m)}


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_matches_and_candidates_same_as_with_np_unique(path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(path) as t:   # type: ignore[arg-type]
        got_ms = fusion.find_matches(t)
        got = fusion.fusion_candidates(t)
        monkeypatch.setattr(fusion, "distinct_rows", distinct_rows_before)   # the search again, by the old rule
        want_ms = fusion.find_matches(t)
        want = fusion.fusion_candidates(t)
    assert [plain(m) for m in got_ms] == [plain(m) for m in want_ms]
    assert got == want
