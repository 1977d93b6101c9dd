"""``profuse diff`` grouped (issue 46.5): one row per (op, input shapes) over the module instances it ran
in, each group's instances a drill-down in JSON; what one backend names its own way (attention variants)
matched by class; the console at 80 columns; the explorer's Compare view showing the same groups and the
same signed deltas as the console.

Expected figures come from the raw trace JSON (oracle.py's readings: the innermost op around a launch,
the innermost ``nn.Module`` scope around an op), not from profuse.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest
from conftest import trace_path
from oracle import OP_CATS, category, complete_events, innermost_around, is_device, launch_of, launches, module_around, op_of
from rich.cells import cell_len

from profuse.cli import main

torch = pytest.importorskip("torch")

H100, MI300 = "h100_bert_small.json.gz", "mi300_bert_small.json.gz"
_STEP = re.compile(r"^ProfilerStep#\d+$")
Key = tuple[str, str, str]   # (op name, Input Dims as recorded, module instance)


# ---- independent readings of the raw JSON ---------------------------------------------------------

def _key(events: list[dict], e: dict) -> Key:
    mod = module_around(events, e)
    dims = (e.get("args") or {}).get("Input Dims")
    return (_STEP.sub("ProfilerStep#*", e["name"]), json.dumps(dims) if dims is not None else "",
            mod["name"].removeprefix("nn.Module: ") if mod is not None else "")


def _per_key(events: list[dict], own: dict[int, float]) -> dict[Key, tuple[int, float]]:
    out: dict[Key, tuple[int, float]] = {}
    for e in events:
        if category(e) in OP_CATS:
            k = _key(events, e)
            calls, us = out.get(k, (0, 0.0))
            out[k] = (calls + 1, us + own.get(e["order"], 0.0))
    return out


def device_by_key(path: Path) -> dict[Key, tuple[int, float]]:
    """(op, dims, module) -> (calls, µs of the device events it launched itself): each device event to its
    runtime call by correlation, to the innermost op holding the call's start."""
    events = complete_events(path)
    by_corr, own = launches(events), {}
    for d in filter(is_device, events):
        launch = launch_of(d, by_corr)
        op = op_of(events, launch) if launch is not None else None
        if op is not None:
            own[op["order"]] = own.get(op["order"], 0.0) + float(d["dur"])
    return _per_key(events, own)


def cpu_self_by_key(path: Path) -> dict[Key, tuple[int, float]]:
    """(op, dims, module) -> (calls, µs of self CPU time): an op's duration less its direct children's
    (the ops whose innermost enclosing op it is), never below 0."""
    events = complete_events(path)
    ops = [e for e in events if category(e) in OP_CATS]
    children: dict[int, float] = {}
    for e in ops:
        parent = innermost_around(ops, e, lambda o: True)
        if parent is not None:
            children[parent["order"]] = children.get(parent["order"], 0.0) + float(e["dur"])
    return _per_key(events, {e["order"]: max(float(e["dur"]) - children.get(e["order"], 0.0), 0.0) for e in ops})


def by_group(keys: dict[Key, tuple[int, float]]) -> dict[tuple[str, str], dict[str, tuple[int, float]]]:
    """(op, dims) -> module -> (calls, µs)."""
    out: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
    for (name, dims, mod), v in keys.items():
        out.setdefault((name, dims), {})[mod] = v
    return out


def _dims(shape: str) -> str:
    return json.dumps(json.loads(shape)) if shape else ""


