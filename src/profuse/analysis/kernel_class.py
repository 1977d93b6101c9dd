"""What class of work a device activity is, from its kind, its name and the op that launched it.

One class per activity, from this fixed list (docs/advisor.md states each rule):
``gemm attention conv norm elementwise reduction communication memcpy_h2d memcpy_d2h memcpy_d2d
memcpy_unknown memset other`` (a copy's direction: :func:`memcpy_class`). Names decide first, by the
device vocabulary's kernel names (trace/vocabulary.py: each family's vendor libraries, cuBLAS ``*gemm*``,
``nvjet``, CUTLASS, hipBLASLt/Tensile ``Cijk_*``, cuDNN, MIOpen, NCCL/RCCL, and ``PORTABLE``'s: inductor's
Triton templates ``triton_tem_*mm*``, flash/``attn_fwd``/paged attention, ATen's elementwise and reduction
kernels); a generic name (``elementwise_kernel``, MTIA ``pe_exe``, a CUTLASS kernel under a convolution)
takes its launching op's class.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..trace.vocabulary import CLASS_ORDER, dtype_fields, generation, kernel_fragments
from .opclass import op_class, short

KERNEL_CLASSES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "communication",
                  "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_unknown", "memset", "other")



@dataclass(frozen=True)
class _Patterns:
    by_class: tuple[tuple[str, re.Pattern[str]], ...]   # (class, the union of every family's fragments)
    fp32: re.Pattern[str]
    not_fp32: re.Pattern[str]
    dtype_fields: tuple[re.Pattern[str], ...]


def _union(fragments: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(fragments) or r"(?!)", re.I)


@lru_cache(maxsize=4)
def _patterns(generation: int) -> _Patterns:
    """The device vocabulary's kernel names compiled (once per set of registered devices)."""
    del generation  # the cache key: a device registered at run time brings its names
    return _Patterns(tuple((c, _union(kernel_fragments(c))) for c in CLASS_ORDER), _union(kernel_fragments("fp32")),
                     _union(kernel_fragments("not_fp32")), tuple(re.compile(p) for p in dtype_fields()))


def _named(name: str) -> str | None:
    """The first class (CLASS_ORDER) whose vocabulary fragments match ``name``."""
    return next((c for c, pattern in _patterns(generation()).by_class if pattern.search(name)), None)


# the launching op's class (opclass.op_class) -> kernel class, for kernels whose name says nothing
_OP_CLASS = {"matmul": "gemm", "attention": "attention", "norm": "norm", "softmax": "reduction",
             "reduction": "reduction", "pointwise": "elementwise", "copy": "elementwise"}


def is_collective(name: str) -> bool:
    """Whether a device kernel's name says it is a collective (NCCL, RCCL, custom all-reduce kernels):
    the communication class's name rule, for callers that classify by name alone (the rank maps)."""
    return bool(_patterns(generation()).by_class[0][1].search(name))


# a copy's direction as a text names it (lower case, no spaces or underscores): CUDA/ROCm copy names
# (``Memcpy HtoD (Pageable -> Device)``, ``Memcpy PtoP (Device -> Device)``: peer to peer), MTIA's launch calls
# (``memcpyDtoHAsync``) and its DMA requests' ``args.direction`` (``HOST_TO_DEVICE``)
_DIRECTIONS = (("memcpy_h2d", ("htod", "h2d", "host->device", "hosttodevice")),
               ("memcpy_d2h", ("dtoh", "d2h", "device->host", "devicetohost")),
               ("memcpy_d2d", ("dtod", "d2d", "device->device", "devicetodevice", "ptop")))


def _direction_named(text: str | None) -> str | None:
    if not text:
        return None
    low = text.lower().replace(" ", "").replace("_", "")
    return next((cls for cls, words in _DIRECTIONS if any(w in low for w in words)), None)


def memcpy_class(name: str, launch: str | None = None, recorded: str | None = None) -> str:
    """The direction of a copy: the one the trace records for it (``recorded``: its ``args.direction``, the
    ``directions`` table), else the one its ``name`` names, else its ``launch`` call's (MTIA's ``enqueueCommand
    memcpyHtoDAsync``); a copy none of them names is ``memcpy_unknown``, never called device to device."""
    return (_direction_named(recorded) or _direction_named(name) or _direction_named(launch)
            or "memcpy_unknown")


def _op_kernel_class(op: str | None) -> str | None:
    if not op:
        return None
    s = short(op).lower()
    if "conv" in s:
        return "conv"
    if any(w in s for w in ("all_reduce", "allreduce", "all_gather", "reduce_scatter", "c10d", "nccl", "gloo",
                            "broadcast_", "alltoall")):
        return "communication"
    return _OP_CLASS.get(op_class(op))


def kernel_class(kind: str, name: str, op: str | None = None, launch: str | None = None,
                 direction: str | None = None) -> str:
    """The class of one device activity: ``kind`` (kernel, memcpy, memset), its ``name``, the name of
    the ``op`` that launched it and of its ``launch`` runtime call, and a copy's recorded ``direction``
    (:func:`memcpy_class`)."""
    return _kernel_class(kind, name, op, launch, direction, generation())


@lru_cache(maxsize=65536)
def _kernel_class(kind: str, name: str, op: str | None, launch: str | None, direction: str | None,
                  _generation: int) -> str:
    if kind == "memset":
        return "memset"
    if kind == "memcpy":
        return memcpy_class(name, launch, direction)
    by_op = _op_kernel_class(op)
    named = _named(name)
    if by_op == "conv" and named == "gemm":
        return "conv"   # a CUTLASS or implicit GEMM under a convolution
    if named == "elementwise":
        return by_op if by_op in ("norm", "reduction") and "elementwise" in name.lower() else "elementwise"
    return named or by_op or "other"


def fp32_matrix(name: str, input_types: str | None) -> bool:
    """Whether a gemm/conv kernel computes in FP32: its op's recorded input types say ``float``, or
    (no types recorded) its name says single precision."""
    if input_types:
        first = input_types.split(",", 1)[0]
        if '"float"' in first:
            return not _patterns(generation()).not_fp32.search(name)
        if any(t in first for t in ("Half", "BFloat16", "Float8", "int")):
            return False
    pat = _patterns(generation())
    for field in pat.dtype_fields:   # a name that states its input type (Tensile): S is single precision
        stated = field.match(name)
        if stated:
            return stated["dt"].startswith("S")
    return bool(pat.fp32.search(name)) and not pat.not_fp32.search(name)
