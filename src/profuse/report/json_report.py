"""``profuse report --format json``: the stable ``profuse.report/3`` document (``payloads.report``)."""
from __future__ import annotations

import msgspec

from ..payloads.report import ReportDocument


def render_json(doc: ReportDocument | msgspec.Struct | dict[str, object]) -> str:
    """A document (the report, or any other payload record) as indented JSON."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode()
