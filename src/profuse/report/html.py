"""``profuse report --format html``: one self-contained file (no network when opened) with the
explorer's overview, ops, modules and a decimated timeline, built from the same front end."""
from __future__ import annotations

import re
from typing import Any

from ..frontend import STATIC, payload_json
from ..trace import Trace

ORDER = ("dom.js", "api.js", "timeline.js", "views.js", "app.js")
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")
_IMPORT = re.compile(r"^import .*?;\s*$", re.MULTILINE)
_EXPORT = re.compile(r"^export (?=(async )?(function|class|const|let))", re.MULTILINE)


def bundle_js() -> str:
    """The explorer's ES modules as one inline module: imports dropped, exports made local."""
    parts = []
    for name in ORDER:
        src = (STATIC / name).read_text()
        src = _IMPORT.sub("", src)
        src = _EXPORT.sub("", src)
        src = src.replace("import * as views from \"./views.js\";", "")
        parts.append(f"// --- {name}\n{src}")
    js = "\n".join(parts)
    js = js.replace("views[st.view]", "({ranks, overview, ops, timeline, modules, compiled, compare})[st.view]")
    return js.replace("</script", "<\\/script")


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
              f"<script type=\"module\">{bundle_js()}</script>")
    page = page.replace('<script type="module" src="/assets/app.js"></script>', script)
    return page.replace("<title>profuse explorer</title>", "<title>profuse report</title>")
