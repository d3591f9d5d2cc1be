"""Migrate a store's state to the value schema a new query version expects, so that the new
version starts on it instead of on empty state (Spark refuses a state whose schema differs:
`STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE`).

The target is what the new version itself writes: the state schema file of a checkpoint it
wrote (run it once on a little input into a scratch checkpoint), so the migrated state has
exactly the schema Spark will check it against. Every key of the store gets a new value, by
column name: a column in both keeps its value (widened where the new type is wider: byte,
short, int to a longer integer or to a float type; float to double; a decimal to one with
at least as many digits on each side of the point), a new column takes its default (given,
else null where it is nullable), a column the new version does not have is dropped. The key
schema must be the same (a key change is another grouping: its state cannot be carried
over). The new values are written as an edit batch (engine/edit/batch.py: every key set)
and the target's schema file replaces the store's, the one it replaces kept beside it
(`schema.before-<edit batch>`: the engine reads the batches before the edit with it, Spark
reads only `schema`); the edit's verification proves every
key holds exactly its migrated value, and Spark's state reader reads them with the new
schema before anything is swapped in.

Only stores described by a schema file of version 1 or 2 (`<op>/0/_metadata/schema`: every
single-store operator) are migrated; transformWithState's schema files (v3) are refused.
"""

from __future__ import annotations

import decimal
import struct
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.state_schemas import schema_file
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.edit.changes import (
    KeyChange,
    matching_raw_entries,
    provider_of,
    refuse_unwritable,
    store_schema,
)
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.keytext import coerce
from airflow_provider_streamstate.engine.lookup.encodings.schema import read_schema_v2
from airflow_provider_streamstate.engine.lookup.encodings.types import (
    DataType,
    DecimalType,
    StructField,
    StructType,
)
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import decode_row, encode_row
from airflow_provider_streamstate.engine.lookup.reading.sources import StateSource

_INTEGERS = ("byte", "short", "integer", "long")
_WIDER = {**{t: set(_INTEGERS[i:]) | {"float", "double"} for i, t in enumerate(_INTEGERS)},
          "float": {"double"}}


@dataclass(frozen=True)
class Migration:
    """A store's state to be rewritten into `value`, the value schema the file
    `schema_file` (its bytes, from a checkpoint the new query version wrote) describes."""

    operator: int | str
    store: str
    key: StructType
    value: StructType
    schema_file: bytes
    target: str  # where the schema comes from, for people
    defaults: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "store": self.store, "target": self.target, "value": self.value.simple(),
                "defaults": dict(self.defaults), "description": self.description}


def migration_to(
    target: str | CheckpointFS, *, operator: int = 0, store: str = "default", defaults: dict[str, Any] | None = None,
    description: str | None = None, connection: Any = None,
) -> Migration:
    """The migration to the state schema of operator `operator`'s `store` in the checkpoint
    `target` (one the new query version wrote)."""
    fs = target if isinstance(target, CheckpointFS) else open_checkpoint_fs(target, connection=connection)
    rel = schema_file(operator, store)
    try:
        data = fs.read_bytes(rel)
    except (FileNotFoundError, NotFoundError):
        raise UsageError(f"{fs.where(rel)} does not exist: no state schema of operator {operator} ({store}) there",
                         hint="run the new query version once (a little input) into that checkpoint") from None
    schema = read_schema_v2(data, fs.where(rel))
    text = description or f"migrate operator {operator} ({store}) to the state schema of {fs.location}"
    return Migration(operator, store, schema.key, schema.value, data, fs.location, dict(defaults or {}), text)


def migrated_changes(src: StateSource, m: Migration) -> list[KeyChange]:
    """Every key of the store with its value in the migration's schema, refusing (one line)
    a key schema that differs, a column that cannot be carried over, a missing default."""
    refuse_unwritable(src)
    op, schema = store_schema(src, m.operator, m.store)  # refuses joins and transformWithState
    if [(f.name, f.type) for f in schema.key.fields] != [(f.name, f.type) for f in m.key.fields]:
        raise UsageError(f"the new state's key is {m.key.simple()}, the state's is {schema.key.simple()}: a key change "
                         "is another grouping, its state cannot be carried over",
                         hint="start the new query version from empty state (or migrate only value columns)")
    convert = value_conversion(schema.value, m.value, m.defaults)
    provider = provider_of(src.conf, src.description)
    base = 0 if provider == "hdfs" else len(rk.VERSION)
    out = []
    for part, key_bytes, value_bytes in matching_raw_entries(src, op, m.store, schema, provider):
        new = convert(decode_row(value_bytes[base:], schema.value))
        row = encode_row([new[f.name] for f in m.value.fields], m.value)
        out.append(KeyChange(op.operator_id, op.name, m.store, part, decode_row(key_bytes[base:], schema.key),
                             key_bytes, decode_row(row, m.value), row if provider == "hdfs" else rk.VERSION + row))
    return out


