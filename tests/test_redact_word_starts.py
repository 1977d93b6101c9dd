"""The secret-word patterns tried only where a match can start (profuse/redact.py, _sub_at_words), checked
against the rule they replace: each pattern's ``sub`` over the whole text, on a seeded fuzz of secret-shaped
fragments and on a real report document."""
from __future__ import annotations

import contextlib
import io
import json
import random

import pytest
from conftest import trace_path

from profuse import redact
from profuse.cli import main


def whole_text_rule(text: str) -> str:
    """redact_text as it ran before: every pattern over the whole text (the secret-word ones always: their
    needle gate missed ``MYKEY=``), the others where one of their needles is."""
    lower = text.lower()
    for k, ((pattern, repl), (low, exact)) in enumerate(zip(redact._PATTERNS, redact._NEEDLES)):
        if k in redact._WORD_PATTERNS or any(n in lower for n in low) or any(n in text for n in exact):
            text = pattern.sub(repl, text)
            lower = text.lower()
    return text


ATOMS = ["password", "PASS", "DB_PASS", "MYKEY", "MY_KEY =", "key", "_key", "api_key", "api-key", "apikey", "token",
         "tokens", "secret", "Secret", "auth", "Authorization", "credential", "pwd", "passwd", "--", "-", "=", ":", " ",
         "  ", "\n", "\t", '"', "'", "\\", '\\"', "x", "hunter2", "abc", "12", "_", ".", "sort_keys", "forward pass",
         "--hf-token", "--password", "ä", "\\u00e4", "null", ",", "{", "}", "\x1b[31m", "secretoken", "privatekey",
         "access_key", "ACCESSKEY", "a" * 30, "-" * 3, '"key": "b', '"tokens": null']


@pytest.mark.parametrize("seed", range(4))
def test_the_word_starts_find_what_the_whole_text_scan_finds(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(5000):
        text = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 16)))
        assert redact.redact_text(text) == whole_text_rule(text), repr(text)


def test_a_report_document_is_redacted_as_by_the_whole_text_scan(capsys) -> None:
    # GIVEN a real report document (JSON keys "key" and "tokens" by the thousand) with secrets planted
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "json", "--no-cache"]) == 0
    doc = json.loads(out.getvalue())
    doc["planted"] = ["run --api-key sk-abc", "DB_PASSWORD=hunter2", "MYKEY=hunter3", "x --hf-token hf_xyz", "token: t0k"]
    text = json.dumps(doc, indent=2)
    assert text.count("key") > 10
    # THEN the two rules give the same text, and the planted secrets are gone
    got = redact.redact_text(text)
    assert got == whole_text_rule(text)
    assert not any(s in got for s in ("sk-abc", "hunter2", "hunter3", "hf_xyz", "t0k"))


def test_an_upper_case_key_name_alone_is_redacted() -> None:
    # a text whose only secret word is MYKEY (no other needle): the gate before never ran the pattern
    assert redact.redact_text("MYKEY=hunter2") == "MYKEY=[redacted]"
