"""Payloads straight from a loaded trace: run the analyses a view needs, then its builder. The
explorer's routes and ``profuse report`` call these, so both send the same records."""
from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from ..analysis.advice.findings import Findings, trace_findings
from ..analysis.beside import beside
from ..analysis.breakdown import device_breakdown
from ..analysis.compare.diff import diff
from ..analysis.compiled import compiled_regions
from ..analysis.health import Health, trace_health
from ..analysis.memory import has_memory
from ..analysis.module_tree import module_tree
from ..analysis.op_kernels import kernels_by_row
from ..analysis.optable import OpTable, op_table
from ..analysis.summary import Summary, summarize
from ..analysis.timeline import Lane, TimelineWindow, timeline_model, timeline_window
from ..redact import redacted
from ..trace.artifacts import read_artifacts
from .advice import advice_payload
from .calltree import CallTree, KernelLaunches, kernel_launches_of
from .diff import DiffPayload, diff_payload
from .memory import MemoryTimeline, memory_timeline_of
from .ops import OpKernels, Ops, op_kernels_payload, ops_payload
from .overview import Overview, overview_payload
from .report import Analysed
from .views import CompiledView, Modules, RunInfo, compiled_payload, modules_payload

if TYPE_CHECKING:
    from ..trace import Trace


class ReportPayloads(Struct):
    """Everything the self-contained HTML report embeds for its one run."""

    runs: list[RunInfo]
    overview: Overview
    ops: Ops
    op_kernels: dict[str, OpKernels]
    lanes: list[Lane]
    timeline: TimelineWindow
    modules: Modules
    memory: MemoryTimeline | None = None  # the timeline's memory lanes (None: no memory events)
    compiled: CompiledView | None = None  # torch.compile regions (None: the trace has none, nor a NEFF)
    calltree: CallTree | None = None      # the Python call tree (None: no python_function events)
    kernel_launches: KernelLaunches | None = None  # grid and block per kernel name, where recorded


def run_info(run: int, trace: Trace) -> RunInfo:
    """The run as the run picker lists it."""
    return RunInfo(run=run, path=str(trace.path), device_label=trace.device_label, events=trace.meta["events"])


def overview_of(trace: Trace, *, summary: Summary | None = None, advice: Findings | None = None,
                with_advice: bool = True, keep_metadata: bool = False, health: Health | None = None) -> Overview:
    """The Overview; ``summary``, ``advice`` and ``health`` when already computed (advice only if
    ``with_advice``)."""
    summary = summary or summarize(trace)
    if with_advice and advice is None:
        with beside(trace) as submit:  # the sections the diagnosis does not read on another thread, as the report
            advice = trace_findings(trace, submit=submit)
    return overview_payload(summary, device_breakdown(trace, summary.device_busy),
                            advice_payload(advice) if with_advice and advice is not None else None,
                            device_label=trace.device_label, metadata=trace.meta.get("trace_meta", {}),
                            keep_metadata=keep_metadata, health=health or trace_health(trace))


def ops_of(trace: Trace, *, group_by: str = "op", sort: str = "self_device", top: int | None = None,
           table: OpTable | None = None) -> Ops:
    """The op table (``table`` when already computed), its first ``top`` rows (None or 0: all)."""
    return ops_payload(table or op_table(trace, group_by=group_by, sort=sort), top)


def op_kernels_of(trace: Trace, ops: Ops) -> dict[str, OpKernels]:
    """Row key -> kernels, for every row of ``ops``."""
    return op_kernels_payload(ops, kernels_by_row(trace, ops.group_by))


def modules_of(trace: Trace) -> Modules:
    """The nn.Module tree."""
    return modules_payload(module_tree(trace), trace.device_label)


def compiled_of(trace: Trace) -> CompiledView:
    """Compiled regions, with the generated code a bundle saved beside the trace."""
    return compiled_payload(compiled_regions(trace), read_artifacts(trace.path))


def compare_of(a: Trace, b: Trace, *, gate_metric: str | None = None, threshold_pct: float | None = None,
               keep_metadata: bool = False) -> DiffPayload:
    """Run A against run B (with the CI gate's metric and threshold when given), with their diagnoses'
    budgets side by side; every string redacted (:func:`profuse.redact.redacted`) unless ``keep_metadata``."""
    from ..analysis.diagnosis import diagnose
    from .diagnosis import budget_diff

    payload = diff_payload(diff(a, b, gate_metric=gate_metric, threshold_pct=threshold_pct))
    payload.budget = budget_diff(diagnose(a), diagnose(b))
    return redacted(payload, keep=keep_metadata)


def report_payloads(trace: Trace, analysed: Analysed, *, top: int | None, keep_metadata: bool,
                    timeline_width: int = 3000) -> ReportPayloads:
    """The HTML report's payloads from the analyses every renderer reads (``payloads.report.analyse``;
    advice None: ``--no-advice``); the ops and their kernels are the rows the table shows. Every string in
    them is redacted (:func:`profuse.redact.redacted`) unless ``keep_metadata``."""
    summary, table, advice, health = analysed.summary, analysed.table, analysed.advice, analysed.health
    ops = ops_of(trace, top=top, table=table)
    if advice is not None and advice.diagnosis is not None:  # the rows the lever cards link to
        from .diagnosis import diagnosis_payload
        from .diagnosis_rows import with_lever_rows

        ops = with_lever_rows(ops, table, diagnosis_payload(advice.diagnosis))
    model = timeline_model(trace)
    try:
        lanes, window = model.lanes, timeline_window(model, None, None, timeline_width)
    finally:
        model.close()
    return redacted(ReportPayloads(
        runs=[run_info(0, trace)],
        overview=overview_of(trace, summary=summary, advice=advice, with_advice=advice is not None,
                             keep_metadata=keep_metadata, health=health),
        ops=ops, op_kernels=op_kernels_of(trace, ops), lanes=lanes, timeline=window, modules=modules_of(trace),
        memory=memory_timeline_of(trace) if has_memory(trace) else None, compiled=_compiled_if_any(trace),
        calltree=analysed.calltree, kernel_launches=_launches_if_any(trace)), keep=keep_metadata)


def _launches_if_any(trace: Trace) -> KernelLaunches | None:
    launches = kernel_launches_of(trace)
    return launches if launches.kernels else None


def _compiled_if_any(trace: Trace) -> CompiledView | None:
    """The Compiled view where the trace has a compiled region or a NEFF beside it (the report's tab)."""
    view = compiled_of(trace)
    return view if view.regions or view.neffs else None

