"""Shared by the key lookup tests: rows of every type state can hold (the vectors Spark
hashes and writes, tests/unit/lookup_vectors.json), the same columns as Spark SQL
expressions over a rate source (the integration tests' state), and values in one
comparable form whatever reader produced them."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.lookup.encodings.types import parse_struct

VECTORS = Path(__file__).resolve().parent / "unit" / "lookup_vectors.json"
UTC = dt.UTC

# Every type a state key or value can hold, as a Spark schema (DDL order = column order).
TYPED_SCHEMA_JSON = {"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in [
        ("bo", "boolean"), ("by", "byte"), ("sh", "short"), ("i", "integer"), ("l", "long"),
        ("f", "float"), ("d", "double"), ("dc", "decimal(10,2)"), ("dcb", "decimal(30,5)"),
        ("s", "string"), ("bin", "binary"), ("dt", "date"), ("ts", "timestamp"), ("tsn", "timestamp_ntz"),
        ("nul", "void"),
        ("st", {"type": "struct", "fields": [
            {"name": "a", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "b", "type": "string", "nullable": True, "metadata": {}},
            {"name": "c", "type": {"type": "struct", "fields": [
                {"name": "x", "type": "double", "nullable": True, "metadata": {}}]}, "nullable": True,
             "metadata": {}}]}),
        ("arr", {"type": "array", "elementType": "integer", "containsNull": True}),
        ("arrs", {"type": "array", "elementType": "string", "containsNull": True}),
        ("arrd", {"type": "array", "elementType": "decimal(30,5)", "containsNull": True}),
        ("m", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}),
        ("w", {"type": "struct", "fields": [
            {"name": "start", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "end", "type": "timestamp", "nullable": True, "metadata": {}}]}),
    ]]}
TYPED_SCHEMA = parse_struct(TYPED_SCHEMA_JSON, "the test schema")


def typed_rows(n: int = 60, seed: int = 7) -> list[list[Any]]:
    """Rows of TYPED_SCHEMA: edge values first (nulls, -0.0, NaN, extremes, empty and
    multi-byte strings of every length modulo 4), then random ones."""
    rnd = random.Random(seed)
    base = dt.datetime(2024, 2, 29, 12, 0, tzinfo=UTC)
    rows: list[list[Any]] = []
    for k in range(n):
        def maybe(v: Any, k: int = k) -> Any:
            return None if (k + len(rows)) % 11 == 5 else v

        text = "".join(rnd.choice("aé€😀z ") for _ in range(k % 9))
        row = [
            maybe(k % 2 == 0),
            maybe((k * 37) % 256 - 128),
            maybe((k * 997) % 65536 - 32768),
            maybe([0, -1, 2**31 - 1, -(2**31)][k] if k < 4 else rnd.randint(-(2**31), 2**31 - 1)),
            maybe([0, -1, 2**63 - 1, -(2**63)][k] if k < 4 else rnd.randint(-(2**63), 2**63 - 1)),
            maybe([0.0, -0.0, float("nan"), float("inf")][k] if k < 4 else float(rnd.randint(-999, 999)) / 8),
            maybe([0.0, -0.0, float("nan"), -float("inf")][k] if k < 4 else rnd.uniform(-1e6, 1e6)),
            maybe(decimal.Decimal(rnd.randint(-10**9, 10**9)).scaleb(-2)),
            maybe(decimal.Decimal(rnd.randint(-10**29 + 1, 10**29 - 1)).scaleb(-5) if k else decimal.Decimal(0)),
            maybe(text),
            maybe(bytes(rnd.randrange(256) for _ in range(k % 13))),
            maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-30000, 30000))),
            maybe(base + dt.timedelta(microseconds=rnd.randint(-10**15, 10**15))),
            maybe((base + dt.timedelta(microseconds=rnd.randint(-10**15, 10**15))).replace(tzinfo=None)),
            None,
            maybe({"a": rnd.randint(-5, 5), "b": maybe(text[:2]), "c": {"x": rnd.random()}}),
            maybe([maybe(rnd.randint(-9, 9)) for _ in range(k % 5)]),
            maybe([maybe(text[:i]) for i in range(k % 4)]),
            maybe([decimal.Decimal(rnd.randint(-10**20, 10**20)).scaleb(-5) for _ in range(k % 3)]),
            maybe({f"k{j}": maybe(rnd.randint(-10**12, 10**12)) for j in range(k % 4)}),
            maybe({"start": base + dt.timedelta(minutes=10 * k), "end": base + dt.timedelta(minutes=10 * k + 10)}),
        ]
        rows.append(row)
    return rows


def load_vectors() -> dict[str, Any]:
    return dict(json.loads(VECTORS.read_text()))


# --- one comparable form -------------------------------------------------------------------


def norm(value: Any) -> Any:
    """Values from Spark's Rows and from our decoder in one form: structs as tuples (by
    position: state schemas repeat names), maps as sorted pairs, timestamps as UTC naive
    (PySpark gives local naive datetimes; this machine's zone is taken as theirs), bytes,
    NaN as a string."""
    if value is None or isinstance(value, (bool, int, str, decimal.Decimal)):
        return value
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else (0.0 if value == 0 else value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return ("ts", value.astimezone(UTC).replace(tzinfo=None))
        return ("naive", value)
    if isinstance(value, dt.date):
        return value
    if isinstance(value, tuple) and hasattr(value, "asDict"):  # a pyspark Row
        return tuple(norm(v) for v in value)
    if isinstance(value, dict):  # a struct (maps go through the type-guided forms below)
        return tuple(norm(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return tuple(norm(v) for v in value)
    return value


def spark_norm(value: Any, spark_type: Any) -> Any:
    """`norm` of a value Spark's collect() gave, guided by its Spark type: a TimestampType's
    naive local datetime becomes UTC, maps are maps."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark_type, T.TimestampType):
        return ("ts", value.astimezone(UTC).replace(tzinfo=None))
    if isinstance(spark_type, T.TimestampNTZType):
        return ("naive", value)
    if isinstance(spark_type, T.StructType):
        return tuple(spark_norm(v, f.dataType) for v, f in zip(value, spark_type.fields, strict=True))
    if isinstance(spark_type, T.ArrayType):
        return tuple(spark_norm(v, spark_type.elementType) for v in value)
    if isinstance(spark_type, T.MapType):
        return tuple(sorted((repr(spark_norm(k, spark_type.keyType)), spark_norm(v, spark_type.valueType))
                            for k, v in value.items()))
    return norm(value)


def ours_norm(value: Any, t: Any) -> Any:
    """`norm` of a value our decoder gave, guided by our type (maps are maps)."""
    from airflow_provider_streamstate.engine.lookup.encodings import types as LT

    if value is None:
        return None
    if isinstance(t, LT.StructType):
        vals = list(value.values()) if isinstance(value, dict) else list(value)
        return tuple(ours_norm(v, f.type) for v, f in zip(vals, t.fields, strict=True))
    if isinstance(t, LT.ArrayType):
        return tuple(ours_norm(v, t.element) for v in value)
    if isinstance(t, LT.MapType):
        items = value.items() if isinstance(value, dict) else value
        return tuple(sorted((repr(ours_norm(k, t.key)), ours_norm(v, t.value)) for k, v in items))
    if t.name == "timestamp_ntz":
        return ("naive", value)
    return norm(value)


def to_input(value: Any, t: Any) -> Any:
    """A value of Spark's collect() as a key lookup takes it (timestamps as UTC)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(t, T.TimestampType):
        return value.astimezone(UTC)
    if isinstance(t, T.StructType):
        return [to_input(v, f.dataType) for v, f in zip(value, t.fields, strict=True)]
    if isinstance(t, T.ArrayType):
        return [to_input(v, t.elementType) for v in value]
    if isinstance(t, T.MapType):
        return {to_input(k, t.keyType): to_input(v, t.valueType) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value
