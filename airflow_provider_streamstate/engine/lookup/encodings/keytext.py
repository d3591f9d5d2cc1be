"""Keys typed as text (a CLI's `--key k=v,k2=v2`, a URL's `?key=`, a templated DAG field),
turned into the typed values the row encoder takes, by the state key's own schema.

A key is written as `name=value` pairs separated by commas (`account=a-17,region=eu`), or
as bare values in column order (`a-17,eu`; one bare value for a one-column key), or as one
JSON object or array (`{"account": "a-17", "w": null}`): the only way to give a null, and
the easy way for nested values. A comma inside quotes, brackets or braces does not separate.
Each value is read as its column's type: integers, floats (`NaN`, `-0.0`), decimals (exact),
booleans, dates and timestamps in ISO 8601 (a timestamp without an offset is UTC), day-time
intervals in seconds, binary as UTF-8 text or `hex:...`/`base64:...`, structs, arrays and
maps as JSON (a window: `{"start": "2026-01-01T00:00:00Z", "end": "..."}`). Values that are
not text (Python callers) are left as they are.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.lookup.encodings.types import (
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    StructType,
)

_OPEN, _CLOSE = "[{", "]}"
# `name=value`: a name is anything up to the first `=` but quotes, brackets and braces (a
# quoted bare value may hold `=`, as base64 does).
_NAMED = re.compile(r"^\s*([^=\"'\[\]{}]+?)\s*=(.*)$", re.S)


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside quotes, brackets and braces."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _unquote(value: str) -> str:
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return v


def parse_key_text(text: str) -> dict[str, Any] | list[Any]:
    """A key as typed: {column: text} for `k=v` pairs, [text, ...] for bare values, or the
    parsed JSON object or array. Values stay text until `coerce_key` types them."""
    t = text.strip()
    if not t:
        raise UsageError("the key is empty", hint="give it as name=value[,name2=value2] (or a JSON object)")
    if t[0] in "{[":
        try:
            doc = json.loads(t)
        except ValueError as exc:
            raise UsageError(f"the key {t[:60]!r} is not valid JSON: {exc}",
                             hint='give a JSON object {"column": value} or array, or name=value pairs') from None
        if not isinstance(doc, (dict, list)):
            raise UsageError("a JSON key must be an object or an array")
        return doc
    parts = split_top_level(t)
    named = [_NAMED.match(p) for p in parts]
    if any(named) and not all(named):
        raise UsageError(f"the key {t!r} mixes name=value pairs and bare values",
                         hint="name every column (name=value,...) or none (values in column order)")
    if not all(named):
        return [_unquote(p) for p in parts]
    out: dict[str, Any] = {}
    for m in named:
        assert m is not None
        name, value = m.group(1), m.group(2)
        if name in out:
            raise UsageError(f"the key names column {name!r} twice")
        out[name] = _unquote(value)
    return out


def coerce(value: Any, t: DataType, where: str) -> Any:
    """`value` as a Python value of type `t` when it is text (or JSON for nested types);
    anything else is returned as it is. A value that does not read as `t` is a UsageError."""
    if value is None:
        return None
    try:
        if isinstance(t, StructType):
            if isinstance(value, str):
                value = _json(value, where)
            if isinstance(value, dict):
                unknown = [k for k in value if k not in t.names]
                if unknown:
                    raise UsageError(f"{where} has no field {unknown[0]!r}", hint=f"its fields: {', '.join(t.names)}")
                return {f.name: coerce(value.get(f.name), f.type, f"{where}.{f.name}") for f in t.fields}
            if isinstance(value, (list, tuple)):
                if len(value) != len(t.fields):
                    raise UsageError(f"{where} takes {len(t.fields)} values, {len(value)} given",
                                     hint=f"its fields: {', '.join(t.names)}")
                return [coerce(v, f.type, f"{where}.{f.name}") for v, f in zip(value, t.fields, strict=True)]
            return value
        if isinstance(t, ArrayType):
            if isinstance(value, str):
                value = _json(value, where)
            return [coerce(v, t.element, f"{where}[]") for v in value] if isinstance(value, list) else value
        if isinstance(t, MapType):
            if isinstance(value, str):
                value = _json(value, where)
            if isinstance(value, dict):
                return {coerce(k, t.key, f"{where} key"): coerce(v, t.value, f"{where}[{k}]") for k, v in value.items()}
            return value
        if not isinstance(value, str):
            return _from_json_scalar(value, t)
        return _from_text(value, t)
    except (ValueError, TypeError, decimal.InvalidOperation, binascii.Error) as exc:
        raise UsageError(f"{where}: {str(value)[:60]!r} does not read as {t.simple()} ({exc})",
                         hint=_HINTS.get(t.name, "see `streamstate state get --help`")) from None


_HINTS = {
    "timestamp": "write an ISO 8601 time, e.g. 2026-01-01T12:00:00Z (no offset: UTC)",
    "timestamp_ntz": "write an ISO 8601 time without offset, e.g. 2026-01-01T12:00:00",
    "date": "write an ISO date, e.g. 2026-01-01",
    "binary": "write UTF-8 text, or hex:0a0b... or base64:...",
    "boolean": "write true or false",
}


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{where}: {text[:60]!r} is not JSON ({exc})",
                         hint="nested values (structs, arrays, maps) are written as JSON") from None


def _from_json_scalar(value: Any, t: DataType) -> Any:
    """A JSON number or boolean as the column's type (a string went through `_from_text`)."""
    if isinstance(t, DecimalType) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return decimal.Decimal(str(value))
    if t.name in ("float", "double") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if t.name == "daytime" and isinstance(value, (int, float)):
        return dt.timedelta(seconds=value)
    return value


def _from_text(text: str, t: DataType) -> Any:
    name = t.name
    s = text.strip()
    if name == "string":
        return text
    if name in ("null", "void"):
        if s.lower() not in ("", "null"):
            raise ValueError("a null-typed column holds only null")
        return None
    if name == "boolean":
        if s.lower() in ("true", "1", "yes"):
            return True
        if s.lower() in ("false", "0", "no"):
            return False
        raise ValueError("not a boolean")
    if name in ("byte", "short", "integer", "long", "yearmonth"):
        return int(s)
    if name in ("float", "double"):
        return float(s)
    if isinstance(t, DecimalType):
        return decimal.Decimal(s)
    if name == "date":
        return dt.date.fromisoformat(s)
    if name in ("timestamp", "timestamp_ntz"):
        value = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace(" ", "T", 1))
        if name == "timestamp_ntz" and value.tzinfo is not None:
            raise ValueError("a timestamp_ntz has no offset")
        return value
    if name == "daytime":
        return dt.timedelta(seconds=float(s))
    if name == "binary":
        if s.startswith("hex:"):
            return bytes.fromhex(s[4:])
        if s.startswith("base64:"):
            return base64.b64decode(s[7:], validate=True)
        return text.encode("utf-8")
    raise ValueError(f"cannot read a {t.simple()} from text")
