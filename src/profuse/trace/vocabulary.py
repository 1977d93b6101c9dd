"""The device vocabulary: what each device family's trace calls things, in one table every reader uses.

One :class:`Device` entry per family says which Kineto categories hold its runtime calls, which call
names put work on the device (launches, async copies, command submissions), which replay a captured
graph, which block the host on a copy, what its runtime calls' names start with, and which trace
metadata or categories name it, what its vendor libraries name their kernels (by class, and the dtype
a name proves) and its models' datasheet peaks. The loader (event kinds, device recognition, graph
replays) and the analyses (launch work, host syncs, kernel classes, FP32 evidence, peaks) read the
rules built from :data:`DEVICES` and :data:`PORTABLE` (the kernels PyTorch, Triton and the serving
engines write on any device); adding a device is one entry here (:func:`register` at run time) plus
capture's activity mapping.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .datasheets import AMD, MTIA, NVIDIA, Datasheet, recognise


@dataclass(frozen=True)
class KernelNames:
    """Regular-expression fragments (any case) of kernel names, per class, and what a name proves of
    the dtype a matrix kernel computes in. Classes are tried in :data:`CLASS_ORDER`; the first whose
    fragments match a name wins."""

    communication: tuple[str, ...] = ()
    attention: tuple[str, ...] = ()
    conv: tuple[str, ...] = ()
    gemm: tuple[str, ...] = ()
    norm: tuple[str, ...] = ()
    reduction: tuple[str, ...] = ()
    elementwise: tuple[str, ...] = ()
    fp32: tuple[str, ...] = ()         # a matrix kernel so named computes in FP32 ...
    not_fp32: tuple[str, ...] = ()     # ... unless its name also proves TF32, 16-bit or 8-bit math
    dtype_field: str | None = None     # a pattern whose group ``dt`` is the input type (Tensile: ``S``... = FP32)


CLASS_ORDER = ("communication", "attention", "conv", "gemm", "norm", "reduction", "elementwise")

# what PyTorch (ATen), Triton/inductor and the serving engines (vLLM, sglang) name their kernels on any device
PORTABLE = KernelNames(
    communication=(r"all_?reduce", r"all_?gather", r"reduce_?scatter", "alltoall", "broadcast_kernel", "cross_device"),
    attention=("flash", "fmha", "attn", "attention", "sage", "mha_", "_mha", "paged_attention", "xformers"),
    conv=(r"conv(?!ert)", "implicit_gemm", "implicitgemm", "winograd", "depthwise"),
    # inductor's Triton GEMM templates are triton_tem_*mm*; a pointwise kernel named after the addmm
    # whose bias it adds is not a GEMM
    gemm=("gemm", "matmul", r"triton_tem\w*mm", "_mm_", "splitk", "bmm", "dot_"),
    norm=("norm", "rms", "rsqrt", "bn_fw", "bn_bw", "batchnorm", "rowwisemoments", "welford", "layer_?norm"),
    reduction=("reduce", "triton_red", "triton_per", "softmax", "pool", "argmax", "topk", "sort", "scan", "cumsum",
               "sum_kernel", "mean_kernel", "max_kernel"),
    elementwise=("elementwise", "vectorized", "unrolled", "triton_poi", "pointwise", "act_and_mul", "activation",
                 "rotary", "copy", "fill", "cat_?array", "index", "gather", "scatter", "transpose", "nchwtonhwc",
                 "nhwctonchw", "embedding", "store_kvcache", "quant", "cast", "where", "masked", "dropout",
                 "distribution", "subtensorop", "mul_kernel", "add_kernel", "multi_tensor_apply"),
    # a 16-bit template argument (__nv_bfloat16 even in a kernel named *sgemm*) or an 8-bit type
    not_fp32=("bf16", "bfloat16", "f16", "half", "fp8", "int8"),
)

@dataclass(frozen=True)
class Device:
    """One device family's vocabulary (names compared in lower case unless said otherwise)."""

    kind: str                                  # the device kind a report names (CUDA, ROCm, MTIA, Neuron, ...)
    runtime_categories: tuple[str, ...] = ()   # Kineto categories of its runtime and driver calls
    launch_parts: tuple[str, ...] = ()         # a call whose name holds one of these puts work on the device
    graph_launches: tuple[str, ...] = ()       # calls (name prefixes, exact case) that replay a captured graph
    sync_copies: tuple[str, ...] = ()          # blocking copy calls (exact names; any *synchroniz* call blocks too)
    call_prefixes: tuple[str, ...] = ()        # its runtime calls' names start so (names the device)
    metadata_keys: tuple[str, ...] = ()        # top-level trace keys that name the device
    marker_categories: tuple[str, ...] = ()    # categories whose presence alone names the device
    privateuse1: bool = False                  # a PrivateUse1 backend (its calls are privateuse1_* categories)
    kernels: KernelNames = field(default_factory=KernelNames)   # its vendor libraries' kernel names
    datasheets: tuple[Datasheet, ...] = ()     # its models' peaks (trace/datasheets.py)


