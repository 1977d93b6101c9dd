"""Keep secrets out of what profuse shows: by key name and by the shape of the value.

Traces and bundles carry command lines, trace names and environment-like metadata, where people
leave passwords, tokens and keys. Every output (console, JSON, HTML, explorer, error messages) passes
such text through here unless the user asks for ``--keep-metadata``.
"""
from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

REDACTED = "[redacted]"

# keys whose values are dropped whole (metadata dictionaries)
SECRET_KEYS = re.compile(r"token|secret|password|passwd|(?:^|[_-])pass$|key|auth|cred|env|cookie", re.IGNORECASE)

# a secret's name; ``PASS`` and ``KEY`` only as the upper-case tail of an environment name (DB_PASS=, SSHPASS=,
# X_KEY=, SECRETKEY=), case as written: "forward pass: 12 ms", "sort_keys", "--num-keys" are not secrets
_WORD = (r"(?:passwords?|passwd|pwd|tokens?|secrets?|api[-_]?keys?|apikey|access[-_]?keys?"
         r"|private[-_]?keys?|auth(?:[-_]?token|orization)?|credentials?"
         r"|(?-i:(?<=[A-Z0-9_])PASS|(?<=[A-Z0-9_])KEY(?=\s{0,8}=)))(?![a-z])")
# a command-line flag naming a secret: --password, --api-key, --hf-token, -p is too vague to count
_FLAG = re.compile(rf"^--?[\w-]{{0,64}}{_WORD}[\w-]{{0,64}}$", re.IGNORECASE)
# a token shape starts where no letter or digit is before it: after a space, `_`, `-`, `/`, `=`, a quote, a
# control character; and after one as an output writes it escaped (JSON's \t, \n, \u0001; Python's \x01)
_START = (r"(?:(?<![A-Za-z0-9])|(?<=\\[tnrbfv])|(?<=\\u[0-9A-Fa-f]{4})|(?<=\\x[0-9A-Fa-f]{2})"
          r"|(?<=\\U[0-9A-Fa-f]{8}))")
# a value ends at white space, a quote, a separator or a backslash (so a JSON string's escapes stay whole)
_VALUE = r"[^\s\"',;&\\<>]{1,4096}"
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer xyz
    (re.compile(r"\b(?P<pre>(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE), rf"\g<pre>{REDACTED}"),
    # scheme://user:password@host (also as a path has it, scheme:/user:password@host); the password runs to
    # the last @ before the host (it may hold an @ itself: p@ss)
    (re.compile(r"(?P<pre>\b[a-z][a-z0-9+.-]{0,31}:/{1,2}[^/\s:@]{0,256}:)[^/\s\"\\]{1,512}(?=@)",
                re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # --password=hunter2, --api-key=sk-..., token=..., PASSWORD: x, and JSON pairs "api_key": "x"
    # (also as they read inside a JSON string, \"api_key\": \"x\", escaped once or more)
    # A JSON pair's value that is no string ("tokens": null, "tokens": 128: a count, not a secret; an object)
    # is left: replacing it would break the JSON document that passes this boundary.
    (re.compile(rf"(?P<pre>{_WORD}[\w.-]{{0,64}}(?:\\{{0,7}}[\"'])?\s{{0,8}}[=:]\s{{0,8}}(?:\\{{0,7}}[\"'])?)"
                rf"(?<![\"']:)(?<![\"']: ){_VALUE}",
                re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # --password hunter2 (flag, space, value)
    (re.compile(rf"(?P<pre>(?<!\S)--?[\w-]{{0,64}}{_WORD}[\w-]{{0,64}}\s{{1,8}})(?!-){_VALUE}", re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # (every repeat is bounded: an unbounded one before a fixed word is quadratic on long strings)
    # token shapes, anywhere in a string (run_hf_..., bad_ghp_..., /ghp_...): Hugging Face, OpenAI-style,
    # AWS access key ids, GitHub, Slack, JWTs
    (re.compile(rf"{_START}hf_[A-Za-z0-9]{{16,}}"), REDACTED),
    (re.compile(rf"{_START}sk-[A-Za-z0-9_-]{{16,}}"), REDACTED),
    (re.compile(rf"{_START}(?:AKIA|ASIA)[0-9A-Z]{{16}}(?![0-9A-Z])"), REDACTED),
    (re.compile(rf"{_START}(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{{20,}}|{_START}github_pat_[A-Za-z0-9_]{{20,}}"),
     REDACTED),
    (re.compile(rf"{_START}xox[abposr]-[A-Za-z0-9-]{{10,}}"), REDACTED),
    (re.compile(rf"{_START}eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}"), REDACTED),
]


_SECRET_WORDS = ("pass", "pwd", "token", "secret", "apikey", "api_key", "api-key", "access_key", "access-key",
                 "accesskey", "private_key", "private-key", "privatekey", "auth", "credential", "_key", "-key")
# what each pattern cannot match without: (needles in the lowercased text, needles in the text); a
# pattern is run only where one is there (a regex scan costs ~20-100 ms a MB, a substring test ~1)
_NEEDLES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("bearer", "basic"), ()), ((), (":/",)), (_SECRET_WORDS, ()), (_SECRET_WORDS, ()), ((), ("hf_",)),
    ((), ("sk-",)), ((), ("AKIA", "ASIA")), ((), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    ((), ("xox",)), ((), ("eyJ",)),
]
assert len(_NEEDLES) == len(_PATTERNS)


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs, secret flags and token-shaped strings replaced."""
    lower = text.lower()
    for (pattern, repl), (low, exact) in zip(_PATTERNS, _NEEDLES):
        if any(n in lower for n in low) or any(n in text for n in exact):
            text = pattern.sub(repl, text)
            lower = text.lower()
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


class RedactingStream:
    """A text stream that redacts each complete line before passing it on (and what is left on ``flush``).

    Redacting whole lines keeps a secret that a caller writes in pieces (``print("--token", x)``
    writes three times) together. A write that ends without a newline is held until the next
    newline or ``flush()``: a progress bar, which flushes after each frame, still draws at once.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._held = ""

    def write(self, s: str) -> int:
        """Redact and pass on every complete line of what was written so far; hold the rest."""
        text = self._held + s
        cut = text.rfind("\n") + 1
        self._held = text[cut:]
        if cut:
            self.inner.write(redact_text(text[:cut]))
        return len(s)

    def flush(self) -> None:
        """Pass on what is held (redacted) and flush the stream underneath."""
        if self._held:
            held, self._held = self._held, ""
            self.inner.write(redact_text(held))
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ... as the stream underneath
        return getattr(self.inner, name)


_ACTIVE: list[bool] = []


def output_redacted() -> bool:
    """Whether text written now goes out redacted (inside :func:`redacted_output` without ``keep``)."""
    return bool(_ACTIVE) and _ACTIVE[-1]


@contextlib.contextmanager
def redacted_output(*, keep: bool = False) -> Iterator[None]:
    """The output boundary: stdout, stderr and files written (``_io.atomic_write``) are redacted inside.

    ``keep`` (``--keep-metadata``) passes everything through as it is.
    """
    if keep:
        _ACTIVE.append(False)
        try:
            yield
        finally:
            _ACTIVE.pop()
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    _ACTIVE.append(True)
    try:
        yield
    finally:
        _ACTIVE.pop()
        for s in (sys.stdout, sys.stderr):
            if isinstance(s, RedactingStream):
                with contextlib.suppress(OSError, ValueError):  # a closed pipe: nowhere for what is held
                    s.flush()
        sys.stdout, sys.stderr = out, err
