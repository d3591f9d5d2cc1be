"""A condition on one key's looked-up state, written as text: what `bisect_key` searches
for ("the first snapshot where total > 100") and what a pre-deploy check asserts.

    absent | present                    the key is (not) in the state
    <field> <op> <literal>              op: == (or =), !=, <, <=, >, >=
    len() <op> <number>                 elements of a list, map, join side or timers
    <clause> and <clause> ...           all of them

A field is a dotted path into the value row (`total`, `value.c` for a transformWithState
value with a TTL, `groupState.count`); on a list of rows (list state, a join side, map
entries, timers) a clause holds when it holds for any element. A literal is JSON (`12.5`,
`"eu"`, `true`, `null`) or a bare word (a string); it is read as the field's type, so
decimals compare exactly and `2026-01-01T00:00:00Z` compares with a timestamp. A comparison
on an absent key is false.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import operator as op
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": op.eq, "=": op.eq, "!=": op.ne, "<=": op.le, ">=": op.ge, "<": op.lt, ">": op.gt,
}
_CLAUSE = re.compile(r"^\s*(len\(\)|[A-Za-z_$#][\w$#.]*)\s*(==|!=|<=|>=|=|<|>)\s*(?![=<>!])(.+?)\s*$", re.S)
_LEN = "len()"
_HINT = "write e.g. `total > 100`, `absent`, `len() >= 2`, `count == 3 and label != \"x\"`"


@dataclass(frozen=True)
class Clause:
    path: str  # dotted field path, `len()`, or `absent` / `present` (with op and literal empty)
    op: str = ""
    literal: Any = None

    def describe(self) -> str:
        return self.path if not self.op else f"{self.path} {self.op} {json.dumps(self.literal, default=str)}"


@dataclass(frozen=True)
class KeyPredicate:
    """A parsed condition (see the module docstring); call it on a `KeyLookup`."""

    text: str
    clauses: tuple[Clause, ...]

    def __call__(self, hit: Any) -> bool:
        return all(_holds(c, hit.found, hit.value) for c in self.clauses)

    def holds(self, found: bool, value: Any) -> bool:
        return all(_holds(c, found, value) for c in self.clauses)


def parse_predicate(text: str) -> KeyPredicate:
    """`text` parsed; a UsageError saying what is wrong with it otherwise."""
    parts = re.split(r"\s+and\s+", text.strip())
    if not text.strip():
        raise UsageError("the condition is empty", hint=_HINT)
    clauses = []
    for part in parts:
        word = part.strip().lower()
        if word in ("absent", "missing", "present", "found"):
            clauses.append(Clause("absent" if word in ("absent", "missing") else "present"))
            continue
        m = _CLAUSE.match(part)
        if m is None:
            raise UsageError(f"cannot read the condition {part.strip()!r}", hint=_HINT)
        path, oper, raw = m.groups()
        try:
            literal = json.loads(raw)
        except ValueError:
            literal = raw.strip()
        if path == _LEN and (isinstance(literal, bool) or not isinstance(literal, int)):
            raise UsageError(f"len() compares with a whole number, not {raw!r}", hint=_HINT)
        clauses.append(Clause(path, oper, literal))
    return KeyPredicate(text.strip(), tuple(clauses))


def _holds(c: Clause, found: bool, value: Any) -> bool:
    if c.path == "absent":
        return not found
    if c.path == "present":
        return found
    if not found:
        return False
    if c.path == _LEN:
        n = len(value) if isinstance(value, (list, dict)) else 1
        return _OPS[c.op](n, c.literal)
    rows = value if isinstance(value, list) else [value]
    return any(_compare(_field(row, c.path), c.op, c.literal) for row in rows)


def _field(row: Any, path: str) -> Any:
    value = row
    for name in path.split("."):
        if isinstance(value, dict) and name in value:
            value = value[name]
            continue
        fields = ", ".join(value) if isinstance(value, dict) else "(not a row)"
        raise UsageError(f"the value has no field {path!r}", hint=f"its fields there: {fields}")
    return value


def _compare(actual: Any, oper: str, literal: Any) -> bool:
    if actual is None or literal is None:
        return _OPS[oper](actual, literal) if oper in ("==", "=", "!=") else False
    try:
        wanted = _as_type_of(actual, literal)
        return bool(_OPS[oper](actual, wanted))
    except (TypeError, ValueError, decimal.InvalidOperation):
        raise UsageError(f"cannot compare {actual!r} with {literal!r}",
                         hint="write the literal as the field's type (a number, a quoted string, an ISO time)") from None


def _as_type_of(actual: Any, literal: Any) -> Any:
    if isinstance(actual, bool):
        if not isinstance(literal, bool):
            raise TypeError("not a boolean")
        return literal
    if isinstance(actual, decimal.Decimal):
        return decimal.Decimal(str(literal))
    if isinstance(actual, float):
        if isinstance(literal, str) and literal.lower() == "nan":
            return math.nan
        return float(literal)
    if isinstance(actual, int):
        if isinstance(literal, float):
            return literal
        return int(literal)
    if isinstance(actual, dt.datetime):
        t = dt.datetime.fromisoformat(str(literal).replace("Z", "+00:00"))
        if actual.tzinfo is not None and t.tzinfo is None:
            t = t.replace(tzinfo=dt.UTC)
        return t
    if isinstance(actual, dt.date):
        return dt.date.fromisoformat(str(literal))
    if isinstance(actual, (bytes, bytearray)):
        return str(literal).encode("utf-8")
    if isinstance(actual, str):
        return literal if isinstance(literal, str) else json.dumps(literal)
    return literal


def values_match(expected: Any, actual: Any) -> bool:
    """Whether a looked-up value holds `expected` (JSON, as a DAG or a test writes it): the
    fields of an expected dict (the value's other fields are not compared), lists element by
    element, scalars read as the actual value's type (decimals exactly, ISO times)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and values_match(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(values_match(e, a) for e, a in zip(expected, actual, strict=True)))
    if expected is None or actual is None:
        return expected is None and actual is None
    try:
        return bool(actual == _as_type_of(actual, expected))
    except (TypeError, ValueError, decimal.InvalidOperation):
        return False
