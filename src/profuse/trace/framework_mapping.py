"""TorchNeuron's ``framework_mapping_*.json`` beside a trace: runtime sequence id -> op, thread, stream.

Built from the public description (each runtime execution's sequence id, the framework op's sequence
number, its thread and stream), not from a real capture: the reader accepts the spellings below and
counts every record it cannot use. The rows become the ``framework_mapping`` view, with ``op`` the
``events.id`` of the ``cpu_op`` carrying that sequence number (on that thread when one is given; the
first to start, outermost of equal starts, when several ops share the number).
"""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ..errors import TraceError
from .artifacts import read_side_bytes, side_files
from .numbers import int64

PATTERN = "framework_mapping_*.json"
MAX_BYTES = 512 << 20
KEYS = {
    "runtime_seq": ("nrt_sequence_id", "runtime_sequence_id", "nrt_seq_id", "sequence_id", "seq_id"),
    "seq": ("op_sequence_number", "sequence_number", "seq_nr", "seq", "op_seq"),
    "thread": ("thread_id", "thread", "tid"),
    "stream": ("stream_id", "stream"),
}


def files_beside(trace_path: Path) -> list[Path]:
    """``framework_mapping_*.json`` in the trace's folder, looked at without following links; one
    that is a link, FIFO or device is an error naming it (it would be followed, or block the load)."""
    out = []
    for p, why in side_files(trace_path.parent, ".json"):
        if fnmatch.fnmatchcase(p.name, PATTERN):
            if why:
                raise TraceError(p, f"{why}: move it away to load the trace")
            out.append(p)
    return out


def _records(path: Path) -> list[Any]:
    raw, why = read_side_bytes(path, MAX_BYTES)
    if raw is None:
        raise TraceError(path, f"{why}: move it away to load the trace")
    try:
        doc = json.loads(raw, parse_int=_whole)
    except UnicodeDecodeError as err:
        raise TraceError(path, f"cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise TraceError(path, f"not valid JSON ({err.msg}, line {err.lineno}): move it away to load the trace") from None
    except RecursionError:
        raise TraceError(path, "is nested too deeply to read: move it away to load the trace") from None
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        lists = [v for v in doc.values() if isinstance(v, list)]
        if len(lists) == 1:
            return lists[0]
        if doc and all(isinstance(v, dict) for v in doc.values()):  # {runtime_seq: {...}}
            return [{"runtime_sequence_id": k, **v} for k, v in doc.items()]
    raise TraceError(path, "holds neither a list of mapping records nor an object of them")




def _whole(text: str) -> int | None:
    """A JSON integer as read (the decoder's ``parse_int``): None past 64 bits."""
    return int64(text, text=True)


def _int(v: Any) -> int | None:
    """An id: a whole number within 64 bits, or a string of its digits; anything else None (counted)."""
    return int64(v, text=True)


def _pick(rec: dict[str, Any], field: str) -> int | None:
    for k in KEYS[field]:
        if k in rec:
            return _int(rec[k])
    return None


def read(files: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Columns of every usable record, and counts: files, rows, skipped (no runtime id or no op seq)."""
    cols: dict[str, list[Any]] = {"file": [], "runtime_seq": [], "seq": [], "thread_id": [], "stream": []}
    skipped = 0
    for f in files:
        for rec in _records(f):
            rs = _pick(rec, "runtime_seq") if isinstance(rec, dict) else None
            seq = _pick(rec, "seq") if isinstance(rec, dict) else None
            if rs is None or seq is None:
                skipped += 1
                continue
            cols["file"].append(f.name)
            cols["runtime_seq"].append(rs)
            cols["seq"].append(seq)
            cols["thread_id"].append(_pick(rec, "thread"))
            cols["stream"].append(_pick(rec, "stream"))
    arrays = {k: np.array(v, dtype=object) for k, v in cols.items()}
    return arrays, {"files": [f.name for f in files], "rows": len(cols["file"]), "skipped": skipped}


def attach(con: duckdb.DuckDBPyConnection, trace_path: Path) -> dict[str, Any] | None:
    """Make the ``framework_mapping`` view when mapping files sit beside the trace; None when none do."""
    files = files_beside(trace_path)
    if not files:
        return None
    arrays, info = read(files)
    con.register("_framework_mapping", arrays)
    con.execute("""
        CREATE OR REPLACE TEMP VIEW framework_mapping AS
        SELECT m.file, CAST(m.runtime_seq AS BIGINT) AS runtime_seq, CAST(m.seq AS BIGINT) AS seq,
               CAST(m.thread_id AS BIGINT) AS thread_id, CAST(m.stream AS BIGINT) AS stream,
               (SELECT e.id FROM events e
                 WHERE e.kind = 'cpu_op' AND e.seq = CAST(m.seq AS BIGINT)
                   AND (m.thread_id IS NULL OR e.tid = CAST(m.thread_id AS VARCHAR))
                 ORDER BY e.ts, e.dur DESC, e.id LIMIT 1) AS op
        FROM _framework_mapping m""")
    linked = con.execute("SELECT count(op) FROM framework_mapping").fetchall()[0]
    info["linked"] = int(linked[0]) if linked else 0
    return info
