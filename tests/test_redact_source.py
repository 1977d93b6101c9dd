"""Redaction on the data (issue 45, item 1): every string of every record is redacted once where the
record is built, so no output (JSON, console, HTML, sql, diff, explorer, MCP, notebook) shows a secret,
whatever character stands before it and whichever field of the trace or bundle holds it."""
from __future__ import annotations

import gzip
import json
import random
import string
from dataclasses import dataclass

import msgspec
import pytest
from conftest import trace_path
from explorer_util import running
from test_input_boundary import request

import profuse
from profuse.agents.mcp import Answers, Traces
from profuse.cli import main
from profuse.redact import REDACTED, redact_text

BASE = "h100_bert_small.json.gz"  # a real trace with ops, kernels, modules, threads and a Python stack


def _tail(rng: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


# token shapes: (the secret as planted, the part of it no output may show)
def _hf(r):
    t = _tail(r, 24)
    return "hf_" + t, t


def _sk(r):
    t = _tail(r, 24)
    return "sk-proj-" + t, t


def _akia(r):
    t = _tail(r, 16, string.ascii_uppercase + string.digits)
    return "AKIA" + t, t


def _ghp(r):
    t = _tail(r, 30)
    return "ghp_" + t, t


def _pat(r):
    t = _tail(r, 30)
    return "github_pat_" + t, t


def _slack(r):
    t = _tail(r, 20)
    return "xoxb-1234-" + t, t


def _jwt(r):
    t = _tail(r, 20)
    return f"eyJ{_tail(r, 12)}.eyJ{_tail(r, 12)}.{t}", t


def _bearer(r):
    t = _tail(r, 20)
    return "Authorization: Bearer " + t, t


def _url(r):  # the password holds an @ (and the user is an e-mail address)
    t = _tail(r, 12)
    return f"https://bob@corp.example:p@ss{t}@db.example/x", t


def _url_amp(r):  # the password holds what the HTML report's JSON writes escaped (& < ä as \u0026 ...)
    t = _tail(r, 12)
    return f"postgres://svc:p&<ä{t}@db.example/x", t


def _url_user(r):  # user-info with no password: a token as the user
    t = _tail(r, 20)
    return f"https://tok{t}@huggingface.co/x", t


def _env_utf8(r):  # a value the HTML report's data (JSON, ASCII only) writes escaped: \u00e4
    t = _tail(r, 16)
    return f"API_TOKEN=äö{t}", t


def _env(name):
    def make(r):
        t = _tail(r, 16)
        return f"{name}={t}", t
    make.__name__ = name
    return make


SHAPES = [_hf, _sk, _akia, _ghp, _pat, _slack, _jwt, _bearer, _url, _url_amp, _url_user, _env_utf8, _env("DB_PASS"),
          _env("db_pass"), _env("MY_SECRET"), _env("MY_PASSWD"), _env("HF_TOKEN"), _env("AWS_SECRET_ACCESS_KEY"),
          _env("X_KEY")]

# what stands before a secret: every C0 and C1 control, bidi marks, escapes as outputs write them, terminal
# control sequences, punctuation
C0 = [chr(c) for c in range(0x20) if c != 0]  # NUL: a name with NUL is cut by DuckDB (tested apart, below)
C1 = [chr(c) for c in range(0x7F, 0xA0)]
BIDI = ["\u061c", "\u200b", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]
ESCAPES = ["\\t", "\\n", "\\x01", "\\x1b", "\\u0085", "\\u202e", "\x1b[31m", "\x1b[1;4m", "\x9b0m", "\\x1b[0m",
           "\\u001b[2J", "\x1b]0;title\x07", "\x1bM"]
PUNCT = [*string.punctuation, " ", "\u00a0", "é", "\u3000"]
BEFORE = C0 + C1 + BIDI + ESCAPES + PUNCT


@dataclass
class Planted:
    """A bundle folder holding a real trace rewritten with secrets, and what no output may show."""

    folder: object
    gone: dict[str, str]   # where it was planted -> the secret's part no output may show
    op: str                # one planted op name (as the trace holds it)


FIELDS = ("op", "kernel", "module", "thread", "trace_name", "annotation", "error", "argv", "path")


def plant(tmp_path, secrets: dict[str, tuple[str, str]], name: str = "bundle") -> Planted:
    """``secrets``: field -> (what is planted, the part no output may show), ``field`` one of FIELDS
    (``<field>:<n>`` plants several in one field). Each op, kernel and module name keeps its own name
    before the secret, so the trace's tables and analyses stay as they were."""
    doc = json.loads(gzip.decompress(trace_path(BASE).read_bytes()))
    by_field: dict[str, list[str]] = {}
    for key, (value, _) in secrets.items():
        by_field.setdefault(key.split(":")[0], []).append(value)
    renamed: dict[tuple[str, str], str] = {}

    def rename(cat: str, name: str, pool: list[str]) -> str:
        if (cat, name) not in renamed and len(renamed_in(cat)) < len(pool):
            renamed[(cat, name)] = name + pool[len(renamed_in(cat))]
        return renamed.get((cat, name), name)

    def renamed_in(cat):
        return [k for k in renamed if k[0] == cat]

    for e in doc["traceEvents"]:
        cat, n = e.get("cat"), e.get("name", "")
        if cat == "cpu_op" and by_field.get("op"):
            e["name"] = rename("op", n, by_field["op"])
        elif cat == "kernel" and by_field.get("kernel"):
            e["name"] = rename("kernel", n, by_field["kernel"])
        elif cat == "python_function" and n.startswith("nn.Module: ") and by_field.get("module"):
            cls, _, idx = n[len("nn.Module: "):].rpartition("_")
            e["name"] = "nn.Module: " + rename("module", cls, by_field["module"]) + "_" + idx
        elif cat == "user_annotation" and by_field.get("annotation"):
            e["name"] = n + " ".join(by_field["annotation"])
        elif e.get("ph") == "M" and n == "thread_name":
            e["args"]["name"] = e["args"]["name"] + " ".join(by_field.get("thread", []))
    doc["traceName"] = "serve.py " + " ".join(by_field.get("trace_name", []))
    folder = tmp_path / (name + "".join(v for v in by_field.get("path", [])).replace("/", "_"))
    folder.mkdir()
    (folder / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    argv = ["serve.py", *by_field.get("argv", [])]
    meta = {"schema": "profuse.bundle/2", "status": "failed", "command": argv,
            "error": "RuntimeError: connect failed " + " ".join(by_field.get("error", [])),
            "run": {"argv": argv, "exit_code": 1, "error": "Traceback " + " ".join(by_field.get("error", []))}}
    (folder / "meta.json").write_text(json.dumps(meta))
    op = next(iter(v for (c, _), v in renamed.items() if c == "op"), "aten::linear")
    return Planted(folder, {k: g for k, (_, g) in secrets.items()}, op)


SQL = ["SELECT DISTINCT name FROM events", "SELECT * FROM threads", "SELECT * FROM meta",
       "SELECT list(DISTINCT name) AS names FROM events"]


def _cli(capsys, *argv: str) -> str:
    code = main([*argv, "--no-cache"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out + out.err


def cli_outputs(tmp_path, capsys, p: Planted, *, keep: bool = False) -> dict[str, str]:
    """What ``profuse report`` (JSON, console, HTML), ``profuse sql`` and, unless ``keep`` (``profuse diff``
    has no ``--keep-metadata``), ``profuse diff`` print or write of the planted bundle."""
    k = ["--keep-metadata"] if keep else []
    path = str(p.folder)
    out = {"report json": _cli(capsys, "report", path, "--format", "json", *k),
           "report console": _cli(capsys, "report", path, "--top", "0", *k)}
    html = tmp_path / f"r{len(k)}.html"
    out["report html"] = _cli(capsys, "report", path, "--format", "html", "-o", str(html), *k) + html.read_text()
    for fmt in ("json", "table", "csv"):
        out[f"sql {fmt}"] = "".join(_cli(capsys, "sql", path, q, "--format", fmt, *k) for q in SQL)
    if keep:
        return out
    base = str(trace_path(BASE))
    for fmt in ("table", "json", "markdown"):
        code = main(["diff", base, path, "--format", fmt, "--no-cache"])
        got = capsys.readouterr()
        assert code in (0, 1), got.err
        out[f"diff {fmt}"] = got.out + got.err
    return out


def explorer_outputs(p: Planted, *, keep: bool = False) -> dict[str, str]:
    """The explorer API's answers over the planted bundle (and comparing it with the original trace)."""
    out = {}
    with profuse.load(p.folder, cache=False) as t, profuse.load(trace_path(BASE), cache=False) as b:
        with running([t], keep_metadata=keep) as url:
            ops = request(url.at("/api/0/ops"))
            shown_key = next(r["key"] for r in json.loads(ops[1])["rows"]
                             if r["key"] == (p.op if keep else redact_text(p.op)))
            for route in ("/api/runs", "/api/0/overview", "/api/0/lanes", "/api/0/timeline", "/api/0/modules",
                          "/api/0/compiled", "/api/0/ops?group_by=module", "/api/0/ops?group_by=kernel",
                          "/api/0/op_kernels?key=" + _quote(shown_key)):
                status, body = request(url.at(route))[:2]
                assert status == 200, (route, body[:200])
                out["explorer " + route] = body.decode()
            out["explorer /api/0/ops"] = ops[1].decode()
        with running([b, t], keep_metadata=keep) as url:
            status, body = request(url.at("/api/compare"))[:2]
            assert status == 200, body[:200]
            out["explorer /api/compare"] = body.decode()
    return out


def _quote(s: str) -> str:
    import urllib.parse

    return urllib.parse.quote(s, safe="")


def mcp_outputs(p: Planted) -> dict[str, str]:
    """The MCP tools' answers over the planted bundle."""
    traces = Traces(cache=False)
    answers = Answers(traces)
    path = str(p.folder)
    try:
        out = {"mcp report": answers.report(path, levers=50), "mcp sql": answers.sql(path, SQL[3]),
               "mcp op": answers.op(path, redact_text(p.op)), "mcp diff": answers.diff(str(trace_path(BASE)), path),
               "mcp module": answers.module(path, "BertModel")}
    finally:
        traces.close()
    return out


def notebook_outputs(p: Planted) -> dict[str, str]:
    """``profuse.report(path)`` as a notebook shows it, and its repr."""
    nb = profuse.report(str(p.folder))
    return {"notebook _repr_html_": nb._repr_html_(), "notebook repr": repr(nb)}


def shown(outputs: dict[str, str], gone: dict[str, str]) -> list[str]:
    """``where: field`` for each planted secret that an output shows."""
    return [f"{where}: {field}" for where, text in outputs.items() for field, secret in gone.items()
            if secret in text]


def fixed_secrets() -> dict[str, tuple[str, str]]:
    """Every shape, after a tab, a newline, \\x01, ESC or U+0085, in every field."""
    rng = random.Random(45)
    befores = ["\t", "\n", "\x01", "\x1b", "\x85"]
    out = {}
    for i, shape in enumerate(SHAPES):
        for j, field in enumerate(FIELDS):
            if (i + j) % 3:  # a third of the pairs: every shape in three fields, every field with six shapes
                continue
            made = NAME_SHAPES[i % len(NAME_SHAPES)] if field == "path" else shape  # a folder name holds no "/"
            value, gone = made(rng)
            before = befores[(i + j) % len(befores)] if field != "path" else "_"
            out[f"{field}:{made.__name__}"] = (" " + before + value if field == "path" else before + value, gone)
    return out


# argv is kept in meta.json but no output shows it, --keep-metadata or not (checked: none may show it)
NOT_SHOWN = ("argv",)


def _every_output(tmp_path, capsys, p: Planted) -> dict[str, str]:
    return {**cli_outputs(tmp_path, capsys, p), **explorer_outputs(p), **mcp_outputs(p), **notebook_outputs(p)}


def test_secrets_planted_in_every_field_reach_no_output(tmp_path, capsys):
    # GIVEN a real trace and its bundle with every secret shape (tokens, JWT, Bearer, URL user-info with an @ in
    # the password, DB_PASS=, db_pass=, MY_SECRET=, ...) after a tab, a newline, \x01, ESC or U+0085, in op,
    # kernel, module, thread and annotation names, the trace's name, the bundle's error and argv, its path
    p = plant(tmp_path, fixed_secrets())
    # WHEN every output shows it: report JSON, console and HTML, sql, diff, the explorer's API, MCP, notebook
    outputs = _every_output(tmp_path, capsys, p)
    # THEN no output shows any of them
    assert shown(outputs, p.gone) == []
    # and the names around them are still there, with the secret shown as [redacted]
    doc = json.loads(outputs["report json"])
    assert any(r["name"] == redact_text(p.op) and REDACTED in r["name"] for r in doc["ops"])
    assert p.op.split("\t")[0] in outputs["report console"] and "aten::" in outputs["explorer /api/0/ops"]
    # and the op's kernels are found by the key the explorer's op table showed (redacted; 200, not 404)
    assert "kernels" in json.loads(outputs[next(k for k in outputs if "op_kernels" in k)])


def test_keep_metadata_shows_every_planted_secret(tmp_path, capsys):
    # GIVEN the same planted bundle; WHEN the report, sql and the explorer are asked to keep metadata
    p = plant(tmp_path, fixed_secrets())
    kept = {**cli_outputs(tmp_path, capsys, p, keep=True), **explorer_outputs(p, keep=True)}
    # THEN each planted secret is shown by one of them as it was planted (the planting reached the outputs)
    missing = [f for f, secret in p.gone.items()
               if f.split(":")[0] not in NOT_SHOWN and not any(secret in text for text in kept.values())]
    assert missing == []
    assert p.gone["op:_hf"] in kept["report json"] and p.gone["op:_hf"] in kept["report console"]


# shapes a folder name can hold (no "/"): for the path field
NAME_SHAPES = [s for s in SHAPES if s not in (_url, _url_amp, _url_user)]


def fuzz_secrets(rng: random.Random, n: int) -> dict[str, tuple[str, str]]:
    """``n`` secrets of random shapes after random characters, spread over every field (three in the path:
    a folder name holds 255 bytes)."""
    out = {}
    fields = [f for f in FIELDS if f != "path"]
    for i in range(n):
        field = "path" if i < 3 else fields[i % len(fields)]
        value, gone = rng.choice(NAME_SHAPES if field == "path" else SHAPES)(rng)
        before = rng.choice(BEFORE)
        if field == "path" and before in ("/", "\\u001b[2J", "\\u202e", "\\u0085"):
            before = "\\t"
        out[f"{field}:{i}"] = (before + value, gone)
    return out


def test_fuzz_secret_shapes_after_any_character_in_any_field_of_a_trace(tmp_path, capsys):
    # GIVEN (fixed seed) 60 secrets of random shapes, each after a random character (C0 and C1 controls, bidi
    # marks, escapes as outputs write them, terminal sequences, punctuation), in random fields of a real trace
    rng = random.Random(20260045)
    p = plant(tmp_path, fuzz_secrets(rng, 60))
    # WHEN every output shows the trace; THEN none shows any of them
    assert shown(_every_output(tmp_path, capsys, p), p.gone) == []


def test_fuzz_every_shape_after_every_character_in_a_record():
    # GIVEN every secret shape after every character of the fuzz alphabet (NUL included), as a record's field,
    # a list item, a dict key and value, and a NamedTuple's field
    from typing import NamedTuple

    from profuse.errors import printable
    from profuse.redact import redacted

    class Row(msgspec.Struct, frozen=True):
        name: str
        names: list[str]
        args: dict[str, str]

    class Pair(NamedTuple):
        a: str
        n: int

    rng = random.Random(45)
    leaks = []
    for shape in SHAPES:
        for before in ["\x00", *BEFORE]:
            value, gone = shape(rng)
            s = f"aten::mm{before}{value} tail"
            rec = redacted([Row(s, [s], {s: s}), Pair(s, 1)])
            # WHEN redacted as a record, and as the output boundary's safety net sees it (JSON-escaped, as a
            # console writes a control character)
            texts = {"record": repr(rec), "json": redact_text(json.dumps(s)), "console": redact_text(printable(s)),
                     "json in json": redact_text(json.dumps(json.dumps(s)))}
            # THEN no form shows it, and the record's name before it is kept
            leaks += [f"{shape.__name__} after {before!r} in {k}" for k, t in texts.items() if gone in t]
            assert rec[0].name.startswith("aten::mm") and REDACTED in rec[0].name
    assert leaks == []


def test_redacted_copies_what_it_changes_and_keeps_the_rest():
    # GIVEN a record that a cache may hold, one field secret
    from profuse.redact import redacted

    class Row(msgspec.Struct, frozen=True):
        name: str
        n: int

    clean, secret = Row("aten::mm", 1), Row("aten::mm\thf_" + "a1" * 10, 2)
    rows = [clean, secret]
    out = redacted(rows)
    # THEN the secret row is a redacted copy, the clean row the same object, the record passed in unchanged
    assert out[0] is clean and out[1].name == "aten::mm\t" + REDACTED and rows[1] is secret
    assert secret.name.endswith("a1" * 10)
    # and a record with nothing to redact comes back as itself; --keep-metadata keeps all
    assert redacted(rows[:1]) is not None and redacted(clean) is clean and redacted(rows, keep=True) is rows
    # and two dict keys alike once redacted are both kept
    d = redacted({"k hf_" + "a" * 20: 1, "k hf_" + "b" * 20: 2, "DB_PASS": "x", "tokens": 3})
    assert d == {f"k {REDACTED}": 1, f"k {REDACTED} #2": 2, "DB_PASS": REDACTED, "tokens": 3}


def test_budget_leaves_pass_whole_and_the_steps_around_them_are_redacted():
    # GIVEN steps whose names hold a secret, each with a budget of leaves (records that declare no trace text)
    from profuse.analysis.diagnosis.records import Leaf, StepBudget
    from profuse.redact import _Walk, redacted

    budget = (Leaf("busy/gemm", 1.0, 50.0), Leaf("idle/cpu_other", 1.0, 50.0))
    steps = [StepBudget("ProfilerStep#1", None, None, None, 2.0, budget, False),
             StepBudget("step --token hf_" + "a1" * 10, None, None, None, 2.0, budget, False)]
    out = redacted(steps)
    # THEN the secret step is a redacted copy holding the very same budget, the clean step is itself
    assert out[0] is steps[0] and out[1].name == f"step --token {REDACTED}" and out[1].budget is budget
    # and a tuple of leaves and numbers is passed whole without looking at a leaf, a mixed one is walked
    walk = _Walk()
    assert walk.value(budget) is budget and walk.value((*budget, 3, None)) is not None
    assert walk.seen == {}
    mixed = walk.value((*budget, "x hf_" + "b" * 20))
    assert mixed[:2] == budget and mixed[2] == f"x {REDACTED}"
    assert walk.holds_text(Leaf) is False and walk.holds_text(StepBudget) is True


@pytest.mark.parametrize("text, gone, kept", [
    ("db_pass=hunter2x", "hunter2x", "db_pass="),
    ("DB_PASS=hunter2x MY_SECRET=s3cr3t", "hunter2x", "MY_SECRET="),
    ("https://bob@corp.example:p@ss@w0rd@db/x", "ss@w0rd", "@db/x"),
    ("éhttps://user:p@ss@host/x", "p@ss", "host/x"),
    ("https://tok123abcdef@huggingface.co/x", "tok123abcdef", "huggingface.co"),
    ("\x1b[1;31mhf_ABCDEFGHIJKLMNOPQRST", "ABCDEFGHIJKLMNOP", "\x1b[1;31m"),
    ("\x9b0mAKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE", "\x9b0m"),
    ("\\x1b[0mghp_ABCDEFGHIJKLMNOPQRSTUVWX", "ABCDEFGHIJKLMNOPQRST", "\\x1b[0m"),
    ("_Bearer abcdefghij", "abcdefghij", "Bearer"),
])
def test_new_shapes(text, gone, kept):
    out = redact_text(text)
    assert gone not in out and kept in out and REDACTED in out


@pytest.mark.parametrize("text", ["forward pass: 12 ms", "sort_keys=True", "https://git@github.com/x",
                                  "ssh://john.doe@host", "--num-keys 4", "compass_key_count"])
def test_what_is_no_secret_is_left(text):
    assert redact_text(text) == text


def test_a_list_under_a_secret_key_is_hidden_as_redact_hides_it():
    # redacted() replaced only string values under secret keys: {"DB_PASS": ["hunter2"]} kept it (review)
    from profuse.redact import REDACTED, redact, redacted

    rec = {"DB_PASS": ["hunter2"], "api_key": ("k1", 3), "SortKeys": [1, 2], "plain": ["hunter2"]}
    out = redacted(rec)
    assert out["DB_PASS"] == [REDACTED] and out["api_key"] == (REDACTED, 3)
    assert out["SortKeys"] == [1, 2] and out["plain"] == ["hunter2"]   # numbers keep their shape; no secret key
    assert "hunter2" not in str(redact({"DB_PASS": ["hunter2"]}))      # the metadata rule agrees
