"""A bundle's ``meta.json``, as one typed record: written by ``capture`` and read here, without torch.

``BundleMeta`` is the only description of the file: ``capture/bundle.py`` builds one and encodes it,
:func:`read_bundle_meta` decodes it and ``load()`` attaches it to the trace as ``Trace.bundle``. A
bundle folder is input from anyone, so the reader is lenient where the writer is strict: a field of
the wrong shape is left at its default and named in the notes it returns, never a traceback; a file
that is not a profuse bundle's ``meta.json`` gives no record at all (and a note saying why).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .artifacts import read_side_bytes

META_FILE = "meta.json"
SCHEMA = "profuse.bundle/2"  # /2: Exporter(extra=...) keys under "extra" (/1 had them at the top level)
READABLE = (SCHEMA, "profuse.bundle/1")  # a /1 file reads the same; its top-level extras are not kept

_Positive = Annotated[float, msgspec.Meta(gt=0)]


class MeasuredPeaks(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """A device's measured copy bandwidth and matmul rate (``profuse peaks``): what bounds its roofline."""

    copy_bandwidth_gbps: _Positive          # GB/s, bytes read + bytes written by a large copy
    matmul_tflops_fp32: _Positive           # TFLOP/s of a large fp32 matmul (0 would divide a roofline by 0)
    device: str = ""                        # "cpu", "cuda", ...
    device_name: str = ""
    threads: int | None = None              # torch's intra-op threads when measured
    measured_at: str = ""
    source: str = "measured"


class CudaDevice(msgspec.Struct, frozen=True, kw_only=True):
    """Properties of CUDA/ROCm device 0 when the capture ran."""

    name: str = ""
    total_memory: int | None = None
    multi_processor_count: int | None = None
    hip: str | None = None                  # the ROCm version on ROCm builds
    cuda: str | None = None
    count: int | None = None                # devices torch saw


class DeviceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The capturing machine: torch version, CPU, and its CUDA/ROCm device when there was one."""

    torch: str = ""
    cpu: str = ""
    cpu_count: int | None = None
    cuda: CudaDevice | None = None


class CaptureConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The ``ProfileConfig`` a bundle was captured with (see capture/config.py)."""

    streams: list[str] = msgspec.field(default_factory=list)
    devices: str = "auto"
    out: str = ""
    warmup: int = 0
    steps: int = 0
    max_events: int = 0
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


class ScriptRun(msgspec.Struct, frozen=True, kw_only=True):
    """What ``profuse run`` saw of the script it ran."""

    argv: list[str] = msgspec.field(default_factory=list)
    exit_code: int | None = None
    forwards: int | None = None             # outermost nn.Module forward calls
    warmup: int | None = None
    steps_recorded: int | None = None
    whole_run: bool = False                 # no nn.Module forward: the whole script was one step
    error: str | None = None                # the script's exception, when it raised
    # the capture's own cost: the fastest recorded step's wall time (profiler on) and the fastest steady call's
    # with the profiler off (warm-up calls but the first, and calls after the recording; `unrecorded_calls` of them)
    recorded_step_ms: float | None = None
    unrecorded_step_ms: float | None = None
    unrecorded_calls: int = 0
    compiled_calls: list[int] = msgspec.field(default_factory=list)  # calls during which torch.compile compiled
    compiled_steps: list[int] = msgspec.field(default_factory=list)  # those recorded: renamed, not steps

    @property
    def overhead(self) -> float | None:
        """The capture's own cost: the fastest recorded step over the fastest steady call without the profiler,
        to two decimals (None where either was not measured). The one rule the report and ``profuse run`` print."""
        rec, plain = self.recorded_step_ms, self.unrecorded_step_ms
        return round(rec / plain, 2) if rec and plain and rec > 0 and plain > 0 else None


class BundleMeta(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``meta.json`` holds: how, where and with what a bundle was captured."""

    schema: str                             # profuse.bundle/2 (or /1, read the same)
    status: str | None = None               # complete | failed | interrupted
    error: str | None = None                # the profiled block's exception, when it raised
    config: CaptureConfig | None = None
    profuse: str | None = None              # versions
    python: str | None = None
    host: str | None = None
    command: list[str] = msgspec.field(default_factory=list)
    written_at: str | None = None
    device: DeviceInfo | None = None
    peaks: MeasuredPeaks | None = None      # this machine's, when `profuse peaks` had measured them
    dropped_events: dict[str, int] = msgspec.field(default_factory=dict)  # why -> count, by the capture's filters
    steps_recorded: int | None = None       # profuse.profile: steps recorded after warm-up
    warmup: int | None = None
    run: ScriptRun | None = None            # profuse run only
    extra: dict[str, Any] = msgspec.field(default_factory=dict)  # Exporter(extra=...) keys of the user's


def encode_bundle_meta(meta: BundleMeta) -> bytes:
    """``meta.json``'s bytes: indented JSON; values JSON cannot hold (a user's extras) as their ``str``."""
    return msgspec.json.format(msgspec.json.encode(meta, enc_hook=str), indent=2)


def read_bundle_meta(folder: str | os.PathLike[str]) -> tuple[BundleMeta | None, list[str]]:
    """``(meta, notes)`` for the ``meta.json`` in ``folder``: ``(None, [])`` when there is none.

    The file is read as any side file (a link, a FIFO or a huge file is refused); a file that is not
    a JSON object with ``schema: profuse.bundle/2`` (or ``/1``) gives no meta, and each field of the wrong shape
    is left at its default; both are said in the notes.
    """
    path = Path(folder) / META_FILE
    if not (path.exists() or path.is_symlink()):
        return None, []
    data, why = read_side_bytes(path)
    if data is None:
        return None, [f"{path.name} beside the trace {why}: bundle details ignored"]
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None, [f"{path.name} beside the trace is not valid JSON: bundle details ignored"]
    if not isinstance(doc, dict) or doc.get("schema") not in READABLE:
        return None, [f"{path.name} beside the trace is not a profuse bundle's (no schema {SCHEMA!r}): ignored"]
    return bundle_meta_from(doc)


def bundle_meta_from(doc: dict[str, Any]) -> tuple[BundleMeta, list[str]]:
    """A ``BundleMeta`` from a decoded ``meta.json`` object, field by field: ``(meta, notes)``."""
    fields: dict[str, Any] = {}
    bad: list[str] = []
    for info in msgspec.structs.fields(BundleMeta):
        if info.encode_name not in doc:
            continue
        try:
            fields[info.name] = msgspec.convert(doc[info.encode_name], info.type)
        except msgspec.ValidationError:
            bad.append(info.encode_name)
    notes = [f"{META_FILE}: {', '.join(bad)} of an unexpected shape: ignored"] if bad else []
    return BundleMeta(**fields), notes
