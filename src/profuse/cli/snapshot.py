"""``profuse report snapshot.pickle``: a ``torch.cuda.memory._dump_snapshot`` file, read without running it."""
from __future__ import annotations

import argparse

from ..errors import UserError
from ._common import console, emit

SCHEMA = "profuse.memory_snapshot/1"


def run_snapshot_report(args: argparse.Namespace) -> int:
    """Print (or write as JSON) each device's peak and what is live at it, from a memory snapshot."""
    from ..analysis.memory import memory_section as memory_of
    from ..payloads.memory import memory_timeline_of
    from ..trace.snapshot import load_snapshot

    if args.format == "html":
        raise UserError(f"{args.path}: --format html is not available for a memory snapshot; use table or json")
    with load_snapshot(args.path) as trace:
        payload = memory_of(trace)
        counts = trace.meta.get("memory_snapshot") or {}
        lanes = memory_timeline_of(trace).lanes if args.format == "json" else []
    if args.format == "json":
        import msgspec

        from ..report.json_report import render_json

        doc = {"schema": SCHEMA, "path": str(args.path), "counts": counts,
               "memory": msgspec.to_builtins(payload) if payload is not None else {"devices": []},
               "timeline": msgspec.to_builtins(lanes)}
        return emit(render_json(doc), args.output, json_document=True)
    from rich.text import Text

    from ..report.console_memory import render_memory

    con = console()
    con.print(Text(f"{args.path}: torch memory snapshot · {counts.get('segments', 0):,} segments · "
                   f"{counts.get('blocks', 0):,} blocks · {counts.get('entries', 0):,} alloc/free entries"))
    if payload is None:
        con.print(Text("No alloc/free history in this snapshot (record it with "
                       "torch.cuda.memory._record_memory_history() before the run).", style="yellow"))
    if counts.get("history_disagrees"):
        from ..report.console_memory import fmt_bytes

        con.print(Text(f"The alloc/free history and the final state disagree on {counts['history_disagrees']} "
                       "device(s): the history stops before frees it needs; the totals start "
                       f"{fmt_bytes(int(counts.get('history_disagrees_bytes', 0)))} (allocated) and "
                       f"{fmt_bytes(int(counts.get('history_disagrees_reserved_bytes', 0)))} (reserved) higher, "
                       "so none goes below zero.", style="yellow"))
    render_memory(con, payload)
    return 0
