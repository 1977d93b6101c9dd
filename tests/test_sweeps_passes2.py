"""The report's passes outside the diagnosis made cheaper (issue 44, round 2), each checked against the rule it
replaced, kept below as the oracle: on every shared trace, and on hand-built tables.

- the scope instances' op units (``scopes.op_units``): once one query joining the names and the shape pairs on
  their values, and every op on its enclosing op;
- the output boundary's secret-word scan (``redact._word_starts``): once one regex alternation tried at every
  character (tests/test_redact_word_starts.py checks the whole-text rule; here the starts themselves).
"""
from __future__ import annotations

import random
import re
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse import redact
from profuse.analysis import scopes
from profuse.trace.schema import DDL

# --- the previous rules, kept here as the oracles -------------------------------------------------------

_OP_UNITS_BEFORE = """
    SELECT e.id, coalesce(e.scope, -1 - e.thread) AS sid, nm.code AS name, e.ts, e.dur, coalesce(e.device_total, 0) AS dev,
           coalesce(e.kernels_total, 0) AS kern, e.thread, coalesce(sh.code + 1, 0) AS shape
    FROM events e
        JOIN (SELECT unnest(?::VARCHAR[]) AS name, unnest(range(?)) AS code) nm ON nm.name IS NOT DISTINCT FROM e.name
        LEFT JOIN shapes s ON s.id = e.id
        LEFT JOIN (SELECT unnest(?::VARCHAR[]) AS d, unnest(?::VARCHAR[]) AS t, unnest(range(?)) AS code) sh
               ON sh.d = s.input_dims AND sh.t IS NOT DISTINCT FROM s.input_types
        LEFT JOIN (SELECT id, scope FROM events WHERE kind = 'cpu_op') po ON po.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND (e.parent_op IS NULL OR po.scope IS DISTINCT FROM e.scope)"""


def op_units_before(con: Any) -> list[tuple[Any, ...]]:
    """scopes._unit_table's op units as they were read, each as a row of values (name and shape decoded), by id."""
    names = [n for (n,) in con.execute(
        "SELECT DISTINCT name FROM events WHERE kind = 'cpu_op' UNION SELECT DISTINCT name FROM scopes").fetchall()]
    pairs = con.execute("""SELECT DISTINCT s.input_dims, s.input_types FROM shapes s SEMI JOIN events e
        ON e.id = s.id AND e.kind = 'cpu_op' WHERE s.input_dims IS NOT NULL""").fetchall()
    ops = con.execute(_OP_UNITS_BEFORE, [names, len(names), [d for d, _ in pairs], [t for _, t in pairs],
                                         len(pairs)]).fetchnumpy()
    return _decoded(ops, names, [(None, None), *pairs])


def _decoded(ops: dict[str, Any], names: list[str], pairs: list[Any]) -> list[tuple[Any, ...]]:
    cols = [np.asarray(ops[k], dtype=np.int64).tolist() for k in ("id", "sid", "ts", "dur", "dev", "kern", "thread")]
    name = [names[i] for i in np.asarray(ops["name"], dtype=np.int64).tolist()]
    shape = [tuple(pairs[i]) for i in np.asarray(ops["shape"], dtype=np.int64).tolist()]
    return sorted(zip(*cols, name, shape))


def op_units_now(con: Any) -> list[tuple[Any, ...]]:
    ops, names, pairs = scopes.op_units(con)
    return _decoded(ops, names, [(None, None), *pairs])


_NEEDLE_REGEX = re.compile("(?=" + "|".join(re.escape(n) for n in (*redact._SECRET_WORDS, "pwd")) + ")")


def word_starts_before(text: str, lower: str) -> list[int]:
    """redact._sub_at_words' starts as they were found: one regex alternation at every character."""
    return sorted({m.start() for m in _NEEDLE_REGEX.finditer(lower)} | {m.start() for m in redact._UPPER_KEY.finditer(text)}
                  | {m.start() for m in redact._KEY_AFTER_UNDERSCORE.finditer(lower)})


# --- hand-built tables ----------------------------------------------------------------------------------


