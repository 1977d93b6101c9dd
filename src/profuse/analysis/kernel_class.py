"""What class of work a device activity is, from its kind, its name and the op that launched it.

One class per activity, from this fixed list (docs/advisor.md states each rule):
``gemm attention conv norm elementwise reduction communication memcpy_h2d memcpy_d2h memcpy_d2d
memset other``. Names decide first (vendor libraries name their kernels: cuBLAS/cuBLASLt ``*gemm*``,
``nvjet``, CUTLASS, hipBLASLt/Tensile ``Cijk_*``, inductor's Triton GEMM templates ``triton_tem_*mm*``
(a pointwise or reduction kernel named after the ``addmm`` whose bias it adds is not a GEMM), flash/fmha/``attn_fwd``/
paged attention, cuDNN/MIOpen convolutions, NCCL/RCCL); a generic name (``elementwise_kernel``,
MTIA ``pe_exe``, a CUTLASS kernel under a convolution) takes its launching op's class.
"""
from __future__ import annotations

import re
from functools import lru_cache

from .opclass import op_class, short

KERNEL_CLASSES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "communication",
                  "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memset", "other")

_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|broadcast_kernel|cross_device",
                   re.I)
_ATTENTION = re.compile(r"flash|fmha|attn|attention|sage|mha_|_mha|paged_attention|xformers", re.I)
_CONV = re.compile(r"conv(?!ert)|fprop|dgrad|wgrad|implicit_gemm|implicitgemm|scudnn|igemm_|miopen(?!batchnorm)|"
                   r"naive_conv|winograd|fft2d|wrw_|depthwise", re.I)
_GEMM = re.compile(r"gemm|cublas|cijk_|cutlass|nvjet|matmul|triton_tem\w*mm|_mm_|splitk|hipblaslt|wvsplitk|"
                   r"xmma|^fc-|[_-]fc[_-]|bmm|sgemm|hgemm|dot_", re.I)
_NORM = re.compile(r"norm|rms|rsqrt|bn_fw|bn_bw|batchnorm|rowwisemoments|welford|layer_?norm", re.I)
_REDUCTION = re.compile(r"reduce|triton_red|triton_per|softmax|pool|argmax|topk|sort|scan|cumsum|sum_kernel|"
                        r"mean_kernel|max_kernel", re.I)
_ELEMENTWISE = re.compile(r"elementwise|vectorized|unrolled|triton_poi|pointwise|act_and_mul|activation|"
                          r"rotary|copy|fill|cat_?array|index|gather|scatter|transpose|nchwtonhwc|"
                          r"nhwctonchw|embedding|store_kvcache|quant|cast|where|masked|dropout|distribution|"
                          r"subtensorop|mul_kernel|add_kernel|multi_tensor_apply", re.I)
# the launching op's class (opclass.op_class) -> kernel class, for kernels whose name says nothing
_OP_CLASS = {"matmul": "gemm", "attention": "attention", "norm": "norm", "softmax": "reduction",
             "reduction": "reduction", "pointwise": "elementwise", "copy": "elementwise"}


def is_collective(name: str) -> bool:
    """Whether a device kernel's name says it is a collective (NCCL, RCCL, custom all-reduce kernels):
    the communication class's name rule, for callers that classify by name alone (the rank maps)."""
    return bool(_COMM.search(name))


def memcpy_class(name: str) -> str:
    """The direction of a copy from its name (``Memcpy HtoD (Pageable -> Device)``, MTIA
    ``memcpyDtoHAsync``); a copy that names no direction is device to device."""
    low = name.lower().replace(" ", "")
    if "htod" in low or "h2d" in low or "host->device" in low:
        return "memcpy_h2d"
    if "dtoh" in low or "d2h" in low or "device->host" in low:
        return "memcpy_d2h"
    return "memcpy_d2d"


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


@lru_cache(maxsize=65536)
def kernel_class(kind: str, name: str, op: str | None = None, launch: str | None = None) -> str:
    """The class of one device activity: ``kind`` (kernel, memcpy, memset), its ``name``, the name of
    the ``op`` that launched it and of its ``launch`` runtime call (MTIA names a DMA's direction there)."""
    if kind == "memset":
        return "memset"
    if kind == "memcpy":
        cls = memcpy_class(name)
        return cls if cls != "memcpy_d2d" or not launch else memcpy_class(launch)
    by_op = _op_kernel_class(op)
    if _COMM.search(name):
        return "communication"
    if _ATTENTION.search(name):
        return "attention"
    if _CONV.search(name) or (by_op == "conv" and _GEMM.search(name)):
        return "conv"
    if _GEMM.search(name):
        return "gemm"
    if _NORM.search(name):
        return "norm"
    if _REDUCTION.search(name):
        return "reduction"
    if _ELEMENTWISE.search(name):
        return by_op if by_op in ("norm", "reduction") and "elementwise" in name.lower() else "elementwise"
    return by_op or "other"


# FP32 matrix kernels by name: cuBLAS/cuDNN single-precision (sgemm, scudnn), MTIA's fc-dtype_Float,
# CUTLASS/xmma f32 operands; TF32 kernels (tf32 in the name) are already on the fast path. Tensile
# (hipBLASLt, rocBLAS) names the input data type after the layout: Cijk_Alik_Bljk_S... is single,
# ..._BBS_... bf16 in and out with fp32 compute, ..._HHS_... half: only the first letter counts.
_FP32_NAME = re.compile(r"sgemm|scudnn|_s_?gemm|dtype_float\b|fc-dtype_float|f32f32_f32(?!.*tf32)", re.I)
_TENSILE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_(?P<dt>[A-Z0-9]+)_")
# not FP32 math: TF32 (Ampere's tensor-op s1688 kernels are TF32), 16-bit (a template argument such as
# __nv_bfloat16 says so even in a kernel named *sgemm*), 8-bit
_NOT_FP32 = re.compile(r"tf32|s1688|bf16|bfloat16|f16|half|fp8|int8|hgemm", re.I)


def fp32_matrix(name: str, input_types: str | None) -> bool:
    """Whether a gemm/conv kernel computes in FP32: its op's recorded input types say ``float``, or
    (no types recorded) its name says single precision."""
    if input_types:
        first = input_types.split(",", 1)[0]
        if '"float"' in first:
            return not _NOT_FP32.search(name)
        if any(t in first for t in ("Half", "BFloat16", "Float8", "int")):
            return False
    tensile = _TENSILE.match(name)
    if tensile:
        return tensile["dt"].startswith("S")
    return bool(_FP32_NAME.search(name)) and not _NOT_FP32.search(name)
