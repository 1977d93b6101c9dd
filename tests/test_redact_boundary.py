"""Secrets at the output boundary: every output (sql included) is redacted unless --keep-metadata."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest
from conftest import trace_path
from explorer_util import running
from test_input_boundary import request

import profuse
from profuse.cli import main
from profuse.redact import redact_text

SMALL = "a100_event_sync.json.gz"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
HF = "hf_" + "QwErTyUiOpAsDfGhJkLz"


def _named(tmp_path, trace_name: str, file_name: str = "t.json.gz"):
    doc = json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))
    doc["traceName"] = trace_name
    p = tmp_path / file_name
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_sql_redacts_metadata_unless_kept(tmp_path, capsys, fmt):
    # GIVEN a trace whose name holds a --token=ghp_... flag and a URL password
    p = _named(tmp_path, f"serve.py --token={GHP} --db https://bob:s3cretpass@db.example/x")
    q = "SELECT json_extract_string(value, '$.traceName') AS value FROM meta WHERE key = 'trace_meta'"
    assert main(["sql", str(p), q, "--format", fmt, "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert GHP not in out and "s3cretpass" not in out and "[redacted]" in out
    if fmt == "json":
        assert "serve.py" in json.loads(out)[0]["value"]
    assert main(["sql", str(p), q, "--format", fmt, "--no-cache", "--keep-metadata"]) == 0
    kept = capsys.readouterr().out
    assert GHP in kept and "s3cretpass" in kept


@pytest.mark.parametrize("secret", [
    f"run_{HF}.json.gz", f"bad_{GHP}", f"x-{HF}", f"dir/{GHP}/t", "key_AKIAIOSFODNN7EXAMPLE",
])
def test_token_shapes_anywhere_in_a_string(secret):
    out = redact_text(f"profuse: {secret}: not found")
    assert "[redacted]" in out
    assert all(tok not in out for tok in (HF, GHP, "AKIAIOSFODNN7EXAMPLE"))


@pytest.mark.parametrize("text, gone", [
    ('{"api_key": "abc123xyz"}', "abc123xyz"),
    ("{'password': 'hunter2'}", "hunter2"),
    ('cfg={\\"secret_token\\": \\"zzz999\\"}', "zzz999"),  # as it reads inside a JSON string
    ("HF_TOKEN=q1w2e3r4 python x.py", "q1w2e3r4"),
    ("auth_token: abc.def", "abc.def"),
])
def test_secret_pairs_in_strings(text, gone):
    out = redact_text(text)
    assert gone not in out and "[redacted]" in out


def test_token_after_underscore_in_every_output(tmp_path, capsys):
    # GIVEN a trace whose file name carries a token after an underscore, and a JSON pair in its name
    p = _named(tmp_path, 'cfg {"api_key": "abc123xyz"}', f"run_{HF}.json.gz")
    outputs = {}
    assert main(["report", str(p), "--no-cache"]) == 0
    outputs["console"] = capsys.readouterr().out
    assert main(["report", str(p), "--format", "json", "--no-cache"]) == 0
    outputs["json"] = capsys.readouterr().out
    json.loads(outputs["json"])  # still JSON after redaction
    assert main(["report", str(p), "--format", "html", "-o", str(tmp_path / "r.html"), "--no-cache"]) == 0
    outputs["html"] = (tmp_path / "r.html").read_text() + capsys.readouterr().out
    assert main(["sql", str(p), "SELECT * FROM meta", "--format", "json", "--no-cache"]) == 0
    outputs["sql"] = capsys.readouterr().out
    assert main(["report", str(tmp_path / f"bad_{GHP}.json.gz")]) == 2
    outputs["error"] = capsys.readouterr().err
    with profuse.load(p, cache=False) as t, running([t]) as base:
        runs, overview = request(base.at("/api/runs")), request(base.at("/api/0/overview"))
        assert runs[0] == overview[0] == 200  # the token opens them: the text checked below is the real answer
        outputs["explorer"] = runs[1].decode() + overview[1].decode()
    for where, text in outputs.items():
        for s in (HF, GHP, "abc123xyz"):
            assert s not in text, f"{s} shown in {where}"
    assert "[redacted]" in outputs["error"] and outputs["error"].count("\n") == 1


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_torch_compile_triton.json.gz"])
def test_redaction_changes_nothing_without_secrets(tmp_path, capsys, name):
    # GIVEN real traces with no secrets; THEN the boundary leaves the JSON and the HTML (front-end code
    # included) byte for byte as --keep-metadata writes them
    p = tmp_path / name
    shutil.copy(trace_path(name), p)
    for fmt in ("json", "html"):
        outs = []
        for keep in ([], ["--keep-metadata"]):
            o = tmp_path / f"{fmt}{len(keep)}"
            assert main(["report", str(p), "--format", fmt, "-o", str(o), *keep]) == 0
            outs.append(o.read_text())
        assert outs[0] == outs[1], fmt
    capsys.readouterr()


def test_json_pairs_whose_value_is_no_string_are_left_so_json_stays_json():
    # GIVEN the report's own fields named like secrets ("tokens" of a serving step) holding null, a count or
    # an object: WHEN they pass the output boundary THEN the document is unchanged (a string value is still
    # redacted)
    import json

    from profuse.redact import redact_text

    doc = json.dumps({"tokens": None, "steps": [{"tokens": 128, "token_ids": [1, 2]}], "password": {"a": 1}},
                     indent=2)
    assert redact_text(doc) == doc
    assert json.loads(redact_text(json.dumps({"api_key": "abc"}))) == {"api_key": "[redacted]"}


SECRETS = {  # planted in op names, thread names, metadata, the trace name: each must be gone from every output
    "tab": "\t" + HF, "newline": "\nsk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm", "control": "\u0001AKIA" + "IOSFODNN7EXAMPLE",
    "db_pass": "DB_PASS=" + "hunter2hunter2", "url": "https://user:" + "p@ssw0rd42" + "@db.example/x",
    "bearer": "Authorization: Bearer " + "eyJhbGciOi.eyJzdWIiOi.SflKxwRJSM",
    "x_key": "X_KEY=" + "zz9900aabbcc",
}
GONE = {"tab": HF, "newline": "Zx9Yw8Vu7Ts6Rq5Po4Nm", "control": "IOSFODNN7EXAMPLE", "db_pass": "hunter2hunter2",
        "url": "ssw0rd42", "bearer": "SflKxwRJSM", "x_key": "zz9900aabbcc"}


def _planted(tmp_path):
    doc = json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for e, secret in zip(ops, SECRETS.values()):
        e["name"] = f"aten::op{secret}"
    doc["traceName"] = " ".join(SECRETS.values())
    p = tmp_path / "planted.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p


def test_secrets_after_control_characters_and_in_the_notebook_are_redacted(tmp_path, capsys):
    # GIVEN secrets after a tab, a newline and a control character, a *_PASS, a URL password holding an @,
    # a Bearer JWT and a *_KEY, planted in op names and the trace name
    p = _planted(tmp_path)
    outputs = {}
    for fmt in ("json", "table"):
        assert main(["report", str(p), "--format", fmt, "--top", "0", "--no-cache"]) == 0
        outputs[fmt] = capsys.readouterr().out
    assert main(["report", str(p), "--format", "html", "-o", str(tmp_path / "r.html"), "--no-cache"]) == 0
    capsys.readouterr()
    outputs["html"] = (tmp_path / "r.html").read_text()
    nb = profuse.report(str(p))
    outputs["notebook"] = nb.html + nb._repr_html_() + repr(nb)
    t = profuse.table(str(p))
    outputs["notebook table"] = repr(t) + t._repr_html_()
    assert "aten::op" in outputs["notebook table"], "the table shows the ops (so the check above checks something)"
    # THEN none of them reaches any output, and the op names are still there, redacted
    for where, text in outputs.items():
        for key, secret in GONE.items():
            assert secret not in text, f"{key} shown in {where}"
    assert "aten::op" in outputs["json"] and "[redacted]" in outputs["json"]
    # and --keep-metadata (keep_metadata=True) keeps them
    assert GONE["tab"] in profuse.report(str(p), keep_metadata=True).html
