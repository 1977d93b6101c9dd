"""Codes of a column's values (their positions among the distinct values listed) from DuckDB ``hash`` values,
so that a query need not join on the values themselves."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")


def hash_codes(name_hashes: np.ndarray, frame_hashes: np.ndarray) -> np.ndarray | None:
    """Each row's code (the position of its value among the distinct values listed) from DuckDB ``hash``
    values: ``name_hashes`` of the listed values, ``frame_hashes`` of the rows'. None where two listed values
    share a hash, or a row's hash is not listed: the caller then codes the values themselves."""
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
