"""Table layout of a loaded trace, and how Kineto categories map onto event kinds.

docs/schema.md describes every table and column for users; keep the two in step.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from .vocabulary import runtime_categories

SCHEMA_VERSION = 20  # bump when tables change: caches with another version are rebuilt (13: device events'
# module and scope are those holding their launch call; shapes.concrete_inputs; the memory tables;
# 14: self CPU never negative; 15: a trace with no device activity and no launch is CPU; 16: kinds,
# graph launches and device recognition from the device vocabulary, graph launches by name prefix; 17: the
# nested_calls table; 18: nested_calls holds a call inside its own name at any depth; 19: a row of
# device-side sync records alone in a device's process is a device row; 20: the directions table)

# Kineto category (lower-cased) -> profuse kind. Legacy traces wrote `Kernel`, `Runtime`, ... Each device
# family's runtime categories are the device vocabulary's (trace/vocabulary.py): see category_kind.
CATEGORY_KIND: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "python_function": "python",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
    "mtia_ccp_events": "device_other",
}
# MTIA command-processor events, classified by what they are rather than by a list of compute names:
# DMA (dma_request, ...) is a copy, event records/waits are stream bookkeeping, and everything else
# (pe_exe, merge, remote, or an event named after the op it runs) is compute.


def category_kind(category: str) -> str:
    """The profuse kind of a Kineto category (lower case): the table above, a device family's runtime
    categories (trace/vocabulary.py), else ``other``."""
    found = CATEGORY_KIND.get(category)
    if found is not None:
        return found
    return "runtime" if category in runtime_categories() else "other"


def mtia_device_kind(name: str) -> str:
    """The kind of one ``mtia_ccp_events`` event from its name (see above)."""
    low = name.lower()
    if low.startswith("dma"):
        return "memcpy"
    if low.startswith("event_") or low in ("event", "barrier", "fence", "noop"):
        return "device_other"
    return "kernel"

HOST_KINDS = ("cpu_op", "annotation", "python", "runtime", "sync", "other")
KINDS = (*HOST_KINDS, "kernel", "memcpy", "memset", "gpu_annotation", "device_other")
DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "device_other")
# Device events whose time counts as device time of the op that launched them.
DEVICE_TIME_KINDS = ("kernel", "memcpy", "memset")
# Host events that torch's key_averages() lists as rows (what the op table shows).
TABLE_KINDS = ("cpu_op", "annotation", "runtime", "sync")
# The same two sets as the text of an SQL IN list (fixed names, never anything from a trace).
DEVICE_TIME_SQL = ", ".join(f"'{k}'" for k in DEVICE_TIME_KINDS)
TABLE_KINDS_SQL = ", ".join(f"'{k}'" for k in TABLE_KINDS)

# While tables are built, the kind column holds each kind's position in KINDS (its code).
KIND_CODE: dict[str, int] = {k: i for i, k in enumerate(KINDS)}


UNLINKED_REASONS = {
    "no_launch_in_trace": "its launch call is not in the trace (launched before the capture window)",
    "gpu_only_trace": "the trace has no CPU-side events",
    "no_correlation": "the event carries no correlation id, flow or external id",
    "launch_outside_op": "its launch call ran outside any op",
    "outside_runtime_calls": "it ran outside every runtime call (neuron-explorer Parquet links by time window)",
}


def not_linked(reason: str) -> str:
    """What the reports print after a count of device events left unlinked for ``reason`` (``events.unlinked``)."""
    return f"not linked: {UNLINKED_REASONS.get(reason, reason)}"


DDL = """
CREATE TABLE events (
    id BIGINT,                -- position among the trace's complete ('X') events, file order
    kind VARCHAR,             -- cpu_op annotation python runtime sync kernel memcpy memset gpu_annotation device_other other
    cat VARCHAR,              -- the category as written in the trace
    name VARCHAR,
    ts BIGINT,                -- start, integer ns since the epoch of the trace's clock
    dur BIGINT,               -- ns
    pid VARCHAR,
    tid VARCHAR,
    thread INTEGER,           -- dense id of (pid, tid)
    device INTEGER,           -- device index for device events (NULL on the host)
    stream BIGINT,            -- device stream / queue for device events
    correlation BIGINT,
    external_id BIGINT,
    parent BIGINT,            -- innermost enclosing host event on the same thread
    depth INTEGER,            -- 0 for top-level host events
    op BIGINT,                -- host: innermost enclosing-or-self cpu_op / annotation; device: the op that launched it
    module BIGINT,            -- innermost enclosing nn.Module scope (id of a `scopes` row)
    scope BIGINT,             -- innermost enclosing scope of either kind: nn.Module or annotation
    parent_op BIGINT,         -- host: innermost enclosing cpu_op, not counting itself
    launch BIGINT,            -- device events: id of the runtime call that launched it
    link VARCHAR,             -- device events: how `launch` was found (correlation, flow, external_id, graph) or NULL
    unlinked VARCHAR,         -- device events that could not be linked: the reason
    self_cpu BIGINT,          -- host: dur minus direct children listed in the op table (ns)
    self_device BIGINT,       -- host: device time of events it launched itself (ns)
    device_total BIGINT,      -- host: device time of events it or its descendants launched (ns)
    kernels INTEGER,          -- host: device events it launched itself
    kernels_total INTEGER,    -- host: device events it or its descendants launched
    seq BIGINT,               -- autograd sequence number
    python_id BIGINT,
    python_parent_id BIGINT,
    bytes BIGINT,             -- memcpy/memset size when recorded
    flops DOUBLE
);
CREATE TABLE shapes (
    id BIGINT,                -- events.id
    input_dims VARCHAR,       -- JSON list of input shapes as recorded ("Input Dims")
    input_types VARCHAR,      -- JSON list of input dtypes ("Input type")
    grid VARCHAR,             -- device events: launch grid as JSON
    block VARCHAR,
    concrete_inputs VARCHAR   -- JSON list of scalar arguments as recorded ("Concrete Inputs"), NULL when all empty
);
CREATE TABLE scopes (
    id BIGINT,                -- events.id of the python_function / user_annotation event
    kind VARCHAR,             -- module | annotation
    name VARCHAR,             -- module class (e.g. LlamaRMSNorm) or annotation name
    label VARCHAR,            -- the event name as recorded (e.g. 'nn.Module: LlamaRMSNorm_0')
    parent BIGINT,            -- enclosing scope
    ts BIGINT, dur BIGINT, thread INTEGER
);
CREATE TABLE threads (thread INTEGER, pid VARCHAR, tid VARCHAR, process_name VARCHAR,
                      thread_name VARCHAR, labels VARCHAR, is_device BOOLEAN);
