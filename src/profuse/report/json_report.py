"""``profuse report --format json``: the stable ``profuse.report/4`` document (``payloads.report``)."""
from __future__ import annotations

import msgspec

from ..payloads.report import ReportDocument

# characters JSON may carry raw that a terminal acts on: C1 controls and bidi controls (JSON escapes C0 itself);
# written as \uXXXX, the document is the same (a reader decodes the same string) and safe to print
_ESCAPED = {cp: f"\\u{cp:04x}" for cp in (*range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                            *range(0x2066, 0x206A))}


def render_json(doc: ReportDocument | msgspec.Struct | dict[str, object]) -> str:
    """A document (the report, or any other payload record) as indented JSON, every character a terminal
    would act on escaped."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode().translate(_ESCAPED)
