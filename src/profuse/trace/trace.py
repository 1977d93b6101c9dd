"""A loaded trace: a read-only DuckDB connection over its tables, plus its metadata."""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb

from ..errors import UserError
from .cache import CacheWriter


class Trace:
    """Tables of one trace. Query them with :meth:`sql`; see docs/schema.md for the columns."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, *, from_cache: bool,
                 writer: CacheWriter | None = None) -> None:
        self.path = path
        self.con = con
        self.from_cache = from_cache
        self.writer = writer  # the cache being written behind, if any
        self.framework_mapping: dict[str, Any] | None = None  # counts when framework_mapping_*.json was beside it

    @cached_property
    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.con.execute("SELECT key, value FROM meta").fetchall()}

    @property
    def device_kind(self) -> str:
        return str(self.meta["device_kind"])

    @property
    def device_label(self) -> str:
        """Column heading for device time: CUDA, ROCm, MTIA, CPU, ..."""
        return self.device_kind

    @property
    def cpu_only(self) -> bool:
        return self.device_kind == "CPU"

    def sql(self, query: str, params: list[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run SQL against the trace's tables: (column names, rows). Errors are user errors."""
        try:
            cur = self.con.execute(query, params or [])
            return [d[0] for d in cur.description or []], cur.fetchall()
        except duckdb.Error as err:
            first = str(err).strip().splitlines()[0]
            raise UserError(f"SQL error: {first}") from None

    def wait_for_cache(self) -> str | None:
        """Wait until the cache file is written; returns why it could not be, or None."""
        if self.writer is None:
            return None
        self.writer.wait()
        return self.writer.error

    def close(self) -> None:
        self.wait_for_cache()
        self.con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Trace {self.path.name}: {self.meta['events']} events, {self.device_kind}>"
