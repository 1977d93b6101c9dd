"""The browser front end shared by the explorer (served file by file) and the HTML report (inlined).

Data only: the ES modules, CSS and page in ``static/``, and the one way a payload is embedded in a
page. It imports nothing from profuse, so ``report`` and ``explorer`` can both depend on it without
depending on each other.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STATIC = Path(__file__).parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def assets() -> dict[str, tuple[bytes, str]]:
    """Every front-end file with its content type, read once: the only files the explorer serves."""
    return {p.name: (p.read_bytes(), TYPES.get(p.suffix, "application/octet-stream"))
            for p in STATIC.iterdir() if p.is_file() and p.suffix in TYPES}


def payload_json(obj: Any) -> str:
    """JSON safe to embed in an HTML ``<script type="application/json">`` block."""
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
