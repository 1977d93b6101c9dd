"""``profuse report --format html``: one self-contained file (no network when opened) with the
explorer's overview, ops (openable to their kernels), modules and a decimated timeline, built from
the payloads ``profuse report`` computed and the shared front end."""
from __future__ import annotations

import re

import msgspec

from ..frontend import STATIC, payload_json
from ..payloads.build import ReportPayloads

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


def embedded(p: ReportPayloads) -> dict[str, object]:
    """The payloads under the API paths the front end asks for (``/api/0/ops`` -> ``0/ops``)."""
    return {"runs": p.runs, "0/overview": p.overview, "0/ops": p.ops, "0/op_kernels": p.op_kernels,
            "0/lanes": p.lanes, "0/timeline": p.timeline, "0/modules": p.modules}


def render_html(payloads: ReportPayloads) -> str:
    """The page: the front end's HTML with its CSS, data and script inlined, under a no-network CSP."""
    page = (STATIC / "index.html").read_text()
    css = (STATIC / "style.css").read_text().replace("</style", "<\\/style")
    page = page.replace('<link rel="stylesheet" href="/assets/style.css">', f"<style>{css}</style>")
    page = page.replace("<head>", f'<head>\n<meta http-equiv="Content-Security-Policy" content="{CSP}">', 1)
    data = payload_json(msgspec.to_builtins(embedded(payloads)))
    script = (f'<script type="application/json" id="profuse-data">{data}</script>\n'
              f"<script type=\"module\">{bundle_js()}</script>")
    page = page.replace('<script type="module" src="/assets/app.js"></script>', script)
    return page.replace("<title>profuse explorer</title>", "<title>profuse report</title>")
