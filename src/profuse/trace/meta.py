"""``Trace.meta``: the ``meta`` table of a loaded trace as a typed record (docs/schema.md)."""
from __future__ import annotations

from typing import Any

import msgspec


class TraceMeta(msgspec.Struct, kw_only=True, frozen=True):
    """What the trace is and everything its load counted or left out. Read fields as attributes
    (``meta.events``); ``meta["events"]`` and ``meta.get("device_name")`` also work, as on the dict this
    record replaces (a key that is not a field: ``KeyError`` / the default)."""

    schema_version: int
    path: str
    device_kind: str
    device_name: str | None = None
    events: int
    span_us: float
    source: dict[str, Any] = msgspec.field(default_factory=dict)      # the trace's fingerprint, or a reader's note
    kinds: dict[str, int] = msgspec.field(default_factory=dict)       # events per kind
    other_phases: dict[str, int] = msgspec.field(default_factory=dict)
    unlinked: dict[str, int] = msgspec.field(default_factory=dict)    # device events per reason not linked
    unmatched_flows: int = 0
    skipped: dict[str, int] = msgspec.field(default_factory=dict)     # --lenient: bad events per reason
    skipped_examples: Any = None
    imprecise_ts_events: int = 0
    ignored_args: dict[str, Any] = msgspec.field(default_factory=dict)
    base_time_ns: int | None = None
    trace_meta: dict[str, Any] = msgspec.field(default_factory=dict)  # the trace file's own top-level keys
    unnamed_events: int = 0
    memory_events: int = 0                  # profile_memory's [memory] events read into the memory table
    memory_skipped: Any = None              # memory events left out, per reason (a field missing or not an integer)
    memory_snapshot: dict[str, int] | None = None  # a torch memory snapshot: entries read into each table

    def __getitem__(self, key: str) -> Any:
        """The field named ``key`` (``KeyError`` if there is none)."""
        if key not in self.__struct_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The field named ``key``, or ``default`` when there is no such field."""
        return getattr(self, key) if key in self.__struct_fields__ else default

    def __contains__(self, key: object) -> bool:
        return key in self.__struct_fields__

    def keys(self) -> tuple[str, ...]:
        """The field names, as a dict's keys."""
        return self.__struct_fields__

    def items(self) -> list[tuple[str, Any]]:
        """(field, value) pairs, as a dict's items."""
        return [(k, getattr(self, k)) for k in self.__struct_fields__]


def trace_meta(rows: dict[str, Any]) -> TraceMeta:
    """The record from the ``meta`` table's decoded rows (keys it does not know are left out)."""
    return msgspec.convert(rows, TraceMeta)


def listed_device(top: dict[str, Any]) -> tuple[bool, str | None]:
    """What a trace's top-level keys list of its devices (``deviceProperties``; older traces:
    ``computeProperties``): whether any is listed, and the first one's name."""
    props = top.get("deviceProperties") or top.get("computeProperties") or []
    props = props if isinstance(props, list) else []  # any other shape says nothing usable
    first = first_device(top)
    name = first.get("name") if first else None
    return bool(props), name if isinstance(name, str) else None


def first_device(top: dict[str, Any]) -> dict[str, Any] | None:
    """The first device a trace's top-level keys (or ``meta.trace_meta``) list, as its properties."""
    props = top.get("deviceProperties") or top.get("computeProperties") or []
    return props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else None
