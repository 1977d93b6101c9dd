"""``profuse report --format html``: one self-contained file (no network when opened) with the
explorer's overview, ops, modules and a decimated timeline, built from the same front end."""
from __future__ import annotations

from typing import Any

from ..frontend import STATIC, inline_script, payload_json, script_tags
from ..trace import Trace

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def payload(trace: Trace, *, keep_metadata: bool, timeline_width: int = 3000) -> dict[str, Any]:
    from ..explorer import data

    data.prepare(trace)
    return {
        "runs": [{"run": 0, "path": str(trace.path), "device_label": trace.device_label,
                  "events": trace.meta["events"]}],
        "0/overview": data.overview(trace, keep_metadata=keep_metadata),
        "0/ops": data.ops(trace, "op"),
        "0/lanes": data.lanes(trace),
        "0/timeline": data.timeline(trace, None, None, timeline_width),
        "0/modules": data.modules(trace),
    }


def render_html(trace: Trace, *, keep_metadata: bool = False) -> str:
    page = (STATIC / "index.html").read_text()
    css = (STATIC / "style.css").read_text().replace("</style", "<\\/style")
    page = page.replace('<link rel="stylesheet" href="/assets/style.css">', f"<style>{css}</style>")
    page = page.replace("<head>", f'<head>\n<meta http-equiv="Content-Security-Policy" content="{CSP}">', 1)
    data = payload_json(payload(trace, keep_metadata=keep_metadata))
    script = (f'<script type="application/json" id="profuse-data">{data}</script>\n'
              f"<script>{inline_script()}</script>\n")
    page = page.replace(script_tags(), script)
    return page.replace("<title>profuse explorer</title>", "<title>profuse report</title>")
