"""What a repair edit asks for, and the bytes it means: keys to delete and keys to set, per
operator and store, each encoded as Spark stores it and placed in the partition Spark looks
for it in.

An edit is given as JSON (the CLI's `--edit`), one object or a list of them:

    {"operator": 0, "store": "default",
     "delete": [{"k": "a"}, ["b"], "c"],
     "delete_where": "sum > 1000000 and key.k != \"vip\"",
     "set": [{"key": {"k": "d"}, "value": {"count": 3, "sum": 14}}]}

`operator` is an id or a name (default 0), `store` the operator's store (default `default`);
keys are given as a key lookup takes them (by column name, in order, or a single value bare:
engine/lookup/api.py `key_values`), values by column name or in order, every column given.
`delete_where` selects keys by a condition (engine/lookup/predicate.py) on the value's
fields, and on the key's as `key.<column>`: every partition of the store is read (without
Spark) to find them.
`compile_changes` turns it into one `KeyChange` per key against the checkpoint's own schema
files, refusing (one line each) what an edit cannot write yet: column-family stores
(transformWithState, join state format 3), stream-stream joins, session windows, Avro-
encoded state, row checksums (Spark 4.2+), a codec other than lz4, the same key twice.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import store_kind
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError
from airflow_provider_streamstate.engine.lookup.api import (
    ENCODING_CONF,
    ROW_CHECKSUM_CONF,
    STRICT_DISTRIBUTION_CONF,
    key_values,
    operator_schemas,
)
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.keytext import coerce
from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
from airflow_provider_streamstate.engine.lookup.encodings.schema import ColumnFamilySchema
from airflow_provider_streamstate.engine.lookup.encodings.types import StructType
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import (
    decode_row,
    decode_row_values,
    encode_row,
)
from airflow_provider_streamstate.engine.lookup.formats.codec import codec_name
from airflow_provider_streamstate.engine.lookup.layouts import kind_of
from airflow_provider_streamstate.engine.lookup.predicate import parse_predicate
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.entries import partition_entries
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads, partition_state
from airflow_provider_streamstate.engine.lookup.reading.sources import OperatorView, StateSource


@dataclass(frozen=True)
class StoreEdit:
    """The keys to delete and to set in one store of one operator, as given."""

    operator: int | str
    store: str
    delete: tuple[Any, ...]
    set: tuple[tuple[Any, Any], ...]  # (key, value)
    delete_where: str | None = None  # a condition (engine/lookup/predicate.py) on value and `key.<column>`


@dataclass(frozen=True)
class EditSpec:
    """A repair edit: its store edits and a description (what the result's snapshot says)."""

    edits: tuple[StoreEdit, ...]
    description: str

    @classmethod
    def from_json(cls, data: Any, description: str | None = None) -> EditSpec:
        """An edit from its JSON (text or parsed); UsageError naming what is malformed."""
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise UsageError(f"the edit is not JSON: {exc}", hint="give an object or a list of them") from None
        items = data if isinstance(data, list) else [data]
        edits = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise UsageError(f"edit {i} is not an object", hint='give {"delete": [...], "set": [...]}')
            unknown = sorted(set(item) - {"operator", "store", "delete", "delete_where", "set"})
            if unknown:
                raise UsageError(f"edit {i} has an unknown field {unknown[0]!r}",
                                 hint="its fields: operator, store, delete, delete_where, set")
            sets = []
            for s in item.get("set") or []:
                if not isinstance(s, dict) or set(s) != {"key", "value"} or s["value"] is None:
                    raise UsageError(f"a set of edit {i} is not {{\"key\": ..., \"value\": ...}}: {str(s)[:80]}",
                                     hint="give the key and its whole new value (delete a key with delete)")
                sets.append((s["key"], s["value"]))
            deletes = item.get("delete") or []
            if not isinstance(deletes, list):
                raise UsageError(f"the delete of edit {i} is not a list of keys")
            where = item.get("delete_where")
            if where is not None:
                if not isinstance(where, str):
                    raise UsageError(f"the delete_where of edit {i} is not a condition", hint='e.g. "sum > 1000"')
                parse_predicate(where)
            if not deletes and not sets and not where:
                raise UsageError(f"edit {i} deletes and sets nothing", hint="give keys in delete or set, or delete_where")
            edits.append(StoreEdit(item.get("operator", 0), str(item.get("store", "default")), tuple(deletes),
                                   tuple(sets), where))
        if not edits:
            raise UsageError("the edit is empty", hint="give at least one key to delete or set")
        return cls(tuple(edits), description or describe(edits))

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description,
                "edits": [{"operator": e.operator, "store": e.store, "delete": list(e.delete),
                           "delete_where": e.delete_where,
                           "set": [{"key": k, "value": v} for k, v in e.set]} for e in self.edits]}


