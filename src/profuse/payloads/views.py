"""The explorer's other views: the runs it serves, the nn.Module tree, compiled regions."""
from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType

from ..analysis.compiled import CompiledRegion, CompiledSummary, NeffBrief, source_ops
from ..analysis.module_tree import ModuleNode


class RunInfo(Struct, kw_only=True):
    """One run the explorer serves (``rank`` only for the rank traces of a distributed run)."""

    run: int
    path: str
    device_label: str
    events: int
    rank: int | UnsetType = UNSET


class Modules(Struct):
    """The nn.Module tree in depth-first order (empty: the trace has no module scopes)."""

    device_label: str
    nodes: list[ModuleNode]   # the analysis records, times rounded to the ns there


class GeneratedKernel(Struct):
    """A kernel whose code a bundle saved, with the ops its name says it fuses."""

    name: str
    fused_ops: list[str]


class CompiledView(Struct):
    """The Compiled view: regions, graph breaks, saved generated code, NEFFs beside the trace."""

    regions: list[CompiledRegion]
    graph_breaks: int
    eager_between: list[str]
    code: dict[str, str]
    generated_kernels: list[GeneratedKernel]
    neffs: list[NeffBrief]


def modules_payload(nodes: list[ModuleNode], device_label: str) -> Modules:
    """The module tree as :func:`analysis.module_tree.module_tree` gives it."""
    return Modules(device_label=device_label, nodes=nodes)


def compiled_payload(summary: CompiledSummary, code: dict[str, str]) -> CompiledView:
    """Compiled regions with the code files a bundle saved (``code``: file name -> text)."""
    return CompiledView(regions=list(summary.regions), graph_breaks=summary.graph_breaks,
                        eager_between=list(summary.eager_between), code=code,
                        generated_kernels=[GeneratedKernel(name=k, fused_ops=source_ops(k))
                                           for k in summary.generated_kernels],
                        neffs=list(summary.neffs))
