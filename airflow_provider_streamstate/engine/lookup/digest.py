"""A digest of a checkpoint's whole state at one batch, without Spark: per operator, store
and column family, how many entries it holds and an order-independent fingerprint of them
(the sum of a 128-bit hash of every key and value, as they are stored), and for the
operators whose stored key is the key Spark partitions by, whether each key sits in the
partition `pmod(murmur3(key), partitions)` says.

Two digests are equal exactly when the two states hold the same entries, wherever they are:
how a rescale proves that Spark's offline repartition moved every entry and lost, added or
changed none (engine/state/rescale.py), and that the moved keys are where Spark will look
for them. Memory is one decoded partition at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import (
    HDFS_PROVIDER,
    PROVIDER_CONF,
    CheckpointReader,
)
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lookup.api import operator_schemas
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
from airflow_provider_streamstate.engine.lookup.encodings.schema import ColumnFamilySchema
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import decode_row
from airflow_provider_streamstate.engine.lookup.formats.codec import check_codec, codec_name
from airflow_provider_streamstate.engine.lookup.formats.rocksdb_state import RocksPartition
from airflow_provider_streamstate.engine.lookup.layouts import JOIN, TRANSFORM_WITH_STATE
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads, partition_state
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource, OperatorView

_MASK = (1 << 128) - 1
MAX_MISPLACED = 20  # keys named in a digest that found them in the wrong partition


@dataclass(frozen=True)
class StoreDigest:
    """One store (or column family) of one operator."""

    operator_id: int
    operator: str
    store: str  # the store, or `store/column family`
    entries: int
    fingerprint: str
    placement_checked: bool

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "operator": self.operator, "store": self.store,
                "entries": self.entries, "fingerprint": self.fingerprint,
                "placement_checked": self.placement_checked}


@dataclass(frozen=True)
class StateDigest:
    """Every store of every stateful operator of a checkpoint at a batch."""

    source: str
    batch_id: int
    partitions: dict[int, int]  # operator id -> partitions
    stores: tuple[StoreDigest, ...]
    misplaced: tuple[str, ...] = field(default=())
    bytes_read: int = 0

    def same_entries(self, other: StateDigest) -> list[str]:
        """What differs between the entries of two digests (empty when they hold the same)."""
        mine = {(s.operator_id, s.store): s for s in self.stores}
        theirs = {(s.operator_id, s.store): s for s in other.stores}
        out = []
        for key in sorted(mine.keys() | theirs.keys()):
            a, b = mine.get(key), theirs.get(key)
            if a is None or b is None:
                out.append(f"operator {key[0]} store {key[1]}: only in {self.source if b is None else other.source}")
            elif (a.entries, a.fingerprint) != (b.entries, b.fingerprint):
                out.append(f"operator {key[0]} store {key[1]}: {a.entries} entries in {self.source}, {b.entries} in "
                           f"{other.source}" + (", and other contents" if a.entries == b.entries else ""))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "batch_id": self.batch_id,
                "partitions": {str(k): v for k, v in self.partitions.items()},
                "stores": [s.to_json() for s in self.stores], "misplaced": list(self.misplaced),
                "bytes_read": self.bytes_read}


class _Acc:
    def __init__(self) -> None:
        import xxhash  # once per store, not per entry: a digest adds millions of them

        self._hash = xxhash.xxh3_128_intdigest
        self.entries = 0
        self.total = 0

    def add(self, key: bytes, value: bytes) -> None:
        self.entries += 1
        self.total = (self.total + self._hash(len(key).to_bytes(4, "little") + key + value)) & _MASK


def _list_value(value: bytes, where: str) -> bytes:
    """A list-state value in one form whether its elements were merged (',' between them)
    or written in one piece: the same list digests the same."""
    return b"".join(len(e).to_bytes(4, "little") + e for e in rk.multiple_values(value, where))


def _operator_ids(src: CheckpointSource) -> list[int]:
    fs = src.reader.fs
    return sorted(int(p) for p in fs.listdir("state") if p.isdigit()) if fs.is_dir("state") else []


def _key_schemas(src: CheckpointSource, op: OperatorView, reads: Reads) -> dict[str, ColumnFamilySchema]:
    """The key schema of each store whose stored key is the partitioning key: a single-store
    operator's, and a join side's key -> count store (its key -> rows store appends an index).
    None for an operator without a schema file (Spark before 3.1): placement goes unchecked."""
    if op.name in TRANSFORM_WITH_STATE or op.state_variables:
        return {}
    try:
        schemas = operator_schemas(src, op, PartitionCache(max_entries=0, max_bytes=0), reads)
    except UnsupportedCheckpointError:
        return {}
    wanted = [s for s in op.stores if s.endswith("-keyToNumValues")] if op.name == JOIN else list(op.stores)
    return {store: schemas[store] for store in wanted if store in schemas}


def state_digest(location: str, batch_id: int | None = None, *, connection: Any = None,
                 progress: Callable[[str], None] = lambda msg: None) -> StateDigest:
    """The digest of the checkpoint at `location` at committed batch `batch_id` (default the
    newest), read through `connection` when it is remote (else the environment's)."""
    src = CheckpointSource(location, batch_id, reader=CheckpointReader(location, connection=connection))
    codec = codec_name(src.conf)
    check_codec(codec)
    provider = "hdfs" if src.conf.get(PROVIDER_CONF, HDFS_PROVIDER) == HDFS_PROVIDER else "rocksdb"
    reads = Reads()
    no_cache = PartitionCache(max_entries=0, max_bytes=0)  # each partition is read once

    accs: dict[tuple[int, str, str], _Acc] = {}
    placement: dict[tuple[int, str], bool] = {}
    misplaced: list[str] = []
    partitions: dict[int, int] = {}
    for op_id in _operator_ids(src):
        op = src.operator(op_id)
        partitions[op_id] = op.partitions
        schemas = _key_schemas(src, op, reads)
        lists = {str(v["name"]) for v in op.state_variables if v.get("kind") == "ListState"}
        for store in op.stores:
            placement[(op_id, store)] = store in schemas
            for p in range(op.partitions):
                part = partition_state(src, op, p, store, provider, codec, no_cache, reads)
                names = {v: k for k, v in part.column_families.items()} if isinstance(part, RocksPartition) else {}
                for key, value in part.items():
                    label = store
                    if names:
                        cf_id = int.from_bytes(key[:2], "little", signed=True)
                        cf_name = names.get(cf_id, f"cf{cf_id}")
                        label, key = f"{store}/{cf_name}", key[2:]
                        if cf_name in lists:
                            value = _list_value(value, f"{cf_name} of {src.description}")
                    accs.setdefault((op_id, op.name, label), _Acc()).add(key, value)
                    if store in schemas and len(misplaced) < MAX_MISPLACED:
                        _check_place(key, provider, schemas[store], op, store, p, misplaced)
            progress(f"operator {op_id} store {store}: {op.partitions} partitions read")
    stores = tuple(
        StoreDigest(op_id, name, label, a.entries, f"{a.total:032x}", placement.get((op_id, label), False))
        for (op_id, name, label), a in sorted(accs.items()))
    return StateDigest(src.description, src.batch_id, partitions, stores, tuple(misplaced), reads.bytes)


def _check_place(key: bytes, provider: str, schema: ColumnFamilySchema, op: OperatorView, store: str,
                 partition: int, misplaced: list[str]) -> None:
    row = key if provider == "hdfs" else key[len(rk.VERSION):]
    values = decode_row(row, schema.key)
    names = [f.name for f in schema.key.fields]
    if not names:
        expected = 0  # a global aggregation keeps its one key in partition 0
    else:
        expected = partition_of([values[n] for n in names], [f.type for f in schema.key.fields], op.partitions)
    if expected != partition:
        misplaced.append(f"operator {op.operator_id} store {store}: key {values} is in partition {partition}, "
                         f"Spark looks for it in {expected}")

