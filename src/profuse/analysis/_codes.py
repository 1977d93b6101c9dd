"""Codes of a column's values (their positions among the distinct values listed) from DuckDB ``hash`` values,
so that a query need not join on the values themselves."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..trace import compiled
from ..trace.arrays import distinct

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")

# a table of at most this many slots (int32: 16 MiB) looks each row's hash up at once; with more values listed
# than fit it sparsely, a binary search does
_MAX_SLOTS_LOG2 = 22


def hash_codes(name_hashes: np.ndarray, frame_hashes: np.ndarray) -> np.ndarray | None:
    """Each row's code (the position of its value among the distinct values listed) from DuckDB ``hash``
    values: ``name_hashes`` of the listed values, ``frame_hashes`` of the rows'. None where two listed values
    share a hash, or a row's hash is not listed: the caller then codes the values themselves."""
    if not name_hashes.size:
        return np.zeros(0, dtype=np.int64) if not frame_hashes.size else None
    name_hashes = np.asarray(name_hashes, dtype=np.uint64)
    frame_hashes = np.asarray(frame_hashes, dtype=np.uint64)
    known = np.sort(name_hashes)
    if bool((known[1:] == known[:-1]).any()):
        return None
    slots = _slot_table(name_hashes)
    if slots is not None:   # a bit field of the hash tells every listed value apart: one look-up per row
        shift, table = slots
        if compiled.enabled():   # in one pass, no array per step
            out = np.empty(frame_hashes.size, dtype=np.int64)
            listed = np.ascontiguousarray(name_hashes)
            return out if compiled.accel.slot_codes(np.ascontiguousarray(frame_hashes), table, listed, shift, out) else None
        at = frame_hashes >> np.uint64(shift)
        at &= np.uint64(table.size - 1)
        code: np.ndarray = table[at].astype(np.int64)
        if bool((code < 0).any()) or not bool((name_hashes[code] == frame_hashes).all()):
            return None
        return code
    order = np.argsort(name_hashes)
    at = np.minimum(np.searchsorted(known, frame_hashes), known.size - 1)
    if not bool((known[at] == frame_hashes).all()):
        return None
    return order[at].astype(np.int64)


def _slot_table(name_hashes: np.ndarray) -> tuple[int, np.ndarray] | None:
    """A shift and a table of 2^k slots (-1: none) such that bits shift..shift+k of each listed hash are its
    own slot, holding its position; None where no such field is found (too many values for the table)."""
    n = name_hashes.size
    bits = min(max(2 * int(n).bit_length() + 1, 8), _MAX_SLOTS_LOG2)
    if n * n > (1 << (bits + 2)):   # distinct slots unlikely (the birthday bound): search instead
        return None
    mask = np.uint64((1 << bits) - 1)
    for shift in range(0, 64 - bits + 1, 3):
        slot = (name_hashes >> np.uint64(shift)) & mask
        if distinct(slot).size == n:
            table = np.full(1 << bits, -1, dtype=np.int32)
            table[slot] = np.arange(n, dtype=np.int32)
            return shift, table
    return None


def position_lookup(ids: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A lookup from values to their position in ``ids`` (-1 for a value not there; of repeated values, the
    first): ``ids`` sorted once (not at all where ascending already), each lookup one binary search."""
    order = None if bool((ids[1:] > ids[:-1]).all()) else np.argsort(ids, kind="stable")   # None: ascending
    keys = ids if order is None else ids[order]

    def lookup(values: np.ndarray) -> np.ndarray:
        if keys.size == 0:
            return np.full(np.shape(values), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, values), keys.size - 1)
        found: np.ndarray = np.where(keys[at] == values, at if order is None else order[at], -1).astype(np.int64, copy=False)
        return found

    return lookup


def positions(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each of ``values``' position in ``ids`` (-1: not there): :func:`position_lookup` asked once."""
    return position_lookup(ids)(values)