DEVICES: list[Device] = [
    Device("CUDA", runtime_categories=("cuda_runtime", "cuda_driver", "runtime"), launch_parts=("launch", "async"),
           graph_launches=("cudaGraphLaunch", "cuGraphLaunch"),
           sync_copies=("cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyHtoD"),
           # cuBLAS/cuBLASLt, CUTLASS, nvjet, cuDNN, NCCL; Ampere's tensor-op s1688 kernels are TF32
           kernels=KernelNames(communication=("nccl",), conv=("fprop", "dgrad", "wgrad", "scudnn", "fft2d"),
                               gemm=("cublas", "cutlass", "nvjet", "xmma", "sgemm", "hgemm"),
                               fp32=("sgemm", "scudnn", "_s_?gemm", r"f32f32_f32(?!.*tf32)"),
                               not_fp32=("tf32", "s1688", "hgemm")),
           datasheets=NVIDIA),
    Device("ROCm", runtime_categories=("hip_runtime",), launch_parts=("launch", "async"),
           graph_launches=("hipGraphLaunch",),
           sync_copies=("hipMemcpy", "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD"),
           call_prefixes=("hip",), metadata_keys=("roctracer_version", "hip_runtime_version"),
           # hipBLASLt/Tensile (Cijk_Alik_Bljk_S...: the first letter after the layout is the input type:
           # S single, BBS bf16 with fp32 compute, HHS half), skinny GEMMs, MIOpen, RCCL
           kernels=KernelNames(communication=("rccl",), conv=("igemm_", "miopen(?!batchnorm)", "naive_conv", "wrw_"),
                               gemm=("cijk_", "hipblaslt", "wvsplitk"),
                               dtype_field=r"^Cijk_[A-Za-z]+_[A-Za-z]+_(?P<dt>[A-Z0-9]+)_"),
           datasheets=AMD),
    Device("MTIA", runtime_categories=("mtia_runtime",), launch_parts=("runfunction", "enqueue"),
           marker_categories=("mtia_runtime", "mtia_ccp_events"),
           kernels=KernelNames(gemm=("^fc-", "[_-]fc[_-]"), fp32=(r"dtype_float\b", "fc-dtype_float")),
           datasheets=MTIA),
    Device("PrivateUse1", runtime_categories=("privateuse1_runtime", "privateuse1_driver"),
           launch_parts=("launch", "async"), privateuse1=True),
    # the Neuron Runtime's API is public: its calls are nrt_* (TorchNeuron is a PrivateUse1 backend)
    Device("Neuron", launch_parts=("nrt_execute", "nrt_model_submit"), call_prefixes=("nrt_",), privateuse1=True),
    # profuse's own emulated PrivateUse1 device (src/profuse/emu): emu* runtime calls, emu_<op>_kernel kernels;
    # its host<->device copies block the caller
    Device("emu", launch_parts=("emulaunchkernel",), sync_copies=("emuMemcpyDtoH", "emuMemcpyHtoD"),
           call_prefixes=("emu",), privateuse1=True,
           kernels=KernelNames(gemm=(r"^emu_(add|baddb|b)?mm_kernel",), norm=(r"^emu_fused_rms_norm",),
                               reduction=(r"^emu_(sum|amax|max|argmax|cumsum|log_softmax|topk)_kernel",),
                               elementwise=(r"^emu_\w+_kernel$",))),
]

# calls that move data and so put work on a device even where they block (device recognition only)
_COPY_PARTS = ("memcpy", "memset")


def register(device: Device) -> None:
    """Add a device family to the vocabulary (before traces of it are loaded: cached tables keep the
    kinds they were built with)."""
    global _generation
    DEVICES.append(device)
    _rules.cache_clear()
    _generation += 1


_generation = 0


def generation() -> int:
    """How many devices were registered at run time: a cache of rules built from this table keys on it."""
    return _generation


