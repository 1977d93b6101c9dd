"""The argument parser every ``profuse`` command uses: an argument error is one line and exit 2, with
"did you mean" where a command, an option or a choice is a typo of a real one."""
from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

_CHOICE = re.compile(r"invalid choice: '(?P<got>[^']*)'")
_UNKNOWN = re.compile(r"unrecognized arguments: (?P<got>.+)$")


class Parser(argparse.ArgumentParser):
    """``argparse`` with one-line errors (no usage block: ``--help`` shows it) and suggestions."""

    def error(self, message: str) -> NoReturn:
        """``prog: error: message (did you mean X?)`` on one line, exit 2."""
        hint = _hint(self, message)
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")


def _closest(word: str, options: list[str]) -> str | None:
    found = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return found[0] if found else None


def _hint(parser: argparse.ArgumentParser, message: str) -> str:
    m = _CHOICE.search(message)
    if m:
        choices = [str(c) for a in _all_actions(parser) if a.choices for c in a.choices]
        best = _closest(m["got"], choices)
        return f"; did you mean '{best}'?" if best else ""
    m = _UNKNOWN.search(message)
    if m:
        options = [o for a in _all_actions(parser) for o in a.option_strings]
        for word in m["got"].split():
            best = _closest(word.split("=", 1)[0], options) if word.startswith("-") else None
            if best:
                return f"; did you mean {best}?"
    return ""


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and its sub-commands' (an unknown option is reported by the top parser)."""
    out = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all_actions(sub)
    return out
