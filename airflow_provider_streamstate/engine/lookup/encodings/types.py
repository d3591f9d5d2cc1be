"""Spark SQL data types as a state schema file writes them (`StructType.json`).

State schema files (and operator metadata) describe keys and values in Spark's JSON type
notation; the row codec, the partition hash and the key encoder all dispatch on these
types, so they are parsed once into small immutable objects. Anything we cannot decode
exactly (a string with a non-binary collation, a user-defined type, an unknown name) is
refused when the schema is read, never half-decoded later.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError

MAX_LONG_DIGITS = 18  # Decimal.MAX_LONG_DIGITS: a decimal of this precision or less is a long

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
# Atomic type names as Spark's DataType.json writes them, and their fixed width in bytes
# inside an UnsafeArrayData (UnsafeRow slots are always 8 bytes).
_ATOMIC_WIDTH = {
    "null": 8, "void": 8, "boolean": 1, "byte": 1, "short": 2, "integer": 4, "long": 8,
    "float": 4, "double": 8, "date": 4, "timestamp": 8, "timestamp_ntz": 8,
    "string": 8, "binary": 8,
}
_INTERVAL = re.compile(r"^interval (day|hour|minute|second)( to (day|hour|minute|second))?$")
_YEAR_MONTH = re.compile(r"^interval (year|month)( to (year|month))?$")
SUPPORTED = ("boolean, byte, short, integer, long, float, double, decimal, string, binary, date, "
             "timestamp, timestamp_ntz, null, day-time and year-month intervals, struct, array, map")


@dataclass(frozen=True)
class DataType:
    """A Spark type: `name` is Spark's JSON name (`long`, `decimal`, `struct`, ...)."""

    name: str

    @property
    def is_fixed(self) -> bool:
        """Stored inline in a row slot (no offset/size pointer)."""
        return self.name in ("null", "void", "boolean", "byte", "short", "integer", "long", "float", "double",
                             "date", "timestamp", "timestamp_ntz", "daytime", "yearmonth")

    @property
    def element_width(self) -> int:
        """Bytes one element of this type takes in an array's fixed part."""
        return _ATOMIC_WIDTH.get(self.name, 8) if self.name not in ("daytime", "yearmonth") else (
            8 if self.name == "daytime" else 4)

    def simple(self) -> str:
        return self.name


@dataclass(frozen=True)
class DecimalType(DataType):
    precision: int = 10
    scale: int = 0

    @property
    def is_fixed(self) -> bool:
        return self.precision <= MAX_LONG_DIGITS

    @property
    def element_width(self) -> int:
        return 8

    def simple(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True


@dataclass(frozen=True)
class StructType(DataType):
    fields: tuple[StructField, ...] = ()

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def simple(self) -> str:
        return "struct<" + ",".join(f"{f.name}:{f.type.simple()}" for f in self.fields) + ">"


@dataclass(frozen=True)
class ArrayType(DataType):
    element: DataType = DataType("null")
    contains_null: bool = True

    def simple(self) -> str:
        return f"array<{self.element.simple()}>"


@dataclass(frozen=True)
class MapType(DataType):
    key: DataType = DataType("null")
    value: DataType = DataType("null")
    value_contains_null: bool = True

    def simple(self) -> str:
        return f"map<{self.key.simple()},{self.value.simple()}>"


def struct(*fields: tuple[str, DataType]) -> StructType:
    """A struct type from (name, type) pairs (tests, and schemas we build ourselves)."""
    return StructType("struct", tuple(StructField(n, t) for n, t in fields))


def atomic(name: str) -> DataType:
    return parse_type(name, "a type name")


def parse_type(value: Any, where: str) -> DataType:
    """A type from its JSON form (a name or an object); unsupported ones refused by name."""
    if isinstance(value, str):
        name = value.strip()
        m = _DECIMAL.match(name)
        if m:
            return DecimalType("decimal", int(m.group(1)), int(m.group(2)))
        if name == "decimal":
            return DecimalType("decimal", 10, 0)
        if name in _ATOMIC_WIDTH:
            return DataType("null" if name == "void" else name)
        if _INTERVAL.match(name):
            return DataType("daytime")
        if _YEAR_MONTH.match(name):
            return DataType("yearmonth")
        raise UnsupportedCheckpointError(
            f"{where} uses the type {name!r}, which key lookups cannot decode",
            hint=f"supported types: {SUPPORTED}; read this state with Spark (`streamstate state`)",
        )
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "struct":
            return StructType("struct", tuple(_field(f, where) for f in value.get("fields") or []))
        if kind == "array":
            return ArrayType("array", parse_type(value.get("elementType"), where), bool(value.get("containsNull", True)))
        if kind == "map":
            return MapType("map", parse_type(value.get("keyType"), where), parse_type(value.get("valueType"), where),
                           bool(value.get("valueContainsNull", True)))
        if kind == "udt":
            raise UnsupportedCheckpointError(
                f"{where} uses a user-defined type ({value.get('class') or value.get('pyClass')})",
                hint=f"supported types: {SUPPORTED}",
            )
    raise UnsupportedCheckpointError(f"{where} has a type Spark's JSON notation does not describe: {value!r}",
                                     hint="check that the schema file is a Spark state schema")


def _field(d: Any, where: str) -> StructField:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise UnsupportedCheckpointError(f"{where} has a malformed struct field {d!r}")
    meta = d.get("metadata") or {}
    if isinstance(meta, dict) and meta.get("__COLLATIONS"):
        raise UnsupportedCheckpointError(
            f"{where}: field {d['name']!r} is a string with collation {meta['__COLLATIONS']}",
            hint="key lookups support the default UTF8_BINARY strings; read this state with Spark",
        )
    t = d.get("type")
    if isinstance(t, str) and t.startswith("string collate"):
        raise UnsupportedCheckpointError(f"{where}: field {d['name']!r} is a {t}",
                                         hint="key lookups support the default UTF8_BINARY strings")
    return StructField(d["name"], parse_type(t, where), bool(d.get("nullable", True)))


def parse_struct(text: str | dict[str, Any], where: str) -> StructType:
    """A `StructType.json` document (text or parsed)."""
    try:
        doc = json.loads(text) if isinstance(text, str) else text
    except ValueError as exc:
        raise UnsupportedCheckpointError(f"{where} holds a schema that is not JSON: {exc}") from None
    t = parse_type(doc, where)
    if not isinstance(t, StructType):
        raise UnsupportedCheckpointError(f"{where} holds a {t.simple()}, not a struct schema")
    return t
