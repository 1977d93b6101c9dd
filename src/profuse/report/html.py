"""``profuse report --format html``: one self-contained file (no network when opened) with the
explorer's overview, ops (openable to their kernels), modules and a decimated timeline, built from
the payloads ``profuse report`` computed and the shared front end."""
from __future__ import annotations

import msgspec

from ..frontend import STATIC, inline_script, payload_json, script_tags
from ..payloads.build import ReportPayloads

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def embedded(p: ReportPayloads) -> dict[str, object]:
    """The payloads under the API paths the front end asks for (``/api/0/ops`` -> ``0/ops``)."""
    return {"runs": p.runs, "0/overview": p.overview, "0/ops": p.ops, "0/op_kernels": p.op_kernels,
            "0/lanes": p.lanes, "0/timeline": p.timeline, "0/modules": p.modules,
            **({"0/memory": p.memory} if p.memory is not None else {})}


def render_html(payloads: ReportPayloads) -> str:
    """The page: the front end's HTML with its CSS, data and script inlined, under a no-network CSP."""
    page = (STATIC / "index.html").read_text()
    css = (STATIC / "style.css").read_text().replace("</style", "<\\/style")
    page = page.replace('<link rel="stylesheet" href="/assets/style.css">', f"<style>{css}</style>")
    page = page.replace("<head>", f'<head>\n<meta http-equiv="Content-Security-Policy" content="{CSP}">', 1)
    data = payload_json(msgspec.to_builtins(embedded(payloads)))
    script = (f'<script type="application/json" id="profuse-data">{data}</script>\n'
              f"<script>{inline_script()}</script>\n")
    page = page.replace(script_tags(), script)
    return page.replace("<title>profuse explorer</title>", "<title>profuse report</title>")
