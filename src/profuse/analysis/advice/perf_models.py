"""FLOP and byte models that need an op's scalar arguments (``Concrete Inputs``), beside opclass's.

Conventions (those of TraceLens's perf models, and of torch's own FLOP counter):

- Convolution (1d/2d/3d, transposed, grouped) from its output: 2·N·C_out·prod(out spatial)·(C_in/groups)
  ·prod(kernel) multiply-adds counted as two FLOPs, plus one per output element with a bias. A
  transposed convolution does the same products from its input: 2·N·C_in·prod(in spatial)·(C_out/groups)
  ·prod(kernel). Output size: ``(in + 2p - d(k-1) - 1) // s + 1``; transposed
  ``(in-1)s - 2p + d(k-1) + output_padding + 1``. Bytes: input, weight, bias and output, each once.
- Attention: 4·B·H·Nq·Nkv·d (two matmuls), halved when the op says it is causal (``is_causal``, or
  the efficient kernel's ``custom_mask_type``), since a causal mask skips half the scores.

Each argument's position is that of the op's schema (aten's native_functions.yaml); a model that
cannot read every argument it needs claims nothing (None), never a guess.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..opclass import ELEM_BYTES, Tensor, attention_flops, base

# Argument positions per conv op: bias, stride, padding, dilation, transposed (a position, or the
# fixed answer), output_padding, groups. None: the op has no such argument.
_CONV_ARGS: dict[str, tuple[int | None, int, int, int, int | bool, int | None, int]] = {
    "conv1d": (2, 3, 4, 5, False, None, 6), "conv2d": (2, 3, 4, 5, False, None, 6),
    "conv3d": (2, 3, 4, 5, False, None, 6),
    "conv_transpose1d": (2, 3, 4, 7, True, 5, 6), "conv_transpose2d": (2, 3, 4, 7, True, 5, 6),
    "conv_transpose3d": (2, 3, 4, 7, True, 5, 6),
    "convolution": (2, 3, 4, 5, 6, 7, 8), "_convolution": (2, 3, 4, 5, 6, 7, 8),
    "convolution_overrideable": (2, 3, 4, 5, 6, 7, 8),
    "cudnn_convolution": (None, 3, 2, 4, False, None, 5),
    "cudnn_convolution_transpose": (None, 4, 2, 5, True, 3, 6),
    "miopen_convolution": (2, 4, 3, 5, False, None, 6),
    "miopen_convolution_transpose": (2, 5, 3, 6, True, 4, 7),
    "miopen_depthwise_convolution": (2, 4, 3, 5, False, None, 6),
    "mkldnn_convolution": (2, 4, 3, 5, False, None, 6),
}
CONV_OPS = frozenset(_CONV_ARGS)

# Position of the causal flag among each attention op's arguments; the efficient kernel's forward
# takes a mask type instead (0: none, 1 and 2: causal from the top left / bottom right).
_CAUSAL_AT = {
    "scaled_dot_product_attention": 5, "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_flash_attention_for_cpu": 4, "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention": 6, "_flash_attention_forward": 8,
    "_scaled_dot_product_attention_math": 5, "_efficient_attention_forward": 9,
}
_MASK_TYPE = {"_efficient_attention_forward"}


@dataclass(frozen=True)
class Model:
    """FLOPs and bytes of one call, and the element size its compute peak is chosen by."""

    flops: float
    read: int
    write: int
    elem: int


def _json_list(text: str | None) -> list[Any] | None:
    if not text:
        return None
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, list) else None


def _scalar(text: Any) -> Any:
    """One Concrete Inputs entry ('[16, 16]', '1', 'False', '0.', 'same') as a Python value."""
    if not isinstance(text, str):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _ints(v: Any, n: int) -> list[int] | None:
    """A per-spatial-dim int list from a list or one int (broadcast), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, list) and len(v) in (1, n) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v) * (n if len(v) == 1 else 1)
    return None


def _dims_at(dims: list[Any], i: int | None) -> list[int] | None:
    if i is None or i >= len(dims) or not isinstance(dims[i], list):
        return None
    d = dims[i]
    ok = all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**62 for x in d)
    return d if ok else None


def conv_model(name: str, input_dims: str | None, input_types: str | None, concrete: str | None) -> Model | None:
    """FLOPs and bytes of one convolution call (module docstring), or None where an argument is unreadable."""
    spec = _CONV_ARGS.get(base(name))
    dims, args = _json_list(input_dims), _json_list(concrete)
    if spec is None or dims is None or args is None:
        return None
    types = _json_list(input_types) or []
    bias_at, stride_at, pad_at, dil_at, trans_at, outpad_at, groups_at = spec
    x, w = _dims_at(dims, 0), _dims_at(dims, 1)
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    sp = len(x) - 2

    def arg(i: int | None) -> Any:
        return _scalar(args[i]) if i is not None and i < len(args) else None

    stride, dil, groups = _ints(arg(stride_at), sp), _ints(arg(dil_at), sp), arg(groups_at)
    transposed = trans_at if isinstance(trans_at, bool) else arg(trans_at)
    pad_v = arg(pad_at)
    outpad = _ints(arg(outpad_at), sp) if outpad_at is not None else [0] * sp
    if not isinstance(transposed, bool) or stride is None or dil is None or outpad is None \
            or not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        return None
    n, c_in, in_sp, k_sp = x[0], x[1], x[2:], w[2:]
    if transposed:
        pad = _ints(pad_v, sp)
        if pad is None:
            return None
        c_out = w[1] * groups
        out_sp = [(i - 1) * s - 2 * p + d * (k - 1) + o + 1
                  for i, s, p, d, k, o in zip(in_sp, stride, pad, dil, k_sp, outpad)]
    else:
        c_out = w[0]
        if pad_v == "valid":
            pad = [0] * sp
        elif pad_v == "same":
            out_sp = list(in_sp)
            pad = None
        else:
            pad = _ints(pad_v, sp)
            if pad is None:
                return None
        if pad is not None:
            out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1 if s > 0 else -1
                      for i, s, p, d, k in zip(in_sp, stride, pad, dil, k_sp)]
    if min(out_sp, default=0) <= 0 or c_in % groups or c_out % groups:
        return None
    kernel = math.prod(k_sp)
    out_numel = n * c_out * math.prod(out_sp)
    if transposed:
        products = n * c_in * math.prod(in_sp) * (c_out // groups) * kernel
    else:
        products = out_numel * (c_in // groups) * kernel
    bias = _dims_at(dims, bias_at)
    has_bias = bool(bias) and bias_at is not None and bias_at < len(types) and types[bias_at] not in ("", "None")
    elem = ELEM_BYTES.get(types[0], 4) if types and isinstance(types[0], str) else 4
    read = (math.prod(x) + math.prod(w) + (math.prod(bias) if has_bias and bias else 0)) * elem
    return Model(2.0 * products + (out_numel if has_bias else 0), read, out_numel * elem, elem)


def is_causal(name: str, concrete: str | None) -> bool:
    """Whether an attention call says it is causal in its recorded scalar arguments."""
    b = base(name)
    at, args = _CAUSAL_AT.get(b), _json_list(concrete)
    if at is None or args is None or at >= len(args):
        return False
    v = _scalar(args[at])
    if b in _MASK_TYPE:
        return isinstance(v, int) and not isinstance(v, bool) and v in (1, 2)
    return v is True


def attention_model_flops(name: str, ins: list[Tensor], concrete: str | None) -> float:
    """4·B·H·Nq·Nkv·d, halved for a causal attention."""
    f = attention_flops(name, ins)
    return f / 2 if is_causal(name, concrete) else f
