"""Keep secrets out of what profuse shows: by key name and by the shape of the value.

Traces and bundles carry command lines, trace names and environment-like metadata, where people
leave passwords, tokens and keys. Unless the user asks for ``--keep-metadata``, every string of every
record is redacted once where the record is built (:func:`redacted`, before any renderer: report,
HTML, notebook, diff, explorer, MCP), each value of a raw table read (``profuse sql``) likewise, and
error lines where they are printed; :func:`redacted_output` is the safety net for text no record
carries (notes, other commands' output).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import sys
from collections.abc import Iterator
from typing import Any, TypeVar, cast

REDACTED = "[redacted]"

# keys whose values are dropped whole (metadata dictionaries)
SECRET_KEYS = re.compile(r"token|secret|password|passwd|(?:^|[_-])pass$|key|auth|cred|env|cookie", re.IGNORECASE)

# a secret's name; ``PASS`` and ``KEY`` only as the upper-case tail of an environment name (DB_PASS=, SSHPASS=,
# X_KEY=, SECRETKEY=), case as written, or as the ``_pass``/``_key`` tail of a name given a value (db_pass=x,
# ssh_key: x): "forward pass: 12 ms", "sort_keys", "--num-keys" are not secrets
_WORD = (r"(?:passwords?|passwd|pwd|tokens?|secrets?|api[-_]?keys?|apikey|access[-_]?keys?"
         r"|private[-_]?keys?|auth(?:[-_]?token|orization)?|credentials?"
         r"|(?-i:(?<=[A-Z0-9_])PASS|(?<=[A-Z0-9_])KEY(?=\s{0,8}=))"
         r"|(?<=[A-Za-z0-9]_)(?:pass|key)(?=(?:\\{0,7}[\"'])?\s{0,8}[=:]))(?![a-z])")
# a command-line flag naming a secret: --password, --api-key, --hf-token, -p is too vague to count
_FLAG = re.compile(rf"^--?[\w-]{{0,64}}{_WORD}[\w-]{{0,64}}$", re.IGNORECASE)
# a token shape starts where no letter or digit is before it: after a space, `_`, `-`, `/`, `=`, a quote, a
# control character; and after one as an output writes it escaped (JSON's \t, \n, \u0001; Python's \x01)
_START = (r"(?:(?<![A-Za-z0-9])|(?<=\\[tnrbfv])|(?<=\\u[0-9A-Fa-f]{4})|(?<=\\x[0-9A-Fa-f]{2})"
          r"|(?<=\\U[0-9A-Fa-f]{8}))")
# ... and after a terminal control sequence (ESC [ 31 m, C1 CSI), raw or written escaped, whose last character is
# a letter: the sequence is kept, what follows it is the token (``lead``)
_CSI = r"(?:\x1b|\x9b|\\x1b|\\x9b|\\u001[bB]|\\u009[bB]|\\033|\\e)\[?[0-9;:?<=>]{0,32}[ -/]{0,4}[@-~]"
_AT = rf"(?:(?P<lead>{_CSI})|{_START})"
_TOKEN = rf"\g<lead>{REDACTED}"
# one character as JSON or a console writes it escaped
_ESCAPED = r"\\{1,7}(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|[tnrbfv])"
# a URL's scheme, after anything but a letter, digit or a scheme's own punctuation (é, a control, a terminal
# sequence included)
_SCHEME = rf"(?:{_CSI}|(?<![A-Za-z0-9+.-]))[a-z][a-z0-9+.-]{{0,31}}:/{{1,2}}"
# a value ends at white space, a quote, a separator or a backslash (so a JSON string's escapes stay whole), but
# for a letter JSON writes escaped (ä as \u00e4: a JSON text cell, the HTML report's data), taken whole
_VALUE = (r"(?:[^\s\"',;&\\<>]|\\{1,7}u(?!1680|200[0-9aA]|202[89fF]|205[fF]|3000)"
          r"(?:00[c-fC-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})){1,4096}")
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer xyz
    (re.compile(rf"{_AT}(?P<pre>(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{{6,}}", re.IGNORECASE),
     rf"\g<lead>\g<pre>{REDACTED}"),
    # scheme://user:password@host (also as a path has it, scheme:/user:password@host); the password runs to
    # the last @ before the host (it may hold an @ itself: p@ss), the user to the first colon (it may be an
    # e-mail address); a character in it may be written escaped (JSON's \u00e4, a console's \x01)
    (re.compile(rf"(?P<pre>{_SCHEME}[^/\s:\"\\]{{0,256}}:)(?:[^/\s\"\\]|{_ESCAPED}){{1,512}}(?=@)",
                re.IGNORECASE),
     rf"\g<pre>{REDACTED}"),
    # scheme://user@host with no password: the user-info whole, unless it is a plain name (git@, ubuntu@,
    # john.doe@: up to 32 lower-case letters, dots and dashes); a token as the user (https://ghp_...@github.com,
    # https://AbCdEf...@host) is the secret
    (re.compile(rf"(?P<pre>{_SCHEME})(?!(?-i:[a-z][a-z.-]{{0,31}})@)[^/\s:@\"'\\]{{1,256}}(?=@)",
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
    (re.compile(rf"{_AT}hf_[A-Za-z0-9]{{16,}}"), _TOKEN),
    (re.compile(rf"{_AT}sk-[A-Za-z0-9_-]{{16,}}"), _TOKEN),
    (re.compile(rf"{_AT}(?:AKIA|ASIA)[0-9A-Z]{{16}}(?![0-9A-Z])"), _TOKEN),
    (re.compile(rf"{_AT}(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{{20,}}|github_pat_[A-Za-z0-9_]{{20,}})"), _TOKEN),
    (re.compile(rf"{_AT}xox[abposr]-[A-Za-z0-9-]{{10,}}"), _TOKEN),
    (re.compile(rf"{_AT}eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}"), _TOKEN),
]


_SECRET_WORDS = ("pass", "pwd", "token", "secret", "apikey", "api_key", "api-key", "access_key", "access-key",
                 "accesskey", "private_key", "private-key", "privatekey", "auth", "credential", "_key", "-key")
# what each pattern cannot match without: (needles in the lowercased text, needles in the text); a
# pattern is run only where one is there (a regex scan costs ~20-100 ms a MB, a substring test ~1)
_NEEDLES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("bearer", "basic"), ()), ((), (":/",)), ((), ("@",)), (_SECRET_WORDS, ()), (_SECRET_WORDS, ()), ((), ("hf_",)),
    ((), ("sk-",)), ((), ("AKIA", "ASIA")), ((), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    ((), ("xox",)), ((), ("eyJ",)),
]
assert len(_NEEDLES) == len(_PATTERNS)


# The secret-word patterns (a word, then a value) cost ~0.5 µs a character when run over a whole text. Each
# secret word starts with a needle (``passwords``: pass, ``api-keys``: api-key, ``MYKEY``: upper-case KEY
# after a letter or digit, ``db_key``: key after an underscore), and a match starts at its word (pattern 3)
# or at the ``-`` that starts the flag holding it, after white space and at most :data:`_WORD_REACH`
# characters before it (pattern 4: ``--hf-token``). So these are tried only at those starts, for every
# place a needle starts (overlapping ones too): the matches a scan of the whole text finds.
_WORD_PATTERNS = {3: False, 4: True}  # pattern: whether it starts at a flag
_WORD_REACH = 70
_WORD_NEEDLE_TEXTS = (*_SECRET_WORDS, "pwd")
_UPPER_KEY = re.compile(r"(?<=[A-Z0-9])KEY")  # in the text as written
_KEY_AFTER_UNDERSCORE = re.compile(r"(?<=_)key")  # in the lower-cased text: db_key=, MY_KEY= (not _key's ``_``)
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs, secret flags and token-shaped strings replaced."""
    lower = text.lower()
    starts: list[int] | None = None   # where a secret word starts in ``text`` as it is now (None: not looked yet)
    for k, ((pattern, repl), (low, exact)) in enumerate(zip(_PATTERNS, _NEEDLES)):
        if k in _WORD_PATTERNS:
            if starts is None:
                starts = _word_starts(text, lower)
            new = _sub_at_words(pattern, repl, text, starts, flag=_WORD_PATTERNS[k])
            if new is not text:
                text, lower, starts = new, new.lower(), None
        elif any(n in lower for n in low) or any(n in text for n in exact):
            new = pattern.sub(repl, text)
            if new != text:
                text, lower, starts = new, new.lower(), None
    return text


