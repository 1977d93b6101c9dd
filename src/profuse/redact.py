"""Keep secrets out of what profuse shows: by key name and by the shape of the value.

Traces and bundles carry command lines, trace names and environment-like metadata, where people
leave passwords, tokens and keys. Every output (console, JSON, HTML, explorer, error messages) passes
such text through here unless the user asks for ``--keep-metadata``.
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

# keys whose values are dropped whole (metadata dictionaries)
SECRET_KEYS = re.compile(r"token|secret|password|passwd|key|auth|cred|env|cookie", re.IGNORECASE)

_WORD = (r"(?:passwords?|passwd|pwd|tokens?|secrets?|api[-_]?keys?|apikey|access[-_]?keys?|private[-_]?keys?"
         r"|auth(?:[-_]?token|orization)?|credentials?)(?![a-z])")
# a command-line flag naming a secret: --password, --api-key, --hf-token, -p is too vague to count
_FLAG = re.compile(rf"^--?[\w-]{{0,64}}{_WORD}[\w-]{{0,64}}$", re.IGNORECASE)
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer xyz
    (re.compile(r"\b(?P<pre>(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE), rf"\g<pre>{REDACTED}"),
    # scheme://user:password@host (also as a path has it, scheme:/user:password@host)
    (re.compile(r"(?P<pre>\b[a-z][a-z0-9+.-]{0,31}:/{1,2}[^/\s:@]{0,256}:)[^/\s@]{1,512}(?=@)", re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # --password=hunter2, --api-key=sk-..., token=..., PASSWORD: x
    (re.compile(rf"(?P<pre>{_WORD}[\w.-]{{0,64}}\s{{0,8}}[=:]\s{{0,8}})(?P<q>[\"']?)[^\s\"',;&]+(?P=q)",
                re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # --password hunter2 (flag, space, value)
    (re.compile(rf"(?P<pre>(?<!\S)--?[\w-]{{0,64}}{_WORD}[\w-]{{0,64}}\s{{1,8}})(?!-)\S+", re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # (every repeat is bounded: an unbounded one before a fixed word is quadratic on long strings)
    # token shapes: Hugging Face, OpenAI-style, AWS access key ids, GitHub, Slack, JWTs
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
]


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs, secret flags and token-shaped strings replaced."""
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_argv(argv: list[Any]) -> list[Any]:
    """A command line with the value after a secret flag (``--token X``) and secret shapes replaced."""
    out: list[Any] = []
    hide_next = False
    for arg in argv:
        if hide_next and isinstance(arg, str) and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = isinstance(arg, str) and bool(_FLAG.match(arg))
        out.append(redact_text(arg) if isinstance(arg, str) else redact(arg))
    return out


def redact(obj: Any) -> Any:
    """A JSON-like value with secret-looking keys dropped and secret-looking strings replaced."""
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items() if not SECRET_KEYS.search(str(k))}
    if isinstance(obj, list | tuple):
        return redact_argv(list(obj))
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
