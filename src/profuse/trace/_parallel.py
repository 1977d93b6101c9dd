"""Decode a trace's chunks on every core: forked workers build columns, the parent merges them.

Workers see the file's bytes through fork (no copy) and send back numpy columns with their own
string tables; the parent remaps those ids into one table. Any problem in a worker (a bad event,
a split inside a nested value) sends the whole trace down the sequential path, which produces the
exact error message or recovers, so results never depend on how the work was split.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from ..errors import TraceError
from . import _decode
from ._columns import THREAD_SHIFT, Columns, add_chunk, flow_cat_values, flow_id_texts
from ._decode import cores_wanted

_DOC: _decode.Document | None = None  # set in the parent before forking; read by the workers
_PATH = ""
PARALLEL_MIN_BYTES = 24 << 20
MIN_CHUNK = 1 << 20


def _die_with_parent(parent: int) -> None:
    """Worker initializer: a worker never outlives the process that started it.

    On Linux the kernel sends SIGKILL to the worker when its parent dies (however it dies: killed,
    SIGTERMed, crashed); the parent's pid is checked afterwards, since it may have died before.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the pipe to the parent still ends the worker
            pass
    if os.getppid() != parent:
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def _work(span: tuple[int, int]) -> Columns | None:
    assert _DOC is not None
    start, end = span
    cols = Columns()
    skipped = _decode.Skipped()
    try:
        events = _decode.decode_chunk(_PATH, _DOC.events[start:end], 0, False, skipped)
        add_chunk(cols, _PATH, 0, events, _DOC.events[start:end], lenient=False, skipped=skipped)
    except TraceError:
        return None
    return None if skipped.total else cols  # anything counted is counted once, by the sequential path


def _remap(table: dict[Any, int], local: dict[Any, int]) -> np.ndarray:
    out = np.empty(max(len(local), 1), dtype=np.int64)
    for value, i in local.items():
        out[i] = table.setdefault(value, len(table))
    return out


def merge(dst: Columns, src: Columns) -> None:
    """Append a chunk's columns to ``dst``, remapping its interned ids into ``dst``'s tables."""
    names, cats = _remap(dst.names, src.names), _remap(dst.cats, src.cats)
    pids, tids = _remap(dst.pids, src.pids), _remap(dst.tids, src.tids)

    def threads(keys: np.ndarray) -> np.ndarray:
        out: np.ndarray = pids[keys // THREAD_SHIFT] * THREAD_SHIFT + tids[keys % THREAD_SHIFT]
        return out

    _merge_flows(dst, src)  # before the parts: it may take the integer flow ids of both as text
    remap = {"name": names, "cat": cats, "inst_name": names, "inst_cat": cats}
    for key, parts in src.parts.items():
        for arr in parts:
            if key in remap:
                arr = remap[key][arr].astype(np.int32)
            elif key.endswith("thread_key"):
                arr = threads(arr)
            dst.add(key, arr)
    _merge_shapes(dst, src)
    dst.directions.extend(d.shifted(dst.n) for d in src.directions)
    for k, v in src.thread_meta.items():
        dst.thread_meta.setdefault(k, {}).update(v)
    for ph, c in src.phase_counts.items():
        dst.phase_counts[ph] = dst.phase_counts.get(ph, 0) + c
    dst.n += src.n
    dst.memory_scanned = dst.memory_scanned and src.memory_scanned
    dst.memory_skipped += src.memory_skipped
    dst.imprecise_ts += src.imprecise_ts
    for key, c in src.ignored_args.items():
        dst.ignored_args[key] = dst.ignored_args.get(key, 0) + c


def _merge_flows(dst: Columns, src: Columns) -> None:
    """``src``'s flow ids and categories after ``dst``'s, in the scanner's forms where both chunks have them
    so (integer ids are a part, appended with the others), else as the reference's lists."""
    if dst.flow_cat_coded is not None and src.flow_cat_coded is not None and not dst.flow_cats:
        dst.flow_cat_coded = dst.flow_cat_coded.appended(src.flow_cat_coded)
    elif dst.flow_cat_coded is None and src.flow_cat_coded is None:  # the reference's chunks: lists
        dst.flow_cats.extend(src.flow_cats)
    else:
        dst.flow_cats, dst.flow_cat_coded = flow_cat_values(dst), None
        dst.flow_cats.extend(flow_cat_values(src))
    dst_ints, src_ints = "flow_id_int" in dst.parts, "flow_id_int" in src.parts
    if (dst_ints and src.flow_ids) or (src_ints and dst.flow_ids):  # integer ids beside text ones: all as text
        dst.flow_ids = flow_id_texts(dst)
        dst.flow_ids.extend(flow_id_texts(src))
    else:
        dst.flow_ids.extend(src.flow_ids)


def _merge_shapes(dst: Columns, src: Columns) -> None:
    """``src``'s shapes after ``dst``'s: as columns when both have them so, else as tuples."""
    if dst.shape_columns is not None and src.shape_columns is not None and not dst.shapes:
        dst.shape_columns = dst.shape_columns.appended(src.shape_columns, dst.n)
        return
    if dst.shape_columns is not None:
        dst.shapes, dst.shape_columns = dst.shape_columns.tuples(), None
    rows = src.shape_columns.tuples() if src.shape_columns is not None else src.shapes
    dst.shapes.extend((dst.n + s[0], *s[1:]) for s in rows)


def decode_parallel(path: str, doc: _decode.Document, *, workers: int,
                    on_progress: Callable[[int], None] | None) -> Columns | None:
    """Columns of every chunk, decoded in ``workers`` processes; None if any chunk needs the slow path."""
    global _DOC, _PATH
    size = len(doc.events)
    spans = _decode.chunk_spans(doc.events, max(MIN_CHUNK, min(_decode.CHUNK_BYTES, size // (workers * 4) + 1)))
    if len(spans) < 2:
        return None
    _DOC, _PATH = doc, path
    cols = Columns()
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            for span, part in zip(spans, pool.map(_work, spans)):
                if part is None:
                    return None
                merge(cols, part)
                if on_progress:
                    on_progress(span[1] - span[0])
    finally:
        _DOC = None
    return cols


def worker_count(nbytes: int) -> int:
    """Decoding processes for a trace of ``nbytes`` (1 below PARALLEL_MIN_BYTES; ``$PROFUSE_WORKERS`` caps it)."""
    if nbytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(cores_wanted(), 8))
