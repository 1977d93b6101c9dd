"""The notebook renderer: what ``profuse.report(path)`` and ``profuse.table(path)`` return.

``profuse.report`` (:class:`NotebookReport`) shows the self-contained HTML report (the same payloads and
front end as ``--format html``) inline in Jupyter, in a sandboxed ``<iframe srcdoc>``: offline, no server,
the report's own CSP, nothing from the trace parsed as the notebook's markup; elsewhere its ``repr`` is one
line. ``profuse.table`` (:class:`NotebookTable`) is the op table as ``profuse report`` prints it: its ``repr``
is that text, a notebook shows it as preformatted HTML; its hints name the Python API's arguments.
"""
from __future__ import annotations

import html
import io
from collections.abc import Callable

import msgspec

from ..payloads.build import ReportPayloads
from ..payloads.report import ReportView
from ..redact import redact_text
from ..units import fmt_us
from .html import render_html

FRAME_HEIGHT_PX = 640
TABLE_WIDTH = 200   # characters the op table is laid out in, as ``profuse report`` piped to a file
PRE_STYLE = ("white-space:pre;overflow-x:auto;line-height:normal;"
             "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace")


class NotebookReport:
    """One trace's report as a notebook shows it; ``view`` holds the records the console and JSON
    render; the HTML page (:attr:`html`) is built from ``payloads`` (a callable that builds them: on
    first use, so a terminal that never shows it never pays for it). A notebook is an output like any
    other (people share them): what it shows is redacted as ``profuse report`` redacts a file it writes,
    unless ``keep_metadata``."""

    def __init__(self, view: ReportView, payloads: Callable[[], ReportPayloads], *,
                 keep_metadata: bool = False) -> None:
        self.view = view
        self._payloads = payloads
        self._html: str | None = None
        self._keep = keep_metadata

    def _shown(self, text: str) -> str:
        return text if self._keep else redact_text(text)

    @property
    def html(self) -> str:
        """The self-contained HTML report (``profuse report --format html``'s page)."""
        if self._html is None:
            self._html = self._shown(render_html(self._payloads()))
        return self._html

    def __repr__(self) -> str:
        doc = self.view.document
        return self._shown(f"<profuse report of {doc.trace.path}: {len(doc.ops)} {doc.group_by} rows, "
                           f"{doc.device_label} time {fmt_us(doc.totals.device_us)}>")

    def _repr_html_(self) -> str:
        """The HTML report in a sandboxed frame: its scripts run there, apart from the notebook's page."""
        return (f'<iframe class="profuse-report" sandbox="allow-scripts" srcdoc="{html.escape(self.html, quote=True)}" '
                f'style="width: 100%; height: {FRAME_HEIGHT_PX}px; border: 1px solid #ddd"></iframe>')


class NotebookTable:
    """The op table of one trace as ``profuse.table`` returns it: the header, notes and op table as
    ``profuse report --no-advice`` prints them (:func:`~profuse.report.console.print_report`), its first
    ``view.top`` rows, and what the rest need in the Python API's words (``top=0``). ``repr`` (and ``str``)
    is that text, a notebook shows it as preformatted HTML; both are redacted unless ``keep_metadata``."""

    def __init__(self, view: ReportView, *, keep_metadata: bool = False) -> None:
        self.view = view
        self._keep = keep_metadata
        self._text: str | None = None

    @property
    def text(self) -> str:
        """The table as printed text (no colours), redacted unless ``keep_metadata``."""
        if self._text is None:
            self._text = self._render()
            if not self._keep:
                self._text = redact_text(self._text)
        return self._text

    def _render(self) -> str:
        from .console import SECTIONS, make_console, print_report

        doc, top = self.view.document, self.view.top
        shown = min(top or len(doc.ops), len(doc.ops))
        # the rows shown are given as the whole table: the console's own "N of M" line names CLI flags
        view = msgspec.structs.replace(self.view, top=None,
                                       document=msgspec.structs.replace(doc, ops=doc.ops[:shown]))
        out = io.StringIO()
        # the op table and what explains it; the call tree is the report's (profuse.report)
        print_report(make_console(file=out, width=TABLE_WIDTH, force_jupyter=False, color_system=None), view,
                     [sec for sec in SECTIONS if sec.name != "calltree"])
        if shown < len(doc.ops):
            out.write(f"{shown} of {len(doc.ops)} rows; top=N shows more, top=0 all, profuse.report(...) the "
                      f"whole report\n")
        return out.getvalue()

    def __repr__(self) -> str:
        return self.text.rstrip("\n")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        """The table as preformatted text: the same characters as ``repr``."""
        return f'<pre class="profuse-table" style="{PRE_STYLE}">{html.escape(self.text)}</pre>'