def redact_json(text: str) -> str:
    """:func:`redact_text` of an indented JSON document (``report.json_report.render_json``'s), each distinct
    line redacted once: a report's lines repeat (every step's budget names the same leaves), so the boundary
    scans a few hundred KB instead of a 6 GB trace's 14.5 MB document.

    The same text as :func:`redact_text` gives, because no match of its patterns holds a newline of such a
    document, nor looks behind one: a newline there only ever comes after a ``,``, ``[``, ``{`` or a whole value
    (a string's own newline is written ``\\n``), before indentation and then a ``"``, a bracket or a value;
    each pattern's white space before or after a ``=``, ``:`` or a flag would need a ``=``/``:`` or a flag's
    letters at one side of the newline, and a value, URL or token shape holds no white space; what a pattern
    looks behind at a line's start is the newline, which no letter, digit, escape or ``_`` it asks for
    matches. So each line's redaction is its own, whichever lines surround it."""
    lines = text.split("\n")
    distinct = list(dict.fromkeys(lines))
    joined = "\n".join(distinct)
    done = redact_text(joined)
    if done == joined:
        return text
    redacted_lines = done.split("\n")
    if len(redacted_lines) != len(distinct):  # a replacement never adds or removes a newline: not reached
        return redact_text(text)
    as_redacted = dict(zip(distinct, redacted_lines))
    return "\n".join([as_redacted[line] for line in lines])


