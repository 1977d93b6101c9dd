"""Bundles: one folder per capture, written atomically.

    trace.json.gz                 the Kineto trace as torch wrote it (opens in Perfetto / TensorBoard)
    meta.json                     config, versions, device, host, command line, times, peaks, status
                                  (a ``BundleMeta``, see trace/bundle.py: the reader needs no torch)
    artifacts/inductor/*.py       code torch.compile generated in this process, where there was some

The folder is assembled under a hidden temporary name and renamed into place at the end, so an
interrupted capture never leaves a folder that looks complete.
"""
from __future__ import annotations

import glob
import gzip
import os
import platform
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from ..errors import UserError, printable
from ..trace.artifacts import INDUCTOR
from ..trace.bundle import (
    META_FILE,
    SCHEMA,
    BundleMeta,
    CaptureConfig,
    CudaDevice,
    DeviceInfo,
    MeasuredPeaks,
    encode_bundle_meta,
    read_bundle_meta,
)
from ..trace.cache import pid_alive

TRACE = "trace.json.gz"


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a bundle folder: a meta.json and a trace.json.gz in it."""
    return (path / META_FILE).is_file() and (path / TRACE).is_file()


def device_info() -> DeviceInfo:
    """This machine as a bundle records it: torch version, CPU, and CUDA/ROCm device 0 if any."""
    import torch

    cuda = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        cuda = CudaDevice(name=p.name, total_memory=p.total_memory, multi_processor_count=p.multi_processor_count,
                          hip=getattr(torch.version, "hip", None), cuda=torch.version.cuda,
                          count=torch.cuda.device_count())
    return DeviceInfo(torch=torch.__version__, cpu=platform.processor() or platform.machine(),
                      cpu_count=os.cpu_count(), cuda=cuda)


def _filter_events(raw: bytes, *, keep_device_ids: dict[str, tuple[int, ...] | None], drop_runtime: bool,
                   max_events: int) -> tuple[bytes, dict[str, int]]:
    """Apply the config's device choice, stream choice and event cap to an exported trace."""
    doc = msgspec.json.decode(raw)
    events = doc.get("traceEvents", [])
    ids = keep_device_ids.get("cuda")
    dropped = {"other_devices": 0, "runtime": 0, "over_max_events": 0}
    kept = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if ids is not None and cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
            dev = (e.get("args") or {}).get("device", e.get("pid"))
            if dev not in ids:
                dropped["other_devices"] += 1
                continue
        if drop_runtime and cat in ("cuda_runtime", "cuda_driver"):
            dropped["runtime"] += 1
            continue
        kept.append(e)
    if max_events and len(kept) > max_events:
        kept.sort(key=lambda e: (e.get("ph") != "M", e.get("ts", 0)))
        dropped["over_max_events"] = len(kept) - max_events
        kept = kept[:max_events]
    doc["traceEvents"] = kept
    return msgspec.json.encode(doc), {k: v for k, v in dropped.items() if v}


def free_out(out: Path) -> tuple[Path, bool]:
    """Where a new capture asked for at ``out`` goes without overwriting anything: ``out`` when it does not
    exist (or is an empty folder), else the first free ``out-2``, ``out-3``, ...; ``(path, moved)``."""
    out = Path(out)

    def free(p: Path) -> bool:
        return not p.exists() or (p.is_dir() and not p.is_symlink() and not any(p.iterdir()))

    if free(out):
        return out, False
    n = 2
    while not free(out.with_name(f"{out.name}-{n}")):
        n += 1
    return out.with_name(f"{out.name}-{n}"), True


