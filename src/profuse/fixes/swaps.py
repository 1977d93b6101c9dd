"""The exact swaps ``profuse.advise`` tries: the fused op the advisor's recommendation names,
put in place of a hand-written module's forward on a copy of the model.

Each swap checks that the module has the form it replaces (a one-input activation, a (q, k, v)
attention with no weights, a norm with a 1-d weight) and returns False when it does not, so the
module is left alone; the caller then checks the numerics of every swap that was made against the
original model. Needs torch (imported lazily).
"""
from __future__ import annotations

import inspect
from typing import Any


def required_positional(module: Any) -> int | None:
    """How many required positional arguments the module's forward takes (None when unknown)."""
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    return sum(1 for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty)


def _weightless(module: Any) -> bool:
    """No parameters of its own or below it: the forward is pure maths on its inputs."""
    return not any(True for _ in module.parameters())


def _activation(module: Any) -> bool:
    return _weightless(module) and required_positional(module) == 1


def swap_gelu_tanh(module: Any) -> bool:
    """A hand-written tanh GELU module -> ``torch.nn.functional.gelu(x, approximate='tanh')``."""
    import torch.nn.functional as F

    if not _activation(module):
        return False
    module.forward = lambda x: F.gelu(x, approximate="tanh")
    return True


def swap_gelu_erf(module: Any) -> bool:
    """A hand-written erf GELU module -> ``torch.nn.functional.gelu(x)``."""
    import torch.nn.functional as F

    if not _activation(module):
        return False
    module.forward = lambda x: F.gelu(x)
    return True


def swap_silu(module: Any) -> bool:
    """A hand-written ``x * sigmoid(x)`` module -> ``torch.nn.functional.silu(x)``."""
    import torch.nn.functional as F

    if not _activation(module):
        return False
    module.forward = lambda x: F.silu(x)
    return True


def swap_sdpa(module: Any) -> bool:
    """A weightless ``softmax(q @ k^T / sqrt(d)) @ v`` module taking (q, k, v) ->
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v)`` (its default scale is 1/sqrt(d)).
    Only in eval mode: a dropout between softmax and the product is then no work, as in SDPA with
    ``dropout_p=0``."""
    import torch.nn.functional as F

    if not _weightless(module) or required_positional(module) != 3 or module.training:
        return False
    module.forward = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    return True


def graphable_device(inputs: Any) -> bool:
    """Whether the example inputs live on a device whose work CUDA/HIP graphs can replay."""
    import torch

    if not torch.cuda.is_available():
        return False
    return any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in inputs)


def compile_reduce_overhead(model: Any) -> Any:
    """The model with its forward compiled in ``mode="reduce-overhead"`` (inductor, replayed as
    CUDA/HIP graphs): the swap the ``cuda_graphs`` lever names."""
    import torch

    model.forward = torch.compile(model.forward, mode="reduce-overhead")
    return model