def value_conversion(old: StructType, new: StructType, defaults: dict[str, Any]) -> Any:
    """A function from a value of `old` (a dict by column name) to one of `new`; UsageError
    naming the first column that cannot be carried over or has no default."""
    if len(set(old.names)) != len(old.names) or len(set(new.names)) != len(new.names):
        raise UnsupportedCheckpointError(
            "a migration maps columns by name, and two columns of the state share one (two sums of one "
            "aggregation, a count beside an avg's)", hint="start the new version from empty state, or give its "
            "aggregates names that differ (one aggregate per buffer name)")
    unknown = sorted(set(defaults) - set(new.names))
    if unknown:
        raise UsageError(f"a default is given for {unknown[0]!r}, which the new state does not have",
                         hint=f"its columns: {', '.join(new.names)}")
    before = {f.name: f for f in old.fields}
    plan: list[tuple[str, Any]] = []  # (column, ("copy", old name) | ("widen", ...) | ("default", value))
    for f in new.fields:
        was = before.get(f.name)
        if was is not None and f.name not in defaults:
            if was.type != f.type and not widens(was.type, f.type):
                raise UsageError(f"column {f.name} is {was.type.simple()} in the state and {f.type.simple()} in the "
                                 "new version: not a widening", hint="give it a default instead, or keep its type")
            if was.nullable and not f.nullable:
                raise UsageError(f"column {f.name} may be null in the state and cannot be in the new version",
                                 hint=f"give it a default (--default {f.name}=...) to replace every value")
            plan.append((f.name, ("copy", f.type)))
            continue
        if f.name in defaults:
            value = _default(defaults[f.name], f)
        elif f.nullable:
            value = None
        else:
            raise UsageError(f"column {f.name} is new and cannot be null: give it a default",
                             hint=f'e.g. --default {f.name}=0 ({f.type.simple()})')
        plan.append((f.name, ("default", value)))

    def convert(value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, (how, arg) in plan:
            out[name] = _widened(value[name], arg) if how == "copy" else arg
        return out

    return convert


def _default(given: Any, f: StructField) -> Any:
    """A default as the column's value, refused in one line when it does not fit exactly."""
    from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import decode_row_values

    where = f"the default of {f.name}"
    if given is None and not f.nullable:
        raise UsageError(f"{where} is null, and the new version's {f.name} cannot be", hint="give a value")
    if isinstance(given, bool) and f.type.name != "boolean":
        raise UsageError(f"{where} ({given!r}) is not a {f.type.simple()}", hint=f"give a {f.type.simple()}")
    value = coerce(given, f.type, where)
    row = StructType("struct", (f,))
    try:
        back = decode_row_values(encode_row([value], row), row)[0]
    except (TypeError, ValueError, OverflowError, AttributeError, struct.error) as exc:
        raise UsageError(f"{where} ({given!r}) is not a {f.type.simple()}: {exc}",
                         hint=f"give a {f.type.simple()}") from None
    if back != value or (isinstance(value, float) != isinstance(back, float) and value is not None):
        raise UsageError(f"{where} ({given!r}) does not fit a {f.type.simple()} exactly (it would be {back!r})",
                         hint=f"give a {f.type.simple()}")
    return value


def widens(old: DataType, new: DataType) -> bool:
    """Whether every value of `old` is exactly a value of `new`."""
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if isinstance(old, DecimalType) or isinstance(new, DecimalType):
        return False
    if old.name in ("integer", "long") and new.name == "float" or old.name == "long" and new.name == "double":
        return False  # not exact above 2**24 (float) or 2**53 (double)
    return new.name in _WIDER.get(old.name, set())


def _widened(value: Any, t: DataType) -> Any:
    if value is None:
        return None
    if t.name in ("float", "double"):
        return float(value)
    if isinstance(t, DecimalType):
        return decimal.Decimal(value)
    return value
