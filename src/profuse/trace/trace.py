"""A loaded trace: a read-only DuckDB connection over its tables, plus its metadata."""
from __future__ import annotations

import contextlib
import html
import json
import re
import threading
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import UserError, printable
from ..redact import redact_text
from .cache import DIGEST, CacheWriter, SourceCheck, read_derived, write_derived_behind

if TYPE_CHECKING:  # DuckDB comes with the connection a Trace is made with: importing this module needs none
    import duckdb

    from .bundle import BundleMeta
    from .meta import TraceMeta
    from .sql_result import SqlResult

R = TypeVar("R")
_READ_ONLY = {"SELECT", "EXPLAIN", "PRAGMA", "CALL"}
_EXPLAIN = re.compile(r"^\s*explain\s+(?:analy[sz]e\s+)?", re.IGNORECASE)


def _statement_kind(query: str) -> str:
    """The type of the one statement in ``query`` (SELECT, UPDATE, ...; EXPLAIN [ANALYZE] X is X's type);
    more than one statement is an error."""
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as err:
        raise UserError(f"SQL error: {str(err).strip().splitlines()[0]}") from None
    if len(statements) != 1:
        raise UserError(f"SQL error: give exactly one statement (got {len(statements)})")
    kind = statements[0].type.name
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs what it explains
        inner = _EXPLAIN.sub("", query, count=1)
        return _statement_kind(inner) if inner != query else "EXPLAIN"
    return kind