CREATE TABLE instants (name VARCHAR, cat VARCHAR, ts BIGINT, pid VARCHAR, tid VARCHAR);
CREATE TABLE flows (id VARCHAR, cat VARCHAR, ph VARCHAR, ts BIGINT, thread INTEGER);
CREATE TABLE nested_calls (id BIGINT, around BIGINT);  -- op-table calls inside one of their own name (around)
CREATE TABLE directions (id BIGINT, direction VARCHAR);  -- args.direction as recorded (MTIA DMA: HOST_TO_DEVICE, ...)
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);  -- JSON values
CREATE TABLE memory (        -- torch.profiler [memory] events (profile_memory=True), time order; docs/memory.md
    id BIGINT, device_type VARCHAR, device INTEGER, ts BIGINT, bytes BIGINT, addr BIGINT,
    total_allocated BIGINT, total_reserved BIGINT, thread INTEGER, op BIGINT, module BIGINT, step BIGINT,
    alloc BIGINT, free BIGINT, before_trace BOOLEAN);
CREATE TABLE op_memory (id BIGINT, cpu_mem BIGINT, self_cpu_mem BIGINT, device_mem BIGINT, self_device_mem BIGINT);
CREATE TABLE memory_frames (id BIGINT, depth INTEGER, name VARCHAR, filename VARCHAR, line BIGINT, site BOOLEAN);
CREATE TABLE memory_segments (device INTEGER, address BIGINT, total_size BIGINT, stream BIGINT, segment_type VARCHAR,
                              allocated_size BIGINT, active_size BIGINT);
CREATE TABLE memory_blocks (device INTEGER, segment BIGINT, address BIGINT, size BIGINT, requested_size BIGINT,
                            state VARCHAR, name VARCHAR, filename VARCHAR, line BIGINT);
CREATE VIEW links AS
    SELECT d.id AS device_event, d.kind, d.name, d.dur, d.launch, d.op, d.module, d.scope, d.link, d.unlinked
    FROM events d WHERE d.kind IN ('kernel', 'memcpy', 'memset');
"""


_EVENTS = re.search(r"^CREATE TABLE events \(\n.*?\n\);", DDL, re.S | re.M)
assert _EVENTS is not None
_COLUMN = re.compile(r"^    (\w+) (\w+)", re.M)
_BYTES = {"BIGINT": 8, "INTEGER": 4}


def events_integer_columns() -> dict[str, int]:
    """The ``events`` table's integer columns and the bytes of each value (BIGINT 8, INTEGER 4), in table order."""
    assert _EVENTS is not None
    return {m[1]: _BYTES[m[2]] for m in _COLUMN.finditer(_EVENTS[0]) if m[2] in _BYTES}


def events_ddl(compression: Mapping[str, str]) -> str:
    """DDL's ``CREATE TABLE events`` with each column named in ``compression`` stored by that DuckDB method
    (``USING COMPRESSION``: ``rle``, ``bitpacking``); DuckDB chooses the others' at each checkpoint."""
    assert _EVENTS is not None

    def column(m: re.Match[str]) -> str:
        how = compression.get(m[1])
        return m[0] if how is None else f"{m[0]} USING COMPRESSION {how}"
    return _COLUMN.sub(column, _EVENTS[0])
