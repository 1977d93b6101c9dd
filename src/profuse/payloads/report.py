"""The ``profuse report --format json`` document, schema ``profuse.report/4`` (docs/schema.md)."""
from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, NamedTuple

from msgspec import UNSET, Struct, UnsetType

from ..analysis.advice.hotspots import Hotspot
from ..analysis.advice.interruptions import Interruption
from ..analysis.advice.records import Candidate
from ..analysis.advice.roofline import Peaks, RooflineRow
from ..analysis.busy import Busy, StepBusy
from ..analysis.calltree import CallTree
from ..analysis.compiled import CompiledSummary
from ..analysis.health import Health
from ..redact import redacted
from .advice import AdvicePayload, advice_payload
from .diagnosis import DiagnosisPayload
from .memory import MemoryPayload
from .ops import Ops, OpsRow, ops_payload
from .overview import Capture, Totals, TraceInfo, capture, totals, trace_info

if TYPE_CHECKING:  # signatures only: decoding a stored report needs none of the analyses
    from ..analysis.advice.findings import Findings
    from ..analysis.optable import OpTable
    from ..analysis.summary import Summary
    from ..trace import Trace

SCHEMA = "profuse.report/4"


class ReportDocument(Struct, kw_only=True):
    """The JSON report: the trace, its totals, the op table, and the advisor's sections (absent with
    ``--no-advice``)."""

    schema: str = SCHEMA
    trace: TraceInfo
    totals: Totals
    diagnosis: DiagnosisPayload | UnsetType | None = UNSET   # first of the advice: where the time went
    device_busy: Busy | None
    steps: list[StepBusy]
    group_by: str
    device_label: str
    cpu_only: bool
    skipped: dict[str, int]
    unmatched_flows: int
    capture: Capture | None
    ops: list[OpsRow]
    hotspots: list[Hotspot] | UnsetType = UNSET
    interruptions: list[Interruption] | UnsetType = UNSET
    fusion_candidates: list[Candidate] | UnsetType = UNSET
    peaks: Peaks | UnsetType | None = UNSET
    roofline: list[RooflineRow] | UnsetType = UNSET
    compiled: CompiledSummary | UnsetType = UNSET
    roofline_note: str | UnsetType | None = UNSET   # "no peak for <device name>: ..." where there are no peaks
    skewed_launches: int | UnsetType = UNSET         # device activities starting before their launch call
    memory: MemoryPayload | UnsetType = UNSET  # only for a trace with memory events (docs/memory.md)
    health: Health | UnsetType = UNSET         # what the trace holds and lacks (docs/advisor.md, "Trace health")
    calltree: CallTree | UnsetType = UNSET     # the Python call tree, where the trace has python_function events


def report_document(summary: Summary, ops: Ops, advice: AdvicePayload | None = None, *,
                    keep_metadata: bool = False, memory: MemoryPayload | None = None,
                    health: Health | None = None, calltree: CallTree | None = None) -> ReportDocument:
    """The document from the summary, the op table payload and the advice (None: no advice keys)."""
    sections: dict[str, Any] = {}
    if advice is not None:
        sections = {f.name: getattr(advice, f.name) for f in fields(AdvicePayload)}
    return ReportDocument(trace=trace_info(summary), totals=totals(summary), device_busy=summary.device_busy,
                          steps=list(summary.steps), group_by=ops.group_by, device_label=ops.device_label,
                          cpu_only=ops.cpu_only, skipped=dict(summary.skipped),
                          unmatched_flows=summary.unmatched_flows,
                          capture=capture(summary, keep_metadata=keep_metadata), ops=ops.rows,
                          memory=UNSET if memory is None else memory, health=UNSET if health is None else health,
                          calltree=UNSET if calltree is None else calltree, **sections)


class ReportView(Struct, kw_only=True):
    """What every renderer of one trace's report reads: the JSON document (written as is by
    ``--format json``), and what only a terminal shows: whether the tables came from the cache, and how
    many op-table rows to show (``top``; None: all, the document always holds every row)."""

    document: ReportDocument
    from_cache: bool = False
    top: int | None = None


class Analysed(NamedTuple):
    """What one trace's report is made from: every renderer's (console, JSON, HTML, notebook) input."""

    summary: Summary
    table: OpTable
    advice: Findings | None          # None: --no-advice
    memory: MemoryPayload | None     # None: the trace has no memory events
    health: Health
    calltree: CallTree | None = None  # None: the trace has no python_function events


def analyse(trace: Trace, *, group_by: str = "op", sort: str = "self_device", advice: bool = True) -> Analysed:
    """Run the report's analyses on a loaded trace, once, for whichever renderer shows them."""
    from ..analysis import op_table, summarize
    from ..analysis._choices import check_choices
    from ..analysis.advice.findings import trace_findings
    from ..analysis.beside import beside
    from ..analysis.device_events import device_events
    from ..analysis.health import trace_health
    from ..analysis.memory import memory_section
    from .calltree import call_tree_of

    check_choices(group_by, sort)   # a bad choice refused before any work, not after the diagnosis
    # the diagnosis here; the rest on another thread meanwhile (analysis/beside.py), each call on its own, so
    # an error or a Ctrl-C here drops those not begun
    with beside(trace) as submit:
        # over there first the device events (remembered per trace), which the fusion search here reads first and
        # the diagnosis after it: here meanwhile the search reads the ops (1 GB trace: the search 0.52 -> 0.38 s,
        # the analysis 1.68 -> 1.62 s). Then the call tree, beside the rest of the fusion search and the start of
        # the diagnosis: the two that need the most memory (at 1 GB about 0.4 and 0.5 GB of temporaries) overlap
        # little; side by side from the start they held more than the raw trace (peak RSS 1.18x raw). Freed
        # blocks serve either thread (one glibc arena: trace/_glibc.py)
        if advice:
            submit(lambda: device_events(trace))
        calltree = submit(lambda: call_tree_of(trace))
        summary, table = submit(lambda: summarize(trace)), submit(lambda: op_table(trace, group_by=group_by, sort=sort))
        memory, health = submit(lambda: memory_section(trace)), submit(lambda: trace_health(trace))
        findings = trace_findings(trace, submit=submit) if advice else None
        return Analysed(summary(), table(), findings, memory(), health(), calltree())


def report_view(analysed: Analysed, *, top: int | None = None, keep_metadata: bool = False) -> ReportView:
    """The report's records from the analyses: the op table with every row, the advice as
    :func:`advice_payload` sends it, the memory section where the trace has memory events; every string
    in them redacted (:func:`profuse.redact.redacted`) unless ``keep_metadata``."""
    a = analysed
    doc = report_document(a.summary, ops_payload(a.table), advice_payload(a.advice) if a.advice is not None else None,
                          keep_metadata=keep_metadata, memory=a.memory, health=a.health, calltree=a.calltree)
    return ReportView(document=redacted(doc, keep=keep_metadata), from_cache=a.summary.from_cache, top=top or None)