def _con(events: list[dict[str, Any]], scope_rows: list[tuple[Any, ...]], shapes: list[tuple[Any, ...]]) -> Any:
    con = duckdb.connect()
    con.execute(DDL)
    for e in events:
        cols = ", ".join(e)
        con.execute(f"INSERT INTO events ({cols}) VALUES ({', '.join('?' for _ in e)})", list(e.values()))
    for s in scope_rows:
        con.execute("INSERT INTO scopes (id, kind, name, label, parent, ts, dur, thread) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    list(s))
    for s in shapes:
        con.execute("INSERT INTO shapes (id, input_dims, input_types) VALUES (?, ?, ?)", list(s))
    return con


def _random_tables(rng: random.Random) -> Any:
    """cpu_ops nested in each other across scopes (NULL ones included), enclosing ops that are annotations
    or missing, NULL names, shapes with NULL types, shapes of events that are no cpu_op."""
    n = rng.randint(0, 30)
    kinds = ["cpu_op"] * 5 + ["annotation", "python", "kernel"]
    names = ["aten::mm", "aten::add", None, "aten::relu", "Linear", "x"]
    events = []
    for i in range(n):
        parent = rng.choice([None, None, rng.randint(0, n + 2)]) if n else None
        events.append({"id": i, "kind": rng.choice(kinds), "name": rng.choice(names), "ts": rng.randint(0, 100),
                       "dur": rng.randint(0, 50), "thread": rng.randint(0, 2), "parent_op": parent,
                       "scope": rng.choice([None, 100, 101, 102]), "device_total": rng.choice([None, 5, 7]),
                       "kernels_total": rng.choice([None, 1, 2])})
    scope_rows = [(100, "module", "Linear", "nn.Module: Linear_0", None, 0, 90, 0),
                  (101, "annotation", "step", "step", 100, 1, 50, 0),
                  (102, "module", "ReLU", "nn.Module: ReLU_0", 101, 2, 9, 0)]
    dims = ["[[1, 2]]", "[[3]]", "[]"]
    shapes = [(i, rng.choice(dims), rng.choice(["[float]", None, "[int]"])) for i in range(n) if rng.random() < 0.6]
    return _con(events, scope_rows, shapes)


@pytest.mark.parametrize("seed", range(40))
def test_op_units_on_hand_built_tables_are_the_previous_join(seed: int) -> None:
    con = _random_tables(random.Random(seed))
    # THEN the op units by hash codes, and by the joins a hash clash falls back to, are the previous join's
    want = op_units_before(con)
    assert op_units_now(con) == want
    ops, names, pairs = scopes._op_units_joined(con, [n for (n,) in con.execute(scopes._NAMES).fetchall()])
    assert _decoded(ops, names, [(None, None), *pairs]) == want


def test_hash_codes_give_none_for_a_clash_or_an_unlisted_value() -> None:
    from profuse.analysis._codes import hash_codes

    listed = np.asarray([30, 10, 20], dtype=np.uint64)
    assert hash_codes(listed, np.asarray([10, 30, 30, 20], dtype=np.uint64)).tolist() == [1, 0, 0, 2]
    assert hash_codes(np.asarray([5, 5], dtype=np.uint64), np.asarray([5], dtype=np.uint64)) is None
    assert hash_codes(listed, np.asarray([10, 40], dtype=np.uint64)) is None
    assert hash_codes(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)).tolist() == []


def test_word_starts_on_fuzzed_text_are_the_previous_regex() -> None:
    rng = random.Random(3)
    atoms = ["pass", "PASS", "KEY", "MYKEY", "_key", "_KEY", "api-key", "token", "tokens", "pwd", "auth", "x", " ",
             "-", "_", "secretoken", "passpass", "privatekey", "Credential", "ä", "İ", "\n"]
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 20)))
        lower = text.lower()
        assert redact._word_starts(text, lower) == word_starts_before(text, lower), repr(text)


# --- the shared traces --------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=ALL_TRACES, ids=trace_id)
def trace(request: pytest.FixtureRequest) -> Any:
    with profuse.load(request.param, cache=False) as tr:
        yield tr


def test_op_units_are_the_previous_join(trace: profuse.Trace) -> None:
    want = op_units_before(trace.con)
    assert op_units_now(trace.con) == want
    ops, names, pairs = scopes._op_units_joined(trace.con, [n for (n,) in trace.con.execute(scopes._NAMES).fetchall()])
    assert _decoded(ops, names, [(None, None), *pairs]) == want