class Trace:
    """Tables of one trace. Query them with :meth:`sql`; see docs/schema.md for the columns."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, *, from_cache: bool,
                 writer: CacheWriter | None = None, notes: list[str] | None = None) -> None:
        self.path = path
        self._con = con
        self._thread_cons: dict[int, duckdb.DuckDBPyConnection] = {}  # queried_with: a thread's own cursor
        self.from_cache = from_cache
        self.writer = writer  # the cache being written behind, if any
        self.notes = notes or []  # what the load did that a user should hear of (a cache discarded)
        self.side_notes: list[str] = []  # those of them about side files (meta.json, framework mappings)
        self.framework_mapping: dict[str, Any] | None = None  # counts when framework_mapping_*.json was beside it
        self.bundle: BundleMeta | None = None  # a profuse bundle's meta.json, when the trace is in one
        self.cache_folder: Path | None = None  # where derived results are kept (None: --no-cache, --lenient)
        # opened by its stat entry (load(verify="behind")): its bytes being hashed behind; None: hashed first
        self.source_check: SourceCheck | None = None
        self.closing: list[Callable[[], None]] = []  # called first by close(): users of its cursors finishing

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection over the trace's tables; on a thread inside :meth:`queried_with`, that
        thread's cursor of it (a connection runs one query at a time)."""
        return self._thread_cons.get(threading.get_ident(), self._con)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor of the connection, on the trace's tables, for another thread (see :meth:`queried_with`);
        the caller closes it."""
        (db,), = self._con.execute("SELECT current_database()").fetchall()
        cur = self._con.cursor()
        cur.execute("USE " + '"' + str(db).replace('"', '""') + '"')
        return cur

    @contextlib.contextmanager
    def queried_with(self, cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Inside the block, :attr:`con` on this thread is ``cur`` (a :meth:`cursor`): analyses on two
        threads query the trace at once, each on its own."""
        ident = threading.get_ident()
        self._thread_cons[ident] = cur
        try:
            yield
        finally:
            del self._thread_cons[ident]

    @cached_property
    def meta(self) -> TraceMeta:
        """The ``meta`` table as a typed record (JSON values decoded): counts, device, source; see docs/schema.md."""
        from .meta import trace_meta

        return trace_meta({k: json.loads(v) for k, v in self.con.execute("SELECT key, value FROM meta").fetchall()})

    @property
    def device_kind(self) -> str:
        """The device the trace ran on: CUDA, ROCm, MTIA, a PrivateUse1 backend's name (e.g. Neuron), or CPU.

        Reports head their device-time columns with this same word, reading it as ``device_label``:
        one value under two names, not two notions.
        """
        return self.meta.device_kind

    device_label = device_kind  # the same property (see device_kind)

    @property
    def cpu_only(self) -> bool:
        """True when the trace has no device: the op table's device columns then show CPU time."""
        return self.device_kind == "CPU"

    def sql(self, query: str, params: list[Any] | None = None) -> SqlResult:
        """Run one read-only SQL statement on the trace's tables: its rows as an Arrow table.

        The result (:class:`~profuse.trace.sql_result.SqlResult`) converts with ``.arrow()`` (the Arrow
        table), ``.df()`` (a DataFrame of pandas, or of polars where pandas is not installed) and ``.pl()``;
        a notebook shows its first rows as a table. What the statement may do is :meth:`sql_rows`'s rule.
        """
        from .sql_result import SqlResult

        def arrow(cur: duckdb.DuckDBPyConnection) -> Any:
            try:
                import pyarrow  # noqa: F401  # DuckDB hands Arrow tables to pyarrow
            except ImportError:
                raise UserError("Trace.sql returns an Arrow table and needs pyarrow (pip install pyarrow); "
                                "Trace.sql_rows gives (columns, rows) without it") from None
            rel = cur.sql(query, params=params or None)
            # to_arrow_table: DuckDB 2's name for what older releases call fetch_arrow_table
            return (getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table)()

        return SqlResult(self._read_only(query, arrow))

    def sql_rows(self, query: str, params: list[Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one read-only SQL statement on the trace's tables: (column names, rows as tuples).

        The statement sees complete tables (the cache, if one is being written, is finished first)
        and can change nothing: only SELECT / EXPLAIN / PRAGMA / CALL are run, inside a transaction
        that is always rolled back, on a connection that from then on reaches no file or network
        (DuckDB's ``enable_external_access`` off). Errors are user errors.
        """
        def rows(cur: duckdb.DuckDBPyConnection) -> tuple[list[str], list[tuple[Any, ...]]]:
            cur.execute(query, params or [])
            return [d[0] for d in cur.description or []], cur.fetchall()

        return self._read_only(query, rows)

    def _read_only(self, query: str, fetch: Callable[[duckdb.DuckDBPyConnection], R]) -> R:
        """``fetch(connection)`` (which runs ``query``) under :meth:`sql_rows`'s rule."""
        kind = _statement_kind(query)
        if kind not in _READ_ONLY:
            raise UserError(f"SQL error: profuse sql runs read-only queries (SELECT, DESCRIBE, EXPLAIN, ...), "
                            f"not {kind}")
        import duckdb

        self.wait_for_cache()
        cur = self.con
        try:
            cur.execute("SET enable_external_access = false")
            cur.execute("BEGIN TRANSACTION")
            return fetch(cur)
        except duckdb.Error as err:
            first = str(err).strip().splitlines()[0]
            raise UserError(f"SQL error: {first}") from None
        finally:
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")

    def derived(self, key: str, compute: Callable[[], bytes]) -> bytes:
        """A result derived from this trace's tables, kept in the cache folder under ``key``.

        ``compute`` makes the bytes (encoded by the caller, e.g. ``msgspec.msgpack.encode``); they are
        stored behind, on a background thread, keyed by the trace's bytes, ``key`` and profuse's build,
        and returned from the cache by later calls (in any process) until the trace or profuse changes.
        ``key`` must name every option the result depends on. Without a cache folder (``--no-cache``,
        ``--lenient``, a trace profuse did not fingerprint) it is ``compute()``, stored nowhere.
        """
        data = self.stored(key)
        if data is None:
            data = compute()
            fp = self.meta.source if self.cache_folder is not None else {}
            if {DIGEST, "size"} <= fp.keys() and self.cache_folder is not None:
                write_derived_behind(self.cache_folder, fp, key, data)
        return data

    def stored(self, key: str) -> bytes | None:
        """What :meth:`derived` keeps under ``key`` for this trace's bytes and this profuse, or None
        (nothing stored, or no cache folder); computes nothing."""
        fp = self.meta.source if self.cache_folder is not None else {}
        if not {DIGEST, "size"} <= fp.keys() or self.cache_folder is None:
            return None
        return read_derived(self.cache_folder, fp, key)

    def wait_for_cache(self) -> str | None:
        """Wait until the cache file is written; returns why it could not be, or None."""
        if self.writer is None:
            return None
        self.writer.wait()
        return self.writer.error

    def close(self) -> None:
        """Wait for the cache write and for what ``closing`` holds, then close the connection."""
        self.wait_for_cache()
        while self.closing:
            self.closing.pop()()
        self._con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return printable(redact_text(f"<Trace {self.path.name}: {self.meta.events:,} events, {self.device_kind}>"))

    def tables(self) -> list[str]:
        """The names of the tables and views :meth:`sql` reads (docs/schema.md describes them)."""
        _, rows = self.sql_rows("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                                "UNION ALL SELECT view_name FROM duckdb_views() "
                                "WHERE database_name = current_database() AND NOT internal ORDER BY 1")
        return [str(r[0]) for r in rows]

    def _repr_html_(self) -> str:
        """A notebook's view of the trace: what it is, its events by kind, and the tables :meth:`sql` reads."""
        m = self.meta
        device = m.device_kind + (f" ({m.device_name})" if m.device_name else "")
        kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(m.kinds.items(), key=lambda kv: -kv[1]))
        rows = [("path", str(self.path)), ("device", device), ("events", f"{m.events:,} ({kinds})"),
                ("span", f"{m.span_us / 1e3:,.3f} ms"), ("tables", ", ".join(self.tables()))]
        body = "".join(f"<tr><th style=\"text-align:left\">{k}</th><td style=\"text-align:left\">"
                       f"{html.escape(printable(redact_text(v)))}</td></tr>" for k, v in rows)
        return (f'<table class="profuse-trace">{body}</table>'
                '<p><small>trace.sql("SELECT ...") runs a query on these tables</small></p>')