def describe(edits: Sequence[StoreEdit]) -> str:
    deletes = sum(len(e.delete) for e in edits)
    sets = sum(len(e.set) for e in edits)
    where = "".join(f", delete where {e.delete_where}" for e in edits if e.delete_where)
    return f"repair: delete {deletes} key(s), set {sets} key(s){where}"


@dataclass(frozen=True)
class KeyChange:
    """One key an edit changes, in the bytes its store keeps (`value` None: removed)."""

    operator_id: int
    operator: str
    store: str
    partition: int
    key: dict[str, Any]  # decoded, for people
    key_bytes: bytes
    value: dict[str, Any] | None
    value_bytes: bytes | None

    @property
    def where(self) -> tuple[int, str, int]:
        return self.operator_id, self.store, self.partition


def provider_of(conf: dict[str, str], where: str) -> str:
    """`hdfs` or `rocksdb`, the store kinds an edit writes."""
    return store_kind(conf, where, readers="state edits write")


def refuse_unwritable(src: StateSource) -> None:
    """What no edit of this checkpoint can write, refused before anything is read."""
    conf, where = src.conf, src.description
    fmt = conf.get(ENCODING_CONF, "unsaferow").lower()
    if fmt != "unsaferow":
        raise UnsupportedCheckpointError(
            f"state edits write UnsafeRow-encoded state; {where} keeps it {fmt}-encoded ({ENCODING_CONF}={fmt})",
            hint="evolve Avro-encoded state with Spark's own schema evolution")
    if conf.get(ROW_CHECKSUM_CONF, "false").lower() == "true":
        raise UnsupportedCheckpointError(
            f"state edits cannot write row checksums yet ({ROW_CHECKSUM_CONF}=true, Spark 4.2+): {where}",
            hint="roll back to a snapshot and replay instead")
    codec = codec_name(conf)
    if codec != "lz4":
        raise UnsupportedCheckpointError(
            f"{where} compresses its state files with {codec}; state edits write lz4 only",
            hint="roll back to a snapshot and replay instead")
    provider_of(conf, where)
    if conf.get(STRICT_DISTRIBUTION_CONF, "false").lower() != "true":
        raise UnsupportedCheckpointError(
            f"{where} was first started before Spark 3.3 ({STRICT_DISTRIBUTION_CONF} is not true): its keys may "
            "not be hash-partitioned on the state key alone, so an edit cannot place a key",
            hint="roll back to a snapshot and replay instead")


def _row(value: Any, schema: StructType, what: str) -> list[Any]:
    """A row's column values in schema order, every column given (by name or in order)."""
    names = schema.names
    listing = ", ".join(f"{f.name}: {f.type.simple()}" for f in schema.fields)
    if isinstance(value, dict):
        if sorted(value) != sorted(names) or len(set(names)) != len(names):
            raise UsageError(f"{what} must give every column once by name", hint=f"its columns: {listing}")
        values = [value[n] for n in names]
    elif isinstance(value, (list, tuple)):
        values = list(value)
    else:
        values = [value]
    if len(values) != len(names):
        raise UsageError(f"{what} has {len(names)} column(s), {len(values)} value(s) were given",
                         hint=f"its columns: {listing}")
    values = [coerce(v, f.type, f"{what} column {f.name}") for v, f in zip(values, schema.fields, strict=True)]
    try:
        encode_row(values, schema)
    except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as exc:
        raise UsageError(f"{what} does not match its types: {exc}", hint=f"its columns: {listing}") from None
    return values


def store_schema(src: StateSource, operator: int | str, store: str,
                 cache: PartitionCache | None = None) -> tuple[OperatorView, ColumnFamilySchema]:
    """The operator and the key and value schema of its `store`, refusing what an edit
    cannot write (a join's or transformWithState's stores) or a store it does not have."""
    op = src.operator(operator)
    kind = kind_of(op.name, bool(op.state_variables))
    if kind != "single":
        what = "stream-stream join" if kind == "join" else "transformWithState"
        raise UnsupportedCheckpointError(
            f"operator {op.operator_id} ({op.name}) keeps {what} state; state edits write single-store "
            "operators (aggregations, deduplication, (flat)mapGroupsWithState) for now",
            hint="roll back to a snapshot and replay instead")
    if store not in op.stores:
        raise UsageError(f"operator {op.operator_id} ({op.name}) has no store {store!r}",
                         hint=f"its stores: {', '.join(op.stores)}")
    schemas = operator_schemas(src, op, cache or PartitionCache(max_entries=8, max_bytes=1 << 20), Reads())
    if store not in schemas:
        raise UnsupportedCheckpointError(f"operator {op.operator_id} ({op.name}) has no schema for {store!r}",
                                         hint="read this state with Spark")
    return op, schemas[store]


