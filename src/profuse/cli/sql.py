"""``profuse sql``: run SQL on a trace's tables (events, links, scopes, shapes, threads, meta, ...)."""
from __future__ import annotations

import argparse
import csv
import sys

from ._common import add_load_args, console, load_trace

# raw text (not re-wrapped): every line fits 80 columns, a long query goes on inside its quotes
HELP = """examples:
  profuse sql trace.json.gz "SELECT kind, count(*), sum(dur)/1e3 AS us
    FROM events GROUP BY kind"
  profuse sql trace.json.gz "SELECT name, device_total/1e3 AS us FROM events
    WHERE kind='cpu_op' ORDER BY us DESC LIMIT 10"
  profuse sql trace.json.gz "SELECT * FROM links WHERE unlinked IS NOT NULL" \\
    --format csv
tables (docs/schema.md): events, links (view), scopes, shapes, threads,
flows, instants, meta
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse sql``."""
    p = subs.add_parser("sql", help="query a trace's tables with SQL (DuckDB)", epilog=HELP,
                        description="Run one SQL query against the tables of a loaded trace.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a Kineto trace or a profuse bundle folder")
    p.add_argument("query", help="the SQL to run (DuckDB dialect)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--keep-metadata", action="store_true",
                   help="keep values that look secret (passwords, tokens, keys in paths, names and metadata); "
                        "by default they are shown as [redacted]")
    add_load_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run one read-only query on a trace's tables and print the rows as a table, CSV or JSON; every
    string value (column names, cells, the strings in a list or struct cell) redacted unless ``--keep-metadata``."""
    from ..redact import redacted

    with load_trace(args.path, args) as trace:
        cols, rows = redacted(trace.sql_rows(args.query), keep=args.keep_metadata)
    if args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    elif args.format == "json":
        import msgspec

        sys.stdout.write(msgspec.json.encode([dict(zip(cols, r)) for r in rows], enc_hook=str).decode() + "\n")
    else:
        from rich.table import Table

        from ..report._text import text

        t = Table(show_edge=False, header_style="bold")
        for c in cols:
            t.add_column(c)
        for r in rows:
            t.add_row(*(text("" if v is None else v) for v in r))  # control characters escaped
        console().print(t)
    return 0
