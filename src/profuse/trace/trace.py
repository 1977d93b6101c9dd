"""A loaded trace: a read-only DuckDB connection over its tables, plus its metadata."""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb

from ..errors import UserError


class Trace:
    """Tables of one trace. Query them with :meth:`sql`; see docs/schema.md for the columns."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, *, from_cache: bool,
                 temp_file: Path | None = None) -> None:
        self.path = path
        self.con = con
        self.from_cache = from_cache
        self._temp_file = temp_file

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

    def rows(self, query: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        rel = self.con.execute(query, params or [])
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, r)) for r in rel.fetchall()]

    def close(self) -> None:
        self.con.close()
        if self._temp_file is not None:
            for p in (self._temp_file, Path(str(self._temp_file) + ".wal")):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Trace {self.path.name}: {self.meta['events']} events, {self.device_kind}>"