def write_bundle(out: Path, trace_json: Path | None, *, config: CaptureConfig, status: str,
                 extra: dict[str, Any] | None = None, filters: dict[str, Any] | None = None,
                 build_cache: bool = True, notes: list[str] | None = None) -> Path:
    """Assemble a bundle at ``out`` from an exported trace file. Returns the final folder.

    ``extra`` holds meta.json fields the capture knows late (``error``, ``steps_recorded``,
    ``warmup``, ``run``); any other key is the user's and is kept under ``extra``. A trace the
    engine cannot load (over profuse's size limit) is still a bundle: it is written without the
    cached tables, and a line saying how to read it is added to ``notes`` (raised when none is given)."""
    out = Path(out)
    check_out(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        work = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
    except OSError as err:
        raise UserError(f"{out}: cannot write the bundle ({err.strerror or err})") from None
    try:
        dropped: dict[str, int] = {}
        if trace_json is not None:
            raw = trace_json.read_bytes()
            if filters:
                raw, dropped = _filter_events(raw, **filters)
            with gzip.open(work / TRACE, "wb", compresslevel=6) as fh:
                fh.write(raw)
        _copy_inductor_code(work)
        meta = bundle_meta(config=config, status=status, extra=extra or {}, dropped=dropped)
        (work / META_FILE).write_bytes(encode_bundle_meta(meta))
        if build_cache and trace_json is not None:
            _build_cache(work / TRACE, out, trace_json.stat().st_size, notes)
        _replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out


def check_out(out: Path) -> None:
    """Refuse (UserError) a bundle folder ``out`` that holds something that is no bundle: a bundle goes where
    there is nothing, an empty folder or an older bundle."""
    if out.is_file() or (out.exists() and not is_bundle(out) and any(out.iterdir())):
        raise UserError(f"{out}: exists and is not a profuse bundle; choose another --out")


def move_bundle(bundle: Path, out: Path) -> None:
    """Move a finished bundle folder to ``out`` (:func:`check_out` first), on the same file system; an old
    bundle there stays until the new one is in place."""
    check_out(out)
    _replace(bundle, out)


def _build_cache(trace: Path, out: Path, json_bytes: int, notes: list[str] | None) -> None:
    """Build the engine's tables into this user's cache, keyed by the trace's bytes (the first report is
    instant here). Over the size limit: a hint in ``notes`` naming ``out``, where the bundle will be."""
    from ..errors import TraceError
    from ..trace import load
    from ..trace._decode import MAX_TRACE_BYTES_ENV, max_trace_bytes

    try:
        load(trace).close()
    except TraceError:
        limit = max_trace_bytes()
        if notes is None or json_bytes <= limit:
            raise
        need = -(-json_bytes // (1 << 20)) << 20  # the trace's JSON bytes, rounded up to a MiB
        notes.append(f"the trace holds {json_bytes:,} bytes of JSON, over profuse's limit of {limit:,}: the bundle is "
                     f"kept, without cached tables; read it with: {MAX_TRACE_BYTES_ENV}={need} profuse report "
                     f"{shlex.quote(printable(str(out)))}")


def _replace(work: Path, out: Path) -> None:
    """Move the finished bundle to ``out``; an old bundle there stays until the new one is in place."""
    if not out.exists():
        os.replace(work, out)
        return
    if _exchange(work, out):  # one atomic step: out is the new bundle, work the old one
        shutil.rmtree(work, ignore_errors=True)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.replace(out, old)  # a kill from here to the next line leaves the old bundle, restored next time
    os.replace(work, out)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(rc == 0)


def clean_stale(out: Path) -> None:
    """Remove what killed writers of ``out`` left: temporary folders, and restore an old bundle
    that was moved aside when no bundle is at ``out``."""
    for p in out.parent.glob(f".{glob.escape(out.name)}.*-*"):
        kind, _, pid = p.name[len(out.name) + 2:].rpartition("-")
        if kind not in ("tmp", "old") or not pid.isdigit() or pid_alive(int(pid)):
            continue
        if kind == "old" and not out.exists() and is_bundle(p):
            os.replace(p, out)
        else:
            shutil.rmtree(p, ignore_errors=True)


def bundle_meta(*, config: CaptureConfig, status: str, extra: dict[str, Any], dropped: dict[str, int]) -> BundleMeta:
    """The meta.json record of a capture made now, in this process."""
    types = {f.encode_name: f.type for f in msgspec.structs.fields(BundleMeta)}
    late: dict[str, Any] = {}
    for key in _LATE_FIELDS:
        if key not in extra:
            continue
        try:
            late[key] = msgspec.convert(extra[key], types[key])
        except msgspec.ValidationError as err:  # e.g. Exporter(extra={"run": 5}): the key is profuse's own
            raise UserError(f"bundle extra {key!r}: {err} ({', '.join(_LATE_FIELDS)} are profuse's own keys)") from None
    return BundleMeta(schema=SCHEMA, status=status, config=config, profuse=_version(),
                      python=sys.version.split()[0], host=socket.gethostname(), command=command_line(),
                      written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), device=device_info(), peaks=_known_peaks(),
                      dropped_events=dropped, extra={k: v for k, v in extra.items() if k not in _LATE_FIELDS},
                      **late)


_LATE_FIELDS = ("error", "steps_recorded", "warmup", "run")
_OWN_MAIN = Path(__file__).resolve().parents[1] / "__main__.py"


def command_line() -> list[str]:
    """The command line as typed: profuse's own entry point (``python -m profuse`` runs it by its
    absolute path, a path of this machine) recorded as ``profuse``; a user's script keeps its path."""
    argv = list(sys.argv)
    if argv and (Path(argv[0]).name == "profuse" or Path(argv[0]).resolve() == _OWN_MAIN):
        argv[0] = "profuse"
    return argv


def _known_peaks() -> MeasuredPeaks | None:
    """This machine's measured peaks (``profuse peaks``) for its main device, when already known."""
    import torch

    from .peaks import cached_peaks

    return cached_peaks("cuda" if torch.cuda.is_available() else "cpu")


def _copy_inductor_code(work: Path) -> None:
    """Save the Python/C++ code torch.compile generated in this process (device-level view)."""
    mods = sys.modules.get("torch._inductor.codecache")
    if mods is None:
        return
    cache = getattr(mods, "PyCodeCache", None)
    mods_ = list(getattr(cache, "modules", [])) + list(getattr(cache, "modules_no_attr", {}).values())
    files: set[str] = {f for f in (getattr(m, "__file__", None) for m in mods_) if f and os.path.isfile(f)}
    if not files:
        return
    dest = work.joinpath(*INDUCTOR)
    dest.mkdir(parents=True)
    for f in sorted(files):
        shutil.copy2(f, dest / Path(f).name)


def _version() -> str:
    from .. import __version__

    return __version__


def read_meta(bundle: Path) -> BundleMeta:
    """The meta.json of a bundle folder, read as ``load()`` reads it; a folder without one is a user error."""
    meta, notes = read_bundle_meta(bundle)
    if meta is None:
        raise UserError(f"{bundle}: not a profuse bundle ({'; '.join(notes) or 'no meta.json'})")
    return meta
