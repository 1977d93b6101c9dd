"""The two records of the engine pipeline: events as decoded, and the ``events`` table's columns.

:class:`DecodedEvents` is what the decoder knows of each complete event (kind, times, thread, ids);
:func:`profuse.trace.correlate.correlate` turns it into :class:`EventColumns`, one array per column
of the ``events`` table (schema.DDL), in the table's order. Row ``i`` of every array is the trace's
``i``-th complete event; -1 means "none" in integer columns and NaN in ``flops``. Neither record
needs DuckDB, so the correlation rules are tested on hand-built inputs.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .schema import KIND_CODE, KINDS

NONE = -1  # "no such event / value" in integer columns


def row_type(*counts: int) -> type[np.signedinteger[Any]]:
    """The integer type of row numbers and ids of rows (and -1) where tables of ``counts`` rows are built:
    int32 where every count fits it (half the bytes; the tables' columns are BIGINT or INTEGER alike), else
    int64."""
    return np.int32 if max(counts, default=0) < 2**31 else np.int64


def narrowed(values: np.ndarray) -> np.ndarray:
    """Integer ``values`` as int32 where every one fits it, else as they are: a column of ids or numbers
    the trace gave (a correlation id, a stream, a device index) usually fits, and the table's BIGINT or
    INTEGER column takes either (half the bytes while the tables are built)."""
    if not values.size or (int(values.min()) >= -(2**31) and int(values.max()) < 2**31):
        return values.astype(np.int32, copy=False)
    return values


@dataclass(frozen=True)
class Flows:
    """Flow events (``s``/``f``/``t``), in file order."""

    ids: np.ndarray      # int32: code of the flow's id (events of one flow share it) into ``id_text``
    id_text: np.ndarray  # each distinct flow id: int64 when all are plain decimal numbers, else text (object)
    ph: np.ndarray       # int8: 0 start, 1 finish, 2 step (index into _build.FLOW_PHASES)
    ts: np.ndarray       # int64 ns
    thread: np.ndarray   # int32 thread number


@dataclass(frozen=True)
class DecodedEvents:
    """Per-event columns as decoded, before correlation (see the module docstring)."""

    kind: np.ndarray              # int8 code into schema.KINDS
    name: np.ndarray              # int32 code into ``names``
    names: np.ndarray             # object: every distinct name ("" for a null one)
    cat: np.ndarray               # int32 code into the trace's distinct categories
    ts: np.ndarray                # int64 ns, baseTimeNanoseconds added
    dur: np.ndarray               # int64 ns
    thread: np.ndarray            # int32 thread number
    pid_of_thread: np.ndarray     # int64 per thread number: its pid as a number, -1 when it is not one
    tid_of_thread: np.ndarray     # int64 per thread number: its tid as a number, -1 when it is not one
    # the integer args below: int64, or int32 where every value of the column fits it (:func:`narrowed`)
    device: np.ndarray            # args.device
    stream: np.ndarray            # args.stream (or stream id)
    correlation: np.ndarray       # args.correlation
    external_id: np.ndarray       # args["External id"]
    seq: np.ndarray               # args["Sequence number"]
    python_id: np.ndarray         # args["Python id"]
    python_parent_id: np.ndarray  # args["Python parent id"]
    nbytes: np.ndarray            # args.bytes (memcpy / memset)
    flops: np.ndarray             # float64 args.flops, NaN when absent
    flows: Flows

    def __len__(self) -> int:
        return len(self.ts)


# How a column is written: a code into the string list named by "lookup" (0-based), an integer where
# "null" stands for SQL NULL, or a float where NaN is NULL; a column not named here is written as it is.
_OPTIONAL = {"null": NONE}
WRITE_RULES: dict[str, dict[str, Any]] = {
    "kind": {"lookup": "kinds"}, "cat": {"lookup": "cats"}, "name": {"lookup": "names"},
    "pid": {"lookup": "pids"}, "tid": {"lookup": "tids"}, "link": {"lookup": "how"}, "unlinked": {"lookup": "why"},
    **dict.fromkeys(("device", "stream", "correlation", "external_id", "parent", "depth", "op", "module", "scope",
                     "parent_op", "launch", "seq", "python_id", "python_parent_id", "bytes"), _OPTIONAL),
    "flops": {"nan_null": True},
}


@dataclass(frozen=True)
class EventColumns:
    """One array per column of the ``events`` table, named and ordered as in schema.DDL.

    String columns hold codes into lists kept beside (:class:`EventStrings`): ``kind`` into
    schema.KINDS, ``link`` into correlate.LINK_HOW, ``unlinked`` into correlate.UNLINKED, ``pid`` and
    ``tid`` are the thread number (into the per-thread pid and tid lists). How each is written is
    :data:`WRITE_RULES`.
    """

    id: np.ndarray
    kind: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    thread: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    op: np.ndarray
    module: np.ndarray
    scope: np.ndarray
    parent_op: np.ndarray
    launch: np.ndarray
    link: np.ndarray
    unlinked: np.ndarray
    self_cpu: np.ndarray
    self_device: np.ndarray
    device_total: np.ndarray
    kernels: np.ndarray
    kernels_total: np.ndarray
    seq: np.ndarray
    python_id: np.ndarray
    python_parent_id: np.ndarray
    bytes: np.ndarray
    flops: np.ndarray

    def __len__(self) -> int:
        return len(self.id)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column by name, in table order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def column_names() -> list[str]:
    """The ``events`` table's columns, in order, as :class:`EventColumns` declares them."""
    return [f.name for f in fields(EventColumns)]


def insert_sql(frame: str, looked_up: Collection[str]) -> str:
    """``INSERT INTO events SELECT ...`` from a registered frame holding :class:`EventColumns` arrays.

    A coded column whose ``lookup`` is in ``looked_up`` is looked up in that list, bound as a
    parameter of that name; the frame holds the other coded columns as strings already.
    """
    exprs = []
    for f in fields(EventColumns):
        col, rule = f"{frame}.{f.name}", WRITE_RULES.get(f.name, {})
        if rule.get("lookup") in looked_up:
            exprs.append(f"list_extract(${rule['lookup']}::VARCHAR[], {col} + 1)")
        elif "null" in rule:
            exprs.append(f"NULLIF({col}, {rule['null']})")
        elif rule.get("nan_null"):
            exprs.append(f"CASE WHEN isnan({col}) THEN NULL ELSE {col} END")
        else:
            exprs.append(col)
    return f"INSERT INTO events SELECT {', '.join(exprs)} FROM {frame}"


@dataclass(frozen=True)
class EventStrings:
    """The string lists that the coded columns of :class:`EventColumns` index (one per ``lookup``)."""

    kinds: list[str]
    cats: list[str | None]
    names: list[str]
    pids: list[str]               # per thread number
    tids: list[str]               # per thread number
    how: list[str | None]
    why: list[str | None]

    def params(self) -> dict[str, list[Any]]:
        """The lists as named SQL parameters for :func:`insert_sql`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def kind_mask(kind: np.ndarray, *kinds: str) -> np.ndarray:
    """Per event: whether its kind code (a position in schema.KINDS) is one of ``kinds``. One lookup per event
    in a table of KINDS flags: ``np.isin`` took 5x as long (1.36 M events: 10.9 ms against 2.4 ms), and
    a load asks this a dozen times."""
    table = np.zeros(len(KINDS), dtype=bool)
    table[[KIND_CODE[k] for k in kinds]] = True
    return np.take(table, kind)
