"""How the analyses read a query's rows: as numpy columns, in one place.

Through a DuckDB relation (``con.sql(...).fetchnumpy()``): on millions of rows it reads about a third faster
than ``execute(...).fetchnumpy()`` once the process has read once. No Arrow: pyarrow's ``to_numpy`` imports
pandas (~0.3 s), more than any read saves.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")


def fetch_columns(con: Any, query: str, params: list[Any] | None = None) -> dict[str, Any]:
    """A query's rows as numpy columns (a masked array where a column holds NULL), read through a relation;
    where the connection still holds an unfinished ``execute`` result (a ``fetchone`` elsewhere), through
    ``execute``, which finishes that one first."""
    import duckdb  # loaded already (``con`` is a DuckDB connection): not at import, which a cached report skips

    try:
        found: dict[str, Any] = con.sql(query, params=params).fetchnumpy()
    except duckdb.ResourceInUseException:
        found = con.execute(query, params).fetchnumpy()
    return found


def dense_columns(con: Any, query: str, params: list[Any] | None = None) -> dict[str, np.ndarray]:
    """:func:`fetch_columns` for a query none of whose columns holds NULL: plain numpy arrays."""
    return {k: np.asarray(v) for k, v in fetch_columns(con, query, params).items()}


_ID_TABLES = itertools.count()


@contextmanager
def id_table(con: Any, ids: np.ndarray) -> Iterator[str]:
    """``ids`` as a table of one BIGINT column ``id`` that SQL on ``con`` reads by the name given, for the block:
    DuckDB scans the array itself, where a list parameter (``unnest(?::BIGINT[])``) binds each id as a value (on
    hundreds of thousands of ids, several times slower). The name is this call's own; the table is gone after
    the block."""
    name = f"_profuse_ids_{next(_ID_TABLES)}"
    con.register(name, {"id": np.ascontiguousarray(ids, dtype=np.int64)})
    try:
        yield name
    finally:
        con.unregister(name)
