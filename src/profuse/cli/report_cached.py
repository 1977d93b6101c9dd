"""``profuse report`` from the cache: the report's document, kept as a derived entry of the trace.

A report (table or JSON) stores its ``profuse.report/3`` document with ``Trace.derived`` (written behind,
never before the report is printed); the next report of the same trace bytes with the same options
finds it by hashing the trace alone, and renders it without opening the tables, importing DuckDB or
numpy, or running an analysis. The entry's key names everything the document depends on besides the
trace's bytes and profuse's build (which the derived entry already checks): the path as given, the
options that change the document (``--group-by``, ``--sort``, ``--keep-metadata``, ``--no-advice``), and
a stamp of the trace's folder (the names, sizes and times of the side files a report reads: a
bundle's ``meta.json`` with its peaks, ``framework_mapping_*.json``, NEFFs, inductor artifacts).
``--top`` only cuts what a terminal shows, so every ``--top`` shares one entry. The notes the load
printed about side files are kept with it and printed again. An entry that cannot be read is ignored
and the report computed as without it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from ..payloads.report import ReportView
    from ..trace import Trace

ENTRY = "report/1"  # the entry's layout: change it when what is stored changes


class Entry(msgspec.Struct):
    """What is stored: the notes the load printed about side files, and the document as JSON."""

    notes: list[str]
    document: msgspec.Raw


def side_stamp(src: Path) -> str:
    """A hash of what the trace's folder holds besides the trace (``lstat`` of each entry, and of the
    inductor artifacts): any side file added, removed or rewritten changes it."""
    rows: list[tuple[str, int, int, int]] = []
    for folder in (src.parent, src.parent / "artifacts", src.parent / "artifacts" / "inductor"):
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    if folder == src.parent and e.name == src.name:
                        continue  # the trace itself is hashed whole
                    st = e.stat(follow_symlinks=False)
                    rows.append((f"{folder.name}/{e.name}", st.st_mode, st.st_size, st.st_mtime_ns))
        except OSError:
            continue
    return hashlib.sha1(repr(sorted(rows)).encode()).hexdigest()


def entry_key(args: argparse.Namespace, src: Path) -> str:
    """The derived key of the report of ``src`` with these options."""
    return json.dumps({"entry": ENTRY, "path": str(src), "group_by": args.group_by, "sort": args.sort,
                       "keep_metadata": bool(args.keep_metadata), "advice": not args.no_advice,
                       "side": side_stamp(src)}, sort_keys=True)


def remember(trace: Trace, args: argparse.Namespace, view: ReportView) -> None:
    """Store the report's document (and the notes about side files) as a derived entry of ``trace``."""
    def encode() -> bytes:
        return msgspec.json.encode({"notes": trace.side_notes, "document": view.document})

    trace.derived(entry_key(args, trace.path), encode)


def cached_report(args: argparse.Namespace) -> int | None:
    """Print the report from its derived entry and return the exit code, or None when there is none
    (the caller then loads the trace and computes it, as always)."""
    if args.format not in ("table", "json") or args.no_cache or args.lenient:
        return None
    stored = _stored_entry(args)
    if stored is None:
        return None
    try:
        entry = msgspec.json.decode(stored, type=Entry)
        if args.format == "json":
            text = msgspec.json.format(bytes(entry.document), indent=2).decode()
        else:
            from ..payloads.report import ReportDocument, ReportView

            view = ReportView(document=msgspec.json.decode(entry.document, type=ReportDocument), from_cache=True,
                              top=args.top or None)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None  # written by this very build, checked by its checksum: only a bug gets here
    _print_notes(entry.notes)
    if args.format == "json":
        from ._common import emit

        return emit(text, args.output)
    from .report import print_view

    return print_view(view, args.output)


def _stored_entry(args: argparse.Namespace) -> bytes | None:
    from ..errors import ProfuseError
    from ..trace.cache import cache_folder, fingerprint, holds_derived_of_size, read_derived
    from ..trace.open_trace import resolve

    try:
        src = resolve(args.path)
        folder = cache_folder(args.cache_dir)
        if folder is None or not holds_derived_of_size(folder, src.stat().st_size):
            return None  # no entry of a trace this size: no need to hash it
        return read_derived(folder, fingerprint(src, hand_on=True), entry_key(args, src))
    except (ProfuseError, OSError):
        return None  # the load says what is wrong, as without a cache


def _print_notes(notes: list[str]) -> None:
    from ..redact import redact_text

    for note in notes:
        print(f"profuse: note: {redact_text(note)}", file=sys.stderr)
