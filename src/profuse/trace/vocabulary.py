"""The device vocabulary: what each device family's trace calls things, in one table every reader uses.

One :class:`Device` entry per family says which Kineto categories hold its runtime calls, which call
names put work on the device (launches, async copies, command submissions), which replay a captured
graph, which block the host on a copy, what its runtime calls' names start with, and which trace
metadata or categories name it. The loader (event kinds, device recognition, graph replays) and the
analyses (launch work, host syncs, the launch count of a trace without device activity) read the
rules built from :data:`DEVICES`; adding a device is one entry here (:func:`register` at run time)
plus capture's activity mapping. Kernel classes are :mod:`profuse.analysis.kernel_class`'s, peaks
:mod:`profuse.analysis.advice.roofline`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


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


DEVICES: list[Device] = [
    Device("CUDA", runtime_categories=("cuda_runtime", "cuda_driver", "runtime"), launch_parts=("launch", "async"),
           graph_launches=("cudaGraphLaunch", "cuGraphLaunch"),
           sync_copies=("cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyHtoD")),
    Device("ROCm", runtime_categories=("hip_runtime",), launch_parts=("launch", "async"),
           graph_launches=("hipGraphLaunch",),
           sync_copies=("hipMemcpy", "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD"),
           call_prefixes=("hip",), metadata_keys=("roctracer_version", "hip_runtime_version")),
    Device("MTIA", runtime_categories=("mtia_runtime",), launch_parts=("runfunction", "enqueue"),
           marker_categories=("mtia_runtime", "mtia_ccp_events")),
    Device("PrivateUse1", runtime_categories=("privateuse1_runtime", "privateuse1_driver"),
           launch_parts=("launch", "async"), privateuse1=True),
    # the Neuron Runtime's API is public: its calls are nrt_* (TorchNeuron is a PrivateUse1 backend)
    Device("Neuron", launch_parts=("nrt_execute", "nrt_model_submit"), call_prefixes=("nrt_",), privateuse1=True),
]

# calls that move data and so put work on a device even where they block (device recognition only)
_COPY_PARTS = ("memcpy", "memset")


def register(device: Device) -> None:
    """Add a device family to the vocabulary (before traces of it are loaded: cached tables keep the
    kinds they were built with)."""
    DEVICES.append(device)
    _rules.cache_clear()


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
