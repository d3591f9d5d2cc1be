"""Look up one key of a stream's state without Spark: `lookup_key`.

    from airflow_provider_streamstate.engine.lookup import lookup_key, SnapshotSource
    hit = lookup_key("/data/ckpt/orders", key={"account": "a-17"})           # newest batch
    hit = lookup_key(SnapshotSource(store, "orders", "latest"), key=["a-17"])
    hit.found, hit.value, hit.partition, hit.files_read, hit.bytes_read

The key's partition is computed as Spark computes it (`murmur3`), and of that partition's
files only what the key needs is read (`partitions`): a RocksDB table's index, filter and
one block, by ranged reads; HDFS-backed files newest first, streamed, up to the one that
decides the key. What was read is kept in a bounded cache (`cache`); the key is encoded
exactly as Spark's row writer would (`unsafe_row`, `rocksdb_keys`) and found by its bytes.
"""

from __future__ import annotations

import posixpath
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.operator_metadata import parse_metadata_v2
from airflow_provider_streamstate.engine.checkpoint.reader import store_kind
from airflow_provider_streamstate.engine.checkpoint.state_schemas import schema_file, schema_of_batch
from airflow_provider_streamstate.engine.core.errors import (
    CorruptionError,
    NotFoundError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.keytext import coerce
from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
from airflow_provider_streamstate.engine.lookup.encodings.schema import (
    ColumnFamilySchema,
    read_schema_v2,
    read_schema_v3,
)
from airflow_provider_streamstate.engine.lookup.encodings.types import DataType, StructField, StructType
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import (
    RowFormatError,
    decode_row,
    encode_row,
    normalize_float_key,
)
from airflow_provider_streamstate.engine.lookup.formats.codec import check_codec, codec_name
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import RocksPartition
from airflow_provider_streamstate.engine.lookup.layouts import (
    JOIN_SIDES,
    NORMALIZED_KEYS,
    TIMER_FIELD,
    TIMERS,
    join_stores,
    kind_of,
)
from airflow_provider_streamstate.engine.lookup.reading.cache import DEFAULT_CACHE, PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads, lookup_partition
from airflow_provider_streamstate.engine.lookup.reading.sources import (
    CheckpointSource,
    OperatorView,
    StateSource,
)

ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
# Since Spark 3.3 stateful operators require exactly HashPartitioning(keys); a query first
# started before pins `false` (or nothing), and its keys may be clustered another way.
STRICT_DISTRIBUTION_CONF = "spark.sql.streaming.statefulOperator.useStrictDistribution"
# Spark 4.2+: a checksum appended to every stored row (off by default); pinned in the offset log.
ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"


@dataclass
class KeyLookup:
    """One key's state. `value`: the value row (a dict) of a single-value state; for list
    state the elements, for a join side the key's rows (lists of dicts); for map state a
    list of {"key": user key, "value": row}; None when not found."""

    found: bool
    key: dict[str, Any]
    value: Any
    kind: str  # value | list | map | rows
    partition: int
    operator_id: int
    operator_name: str
    store: str
    source: str
    batch_id: int
    files_read: list[str] = field(default_factory=list)
    bytes_read: int = 0
    requests: int = 0  # reads sent to the source (a whole file, a range, or a stream)
    cached: bool = False
    elapsed_ms: float = 0.0
    state_var: str | None = None
    join_side: str | None = None
    key_schema: StructType | None = field(default=None, repr=False)
    value_schema: StructType | None = field(default=None, repr=False)  # of one row / element / map value

    def to_json(self) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable

        return {"found": self.found, "key": to_jsonable(self.key), "value": to_jsonable(self.value),
                "kind": self.kind, "partition": self.partition, "operator_id": self.operator_id,
                "operator_name": self.operator_name, "store": self.store, "state_var": self.state_var,
                "join_side": self.join_side, "source": self.source, "batch_id": self.batch_id,
                "files_read": self.files_read, "bytes_read": self.bytes_read, "requests": self.requests,
                "cached": self.cached,
                "elapsed_ms": round(self.elapsed_ms, 3)}


def lookup_key(
    source: StateSource | str,
    *,
    key: dict[str, Any] | Sequence[Any] | Any,
    operator: int | str = 0,
    store_name: str | None = None,
    join_side: str | None = None,
    state_var: str | None = None,
    batch_id: int | None = None,
    cache: PartitionCache | None = None,
    max_bytes: int | None = None,
) -> KeyLookup:
    """The state of one key. `source`: a checkpoint location (read at `batch_id`, default the
    newest committed batch) or a `StateSource` (`CheckpointSource`, `SnapshotSource`).
    `key`: the key columns by name ({"account": "a-17"}) or in order (["a-17"]; a single
    column may be given bare; timestamps as aware datetimes, naive ones (and timestamp_ntz)
    read as UTC wall-clock, or microseconds). A join needs `join_side`; a transformWithState
    operator `state_var`. `max_bytes`: the most the lookup may read from its source (what the
    cache answers is free); past it, ReadBudgetExceeded before the read."""
    started = time.perf_counter()
    if isinstance(source, StateSource):
        if batch_id is not None and batch_id != source.batch_id:
            raise UsageError(f"{source.description} is batch {source.batch_id}, not {batch_id}",
                             hint="give the batch when making the source, or leave batch_id out")
        src = source
    else:
        src = CheckpointSource(str(source), batch_id)
    cache = cache if cache is not None else DEFAULT_CACHE
    op = src.operator(operator)
    kind = kind_of(op.name, bool(op.state_variables))
    _check_encoding(src)
    codec = codec_name(src.conf)
    check_codec(codec)
    provider = _provider(src)
    reads = Reads(max_bytes)
    schemas = operator_schemas(src, op, cache, reads)

    if kind != "join" and src.conf.get(STRICT_DISTRIBUTION_CONF, "false").lower() != "true":
        raise UnsupportedCheckpointError(
            f"{src.description} was first started before Spark 3.3 ({STRICT_DISTRIBUTION_CONF} is not true): "
            "its keys may not be hash-partitioned on the state key alone",
            hint="key lookups need the strict distribution of Spark 3.3+; read this state with Spark")
    if kind == "join":
        if store_name is None:
            if join_side not in JOIN_SIDES:
                raise UsageError(f"operator {op.operator_id} ({op.name}) is a stream-stream join: name its side",
                                 hint="pass join_side='left' or 'right' (or store_name for one of its stores)")
        else:
            kind = "single"
    elif join_side is not None:
        raise UsageError(f"operator {op.operator_id} ({op.name}) is not a stream-stream join",
                         hint="leave join_side out")
    if kind == "tws":
        return _lookup_tws(src, op, schemas, key, state_var, provider, codec, cache, reads, started)
    if state_var is not None:
        raise UsageError(f"operator {op.operator_id} ({op.name}) has no state variables", hint="leave state_var out")
    if kind == "join":
        return _lookup_join(src, op, schemas, key, join_side or "left", provider, codec, cache, reads, started)
    store = store_name or "default"
    if store not in op.stores and store not in schemas:
        raise NotFoundError(f"operator {op.operator_id} ({op.name}) of {src.description} has no store {store!r}",
                            hint=f"its stores: {', '.join(op.stores)}")
    schema = _schema_for(schemas, store, op)
    values = key_values(key, schema.key, op.name)
    partition = _partition(values, schema.key, op)
    cf_store, cf = _store_and_cf(op, store)
    part = lookup_partition(src, op, partition, cf_store, provider, codec, cache, reads)
    raw = part.get(_encode_key(encode_row(values, schema.key), provider, _cf_id(part, cf, src, op)))
    value = None if raw is None else _decode(_strip(raw, provider, store), schema.value, store)
    return _result(src, op, store, values, schema.key, value, "value", partition, reads, started, schema.value)


# --- the three layouts -----------------------------------------------------------------


def _lookup_join(src: StateSource, op: OperatorView, schemas: dict[str, ColumnFamilySchema], key: Any,
                 side: str, provider: str, codec: str, cache: PartitionCache, reads: Reads,
                 started: float) -> KeyLookup:
    counts_name, rows_name = join_stores(side)
    counts, rows = _schema_for(schemas, counts_name, op), _schema_for(schemas, rows_name, op)
    values = key_values(key, counts.key, op.name)
    partition = _partition(values, counts.key, op)
    found: list[dict[str, Any]] = []
    counts_store, counts_cf = _store_and_cf(op, counts_name)
    rows_store, rows_cf = _store_and_cf(op, rows_name)
    part = lookup_partition(src, op, partition, counts_store, provider, codec, cache, reads)
    raw = part.get(_encode_key(encode_row(values, counts.key), provider, _cf_id(part, counts_cf, src, op)))
    if raw is not None:
        n = _decode(_strip(raw, provider, counts_name), counts.value, counts_name)
        count = next(iter(n.values())) if n else 0
        rpart = lookup_partition(src, op, partition, rows_store, provider, codec, cache, reads)
        cf_id = _cf_id(rpart, rows_cf, src, op)
        for index in range(int(count or 0)):
            row_raw = rpart.get(_encode_key(encode_row([*values, index], rows.key), provider, cf_id))
            if row_raw is None:
                continue  # Spark skips a hole a removal left (skipNullsForStreamStreamJoins)
            row = _decode(_strip(row_raw, provider, rows_name), rows.value, rows_name)
            row.pop("matched", None)
            found.append(row)
    row_schema = StructType("struct", tuple(f for f in rows.value.fields if f.name != "matched"))
    res = _result(src, op, f"{side} side", values, counts.key, found if raw is not None else None, "rows",
                  partition, reads, started, row_schema)
    res.join_side = side
    return res


def _lookup_tws(src: StateSource, op: OperatorView, schemas: dict[str, ColumnFamilySchema], key: Any,
                state_var: str | None, provider: str, codec: str, cache: PartitionCache, reads: Reads,
                started: float) -> KeyLookup:
    variables = {str(v["name"]): str(v["kind"]) for v in op.state_variables}
    user = [n for n, k in variables.items() if k != "TimerState"]
    timers = [n for n, k in variables.items() if k == "TimerState"]
    choices = ", ".join(user + ([TIMERS] if timers else [])) or "(none)"
    if state_var == TIMERS:
        if not timers:
            raise NotFoundError(f"operator {op.operator_id} ({op.name}) registers no timers",
                                hint=f"name a state variable: {choices}")
        state_var = timers[0]
    elif state_var is None or state_var not in variables or state_var in timers:
        raise UsageError(
            f"operator {op.operator_id} ({op.name}) keeps state variables: "
            f"{'name one' if state_var is None else f'none named {state_var!r}'}",
            hint=f"pass state_var= one of {choices}")
    var_kind = variables[state_var]
    if var_kind not in ("ValueState", "ListState", "MapState", "TimerState"):
        raise UnsupportedCheckpointError(f"state variable {state_var} is a {var_kind}",
                                         hint="key lookups read ValueState, ListState and MapState variables "
                                         f"and the timers ({TIMERS})")
    if provider != "rocksdb":
        raise UnsupportedCheckpointError(f"operator {op.operator_id} ({op.name}) keeps its state in the HDFS-backed "
                                         "store", hint="transformWithState runs only on RocksDB state")
    cf = _schema_for(schemas, state_var, op)
    if var_kind in ("MapState", "TimerState"):
        # map state: (grouping key, user key); timers (`<mode>Timers_keyToTimestamp`):
        # (grouping key, expiryTimestampMs); both prefix-scanned by the grouping key
        if cf.prefix_columns != 1 or len(cf.key.fields) != 2 or not isinstance(cf.key.fields[0].type, StructType):
            raise UnsupportedCheckpointError(f"{state_var} has an unexpected key schema {cf.key.simple()}",
                                             hint="read this state with Spark")
        grouping = cf.key.fields[0].type
    else:
        grouping = cf.key
    values = key_values(key, grouping, op.name)
    partition = _partition(values, grouping, op)
    part = lookup_partition(src, op, partition, "default", provider, codec, cache, reads)
    cf_id = _cf_id(part, state_var, src, op)
    where = f"{state_var} of {src.description}"
    value: Any
    if var_kind == "ValueState":
        raw = part.get(rk.no_prefix_key(encode_row(values, grouping), cf_id))
        value = None if raw is None else _decode(rk.single_value(raw, where), cf.value, where)
        kind = "value"
    elif var_kind == "ListState":
        raw = part.get(rk.no_prefix_key(encode_row(values, grouping), cf_id))
        value = None if raw is None else [_decode(r, cf.value, where) for r in rk.multiple_values(raw, where)]
        kind = "list"
    else:
        prefix_schema = StructType("struct", cf.key.fields[:1])
        rest_schema = StructType("struct", cf.key.fields[1:])
        prefix = rk.prefix_scan_key(encode_row([values], prefix_schema), None, cf_id)
        entries = []
        for k, v in part.scan_prefix(prefix):
            _, rest = rk.split_prefix_key(k, cf_id is not None, where)
            user_key = next(iter(_decode(rest, rest_schema, where).values()))
            if var_kind == "TimerState":
                entries.append({TIMER_FIELD: user_key})
            else:
                entries.append({"key": user_key, "value": _decode(rk.single_value(v, where), cf.value, where)})
        if var_kind == "TimerState":  # in time order (the table orders them by their bytes)
            entries.sort(key=lambda e: e[TIMER_FIELD])
        value = entries or None
        kind = "map" if var_kind == "MapState" else "timers"
    value_schema = cf.value if var_kind != "TimerState" else StructType(
        "struct", (StructField(TIMER_FIELD, DataType("long"), False),))
    res = _result(src, op, "default", values, grouping, value, kind, partition, reads, started, value_schema)
    res.state_var = TIMERS if var_kind == "TimerState" else state_var
    return res


# --- pieces ----------------------------------------------------------------------------


def key_values(key: Any, schema: StructType, operator_name: str = "") -> list[Any]:
    """The key's column values in schema order, from a dict by name or a sequence."""
    names = [f.name for f in schema.fields]
    listing = ", ".join(f"{f.name}: {f.type.simple()}" for f in schema.fields)
    if isinstance(key, dict):
        dupes = {n for n in names if names.count(n) > 1}
        unknown = [k for k in key if k not in names]
        if unknown:
            raise UsageError(f"the state key has no column {unknown[0]!r}", hint=f"its columns: {listing}")
        if dupes & set(key) or len(key) != len(names):
            missing = [n for n in names if n not in key]
            raise UsageError(
                f"the key must give every column once (missing: {', '.join(missing) or 'none'}"
                f"{'; repeated names: ' + ', '.join(sorted(dupes)) if dupes else ''})",
                hint=f"give all of them, in order, as a list: [{listing}]")
        vals = [key[n] for n in names]
    elif isinstance(key, (list, tuple)):
        vals = list(key)
    else:
        vals = [key]
    if len(vals) != len(names):
        raise UsageError(f"the state key has {len(names)} column(s), {len(vals)} value(s) were given",
                         hint=f"its columns: {listing}")
    vals = [coerce(v, f.type, f"key column {f.name}") for v, f in zip(vals, schema.fields, strict=True)]
    if operator_name in NORMALIZED_KEYS:
        vals = [normalize_float_key(v, f.type) for v, f in zip(vals, schema.fields, strict=True)]
    try:
        encode_row(vals, schema)
    except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as exc:
        raise UsageError(f"the key does not match the state key's types: {exc}", hint=f"its columns: {listing}") from None
    return vals


def _partition(values: list[Any], schema: StructType, op: OperatorView) -> int:
    if not schema.fields:
        return 0  # a global aggregation or limit keeps its one key in partition 0
    return partition_of(values, [f.type for f in schema.fields], op.partitions)


def _provider(src: StateSource) -> str:
    return store_kind(src.conf, src.description, readers="key lookups read")


def _check_encoding(src: StateSource) -> None:
    fmt = src.conf.get(ENCODING_CONF, "unsaferow").lower()
    if fmt != "unsaferow":
        raise UnsupportedCheckpointError(
            f"{src.description} keeps its state {fmt}-encoded ({ENCODING_CONF}={fmt})",
            hint="key lookups read UnsafeRow-encoded state (the default); read this state with Spark")
    if src.conf.get(ROW_CHECKSUM_CONF, "false").lower() == "true":
        raise UnsupportedCheckpointError(
            f"{src.description} stores a checksum with every state row ({ROW_CHECKSUM_CONF}=true)",
            hint="key lookups read rows without checksums (the default); read this state with Spark")


def _store_and_cf(op: OperatorView, store: str) -> tuple[str, str | None]:
    """The store directory and column family a logical store lives in (join state format
    3 keeps a join's four stores as column families of its one `default` store)."""
    if store in op.stores:
        return store, None
    if op.stores == ("default",):
        return "default", store
    raise NotFoundError(f"operator {op.operator_id} ({op.name}) has no store {store!r}",
                        hint=f"its stores: {', '.join(op.stores)}")


def _cf_id(part: Any, cf: str | None, src: StateSource, op: OperatorView) -> int | None:
    if cf is None:
        return None
    if not isinstance(part, RocksPartition):
        raise UnsupportedCheckpointError(f"operator {op.operator_id} of {src.description} keeps column families "
                                         "outside RocksDB", hint="read this state with Spark")
    if cf not in part.column_families:
        if not part.tables and not part.column_families:
            raise UnsupportedCheckpointError(
                f"operator {op.operator_id} of {src.description} has no RocksDB snapshot naming its column families",
                hint="look up a later batch (Spark writes one when a column family is created)")
        return -1  # the variable has no data in this partition yet: nothing can match
    return part.column_families[cf]


def _encode_key(row: bytes, provider: str, cf_id: int | None) -> bytes:
    return row if provider == "hdfs" else rk.no_prefix_key(row, cf_id)


def _strip(raw: bytes, provider: str, where: str) -> bytes:
    return raw if provider == "hdfs" else rk.single_value(raw, where)


def _decode(raw: bytes, schema: StructType, where: str) -> dict[str, Any]:
    try:
        return decode_row(raw, schema)
    except (RowFormatError, IndexError, ValueError) as exc:
        raise CorruptionError(f"a value of {where} does not decode as {schema.simple()}: {exc}",
                              hint="the state file is damaged or its schema changed; read it with Spark") from None


def _schema_for(schemas: dict[str, ColumnFamilySchema], name: str, op: OperatorView) -> ColumnFamilySchema:
    if name not in schemas:
        raise NotFoundError(f"operator {op.operator_id} ({op.name}) has no schema for {name!r}",
                            hint=f"it has: {', '.join(sorted(schemas)) or 'none'}")
    return schemas[name]


def _result(src: StateSource, op: OperatorView, store: str, values: list[Any], schema: StructType, value: Any,
            kind: str, partition: int, reads: Reads, started: float, value_schema: StructType) -> KeyLookup:
    key = decode_row(encode_row(values, schema), schema)
    return KeyLookup(found=value is not None, key=key, value=value, kind=kind, partition=partition,
                     operator_id=op.operator_id, operator_name=op.name, store=store, source=src.description,
                     batch_id=src.batch_id, files_read=reads.files, bytes_read=reads.bytes, requests=reads.requests,
                     cached=reads.all_cached, elapsed_ms=(time.perf_counter() - started) * 1000,
                     key_schema=schema, value_schema=value_schema)


def operator_schemas(src: StateSource, op: OperatorView, cache: PartitionCache,
                     reads: Reads) -> dict[str, ColumnFamilySchema]:
    """Store (or column family) name -> schema, from the operator's own schema files."""
    files = src.operator_files(op.operator_id)
    paths = [f.path for f in files]
    v2_files = {name: schema_of_batch(schema_file(op.operator_id, name), paths, src.batch_id)
                for name in op.stores}  # a migrated store's batches before it: the schema they were written in
    ident = ("schema", op.operator_id, tuple(sorted((f.path, f.identity) for f in files)),
             tuple(sorted(v2_files.items())))

    def load() -> tuple[dict[str, ColumnFamilySchema], int]:
        by_path = {f.path: f for f in files}
        out: dict[str, ColumnFamilySchema] = {}
        v2 = sorted((f for f in files if re.search(r"/_metadata/v2/\d+$", f.path)),
                    key=lambda f: int(posixpath.basename(f.path)))
        if v2:
            newest = v2[-1]
            meta = parse_metadata_v2(reads.read(src, newest), op.operator_id, newest.path)
            for store in meta.stores:
                for rel in store.schema_files:
                    if rel not in by_path:
                        raise NotFoundError(f"{src.description} lacks {rel}, named by {newest.path}")
                    for cf in read_schema_v3(reads.read(src, by_path[rel]), rel):
                        out[cf.name] = cf
            return out, 0
        for name, rel in v2_files.items():
            if rel in by_path:
                out[name] = read_schema_v2(reads.read(src, by_path[rel]), rel)
        if not out:
            raise UnsupportedCheckpointError(
                f"operator {op.operator_id} ({op.name}) of {src.description} has no state schema file",
                hint="checkpoints written before Spark 3.1 keep none; read this state with Spark")
        return out, 0

    schemas, hit = cache.get_or_load(ident, load)
    if not hit:
        reads.all_cached = False
    return schemas