def _word_starts(text: str, lower: str) -> list[int]:
    """Every place a secret word's needle starts (overlapping ones too), ascending: each needle found by
    ``str.find`` (a substring search at C speed, where one regex alternation tried at every character costs
    ~30 ms a MB)."""
    hits: set[int] = set()
    for needle in _WORD_NEEDLE_TEXTS:
        at = lower.find(needle)
        while at >= 0:
            hits.add(at)
            at = lower.find(needle, at + 1)
    if "KEY" in text:
        hits.update(m.start() for m in _UPPER_KEY.finditer(text))
    if "_key" in lower:
        hits.update(m.start() for m in _KEY_AFTER_UNDERSCORE.finditer(lower))
    return sorted(hits)


def _flag_start(text: str, i: int) -> int:
    """Where the flag holding the needle at ``i`` starts (its ``-`` after white space or at the text's start,
    at most :data:`_WORD_REACH` characters before), or -1."""
    lo = max(0, i - _WORD_REACH)
    if "-" not in text[lo:i + 1]:
        return -1
    space = _LAST_SPACE.search(text, lo, i)
    start = space.end() if space is not None else (0 if lo == 0 else -1)
    return start if start >= 0 and text.startswith("-", start) else -1


def _sub_at_words(pattern: re.Pattern[str], repl: str, text: str, hits: list[int], *, flag: bool) -> str:
    """``pattern.sub(repl, text)`` for a secret-word pattern, tried only where such a match can start (see
    :data:`_WORD_PATTERNS`; ``hits``: :func:`_word_starts` of ``text``): left to right, each match kept and
    the next tried after it. ``text`` itself where nothing matched."""
    parts: list[str] = []
    done = 0        # text[:done] is in parts
    for i in hits:
        start = _flag_start(text, i) if flag else i
        if start < done:  # before the last match's end (or no flag holds it)
            continue
        m = pattern.match(text, start)
        if m is not None and m.end() > start:
            parts += (text[done:start], m.expand(repl))
            done = m.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


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


T = TypeVar("T")
_ATOMS = (int, float, bool, type(None), bytes)
_NUMBERS: set[type] = {int, float, bool, type(None)}


def redacted(record: T, *, keep: bool = False) -> T:
    """``record`` with every string in it redacted once, where it enters profuse's records: the one walk
    every record builder's output (``payloads``: the report, the HTML report's payloads, a diff, the
    explorer's and the MCP server's answers) passes before any renderer sees it.

    ``record`` is a msgspec ``Struct``, a dataclass, a list, tuple, set or dict of them, or a string: every
    ``str`` field, item, dict key and value is passed through :func:`redact_text`, and a string value under a
    secret-named key (``SECRET_KEYS``: ``DB_PASS``, ``api_token``, ...), or each string of a list under one,
    is replaced whole. Two keys of one
    dict that redact to the same text are both kept (the second as ``"<key> #2"``): nothing is dropped.
    What changed is a copy (the record passed in, which a cache may hold, is left as it is); what did not is
    the same object. ``keep`` (``--keep-metadata``) returns ``record`` itself.

    A record type whose strings are all profuse's own words, never the trace's (a budget leaf: its key is one of
    the budget's leaf names), says so with ``__trace_text__ = False``: it is passed as it is, and a list or tuple
    of such records and numbers is passed whole, at C speed (a 6 GB trace's report holds 90,000 leaves).
    """
    return record if keep else cast(T, _Walk().value(record))


