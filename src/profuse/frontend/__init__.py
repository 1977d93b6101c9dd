"""The browser front end shared by the explorer (served file by file) and the HTML report (inlined).

Data only: the scripts, CSS and page in ``static/``, the one way a payload is embedded in a page,
and the one inline script a report needs. It imports nothing from profuse, so ``report`` and
``explorer`` can both depend on it without depending on each other.

The scripts are classic scripts that each add one member to a ``profuse`` namespace, in the order
of ``MODULES``; a start script then calls ``profuse.app.start(source)``. The explorer's page loads
them one by one (``script_tags()``); a report concatenates them (``inline_script()``): no rewriting.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STATIC = Path(__file__).parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
MODULES = ("dom.js", "api.js", "timeline_model.js", "timeline_view.js", "diagnosis.js", "views.js", "app.js")
EXPLORER_START = "start_explorer.js"
REPORT_START = "start_report.js"
_NOT_INLINE = ("</script", "<!--", "<script")


def assets() -> dict[str, tuple[bytes, str]]:
    """Every front-end file with its content type, read once: the only files the explorer serves."""
    return {p.name: (p.read_bytes(), TYPES.get(p.suffix, "application/octet-stream"))
            for p in STATIC.iterdir() if p.is_file() and p.suffix in TYPES}


def payload_json(obj: Any) -> str:
    """JSON safe to embed in an HTML ``<script type="application/json">`` block."""
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def script_tags() -> str:
    """The explorer page's script elements in load order, as ``index.html`` has them: what a report
    replaces with one inline ``<script>`` holding ``inline_script()``."""
    return "".join(f'<script src="/assets/{name}"></script>\n' for name in (*MODULES, EXPLORER_START))


def inline_script() -> str:
    """The one script an HTML report inlines: the modules and the report's start script, joined.

    Raises ValueError if a file holds text that would end or confuse the inline ``<script>``
    element (the files are ours: this guards against an edit, it rewrites nothing).
    """
    parts = []
    for name in (*MODULES, REPORT_START):
        src = (STATIC / name).read_text(encoding="utf-8")
        bad = [s for s in _NOT_INLINE if s in src.lower()]
        if bad:
            raise ValueError(f"{name}: holds {bad[0]!r}, which cannot appear inside an inline <script>")
        parts.append(f"// --- {name}\n{src}")
    return "\n".join(parts)