@dataclass(frozen=True)
class _Rules:
    runtime_categories: frozenset[str]
    launch_parts: tuple[str, ...]
    graph_launches: tuple[str, ...]
    sync_copies: tuple[str, ...]


@lru_cache(maxsize=1)
def _rules() -> _Rules:
    def union(field: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for d in DEVICES for v in getattr(d, field)))

    return _Rules(frozenset(union("runtime_categories")), union("launch_parts"), union("graph_launches"),
                  union("sync_copies"))


def runtime_categories() -> frozenset[str]:
    """Every device family's runtime-call categories (lower case): events of kind ``runtime``."""
    return _rules().runtime_categories


def launch_parts() -> tuple[str, ...]:
    """Lower-case parts of the names of calls that put work on a device, every family's."""
    return _rules().launch_parts


def graph_launches() -> tuple[str, ...]:
    """Name prefixes of the calls that replay a captured graph, every family's."""
    return _rules().graph_launches


def is_graph_launch(name: str) -> bool:
    """A call that replays a captured graph (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch, ...)."""
    return name.lower().startswith(tuple(n.lower() for n in graph_launches()))


def is_launch(name: str) -> bool:
    """A call that puts work on a device (a launch, an async copy, a command submission)."""
    low = name.lower()
    return any(part in low for part in launch_parts())


def moves_work(name: str) -> bool:
    """A call that launches, copies or sets device memory: a trace holding one ran on a device."""
    low = name.lower()
    return any(part in low for part in (*launch_parts(), *_COPY_PARTS))


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def launch_call_sql(column: str) -> str:
    """SQL true where ``column`` (a call's name) is a launch call (:func:`is_launch`); fixed text built
    from this table, nothing from a trace."""
    return "(" + " OR ".join(f"lower({column}) LIKE {_sql_text('%' + p + '%')}" for p in launch_parts()) + ")"


def graph_launch_sql(column: str) -> str:
    """SQL true where ``column`` is a graph launch (:func:`is_graph_launch`)."""
    return "(" + " OR ".join(f"{column} ILIKE {_sql_text(n + '%')}" for n in graph_launches()) + ")"


def sync_call_sql(column: str) -> str:
    """SQL true where ``column`` is a blocking call: any ``*synchroniz*`` call or a blocking copy."""
    copies = ", ".join(_sql_text(n) for n in _rules().sync_copies)
    return f"({column} ILIKE '%synchroniz%' OR {column} IN ({copies}))"


def device_of_calls(names: list[object]) -> str | None:
    """The PrivateUse1 backend whose runtime calls these are (by :attr:`Device.call_prefixes`), or None."""
    backends = [(p, d.kind) for d in DEVICES if d.privateuse1 for p in d.call_prefixes]
    for n in names:
        if isinstance(n, str):
            for prefix, kind in backends:
                if n.startswith(prefix):
                    return kind
    return None


def named_by_categories(categories: set[str]) -> str | None:
    """The family whose marker categories the trace holds (MTIA, or a registered one), else None."""
    return next((d.kind for d in DEVICES if categories & set(d.marker_categories)), None)


def device(kind: str) -> Device:
    """The entry of one device family."""
    return next(d for d in DEVICES if d.kind == kind)


def kernel_fragments(cls: str) -> tuple[str, ...]:
    """Every family's (and :data:`PORTABLE`'s) name fragments of one kernel class, or of ``fp32`` /
    ``not_fp32`` dtype evidence."""
    return tuple(dict.fromkeys(f for k in (PORTABLE, *(d.kernels for d in DEVICES)) for f in getattr(k, cls)))


def dtype_fields() -> tuple[str, ...]:
    """The patterns (group ``dt``) by which a family's kernel names state their input type."""
    return tuple(d.kernels.dtype_field for d in DEVICES if d.kernels.dtype_field)


def datasheet(kind: str | None, name: str | None, props: dict[str, object] | None) -> Datasheet | None:
    """The datasheet of a device: by name among every family's models, else by properties among the
    family ``kind``'s (a gfx version and CU count say nothing of another vendor's device)."""
    sheets = tuple(s for d in DEVICES for s in d.datasheets)
    by_name = recognise(tuple(s for s in sheets if s.names), name, props)
    if by_name is not None:
        return by_name
    family = next((d for d in DEVICES if d.kind == kind), None)
    return recognise(tuple(s for s in family.datasheets if not s.names), None, props) if family else None
