"""What :meth:`profuse.trace.Trace.sql` returns: one query's rows as an Arrow table, converted to the
DataFrame library that is installed, and shown in a notebook or a terminal as a table of its first rows.

What it *shows* (``repr``, the notebook's HTML) is redacted as ``profuse sql`` redacts what it prints, and
no control character from a trace reaches the terminal; the data it *gives* (``.arrow()``, ``.df()``,
``.rows``) is what the trace's tables hold, for the caller's own code.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from ..errors import UserError, printable
from ..redact import redacted

if TYPE_CHECKING:
    import pyarrow

SHOWN_ROWS = 20      # rows a repr shows; the rest are counted
CELL_CHARS = 60      # characters of one cell a text repr shows


class SqlResult:
    """One read-only query's rows, read whole: ``.arrow()`` the Arrow table, ``.df()`` a DataFrame
    (pandas, or polars where pandas is not installed), ``.pl()`` a polars DataFrame, ``.columns`` and
    ``.rows`` (tuples); ``len()`` the number of rows. Any library that reads the Arrow C stream interface
    (``__arrow_c_stream__``: polars, pandas, DuckDB) takes it as it is."""

    def __init__(self, table: pyarrow.Table) -> None:
        self._table = table

    def arrow(self) -> pyarrow.Table:
        """The rows as a ``pyarrow.Table`` (column types as DuckDB exports them)."""
        return self._table

    def df(self) -> Any:
        """The rows as a DataFrame of whichever library is installed: pandas, else polars."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            try:
                return self.pl()
            except UserError:
                raise UserError("a DataFrame needs pandas or polars (pip install pandas, or polars); "
                                ".arrow() gives the Arrow table") from None
        return self._table.to_pandas()

    def pl(self) -> Any:
        """The rows as a polars DataFrame."""
        try:
            import polars
        except ImportError:
            raise UserError("a polars DataFrame needs polars (pip install polars); .arrow() gives the Arrow "
                            "table, .df() a pandas DataFrame") from None
        return polars.from_arrow(self._table)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule stream of the rows: ``polars.DataFrame(result)`` and the like read it."""
        return self._table.__arrow_c_stream__(requested_schema)

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self._table.column_names)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        """The rows as tuples of Python values (Arrow's conversion: a HUGEINT sum is a ``Decimal``)."""
        cols = [c.to_pylist() for c in self._table.columns]
        return list(zip(*cols)) if cols else []

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def _shown(self) -> tuple[list[str], list[list[str]]]:
        """The column names and the first SHOWN_ROWS rows as the text a repr shows, redacted."""
        head = SqlResult(self._table.slice(0, SHOWN_ROWS)).rows
        cols, rows = redacted((self.columns, head))
        return [str(c) for c in cols], [["" if v is None else str(v) for v in r] for r in rows]

    def _more(self) -> str:
        n = len(self)
        left = n - min(n, SHOWN_ROWS)
        return (f"{n:,} row{'s' if n != 1 else ''}"
                + (f", the first {SHOWN_ROWS} shown; .df() or .arrow() has them all" if left else ""))

    def __repr__(self) -> str:
        cols, rows = self._shown()
        return f"{text_table(cols, rows)}\n({self._more()})"

    def _repr_html_(self) -> str:
        cols, rows = self._shown()
        return f"{html_table(cols, rows, 'profuse-sql')}<p><small>{html.escape(self._more())}</small></p>"


def text_table(columns: list[str], rows: list[list[str]]) -> str:
    """Columns of text, left-aligned under a rule; each cell made printable and cut to CELL_CHARS."""
    cells = [[_cut(printable(c)) for c in columns], *[[_cut(printable(v)) for v in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    if columns:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def html_table(columns: list[str], rows: list[list[str]], css_class: str) -> str:
    """An HTML table of text cells, every cell made printable (control characters as visible escapes) and
    escaped."""
    head = "".join(f"<th>{html.escape(printable(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(printable(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cut(value: str) -> str:
    return value if len(value) <= CELL_CHARS else value[:CELL_CHARS - 1] + "…"