def diff_json(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> dict:
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def console_ops(out: str) -> list[list[str]]:
    """The cells of the console's op table, row by row (its title, header and rule skipped)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Ops, by name and shapes"))
    rule = next(i for i in range(start, len(lines)) if "╇" in lines[i])
    rows = []
    for ln in lines[rule + 1:]:
        if "│" not in ln:
            break
        rows.append([c.strip() for c in ln.split("│")])
    return rows


# ---- two real recordings: one model in fp32 and in bf16 --------------------------------------------

LAYERS = 6


def _record(path: Path, dtype: torch.dtype) -> Path:
    """Six Linear(64, 64) + ReLU blocks and a Linear(64, 16), three steps, on the CPU, with shapes and
    module scopes. torch's Python tracer now and then decodes a freed frame name when the profile is read
    back (UnicodeDecodeError, torch 2.13; tests/test_memory.py): that recording is taken again."""
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(64, 64), nn.ReLU())], nn.Linear(64, 16))
    model = model.to(dtype)
    x = torch.randn(32, 64, dtype=dtype)
    for attempt in range(5):
        try:
            with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                         record_shapes=True, with_stack=True) as prof:
                for _ in range(3):
                    with torch.profiler.record_function("step"):
                        model(x)
        except UnicodeDecodeError:
            assert attempt < 4, "torch could not read back its own profile five times in a row"
            continue
        prof.export_chrome_trace(str(path))
        return path
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def dtype_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dtypes")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # the machine's cores are shared: one thread keeps the two runs alike
    try:
        return _record(out / "fp32.json", torch.float32), _record(out / "bf16.json", torch.bfloat16)
    finally:
        torch.set_num_threads(threads)


def test_one_model_in_two_dtypes_gives_one_row_per_op_and_shapes(dtype_pair, capsys):
    fp32, bf16 = dtype_pair
    d = diff_json(capsys, fp32, bf16)
    want_a, want_b = by_group(cpu_self_by_key(fp32)), by_group(cpu_self_by_key(bf16))
    groups = {(g["name"], _dims(g["shape"])): g for g in d["op_groups"]}
    # one row per (op, shapes): not one per module instance
    assert len(groups) == len(d["op_groups"]) == len(want_a.keys() | want_b.keys())
    assert set(groups) == want_a.keys() | want_b.keys()
    assert len(d["ops"]) > 3 * len(d["op_groups"]), "the per-instance rows the groups replace"
    for key, g in groups.items():
        ma, mb = want_a.get(key, {}), want_b.get(key, {})
        assert g["instances"] == len(ma.keys() | mb.keys()) == len(g["by_module"]), key
        assert (g["a_calls"], g["b_calls"]) == (sum(c for c, _ in ma.values()), sum(c for c, _ in mb.values())), key
        assert g["a_us"] == pytest.approx(sum(u for _, u in ma.values()), abs=2e-3), key
        assert g["b_us"] == pytest.approx(sum(u for _, u in mb.values()), abs=2e-3), key
        assert g["delta_us"] == pytest.approx(g["b_us"] - g["a_us"], abs=2e-3)
        assert g["matched_by"] == "name" and g["b_name"] == g["name"], "the same model: every op in both runs"
        # the drill-down: each module instance with its own figures
        for inst in g["by_module"]:
            ca, ua = ma.get(inst["module"], (0, 0.0))
            cb, ub = mb.get(inst["module"], (0, 0.0))
            assert (inst["a_calls"], inst["b_calls"]) == (ca, cb), (key, inst["module"])
            assert inst["a_us"] == pytest.approx(ua, abs=1e-3) and inst["b_us"] == pytest.approx(ub, abs=1e-3)
    gemm = groups[("aten::addmm", json.dumps([[64], [32, 64], [64, 64], [], []]))]
    assert gemm["instances"] == LAYERS and gemm["a_calls"] == 3 * LAYERS
    assert sorted(m["module"] for m in gemm["by_module"]) == sorted(f"Linear_{i}" for i in range(LAYERS))
    # largest change first
    changes = [abs(g["delta_us"]) for g in d["op_groups"]]
    assert changes == sorted(changes, reverse=True)


# ---- across vendors: attention named by its backend -------------------------------------------------

# What a ROCm build without flash attention dispatches instead (torch's schema: the efficient kernel takes an
# attention bias and more arguments): (new name, argument count)
EFFICIENT = {"aten::_scaled_dot_product_flash_attention": ("aten::_scaled_dot_product_efficient_attention", 8),
             "aten::_flash_attention_forward": ("aten::_efficient_attention_forward", 14)}


def _efficient_mi300(tmp_path: Path) -> Path:
    """The MI300X BERT trace with its attention ops as the efficient-attention backend names them, their
    query, key and value and their device time as they were."""
    with gzip.open(trace_path(MI300)) as fh:
        doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") in EFFICIENT:
            e["name"], n = EFFICIENT[e["name"]]
            args = e.get("args") or {}
            for field, empty in (("Input Dims", []), ("Input Strides", []), ("Input type", ""), ("Concrete Inputs", "")):
                if isinstance(args.get(field), list):
                    args[field] = args[field][:3] + [empty] * (n - 3)
    out = tmp_path / "mi300_efficient_attention.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(doc, fh)
    return out


def test_attention_variants_across_vendors_pair_by_class_and_the_matched_share_rises(tmp_path, capsys):
    h100, mi300 = trace_path(H100), _efficient_mi300(tmp_path)
    d = diff_json(capsys, h100, mi300)
    want_a, want_b = device_by_key(h100), device_by_key(mi300)
    ga, gb = by_group(want_a), by_group(want_b)
    dev_a = sum(float(e["dur"]) for e in complete_events(h100) if is_device(e))
    dev_b = sum(float(e["dur"]) for e in complete_events(mi300) if is_device(e))
    # matched by name and shapes alone, the attention ops would be one side's only
    by_name_b = sum(us for k, mods in gb.items() if k in ga for _c, us in mods.values())
    attention_b = sum(us for (name, _), mods in gb.items() if name in dict(EFFICIENT.values()) for _c, us in mods.values())
    assert attention_b > 0.2 * dev_b, "attention is a quarter of the MI300X's device time"
    assert 100 * by_name_b / dev_b < 75
    # matched by class, they pair up: the outer op with the outer op, the kernel's op with the kernel's op
    pairs = {(g["name"], g["b_name"]): g for g in d["op_groups"] if g["matched_by"] == "class"}
    assert set(pairs) == {(a, b) for a, (b, _n) in EFFICIENT.items()}
    for (a_name, b_name), g in pairs.items():
        a_mods = next(m for (n, _), m in ga.items() if n == a_name)
        b_mods = next(m for (n, _), m in gb.items() if n == b_name)
        assert {m["module"] for m in g["by_module"]} == a_mods.keys() == b_mods.keys()
        assert g["instances"] == 4 and g["op_class"] == "attention"
        assert g["a_us"] == pytest.approx(sum(u for _, u in a_mods.values()), abs=2e-3)
        assert g["b_us"] == pytest.approx(sum(u for _, u in b_mods.values()), abs=2e-3)
        assert (g["a_calls"], g["b_calls"]) == (4, 4)
    # so the matched share of B's device time rises by the attention's share, to all of it here
    assert d["matched_device_pct"]["b"] == pytest.approx(100 * (by_name_b + attention_b) / dev_b, abs=0.01)
    assert d["matched_device_pct"]["b"] > 100 * by_name_b / dev_b + 20
    by_name_a = sum(us for k, mods in ga.items() if k in gb for _c, us in mods.values())
    attention_a = sum(g["a_us"] for g in pairs.values())
    assert d["matched_device_pct"]["a"] == pytest.approx(100 * (by_name_a + attention_a) / dev_a, abs=0.01)
    # the untouched pair matches the same attention by name
    real = diff_json(capsys, h100, trace_path(MI300))
    named = [g for g in real["op_groups"] if g["name"] == "aten::_flash_attention_forward"]
    assert [g["matched_by"] for g in named] == ["name"] and not any(g["matched_by"] == "class" for g in real["op_groups"])
    assert named[0]["a_us"] == pairs[("aten::_flash_attention_forward", "aten::_efficient_attention_forward")]["a_us"]


def _record_attention(path: Path, backend: object) -> Path:
    """Two attention blocks on the CPU with scaled_dot_product_attention held to one backend."""
    from torch import nn
    from torch.nn.attention import sdpa_kernel

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(64, 192), nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(2, 32, 3, 4, 16).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.o(y.transpose(1, 2).reshape(2, 32, 64))

    torch.manual_seed(0)
    model, x = nn.Sequential(Attn(), Attn()), torch.randn(2, 32, 64)
    for attempt in range(5):
        try:
            with torch.no_grad(), sdpa_kernel(backend), torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
                model(x)
        except UnicodeDecodeError:
            assert attempt < 4, "torch could not read back its own profile five times in a row"
            continue
        prof.export_chrome_trace(str(path))
        return path
    raise AssertionError("unreachable")


def test_cpu_flash_and_math_attention_recorded_here_pair_by_class(tmp_path, capsys):
    from torch.nn.attention import SDPBackend

    flash = _record_attention(tmp_path / "flash.json", SDPBackend.FLASH_ATTENTION)
    math = _record_attention(tmp_path / "math.json", SDPBackend.MATH)
    d = diff_json(capsys, flash, math)
    (pair,) = [g for g in d["op_groups"] if g["matched_by"] == "class"]
    assert (pair["name"], pair["b_name"]) == ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                              "aten::_scaled_dot_product_attention_math")
    assert sorted(m["module"] for m in pair["by_module"]) == ["Attn_0", "Attn_1"]
    ga, gb = by_group(cpu_self_by_key(flash)), by_group(cpu_self_by_key(math))
    a_us = sum(u for (n, _), mods in ga.items() if n == pair["name"] for _, u in mods.values())
    assert pair["a_us"] == pytest.approx(a_us, abs=2e-3)
    # the math backend's own matmuls and softmax stay B's alone: their names say what they are
    only_b = {g["name"] for g in d["op_groups"] if not g["matched_by"] and g["a_calls"] == 0}
    assert {"aten::bmm", "aten::_softmax"} <= only_b
    total_a = sum(u for mods in ga.values() for _, u in mods.values())
    by_name_a = sum(u for k, mods in ga.items() if k in gb for _, u in mods.values())
    assert d["matched_device_pct"]["a"] == pytest.approx(100 * (by_name_a + a_us) / total_a, abs=0.05)


# ---- the console at 80 columns ----------------------------------------------------------------------

@pytest.mark.parametrize("pair", [(H100, MI300), ("a100_alexnet.json.gz", "a100_event_sync.json.gz"),
                                  ("compare_base.json.gz", "compare_test.json.gz")])
def test_console_fits_80_columns_and_prints_the_json_deltas(pair, monkeypatch, capsys):
    from profuse.report.diff import signed_us

    a, b = (trace_path(n) for n in pair)
    d = diff_json(capsys, a, b)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    too_long = [ln for ln in out.splitlines() if cell_len(ln) > 80]
    assert not too_long, "\n".join(too_long)
    # the op table: one line per group (nothing wrapped), in the JSON's order, each with its signed delta
    rows, top = console_ops(out), d["op_groups"][:15]
    assert len(rows) == len(top)
    for row, g in zip(rows, top, strict=True):
        assert row[-2] == signed_us(g["delta_us"]), (row, g["name"])
        name = g["name"] if g["matched_by"] != "class" else f"{g['name']} → {g['b_name']}"
        assert row[0] == name or ("…" in row[0] and name.startswith(row[0].split("…")[0])
                                  and name.endswith(row[0].split("…")[1])), "cut in the middle"
    assert "columns left out at this width" in out


def test_signed_changes_round_as_the_browser_does():
    from profuse.report.diff import factor_words, shapes_text, signed_us, to_fixed

    # JavaScript's toFixed rounds the exact binary value, halves up: 2.25 -> "2.3", 1.15 (1.1499...) -> "1.1"
    assert to_fixed(2.25, 1) == "2.3" and to_fixed(1.15, 1) == "1.1" and to_fixed(1.125, 2) == "1.13"
    assert signed_us(76.248) == "+76.2 µs" and signed_us(-1234.5) == "-1.23 ms" and signed_us(0.0) == "0.0 µs"
    assert signed_us(2.5e6) == "+2.50 s"
    assert factor_words(3.0384) == "3.04x slower" and factor_words(0.6186) == "1.62x faster"
    assert shapes_text("[[512], [141, 512], [512, 512], [], []]") == "512, 141x512, 512x512"
    assert shapes_text("[[1, 141, 512], [], [512], [512], []]") == "1x141x512, -, 512, 512"


# ---- the Compare view ------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
needs_browser = pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
                                   reason="Debian chromium not installed (make test installs it)")


@needs_browser
def test_compare_view_shows_the_groups_with_the_consoles_deltas(capsys, monkeypatch):
    from explorer_util import running
    from playwright.sync_api import sync_playwright

    import profuse
    from profuse.report.diff import signed_us

    a_path, b_path = trace_path(H100), trace_path(MI300)
    d = diff_json(capsys, a_path, b_path)
    monkeypatch.setenv("COLUMNS", "200")
    main(["diff", str(a_path), str(b_path), "--top", "0"])
    console = capsys.readouterr().out
    a, b = profuse.load(a_path), profuse.load(b_path)
    with sync_playwright() as p, running([a, b]) as url:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url.at("/#view=compare"))
        page.wait_for_selector("body[data-ready=compare], body[data-ready=error]", timeout=15000)
        assert page.get_attribute("body", "data-ready") == "compare"
        rows = page.locator("#diff-ops > table > tbody > tr")
        cells = rows.evaluate_all("rs => rs.map(r => [...r.children].map(c => c.innerText))")
        head = page.locator("#diff-ops > table > thead th").all_inner_texts()
        grouped_height = page.evaluate("document.documentElement.scrollHeight")
        table_height = page.locator("#diff-ops > table").bounding_box()["height"]
        row_height = rows.first.bounding_box()["height"]
        # a click opens the group's module instances
        rows.first.click()
        inner = page.locator("#diff-ops .diff-instances tbody tr").evaluate_all(
            "rs => rs.map(r => [...r.children].map(c => c.innerText))")
        inner_head = page.locator("#diff-ops .diff-instances thead th").all_inner_texts()
        browser.close()
    a.close()
    b.close()
    assert not errors, errors
    # one row per op and shapes, in the JSON's order, with the console's signed delta and B/A
    assert len(cells) == len(d["op_groups"]) < len(d["ops"])
    delta, ratio = head.index("Delta"), head.index("B/A")
    shown = console_ops(console)
    assert len(shown) == len(cells)
    for row, on_console, g in zip(cells, shown, d["op_groups"], strict=True):
        assert row[0] == (g["name"] if len(g["name"]) <= 60 else g["name"][:59] + "…")
        assert row[delta] == signed_us(g["delta_us"]) and row[ratio] == row_ratio_of(g)
        assert (row[delta], row[ratio]) == (on_console[-2], on_console[-1]), g["name"]
    # the page holds a row per group: the per-instance table it replaces held up to 200 (one per instance)
    assert table_height <= (len(d["op_groups"]) + 1) * row_height * 1.05, "one line per row, nothing wrapped"
    assert len(d["ops"]) >= 3 * len(d["op_groups"])
    assert grouped_height < min(200, len(d["ops"])) * row_height, "the per-instance rows alone would be taller"
    first = d["op_groups"][0]
    assert [r[0] for r in inner] == [m["module"] for m in first["by_module"]]
    assert [r[inner_head.index("Delta")] for r in inner] == [signed_us(m["delta_us"]) for m in first["by_module"]]


def row_ratio_of(g: dict) -> str:
    """The B/A words of one group as the console writes them (report/diff.py's row_ratio)."""
    from profuse.analysis.compare.diff import DiffRow
    from profuse.report.diff import row_ratio

    return row_ratio(DiffRow(g["name"], g["a_calls"], g["b_calls"], g["a_us"], g["b_us"], g["delta_us"], g["ratio"]))