class _Walk:
    """One pass of :func:`redacted`: strings seen before (names repeat) are redacted once."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.secret_key: dict[str, bool] = {}
        self.field_names: dict[type, tuple[str, ...]] = {}
        self.text_types: dict[type, bool] = {}

    def holds_text(self, t: type) -> bool:
        """Whether a value of type ``t`` may hold the trace's text: a number never does, nor a record type that
        says ``__trace_text__ = False`` (see :func:`redacted`)."""
        found = self.text_types.get(t)
        if found is None:
            found = self.text_types[t] = t not in _NUMBERS and getattr(t, "__trace_text__", True) is not False
        return found

    def text(self, s: str) -> str:
        out = self.seen.get(s)
        if out is None:
            out = self.seen[s] = redact_text(s)
        return s if out == s else out  # ``s`` itself where nothing changed: its record is not copied

    def value(self, v: Any) -> Any:
        if type(v) is str:  # a str subclass (an enum's value) is profuse's own word, not the trace's
            return self.text(v)
        if isinstance(v, _ATOMS) or not self.holds_text(type(v)):
            return v
        if hasattr(type(v), "__struct_fields__"):  # a msgspec Struct (msgspec is imported only if there is one)
            import msgspec

            changed = {f: new for f in v.__struct_fields__
                       if (new := self.value(old := getattr(v, f))) is not old}
            return msgspec.structs.replace(v, **changed) if changed else v
        if isinstance(v, list | tuple | set | frozenset):
            return self.items(v)
        if isinstance(v, dict):
            return self.mapping(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self.dataclass(v)
        return v

    def items(self, v: list[Any] | tuple[Any, ...] | set[Any] | frozenset[Any]) -> Any:
        types = set(map(type, v))   # at C speed: a column of numbers (a timeline's), a budget's leaves
        if types <= _NUMBERS or not any(map(self.holds_text, types)):
            return v
        new = [self.value(x) for x in v]
        if all(a is b for a, b in zip(new, v)):
            return v
        if isinstance(v, tuple) and hasattr(v, "_fields"):  # a NamedTuple
            return type(v)(*new)
        return type(v)(new)

    def mapping(self, v: dict[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        changed = False
        for key, val in v.items():
            new_key = self.value(key)
            new_val = self.secret(val) if self.is_secret_key(key) else self.value(val)
            if new_key in out:  # two keys alike once redacted: both kept
                n = 2
                while f"{new_key} #{n}" in out:
                    n += 1
                new_key = f"{new_key} #{n}"
            out[new_key] = new_val
            changed = changed or new_key is not key or new_val is not val
        return out if changed else v

    def secret(self, val: Any) -> Any:
        """A value under a secret-named key: a string whole, each string of a list or tuple whole (``DB_PASS:
        ["x"]``, as :func:`redact` hides it), anything else walked as usual (its shape is kept: a kernel whose name
        says "Keys" keeps its launch configurations)."""
        if type(val) is str:
            return REDACTED
        if isinstance(val, list | tuple) and any(type(x) is str for x in val):
            return type(val)(REDACTED if type(x) is str else self.value(x) for x in val)
        return self.value(val)

    def is_secret_key(self, key: Any) -> bool:
        if not isinstance(key, str):
            return False
        found = self.secret_key.get(key)
        if found is None:
            found = self.secret_key[key] = bool(SECRET_KEYS.search(key))
        return found

    def dataclass(self, v: Any) -> Any:
        names = self.field_names.get(type(v))
        if names is None:
            names = self.field_names[type(v)] = tuple(f.name for f in dataclasses.fields(v))
        changed = {}
        for name in names:
            old = getattr(v, name)
            if type(old) in _NUMBERS:  # most fields of a record: a number is never redacted
                continue
            new = self.value(old)
            if new is not old:
                changed[name] = new
        if not changed:
            return v
        out = copy.copy(v)
        for name, new in changed.items():
            object.__setattr__(out, name, new)  # a frozen dataclass too: the copy is this walk's own
        return out


def write_passed(stream: Any, text: str) -> None:
    """``text``, as the output boundary passes it on already (:func:`redact_json`'s), written to ``stream`` below
    every :class:`RedactingStream` wrapping it, each passing on what it holds first."""
    while isinstance(stream, RedactingStream):
        stream.flush()
        stream = stream.inner
    stream.write(text)


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
