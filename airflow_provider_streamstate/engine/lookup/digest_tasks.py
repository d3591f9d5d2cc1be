"""A state digest's unit of work: one store partition of one operator at one batch, planned
where the checkpoint is listed and run wherever there is a core (inline, a worker process,
a Spark executor). engine/lookup/digest.py sums the results.

`plan_digest` lists the checkpoint once (`CheckpointReader.plan`: the files a snapshot of
the batch would hold) and makes one `DigestTask` per operator, store and partition, holding
the files that rebuild it (each with the size, mtime and ETag the plan saw, so a task reads
exactly those) and, where the check applies, the key schema that places its keys. A task
pickles. `digest_partition` runs one with the engine's own decoders (the table reader,
changelogs, the row format: never Spark's), streaming the partition's entries
(reading/entries.py) into a count and a 128-bit sum of their hashes per store or column
family, and checking each key's partition where asked. A partition that cannot be read
(a table file missing, a damaged block) is a result with its error, not an exception: a
verification names it among its problems.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, FileStat
from airflow_provider_streamstate.engine.checkpoint.reader import (
    HDFS_PROVIDER,
    PROVIDER_CONF,
    CheckpointReader,
)
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    StreamstateError,
    UnsupportedCheckpointError,
)
from airflow_provider_streamstate.engine.lookup.api import operator_schemas
from airflow_provider_streamstate.engine.lookup.encodings import rocksdb_keys as rk
from airflow_provider_streamstate.engine.lookup.encodings.placement import row_partitioner, rows_partitioner
from airflow_provider_streamstate.engine.lookup.encodings.types import StructType
from airflow_provider_streamstate.engine.lookup.encodings.unsafe_row import RowFormatError, decode_row
from airflow_provider_streamstate.engine.lookup.formats.codec import check_codec, codec_name
from airflow_provider_streamstate.engine.lookup.layouts import JOIN, REFUSED, TRANSFORM_WITH_STATE
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.entries import partition_entries
from airflow_provider_streamstate.engine.lookup.reading.partitions import Reads, partition_state
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach
from airflow_provider_streamstate.engine.lookup.reading.sources import OperatorView, StateFile, StateSource

MASK = (1 << 128) - 1
MAX_MISPLACED = 20  # keys named in a digest that found them in the wrong partition
PLACEMENT_CHUNK = 4096  # keys placed at once (numpy), when the key schema allows it


@dataclass(frozen=True)
class DigestTask:
    """One store partition of one operator at one batch, and how to digest it."""

    location: str
    description: str  # the checkpoint at the batch, as messages name it
    batch_id: int
    operator_id: int
    operator: str
    stores: tuple[str, ...]  # the operator's stores
    store: str
    partition: int
    partitions: int  # the operator's partitions at this batch
    provider: str  # hdfs | rocksdb
    codec: str
    files: tuple[StateFile, ...]  # identity: (size, mtime_ns, etag) as the plan saw it
    key_schema: StructType | None = None  # set: check that every key is in its partition
    lists: frozenset[str] = frozenset()  # column families holding list state

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files if "/_metadata/" not in f.path)


@dataclass(frozen=True)
class PartitionDigest:
    """What one task found: per store (or `store/column family`) its entries and the sum of
    their hashes (mod 2^128), the keys whose partition it checked, the misplaced ones
    (named, up to MAX_MISPLACED), or why it could not read the partition."""

    batch_id: int
    operator_id: int
    operator: str
    store: str
    partition: int
    sums: tuple[tuple[str, int, int], ...] = ()  # (store label, entries, sum of hashes)
    placed: int = 0
    misplaced_keys: int = 0
    misplaced: tuple[str, ...] = ()
    bytes_read: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of this process, while it ran the task
    worker: str = ""  # where it ran: an executor, a process
    error: tuple[str, str, str | None] | None = None  # (error class, message, hint)
    placement_checked: bool = False


def this_worker() -> str:
    """This process, as results name where they were computed."""
    return f"{socket.gethostname()}:{os.getpid()}"


_opened: dict[tuple[str, Reach], CheckpointFS] = {}  # per worker process: one connection per checkpoint


def digest_on_worker(task: DigestTask, reach: Reach) -> PartitionDigest:
    """Run one task in a worker process or an executor, opening the checkpoint as `reach`
    says once per process."""
    key = (task.location, reach)
    fs = _opened.get(key)
    if fs is None:
        if len(_opened) >= 8:  # a long-lived worker that served other checkpoints
            _opened.clear()
        fs = _opened[key] = reach.open(task.location)
    return digest_partition(task, fs)


class _TaskSource(StateSource):
    """The files of one task, read through an opened checkpoint filesystem, each checked to
    be the file the plan saw."""

    def __init__(self, task: DigestTask, fs: CheckpointFS) -> None:
        self.task, self.fs = task, fs
        self.description = task.description
        self.batch_id = task.batch_id

    def partition_files(self, op_id: int, partition: int, store: str) -> list[StateFile]:
        return list(self.task.files)

    def read(self, f: StateFile) -> bytes:
        return _read_planned(self.fs, f, self.description)


class _PlanSource(StateSource):
    """A planned cut of a checkpoint, as the schema reader asks for it."""

    def __init__(self, reader: CheckpointReader, batch_id: int, files: list[StateFile], description: str) -> None:
        self.fs, self.batch_id, self._files, self.description = reader.fs, batch_id, files, description

    def operator_files(self, op_id: int) -> list[StateFile]:
        return [f for f in self._files if f.path.startswith(f"state/{op_id}/")
                and ("/_metadata/" in f.path or "/_stateSchema/" in f.path)]

    def read(self, f: StateFile) -> bytes:
        return _read_planned(self.fs, f, self.description)


def _read_planned(fs: CheckpointFS, f: StateFile, description: str) -> bytes:
    """A file as the plan saw it (size, mtime, ETag), else CheckpointChanged."""
    size, mtime_ns, etag = f.identity
    try:
        with fs.open_checked(f.path, FileStat(size, mtime_ns, etag)) as fh:
            data = fh.read()
    except FileNotFoundError:
        raise CheckpointChanged(f"{f.path} of {description} vanished before it was read",
                                hint="the checkpoint changed under the digest: digest it again") from None
    if len(data) != f.size:
        raise CheckpointChanged(f"{f.path} of {description} has {len(data)} bytes, not the {f.size} listed",
                                hint="the checkpoint changed under the digest: digest it again")
    return data


def _store_files(files: list[StateFile], op_id: int, partition: int, store: str) -> tuple[StateFile, ...]:
    base = f"state/{op_id}/{partition}/" if store == "default" else f"state/{op_id}/{partition}/{store}/"
    out = []
    for f in files:
        if f.path.startswith(base):
            rest = f.path[len(base):]
            if "/" not in rest or rest.startswith(("SSTs/", "logs/", "_metadata/")):
                out.append(f)
    return tuple(out)


def placement_schemas(src: StateSource, op: OperatorView) -> dict[str, StructType]:
    """The key schema of each store whose stored key is the partitioning key: a single-store
    operator's, and a join side's key -> count store (its key -> rows store appends an index).
    None for an operator without a schema file (Spark before 3.1), transformWithState (column
    families) or a session window (several sessions per key): placement goes unchecked."""
    if op.name in TRANSFORM_WITH_STATE or op.state_variables or op.name in REFUSED:
        return {}
    try:
        schemas = operator_schemas(src, op, PartitionCache(max_entries=0, max_bytes=0), Reads())
    except UnsupportedCheckpointError:
        return {}
    wanted = [s for s in op.stores if s.endswith("-keyToNumValues")] if op.name == JOIN else list(op.stores)
    return {store: schemas[store].key for store in wanted if store in schemas}


@dataclass(frozen=True)
class DigestPlan:
    """The tasks of one digest of a checkpoint at a batch, largest first."""

    source: str  # the checkpoint at the batch, as a digest names it
    batch_id: int
    partitions: dict[int, int]  # operator id -> partitions
    tasks: tuple[DigestTask, ...]
    placement: bool


def plan_digest(location: str, batch_id: int | None = None, *, connection: Any = None,
                placement: bool = True, reader: CheckpointReader | None = None) -> DigestPlan:
    """The tasks of the digest of the checkpoint at `location` at committed batch `batch_id`
    (default the newest), listed through `connection` (else the environment's); with
    `placement`, the tasks check each key's partition where the operator allows it."""
    reader = reader or CheckpointReader(location, connection=connection)
    cut = reader.plan(batch_id)
    description = f"checkpoint {reader.where} at batch {cut.batch_id}"
    codec = codec_name(cut.conf)
    check_codec(codec)
    provider = "hdfs" if cut.conf.get(PROVIDER_CONF, HDFS_PROVIDER) == HDFS_PROVIDER else "rocksdb"
    files = [StateFile(f.path, f.size, (f.size, f.mtime_ns, f.etag)) for f in cut.files if f.path.startswith("state/")]
    src = _PlanSource(reader, cut.batch_id, files, description)
    tasks: list[DigestTask] = []
    partitions: dict[int, int] = {}
    for d in cut.operators:
        op = OperatorView(int(d["operator_id"]), str(d.get("name", "unknown")), tuple(d["stores"]),
                          int(d["partitions"]), tuple(d.get("state_variables") or ()))
        partitions[op.operator_id] = op.partitions
        schemas = placement_schemas(src, op) if placement else {}
        lists = frozenset(str(v["name"]) for v in op.state_variables if v.get("kind") == "ListState")
        for store in op.stores:
            for p in range(op.partitions):
                tasks.append(DigestTask(location, description, cut.batch_id, op.operator_id, op.name, op.stores, store,
                                        p, op.partitions, provider, codec, _store_files(files, op.operator_id, p, store),
                                        schemas.get(store), lists))
    tasks.sort(key=lambda t: -t.size)
    return DigestPlan(description, cut.batch_id, partitions, tuple(tasks), placement)


def digest_partition(task: DigestTask, fs: CheckpointFS) -> PartitionDigest:
    """Run one task, reading its files through `fs` (the checkpoint, opened here)."""
    started, cpu = time.perf_counter(), time.process_time()
    reads = Reads()
    op = OperatorView(task.operator_id, task.operator, task.stores, task.partitions)
    try:
        part = partition_state(_TaskSource(task, fs), op, task.partition, task.store, task.provider, task.codec,
                               PartitionCache(max_entries=0, max_bytes=0), reads)
        out = _digest_entries(task, part)
    except (StreamstateError, OSError) as exc:
        if isinstance(exc, StreamstateError):
            error = (type(exc).__name__, exc.message, exc.hint)
        else:
            error = ("CheckpointChanged", f"{task.description}: {exc}", "digest it again")
        return PartitionDigest(task.batch_id, task.operator_id, task.operator, task.store, task.partition,
                               bytes_read=reads.bytes, seconds=time.perf_counter() - started,
                               cpu_seconds=time.process_time() - cpu, worker=this_worker(), error=error)
    sums, placed, misplaced_keys, misplaced = out
    return PartitionDigest(task.batch_id, task.operator_id, task.operator, task.store, task.partition, sums, placed,
                           misplaced_keys, misplaced, reads.bytes, time.perf_counter() - started,
                           time.process_time() - cpu, this_worker(), placement_checked=task.key_schema is not None)


def _list_value(value: bytes, where: str) -> bytes:
    """A list-state value in one form whether its elements were merged (',' between them)
    or written in one piece: the same list digests the same."""
    return b"".join(len(e).to_bytes(4, "little") + e for e in rk.multiple_values(value, where))


def _digest_entries(task: DigestTask, part: Any) -> tuple[tuple[tuple[str, int, int], ...], int, int, tuple[str, ...]]:
    import xxhash  # once per task: bound below, not looked up per entry

    hash128 = xxhash.xxh3_128_intdigest
    families = {v: k for k, v in (getattr(part, "column_families", None) or {}).items()}
    entries = partition_entries(part)
    if families:
        return _digest_families(task, entries, families, hash128), 0, 0, ()
    n = total = 0
    lengths = [i.to_bytes(4, "little") for i in range(256)]
    if task.key_schema is None:
        for key, value in entries:
            n += 1
            k = len(key)
            total += hash128((lengths[k] if k < 256 else k.to_bytes(4, "little")) + key + value)
        return ((task.store, n, total & MASK),), 0, 0, ()
    schema = task.key_schema
    place = row_partitioner(schema, task.partitions)
    many = rows_partitioner(schema, task.partitions)
    base = 0 if task.provider == "hdfs" else len(rk.VERSION)
    p = task.partition
    misplaced: list[str] = []
    wrong = 0

    def check(keys: list[bytes]) -> None:
        """The keys whose partition is not `p`: counted, the first ones named."""
        nonlocal wrong
        parts = None
        if many is not None:
            try:
                parts = many(keys, base)
            except RowFormatError:
                parts = None  # one at a time below: each key that is no row is named
        for i, key in enumerate(keys):
            if parts is not None:
                expected = parts[i]
                if expected == p:
                    continue
            else:
                try:
                    expected = place(key, base)
                except RowFormatError as exc:
                    wrong += 1
                    if len(misplaced) < MAX_MISPLACED:
                        misplaced.append(f"operator {task.operator_id} store {task.store}: key {key.hex()} in "
                                         f"partition {p} is not a row of its key schema ({exc})")
                    continue
                if expected == p:
                    continue
            wrong += 1
            if len(misplaced) < MAX_MISPLACED:
                misplaced.append(f"operator {task.operator_id} store {task.store}: key {decode_row(key[base:], schema)} "
                                 f"is in partition {p}, Spark looks for it in {expected}")

    chunk: list[bytes] = []
    for key, value in entries:
        n += 1
        k = len(key)
        total += hash128((lengths[k] if k < 256 else k.to_bytes(4, "little")) + key + value)
        chunk.append(key)
        if len(chunk) == PLACEMENT_CHUNK:
            check(chunk)
            chunk = []
    check(chunk)
    return ((task.store, n, total & MASK),), n, wrong, tuple(misplaced)


def _digest_families(task: DigestTask, entries: Any, families: dict[int, str],
                     hash128: Any) -> tuple[tuple[str, int, int], ...]:
    """Column families (transformWithState, join state format 3): each its own store label,
    its 2-byte id off the key, a list state's value in one form."""
    acc: dict[str, list[int]] = {}
    for key, value in entries:
        cf_id = int.from_bytes(key[:2], "little", signed=True)
        name = families.get(cf_id, f"cf{cf_id}")
        ckey = key[2:]
        if name in task.lists:
            value = _list_value(value, f"{name} of {task.description}")
        a = acc.get(name)
        if a is None:
            a = acc[name] = [0, 0]
        a[0] += 1
        a[1] += hash128(len(ckey).to_bytes(4, "little") + ckey + value)
    return tuple((f"{task.store}/{name}", a[0], a[1] & MASK) for name, a in sorted(acc.items()))
