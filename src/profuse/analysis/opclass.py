"""What kind of work an op does, and how many bytes it moves, from its name and recorded shapes.

Classes come from tables shipped here: the hand-written ones below, then every aten op torch tags
``pointwise`` (``pointwise_ops.py``, generated from torch's op tags by ``python -m
profuse.fixes.gen_pointwise``). Nothing depends on what the process has imported, so ``report`` on a
laptop without torch and a study with torch loaded classify a trace the same way.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from .pointwise_ops import POINTWISE_OPS

POINTWISE = set("""
abs add add_ addcmul addcdiv clamp clamp_ clamp_min cos cosh div div_ elu erf erfc exp exp2 expm1 fill_ floor
gelu gelu_ hardsigmoid hardswish hardtanh leaky_relu log log1p log2 logical_not maximum minimum mish mul mul_
neg pow reciprocal relu relu_ round rsqrt rsub sigmoid sigmoid_ sign silu silu_ sin sinh softplus sqrt square
sub sub_ tanh tanh_ threshold where masked_fill masked_fill_ lerp zero_ eq ne lt le gt ge bitwise_and
bitwise_or logical_and logical_or true_divide floor_divide remainder fmod nan_to_num dropout native_dropout
""".split())
REDUCTION = set("""
mean sum amax amin max min var var_mean std std_mean norm linalg_vector_norm logsumexp prod argmax argmin
""".split())
NORM = set("""
layer_norm native_layer_norm rms_norm _fused_rms_norm group_norm native_group_norm batch_norm
native_batch_norm _batch_norm_impl_index cudnn_batch_norm instance_norm _native_batch_norm_legit
_native_batch_norm_legit_no_training
""".split())
SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"}
COPY = {"to", "_to_copy", "copy_", "contiguous", "clone", "type_as", "cat", "stack", "_unsafe_view", "index_select"}
MATMUL = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv2d", "convolution", "_convolution",
          "conv1d", "conv3d", "einsum", "_scaled_mm"}
ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_flash_attention_forward", "_efficient_attention_forward", "_scaled_dot_product_attention_math",
             "_scaled_dot_product_flash_attention_for_cpu"}
VIEW = set("""
view reshape expand expand_as t transpose permute unsqueeze squeeze slice select narrow as_strided alias
detach empty empty_like empty_strided zeros zeros_like ones ones_like full result_type lift_fresh chunk split
split_with_sizes unbind flatten unflatten
""".split())
ACTIVATIONS = {"relu", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "elu", "hardswish", "mish", "softplus"}

ELEM_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "long int": 8, "int": 4,
              "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1,
              "c10::Float8_e5m2": 1, "c10::complex<float>": 8, "c10::complex<double>": 16}


def short(name: str | None) -> str:
    """``aten::add_`` -> ``add_``; other namespaces keep their name (an event may have none)."""
    if name is None:
        return ""
    return name.split("::", 1)[1] if name.startswith("aten::") else name


@lru_cache(maxsize=65536)
def base(name: str) -> str:
    """In-place and out variants share a class: ``add_`` -> ``add`` (remembered: passes ask for the
    same few names thousands of times)."""
    s = short(name)
    return s[:-1] if s.endswith("_") and not s.startswith("_") else s


@lru_cache(maxsize=65536)
def op_class(name: str) -> str:
    """pointwise | reduction | norm | softmax | copy | matmul | attention | view | compiled | other."""
    s, b = short(name), base(name)
    for cls, names in (("view", VIEW), ("attention", ATTENTION), ("matmul", MATMUL), ("norm", NORM),
                       ("softmax", SOFTMAX), ("reduction", REDUCTION), ("copy", COPY), ("pointwise", POINTWISE)):
        if s in names or b in names:
            return cls
    if name.startswith("triton_") or name.startswith("cpp_fused"):
        return "compiled"
    if b in POINTWISE_OPS:  # tagged pointwise by torch, beyond the hand-written table
        return "pointwise"
    return "other"


FUSIBLE = {"pointwise", "reduction", "norm", "softmax", "copy"}


@dataclass(frozen=True)
class Tensor:
    """One tensor input of an op: its dimensions and element size in bytes."""
    dims: tuple[int, ...]
    elem: int

    @property
    def numel(self) -> int:
        """Elements in the tensor (1 for a scalar)."""
        return math.prod(self.dims) if self.dims else 1

    @property
    def nbytes(self) -> int:
        """Bytes the tensor holds."""
        return self.numel * self.elem


def tensors(input_dims: str | None, input_types: str | None) -> list[Tensor]:
    """The tensor inputs of an op from its recorded ``Input Dims`` / ``Input type`` JSON."""
    if not input_dims:
        return []
    return list(_tensors(input_dims, input_types))


@lru_cache(maxsize=4096)
def _tensors(input_dims: str, input_types: str | None) -> tuple[Tensor, ...]:
    """:func:`tensors`, parsed once per distinct pair (a model's ops repeat a few shapes thousands of
    times; the tensors are frozen, so the lists may share them)."""
    try:
        dims = json.loads(input_dims)
        types = json.loads(input_types) if input_types else []
    except (ValueError, RecursionError):
        return ()
    if not isinstance(dims, list):  # a trace's args can hold anything; only lists describe inputs
        return ()
    types = types if isinstance(types, list) else []
    out: list[Tensor] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if t in ("", "Scalar", "ScalarList", "GenericList", "TensorList", "None") or not isinstance(d, list):
            continue
        if d and not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63 for x in d):
            continue
        if math.prod(d) >= 2**63:  # no real tensor; a number this big would overflow every estimate
            continue
        out.append(Tensor(tuple(d), ELEM_BYTES.get(t, 4)))
    return tuple(out)


# Ops that read or write only some elements of a tensor they take whole (a gather from a table, a
# write into a slice of a KV cache): their bytes are not their tensors' sizes, so no model is claimed.
INDEXED = set("""
index index_select gather scatter scatter_add scatter_reduce index_put _index_put_impl index_copy index_add
index_fill embedding embedding_bag take masked_select masked_scatter slice_scatter select_scatter
diagonal_scatter put
""".split())
CONV = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "cudnn_convolution",
        "miopen_convolution", "mkldnn_convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
# (batch, heads, sequence, head dim) axes of q/k/v per attention op; the flash/efficient kernels'
# own forward ops take (batch, sequence, heads, head dim)
_BSHD = {"_flash_attention_forward", "_efficient_attention_forward"}


def _matmul_operands(name: str, ins: list[Tensor]) -> tuple[Tensor, Tensor, Tensor | None] | None:
    """(a, b, bias) of a matmul-like op from its recorded inputs; an ``out=`` tensor is never an operand."""
    b = base(name)
    if b in ("addmm", "baddbmm", "addbmm", "addmv") and len(ins) >= 3:
        return ins[1], ins[2], ins[0]
    if b == "linear" and len(ins) >= 2:
        return ins[0], ins[1], ins[2] if len(ins) >= 3 else None
    if b in ("mm", "bmm", "matmul", "_scaled_mm") and len(ins) >= 2:
        return ins[0], ins[1], None
    return None


def _matmul_mnk(name: str, ins: list[Tensor]) -> tuple[int, int, int] | None:
    """(rows of the output incl. batch, columns, reduction length) of a matmul-like op."""
    ops = _matmul_operands(name, ins)
    if ops is None:
        return None
    a, w, _bias = ops
    if len(a.dims) < 2 or not w.dims:
        return None
    k = a.dims[-1]
    if base(name) == "linear":
        n = w.dims[0] if len(w.dims) == 2 else 1
    elif len(w.dims) >= 2:
        n = w.dims[-1]
    else:
        return None
    return math.prod(a.dims[:-1]), n, k


def output_numel(name: str, ins: list[Tensor]) -> int:
    """Elements an op writes, estimated from its inputs (reductions over the last dim)."""
    if not ins:
        return 0
    b = base(name)
    big = max(ins, key=lambda t: t.numel)
    if b in REDUCTION:
        return max(big.numel // (big.dims[-1] if big.dims and big.dims[-1] else 1), 1)
    if b in ("cat", "stack"):
        return sum(t.numel for t in ins)
    mnk = _matmul_mnk(name, ins)
    if mnk is not None:
        return mnk[0] * mnk[1]
    if b in ATTENTION and ins:
        return ins[0].numel
    return big.numel


def modelled(name: str) -> bool:
    """Whether io_bytes/flops below hold for this op: known classes only, no indexed or conv ops."""
    b = base(name)
    if b in INDEXED or b in CONV:
        return False
    return op_class(name) in FUSIBLE | {"matmul", "attention"}


def io_bytes(name: str, ins: list[Tensor]) -> tuple[int, int]:
    """(bytes read, bytes written) by one op, from its inputs."""
    if not ins or op_class(name) == "view":
        return 0, 0
    ops = _matmul_operands(name, ins)
    if ops is not None:
        reads = sum(t.nbytes for t in ops if t is not None)  # an out= tensor is written, not read
        elem = ops[0].elem
    elif base(name) in ATTENTION:
        reads, elem = sum(t.nbytes for t in ins[:3]), ins[0].elem
    else:
        reads, elem = sum(t.nbytes for t in ins), max(ins, key=lambda t: t.numel).elem
    return reads, output_numel(name, ins) * elem


def attention_flops(name: str, ins: list[Tensor]) -> float:
    """4·B·H·Nq·Nkv·d for an attention forward (two matmuls), non-causal; perf_models halves it for a
    call whose recorded arguments say it is causal."""
    if len(ins) < 3 or len(ins[0].dims) != 4 or len(ins[1].dims) != 4:
        return 0.0
    q, k = ins[0].dims, ins[1].dims
    if base(name) in _BSHD:
        b_, nq, h, d = q
        nkv = k[1]
    else:
        b_, h, nq, d = q
        nkv = k[2]
    return 4.0 * b_ * h * nq * nkv * d


def flops(name: str, ins: list[Tensor]) -> float:
    """Floating-point operations of one op: 2·M·N·K for matmuls (+ M·N with a bias), attention from
    q/k shapes, one per output element for pointwise and reductions; 0 where no model holds."""
    b = base(name)
    mnk = _matmul_mnk(name, ins)
    if mnk is not None:
        m, n, k = mnk
        ops = _matmul_operands(name, ins)
        bias = ops is not None and ops[2] is not None
        return 2.0 * m * n * k + (m * n if bias else 0)
    if b in ATTENTION:
        return attention_flops(name, ins)
    if op_class(name) in FUSIBLE and b not in INDEXED:
        return float(output_numel(name, ins))
    return 0.0
