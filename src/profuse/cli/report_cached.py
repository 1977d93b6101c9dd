"""``profuse report`` from the cache: the report's document, kept as a derived entry of the trace.

A report (table or JSON) stores its ``profuse.report/4`` document with ``Trace.derived`` (written behind,
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

An entry is one line of JSON (the notes), then the document exactly as ``--format json`` prints it, so
the JSON format needs no decoder at all; the table decodes the document into its records only when
this console has not printed it before (see :func:`_print_table`).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rich.console import Console

    from ..payloads.report import ReportView
    from ..trace import Trace
    from ..trace.cache import SourceCheck

ENTRY = "report/2"  # the entry's layout: change it when what is stored changes


class Entry(NamedTuple):
    """What is stored: the notes the load printed about side files, and the document as ``--format json``
    prints it (indented JSON)."""

    notes: list[str]
    document: bytes

    def encode(self) -> bytes:
        """One line of JSON (the notes), then the document."""
        return json.dumps(self.notes).encode() + b"\n" + self.document

    @classmethod
    def decode(cls, data: bytes) -> Entry | None:
        """The entry :meth:`encode` wrote, or None for anything else."""
        head, _, document = data.partition(b"\n")
        try:
            notes = json.loads(head)
        except ValueError:
            return None
        if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
            return None
        return cls(notes, document)


def side_stamp(src: Path) -> str:
    """A hash of what the trace's folder holds besides the trace: the name, type, size and time of each
    file there and under ``artifacts/inductor`` (any side file added, removed or rewritten changes it).
    Folders count by name only, and profuse's own cache files (a cache folder may be the trace's) not at all."""
    from ..trace.cache import is_cache_file

    rows: list[tuple[str, int, int, int]] = []
    for folder in (src.parent, src.parent / "artifacts", src.parent / "artifacts" / "inductor"):
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    if (folder == src.parent and e.name == src.name) or is_cache_file(e.name):
                        continue  # the trace itself is hashed whole
                    st = e.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        rows.append((f"{folder.name}/{e.name}", stat.S_IFDIR, 0, 0))
                    else:
                        rows.append((f"{folder.name}/{e.name}", st.st_mode, st.st_size, st.st_mtime_ns))
        except OSError:
            continue
    return hashlib.sha1(repr(sorted(rows)).encode()).hexdigest()


def entry_key(args: argparse.Namespace, src: Path) -> str:
    """The derived key of the report of ``src`` with these options."""
    return json.dumps({"entry": ENTRY, "path": str(src), "group_by": args.group_by, "sort": args.sort,
                       "keep_metadata": bool(args.keep_metadata), "advice": not args.no_advice,
                       "side": side_stamp(src)}, sort_keys=True)


def remember(trace: Trace, args: argparse.Namespace, view: ReportView, rendered: str | None = None) -> None:
    """Store the report's document (and the notes about side files) as a derived entry of ``trace``;
    ``rendered``: the document as :func:`render_json` gives it, where the caller has it already."""
    def encode() -> bytes:
        from ..report.json_report import render_json

        text = rendered if rendered is not None else render_json(view.document)
        return Entry(list(trace.side_notes), text.encode()).encode()

    trace.derived(entry_key(args, trace.path), encode)


def cached_report(args: argparse.Namespace) -> int | None:
    """Print the report from its derived entry and return the exit code, or None when there is none
    (the caller then loads the trace and computes it, as always)."""
    if args.format not in ("table", "json") or args.no_cache or args.lenient:
        return None
    found = stored_entry(args)
    if found is None:
        return None
    entry = Entry.decode(found.data)
    if entry is None:
        return None  # written by this very build, checked by its checksum: only a bug gets here
    if args.format == "json":
        return _print_json(args, found, entry)
    return _print_table(args, found, entry)


PRINTED_MIN = 1 << 20  # a JSON document this big or bigger is kept as the output boundary passed it on


def _print_json(args: argparse.Namespace, found: Found, entry: Entry) -> int | None:
    """The JSON document. On standard output through the output boundary's redaction, a document of at least
    PRINTED_MIN bytes (a big trace's: 23 MB at 10 GB, which takes the boundary over half a second): the text
    that boundary passed on before for this entry, written as it was, else the document through the
    boundary, what it passes on kept for the next time (another derived entry, as the table's text)."""
    from ..redact import RedactingStream, output_redacted
    from ..trace.cache import read_derived, write_derived_behind
    from ._common import emit

    out = sys.stdout
    net = None if (args.output or not output_redacted() or not isinstance(out, RedactingStream)
                   or len(entry.document) < PRINTED_MIN) else out
    key = json.dumps({"printed": found.key})
    text = read_derived(found.folder, found.fp, key) if net is not None else None
    if not found.verified():
        return None  # other bytes than the entry's: their stat entry is gone, and the report computed
    _print_notes(entry.notes)
    if net is None:
        return emit(entry.document.decode(), args.output, json_document=True)
    net.flush()
    if text is not None:
        net.inner.write(text.decode())
        net.inner.flush()
        return 0
    inner, tee = net.inner, _Tee(net.inner)
    net.inner = tee
    try:
        code = emit(entry.document.decode(), None, json_document=True)
        net.flush()
    finally:
        net.inner = inner
    with contextlib.suppress(UnicodeEncodeError):
        write_derived_behind(found.folder, found.fp, key, "".join(tee.parts).encode())
    return code


class Found(NamedTuple):
    """A derived entry found: the cache folder, the trace's fingerprint, the entry's key and its bytes, and
    where the fingerprint came from the trace's stat entry, the hash of its bytes running behind."""

    folder: Path
    fp: dict[str, object]
    key: str
    data: bytes
    check: SourceCheck | None = None

    def verified(self) -> bool:
        """Whether the trace's bytes are the entry's (waits for the hash behind, if one runs)."""
        return self.check is None or self.check.wait() is None


def stored_entry(args: argparse.Namespace) -> Found | None:
    """The report's derived entry for ``args`` (None without one: no hash is taken when the cache holds no
    entry of a trace of this size). Found by the trace's stat entry where it has one (its stat and sampled
    blocks match; a trace of at most FULL_CHECK_BYTES is also hashed behind: call :meth:`Found.verified`
    before using it), else by hashing the trace (and recording a stat entry for a settled file)."""
    from ..errors import ProfuseError
    from ..trace.cache import (
        FULL_CHECK_BYTES,
        SourceCheck,
        cache_folder,
        fingerprint,
        fingerprint_by_stat,
        holds_derived_of_size,
        read_derived,
    )
    from ..trace.open_trace import resolve

    try:
        src = resolve(args.path)
        folder = cache_folder(args.cache_dir)
        if folder is None or not holds_derived_of_size(folder, src.stat().st_size):
            return None
        key = entry_key(args, src)
        by_stat = fingerprint_by_stat(folder, src)
        fp = by_stat or fingerprint(src, hand_on=True, record_in=folder)
        data = read_derived(folder, fp, key)
    except (ProfuseError, OSError):
        return None  # the load says what is wrong, as without a cache
    if data is None:
        return None  # a stat entry's fingerprint naming no entry: the load hashes the bytes, as without one
    # found by the stat entry (its stat and sampled blocks): the whole trace hashed behind where that is
    # cheap, else the entry trusted (trace/cache.py, FULL_CHECK_BYTES)
    behind = by_stat is not None and int(fp["size"]) <= FULL_CHECK_BYTES
    check = SourceCheck(src, fp, folder, lambda: None) if behind else None
    return Found(folder=folder, fp=fp, key=key, data=data, check=check)


def console_signature(con: Console) -> str:
    """What a console's output depends on besides what is printed: its width, whether it is a terminal,
    its colours, encoding and quirks (the height never changes a report)."""
    return repr((con.width, con.is_terminal, con.color_system, con.encoding, con.no_color, con.is_dumb_terminal,
                 con.legacy_windows, con.is_jupyter, con.soft_wrap, con.safe_box, con.options.ascii_only))


class _Tee:
    """A console's file that keeps a copy of what is written (the rest is the file's)."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.file.write(text)

    def flush(self) -> None:
        self.file.flush()

    def isatty(self) -> bool:
        return self.file.isatty()

    def fileno(self) -> int:
        return self.file.fileno()

    @property
    def encoding(self) -> str | None:
        return getattr(self.file, "encoding", None)


def _print_table(args: argparse.Namespace, found: Found, entry: Entry) -> int | None:
    """The table: the text this console printed before for this entry and ``--top``, else rendered from the
    document (and that text kept for the next time, as another derived entry)."""
    from ..trace.cache import read_derived, write_derived_behind
    from ._common import print_view, report_console

    con, buf = report_console(args.output)
    text_key = json.dumps({"text": found.key, "top": args.top, "console": console_signature(con)})
    text = read_derived(found.folder, found.fp, text_key)
    if not found.verified():
        return None  # as for JSON: never printed for other bytes
    if text is not None:
        _print_notes(entry.notes)
        if args.output:
            from .._io import atomic_write

            atomic_write(args.output, text.decode())
            print(f"wrote {args.output}")
        else:
            con.file.write(text.decode())
            con.file.flush()
        return 0
    import msgspec

    from ..payloads.report import ReportDocument, ReportView

    try:
        view = ReportView(document=msgspec.json.decode(entry.document, type=ReportDocument), from_cache=True,
                          top=args.top or None)
    except msgspec.DecodeError:
        return None  # as above: only a bug gets here
    _print_notes(entry.notes)
    tee = None if buf is not None else _Tee(con.file)
    if tee is not None:
        con.file = tee  # type: ignore[assignment]
    code = print_view(view, args.output, (con, buf))
    printed = buf.getvalue() if buf is not None else "".join(tee.parts if tee is not None else [])
    with contextlib.suppress(UnicodeEncodeError):
        write_derived_behind(found.folder, found.fp, text_key, printed.encode())
    return code


def _print_notes(notes: list[str]) -> None:
    from ..redact import redact_text

    for note in notes:
        print(f"profuse: note: {redact_text(note)}", file=sys.stderr)
