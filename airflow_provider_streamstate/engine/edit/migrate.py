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

Spark names an aggregate's state columns after its buffer, not the query's alias: `sum`,
`count`, `max`, an avg's `sum` and `count`, a first's `first` and `valueSet`. Two aggregates
of one function (two sums over different columns, first of several columns) or an avg beside
a sum or a count give one store two columns of one name; they are told apart by position, as
the engine's readers name them: `sum`, then `sum#2`, ... in the query's order. Such a name is
ambiguous for a migration wherever it repeats on either side (which of the state's sums is
the new version's `sum#2`?); each new column of that name must then be given its source
(`pairs`: new column -> the state's column) or a default, else the migration is refused in
one line naming them. A name that repeats only in the state and is gone from the new version
is simply dropped. A name on each side once is paired by name: whether it is the same
aggregate (a sum of the same column) is for the person migrating to know; give it a default
to start it afresh instead.

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
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import (
    decode_row,
    encode_row,
    field_names,
)
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
    pairs: dict[str, str] = field(default_factory=dict)  # a new column -> the state's column it takes

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "store": self.store, "target": self.target, "value": self.value.simple(),
                "defaults": dict(self.defaults), "pairs": dict(self.pairs), "description": self.description}


def migration_to(
    target: str | CheckpointFS, *, operator: int = 0, store: str = "default", defaults: dict[str, Any] | None = None,
    description: str | None = None, connection: Any = None, pairs: dict[str, str] | None = None,
) -> Migration:
    """The migration to the state schema of operator `operator`'s `store` in the checkpoint
    `target` (one the new query version wrote); `pairs` names, for a new column, the state's
    column it takes (columns as `field_names` names them)."""
    fs = target if isinstance(target, CheckpointFS) else open_checkpoint_fs(target, connection=connection)
    rel = schema_file(operator, store)
    try:
        data = fs.read_bytes(rel)
    except (FileNotFoundError, NotFoundError):
        raise UsageError(f"{fs.where(rel)} does not exist: no state schema of operator {operator} ({store}) there",
                         hint="run the new query version once (a little input) into that checkpoint") from None
    schema = read_schema_v2(data, fs.where(rel))
    text = description or f"migrate operator {operator} ({store}) to the state schema of {fs.location}"
    return Migration(operator, store, schema.key, schema.value, data, fs.location, dict(defaults or {}), text,
                     dict(pairs or {}))


def migrated_changes(src: StateSource, m: Migration) -> list[KeyChange]:
    """Every key of the store with its value in the migration's schema, refusing (one line)
    a key schema that differs, a column that cannot be carried over, a missing default."""
    refuse_unwritable(src)
    op, schema = store_schema(src, m.operator, m.store)  # refuses joins and transformWithState
    if [(f.name, f.type) for f in schema.key.fields] != [(f.name, f.type) for f in m.key.fields]:
        raise UsageError(f"the new state's key is {m.key.simple()}, the state's is {schema.key.simple()}: a key change "
                         "is another grouping, its state cannot be carried over",
                         hint="start the new query version from empty state (or migrate only value columns)")
    convert = value_conversion(schema.value, m.value, m.defaults, m.pairs)
    names = field_names(m.value)
    provider = provider_of(src.conf, src.description)
    base = 0 if provider == "hdfs" else len(rk.VERSION)
    out = []
    for part, key_bytes, value_bytes in matching_raw_entries(src, op, m.store, schema, provider):
        new = convert(decode_row(value_bytes[base:], schema.value))
        row = encode_row([new[n] for n in names], m.value)
        out.append(KeyChange(op.operator_id, op.name, m.store, part, decode_row(key_bytes[base:], schema.key),
                             key_bytes, decode_row(row, m.value), row if provider == "hdfs" else rk.VERSION + row))
    return out


def value_conversion(old: StructType, new: StructType, defaults: dict[str, Any],
                     pairs: dict[str, str] | None = None) -> Any:
    """A function from a value of `old` (a dict by `field_names`) to one of `new`; UsageError
    naming the first column that cannot be carried over or has no default, or every column
    whose name repeats and is given neither a pair nor a default (see the module docstring)."""
    old_names, new_names = field_names(old), field_names(new)
    defaults = {_named(k): v for k, v in defaults.items()}
    pairs = {_named(k): _named(v) for k, v in (pairs or {}).items()}
    for what, given, names in (("a default", defaults, new_names), ("a pair", pairs, new_names),
                               ("a pair's source", {v: k for k, v in pairs.items()}, old_names)):
        unknown = sorted(set(given) - set(names))
        if unknown:
            side = "the state" if what == "a pair's source" else "the new state"
            raise UsageError(f"{what} is given for {unknown[0]!r}, which {side} does not have",
                             hint=f"its columns: {', '.join(names)}")
    both = sorted(set(defaults) & set(pairs))
    if both:
        raise UsageError(f"{both[0]} is given both a default and a pair", hint="give it one of them")
    before = dict(zip(old_names, old.fields, strict=True))
    repeated = {f.name for s in (old, new) for f in s.fields if [g.name for g in s.fields].count(f.name) > 1}
    unpaired = [n for n, f in zip(new_names, new.fields, strict=True)
                if f.name in repeated and f.name in {g.name for g in old.fields} and n not in defaults
                and n not in pairs]
    if unpaired:
        message, hint = _ambiguous(unpaired, old_names, new_names)
        raise UsageError(message, hint=hint)
    plan: list[tuple[str, Any]] = []  # (column, ("copy", (old column, type)) | ("default", value))
    for name, f in zip(new_names, new.fields, strict=True):
        source = pairs.get(name, name if name not in defaults else None)
        was = before.get(source) if source is not None else None
        if was is not None:
            if was.type != f.type and not widens(was.type, f.type):
                raise UsageError(f"column {name} is {was.type.simple()} in the state"
                                 f"{f' (as {source})' if source != name else ''} and {f.type.simple()} in the new "
                                 "version: not a widening", hint="give it a default instead, or keep its type")
            if was.nullable and not f.nullable:
                raise UsageError(f"column {name} may be null in the state and cannot be in the new version",
                                 hint=f"give it a default (--default {name}=...) to replace every value")
            plan.append((name, ("copy", (source, f.type))))
            continue
        if name in defaults:
            value = _default(defaults[name], f, name)
        elif f.nullable:
            value = None
        else:
            raise UsageError(f"column {name} is new and cannot be null: give it a default",
                             hint=f'e.g. --default {name}=0 ({f.type.simple()})')
        plan.append((name, ("default", value)))

    def convert(value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, (how, arg) in plan:
            out[name] = _widened(value[arg[0]], arg[1]) if how == "copy" else arg
        return out

    return convert


def _named(column: str) -> str:
    """A column as given (`sum#1` is `sum`)."""
    return column[:-2] if column.endswith("#1") else column


def _ambiguous(unpaired: list[str], old_names: list[str], new_names: list[str]) -> tuple[str, str]:
    """(message, hint) of new columns whose name repeats and that are given no source."""
    base = unpaired[0].partition("#")[0]
    mine = [n for n in old_names if n.partition("#")[0] == base]
    theirs = [n for n in new_names if n.partition("#")[0] == base]
    in_order = [f"{n}={o}" for n, o in zip(theirs, mine, strict=False)]
    return (f"the state has {_listed(mine)} and the new version {_listed(theirs)}: aggregates with one buffer name "
            f"(two {base}s, an avg's beside one, ...), which a migration cannot pair by name "
            f"(unpaired: {_listed(unpaired)})",
            f"pair each new one with the state's it continues, by position in the aggregation (--pair "
            f"{' --pair '.join(in_order[:3])}{' ...' if len(in_order) > 3 else ''} if the query keeps their order; "
            f"StateEditOperator's pairs), or give it a default (--default {theirs[-1]}=...)")


def _listed(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:2])}, ... {names[-1]} ({len(names)})"


def _default(given: Any, f: StructField, name: str) -> Any:
    """A default as the column's value, refused in one line when it does not fit exactly."""
    from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import decode_row_values

    where = f"the default of {name}"
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
