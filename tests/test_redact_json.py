"""The output boundary on a JSON document, line by line (redact.redact_json): the same text as the whole-text
rule (redact_text) gives, on documents full of secrets and on real traces' reports; and the JSON report on
standard output and in a file still redacted."""
from __future__ import annotations

import json
import random
import shutil

import pytest
from conftest import trace_path
from test_redact_boundary import GHP, GONE, HF, SECRETS, _planted

from profuse.cli import main
from profuse.redact import redact_json, redact_text
from profuse.report.json_report import render_json

# pieces a string of the document is made of: secrets of every shape the boundary knows, their near misses, and
# what a JSON string holds that a line-by-line reading could get wrong (newlines, escapes, quotes, line
# separators, control characters, terminal sequences)
PIECES = [
    *SECRETS.values(), "--token", "--api-key", "hunter2x", "password", "password:", "password=", "api_key", "DB_PASS",
    "X_KEY", "=", ":", " ", "  ", "\n", "\r\n", "\t", "\u2028", "\x85", "\x1b[31m", "\\", '"', "'", "@", "/",
    "https://", "http://bob@", "git@github.com:x", "Bearer", "basic", "sk-" + "a" * 20, HF, GHP,
    "AKIA" + "IOSFODNN7EXAMPLE", "xoxb-1234567890ab", "eyJabcdefgh.eyJabcdefgh.abcdefghij", "forward pass: 12 ms",
    "sort_keys", "tokens", "KV tokens 32,785", "aten::mm", "ProfilerStep#6", "ä", "é",
]
KEYS = ["name", "password", "api_key", "tokens", "token_ids", "key", "us", "args", "--token", "note", "DB_PASS"]


def _string(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))


def _value(rng: random.Random, depth: int) -> object:
    pick = rng.random()
    if depth > 3 or pick < 0.45:
        return _string(rng)
    if pick < 0.55:
        return rng.choice([None, True, 0, -12, 3.25, 128])
    if pick < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice([*KEYS, _string(rng)]): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(40))
def test_line_by_line_is_the_whole_text_rule_on_documents_full_of_secrets(seed):
    # GIVEN indented JSON documents (as render_json writes them) whose keys and strings hold secrets, near misses,
    # newlines and escapes, many lines alike (a report's steps repeat)
    rng = random.Random(seed)
    rows = [_value(rng, 0) for _ in range(30)]
    doc = {"steps": rows + rows[:10], "flags": [rng.choice(PIECES) for _ in range(20)], "meta": _value(rng, 1)}
    text = render_json(doc)
    # WHEN the boundary reads it line by line THEN it writes exactly what the whole-text rule writes
    assert redact_json(text) == redact_text(text)


def test_a_secret_on_a_repeated_line_is_redacted_everywhere():
    doc = {"steps": [{"name": f"serve --token {HF}", "us": 1.0}] * 50 + [{"name": "plain", "us": 2.0}]}
    text = render_json(doc)
    out = redact_json(text)
    assert out == redact_text(text) and HF not in out and out.count("[redacted]") == 50
    assert json.loads(out)["steps"][-1]["name"] == "plain"


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_torch_compile_triton.json.gz"])
def test_line_by_line_on_real_reports_with_planted_secrets(tmp_path, capsys, name):
    # GIVEN a real trace's JSON report kept unredacted (--keep-metadata), and the same with secrets planted
    p = tmp_path / name
    shutil.copy(trace_path(name), p)
    for path in (p, _planted(tmp_path)):
        out = tmp_path / "kept.json"
        assert main(["report", str(path), "--format", "json", "--keep-metadata", "--no-cache", "-o", str(out)]) == 0
        text = out.read_text().removesuffix("\n")
        # THEN the line-by-line boundary gives the whole-text rule's text
        assert redact_json(text) == redact_text(text)
    capsys.readouterr()


@pytest.mark.parametrize("to_file", [False, True])
def test_json_report_passes_the_boundary_on_stdout_and_in_a_file(tmp_path, capsys, to_file):
    # GIVEN a trace with secrets planted in op names and its name
    p = _planted(tmp_path)
    out = tmp_path / "r.json"
    args = ["report", str(p), "--format", "json", "--no-cache", *(["-o", str(out)] if to_file else [])]
    assert main(args) == 0
    text = out.read_text() if to_file else capsys.readouterr().out
    # THEN none of them is written, the document is still JSON, and it ends with one newline
    for secret in GONE.values():
        assert secret not in text
    assert "[redacted]" in text and text.endswith("}\n") and json.loads(text)["schema"]
    assert main([*args, "--keep-metadata"]) == 0
    kept = out.read_text() if to_file else capsys.readouterr().out
    assert any(secret in kept for secret in GONE.values())