def matching_entries(src: StateSource, operator: int | str, store: str,
                     condition: str | None) -> Iterator[tuple[list[Any], list[Any]]]:
    """(key, value), each its columns in order, of every entry of the operator's store that
    satisfies `condition` (on the value's fields and `key.<column>`; None: every entry),
    every partition read whole, without Spark."""
    refuse_unwritable(src)
    op, schema = store_schema(src, operator, store)
    provider = provider_of(src.conf, src.description)
    base = 0 if provider == "hdfs" else len(rk.VERSION)
    for _, key_bytes, value_bytes, _, _ in _matching(src, op, store, schema, provider, condition):
        yield decode_row_values(key_bytes[base:], schema.key), decode_row_values(value_bytes[base:], schema.value)


def matching_raw_entries(src: StateSource, op: OperatorView, store: str, schema: ColumnFamilySchema,
                         provider: str) -> Iterator[tuple[int, bytes, bytes]]:
    """(partition, stored key, stored value) of every entry of the store, as stored."""
    for part, key_bytes, value_bytes, _, _ in _matching(src, op, store, schema, provider, None):
        yield part, key_bytes, value_bytes


def compile_changes(src: StateSource, spec: EditSpec) -> list[KeyChange]:
    """Every key of `spec` as the bytes Spark keeps at `src`'s batch, with its partition."""
    refuse_unwritable(src)
    provider = provider_of(src.conf, src.description)
    cache = PartitionCache(max_entries=8, max_bytes=1 << 20)
    out: list[KeyChange] = []
    seen: set[tuple[int, str, bytes]] = set()
    for edit in spec.edits:
        op, schema = store_schema(src, edit.operator, edit.store, cache)
        wanted = [(k, None) for k in edit.delete] + list(edit.set)
        for key, value in wanted:
            values = key_values(key, schema.key, op.name)
            row = encode_row(values, schema.key)
            part = partition_of(values, [f.type for f in schema.key.fields], op.partitions) if schema.key.fields else 0
            key_bytes = row if provider == "hdfs" else rk.no_prefix_key(row)
            if (op.operator_id, edit.store, key_bytes) in seen:
                raise UsageError(f"the edit names key {decode_row(row, schema.key)} of operator {op.operator_id} "
                                 "twice", hint="give each key once: deleted or set")
            seen.add((op.operator_id, edit.store, key_bytes))
            new: dict[str, Any] | None = None
            value_bytes = None
            if value is not None:
                vrow = encode_row(_row(value, schema.value, f"the value of key {key!r}"), schema.value)
                new = decode_row(vrow, schema.value)
                value_bytes = vrow if provider == "hdfs" else rk.VERSION + vrow
            out.append(KeyChange(op.operator_id, op.name, edit.store, part, decode_row(row, schema.key), key_bytes,
                                 new, value_bytes))
        if edit.delete_where:
            for part, key_bytes, _, key, _ in _matching(src, op, edit.store, schema, provider, edit.delete_where):
                if (op.operator_id, edit.store, key_bytes) not in seen:  # a key also named is as named
                    seen.add((op.operator_id, edit.store, key_bytes))
                    out.append(KeyChange(op.operator_id, op.name, edit.store, part, key, key_bytes, None, None))
    return out


def _matching(src: StateSource, op: OperatorView, store: str, schema: ColumnFamilySchema, provider: str,
              condition: str | None) -> Iterator[tuple[int, bytes, bytes, dict[str, Any], dict[str, Any]]]:
    """(partition, stored key, stored value, key, value) of every entry of the store whose
    value (and `key.<column>`) satisfies `condition` (None: every entry), every partition
    read whole, without Spark."""
    predicate = parse_predicate(condition) if condition is not None else None
    codec = codec_name(src.conf)
    base = 0 if provider == "hdfs" else len(rk.VERSION)
    for p in range(op.partitions):
        part = partition_state(src, op, p, store, provider, codec, PartitionCache(max_entries=0, max_bytes=0),
                               Reads())
        for key_bytes, value_bytes in partition_entries(part):
            key = decode_row(key_bytes[base:], schema.key)
            value = decode_row(value_bytes[base:], schema.value)
            fields = value if "key" in value else {**value, "key": key}
            if predicate is None or predicate.holds(True, fields):
                yield p, key_bytes, value_bytes, key, value
