"""The notebook renderer: what ``profuse.report(path)`` and ``profuse.table(path)`` return. In Jupyter
it shows the self-contained HTML report (the same payloads and front end as ``--format html``) inline,
in a sandboxed ``<iframe srcdoc>``: offline, no server, the report's own CSP, nothing from the trace
parsed as the notebook's markup. Elsewhere its ``repr`` is one line."""
from __future__ import annotations

import html
from collections.abc import Callable

from ..payloads.build import ReportPayloads
from ..payloads.report import ReportView
from ..redact import redact_text
from .html import render_html

FRAME_HEIGHT_PX = 640


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
                           f"device time {doc.totals.device_us:.1f} µs>")

    def _repr_html_(self) -> str:
        """The HTML report in a sandboxed frame: its scripts run there, apart from the notebook's page."""
        return (f'<iframe class="profuse-report" sandbox="allow-scripts" srcdoc="{html.escape(self.html, quote=True)}" '
                f'style="width: 100%; height: {FRAME_HEIGHT_PX}px; border: 1px solid #ddd"></iframe>')
