"""Bootstrap a new checkpoint's state from a table: for a stream moved from another engine,
or rebuilt from a warehouse, without replaying the history the table already sums up.

The query's own shape comes from a skeleton: a checkpoint the query wrote (run it once on a
little input, as for a migration), whose operator metadata, state schemas and pinned confs
(shuffle partitions, state store, formats) the new checkpoint takes. The table's rows
(key and value columns, named as the state reader names them: `key_<field>`,
`value_<field>`) become the state of one operator's store, each key in the partition Spark
computes for it; every other store starts empty. The new checkpoint holds one committed
batch, 0, whose sources ended at the given Kafka offsets (`{"topic": {"partition":
offset}}` per source, the offset of the next record to read), so the stream starts with
batch 1 reading from there:

    metadata                 a new query id
    offsets/0, commits/0     the skeleton's pinned confs, the given offsets, watermark 0
    sources/<i>/0            the same offsets, as Kafka's initial offsets (offsets not
                             given: the skeleton's own source logs, where its run ended)
    state/<op>/...           the skeleton's metadata and schema files; state version 1 of
                             every store partition (a delta, or a RocksDB changelog)

It is verified before it is used like an edit: its digest at batch 0 must be the digest of
exactly the table's entries, every key where Spark looks for it, each key read back; and,
with a Spark command, Spark's own state reader reads it the same. Written into a new (empty)
location only: nothing existing is touched. Refused in one line: a skeleton in checkpoint
format 2, RocksDB state without changelog checkpointing (Spark loads a version without a
snapshot only from changelogs), offsets for other sources than the skeleton's, and
whatever an edit cannot write.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import (
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.edit.changes import (
    EditSpec,
    KeyChange,
    StoreEdit,
    compile_changes,
    store_schema,
)
from airflow_provider_streamstate.engine.edit.spark_check import CommandFor, ExpectedEntries, spark_check
from airflow_provider_streamstate.engine.edit.state_files import changelog_file, delta_file
from airflow_provider_streamstate.engine.edit.verify import verified_digest
from airflow_provider_streamstate.engine.lookup.formats.codec import codec_name
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource

log = logging.getLogger("streamstate.edit")


@dataclass(frozen=True)
class BootstrapResult:
    checkpoint: str
    skeleton: str
    keys: int
    query_id: str
    source_offsets: list[Any]
    spark: dict[str, Any] | None = None
    stores: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "skeleton": self.skeleton, "keys": self.keys, "query_id": self.query_id,
                "source_offsets": self.source_offsets, "spark": self.spark, "stores": self.stores,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


def table_rows(rows: Iterable[dict[str, Any]], key_names: list[str], value_names: list[str],
               where: str) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
    """(key, value) of each row of a table named as the state reader names its columns
    (`key_<field>`, `value_<field>`; extra columns, e.g. `partition_id`, are ignored)."""
    wanted = [f"key_{n}" for n in key_names] + [f"value_{n}" for n in value_names]
    if len(set(wanted)) != len(wanted):
        raise UnsupportedCheckpointError("two columns of the state share a name: a table cannot name them apart",
                                         hint="bootstrap this state with Spark instead")
    for i, row in enumerate(rows):
        missing = [c for c in wanted if c not in row]
        if missing:
            raise UsageError(f"row {i} of {where} has no column {missing[0]!r}",
                             hint=f"the state's columns: {', '.join(wanted)}")
        yield {n: row[f"key_{n}"] for n in key_names}, {n: row[f"value_{n}"] for n in value_names}


def read_table(location: str, *, connection: Any = None) -> list[dict[str, Any]]:
    """The rows of a Parquet (`.parquet`, with pyarrow), CSV (`.csv`, a header line; values
    as text, read as the state's types) or JSON lines (`.jsonl`, `.json`) file: a local path,
    or a URL a checkpoint filesystem reads (s3://, hdfs://, file://), reached with
    `connection` as a checkpoint there is (an Airflow worker's table need not be on its disk)."""
    from pathlib import PurePosixPath

    from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme

    suffix = PurePosixPath(location.rstrip("/")).suffix.lower()
    if suffix not in (".parquet", ".csv", ".jsonl", ".json"):
        raise UsageError(f"{location}: a table is .parquet, .csv or .jsonl", hint="export it in one of those")
    if location_scheme(location) == "file" and "://" not in location:
        from pathlib import Path

        file = Path(location).expanduser()
        if not file.is_file():
            raise UsageError(f"{location} is not a file", hint="give the table as a .parquet, .csv or .jsonl file")
        data = file.read_bytes()
    else:
        parent, _, name = location.rstrip("/").rpartition("/")
        try:
            data = open_checkpoint_fs(parent, connection=connection).read_bytes(name)
        except FileNotFoundError:
            raise UsageError(f"{location} does not exist", hint="give the URL of the table's file") from None
    return parse_table(data, suffix, location)


def parse_table(data: bytes, suffix: str, where: str) -> list[dict[str, Any]]:
    """The rows of a table file's bytes, by its suffix (see `read_table`)."""
    if suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            from airflow_provider_streamstate.engine.core.errors import missing_extra

            raise missing_extra("pyarrow", "reading a Parquet table") from None
        return list(pq.read_table(pa.BufferReader(data)).to_pylist())
    text = data.decode("utf-8")
    if suffix == ".csv":
        import csv
        import io

        return [dict(row) for row in csv.DictReader(io.StringIO(text, newline=""))]
    rows = []
    for i, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise UsageError(f"line {i + 1} of {where} is not JSON: {exc}", hint="one JSON object per line") from None
    return rows


def bootstrap_checkpoint(
    skeleton: str | CheckpointFS, target: str, rows: Iterable[dict[str, Any]], *, operator: int | str = 0,
    store: str = "default", source_offsets: list[Any] | None = None, command: CommandFor | None = None,
    connection: Any = None, target_connection: Any = None, timeout_s: float | None = None,
) -> BootstrapResult:
    """A new checkpoint at `target` whose batch 0 holds `rows` (dicts named as the state
    reader names columns) as operator `operator`'s `store` state, shaped as the `skeleton`
    checkpoint the query wrote, resuming at `source_offsets` (one per source; None: where
    the skeleton's last batch ended); see the module docstring."""
    started = time.monotonic()
    seconds: dict[str, float] = {}
    out = open_checkpoint_fs(target, connection=target_connection)
    if out.exists() and out.files():
        raise UsageError(f"{out.location} is not empty: a bootstrap writes a new checkpoint",
                         hint="give a new location (nothing existing is overwritten)")
    skel = skeleton if isinstance(skeleton, CheckpointFS) else open_checkpoint_fs(skeleton, connection=connection)
    reader = CheckpointReader(skel)
    cut = reader.plan(None)
    if cut.checkpoint_format == 2:
        raise UnsupportedCheckpointError(f"{skel.location} is in checkpoint format 2: bootstraps write format 1",
                                         hint="write the skeleton with spark.sql.streaming.stateStore."
                                         "checkpointFormatVersion=1")
    if cut.state_store == "rocksdb":
        raise UnsupportedCheckpointError(
            f"{skel.location} keeps RocksDB state without changelog checkpointing: Spark loads a first version "
            "only from a snapshot then", hint="run the stream with spark.sql.streaming.stateStore.rocksdb."
            "changelogCheckpointing.enabled=true (or HDFS-backed state)")
    meta, skeleton_sources = reader.offsets(cut.batch_id)
    sources = _sources(skeleton_sources, source_offsets, skel.location)

    t = time.monotonic()
    src = CheckpointSource(skel.location, cut.batch_id, reader=reader)
    op = src.operator(operator)
    _, schema = store_schema(src, operator, store)
    pairs = list(table_rows(rows, schema.key.names, schema.value.names, "the table"))
    if not pairs:
        raise UsageError("the table has no rows", hint="a bootstrap needs the state's keys and values")
    changes = compile_changes(src, EditSpec((StoreEdit(op.operator_id, store, (), tuple(pairs)),),
                                            f"bootstrap of {len(pairs)} key(s)"))
    seconds["compile"] = time.monotonic() - t
    t = time.monotonic()
    query_id = str(uuid.uuid4())
    try:  # the target was empty: whatever fails from here on leaves it so
        _write(out, skel, cut, meta, sources, changes, query_id, skeletons_sources=source_offsets is None)
        seconds["write"] = time.monotonic() - t
        t = time.monotonic()
        digest = verified_digest(out, 0, None, changes, [None] * len(changes), connection=target_connection,
                                 what="the bootstrapped checkpoint does not hold the table",
                                 hint=f"nothing was kept at {out.location}; report it")
        seconds["verify"] = time.monotonic() - t
        spark = None
        if command is not None:
            t = time.monotonic()
            spark = spark_check("bootstrap", out, 0, ExpectedEntries.of_digest(digest), changes, command,
                                timeout_s=timeout_s).to_json()
            seconds["spark_check"] = time.monotonic() - t
    except BaseException:
        out.delete_all()
        raise
    seconds["total"] = time.monotonic() - started
    log.info("bootstrapped %s: %d keys of operator %s (%s), shaped as %s", out.location, len(pairs), operator, store,
             skel.location)
    return BootstrapResult(out.location, skel.location, len(pairs), query_id, sources, spark,
                           [s.to_json() for s in digest.stores], seconds)


def given_offsets(value: Any, what: str) -> list[Any] | None:
    """Starting offsets as a caller gives them (JSON text, one source's object, or a list of
    them per source; empty: None, the skeleton's) as `bootstrap_checkpoint` takes them."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise UsageError(f"{what} is not JSON: {exc}", hint='e.g. [{"orders": {"0": 1200}}]') from None
    return list(value) if isinstance(value, list | tuple) else [value]


def _sources(skeleton: list[Any], given: list[Any] | None, where: str) -> list[Any]:
    """The sources' offsets of batch 0: the given ones, shaped as the skeleton's (Kafka:
    topic -> partition -> offset)."""
    if given is None:
        return list(skeleton)
    if len(given) != len(skeleton):
        raise UsageError(f"{len(given)} source offsets given; the query of {where} has {len(skeleton)} source(s)",
                         hint="give one offsets object per source, in the query's order")
    for i, (mine, theirs) in enumerate(zip(given, skeleton, strict=True)):
        kafka = isinstance(theirs, dict) and all(isinstance(v, dict) for v in theirs.values())
        if not kafka:
            raise UsageError(f"source {i} of {where} is not a Kafka source: its offsets cannot be given",
                             hint="bootstraps start Kafka sources at given offsets (or leave them out)")
        if not (isinstance(mine, dict) and all(isinstance(v, dict) and all(isinstance(o, int) and o >= 0
                                                                           for o in v.values())
                                               for v in mine.values())):
            raise UsageError(f"the offsets of source {i} are not {{topic: {{partition: offset}}}}",
                             hint='e.g. {"orders": {"0": 1200, "1": 1187}}')
    return [{topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in s.items()} for s in given]


def _write(out: CheckpointFS, skel: CheckpointFS, cut: Any, meta: dict[str, Any], sources: list[Any],
           changes: list[KeyChange], query_id: str, *, skeletons_sources: bool) -> None:
    """The new checkpoint's files: the skeleton's operator metadata and schemas, state
    version 1 of every store partition, then sources (the skeleton's own source logs when
    its offsets are kept: `skeletons_sources`; else Kafka's initial offsets), offsets and
    commit; `metadata` last."""
    codec = codec_name(cut.conf)
    by_place: dict[tuple[int, str, int], list[tuple[bytes, bytes | None]]] = {}
    for c in changes:
        by_place.setdefault(c.where, []).append((c.key_bytes, c.value_bytes))
    files: list[tuple[str, bytes]] = []
    for f in cut.files:
        if f.path.startswith("state/") and ("/_metadata/" in f.path or "/_stateSchema/" in f.path):
            files.append((f.path, skel.read_bytes(f.path)))
    for op in cut.operators:
        op_id = int(op["operator_id"])
        for part in range(int(op["partitions"])):
            for store in op["stores"]:
                rel = f"state/{op_id}/{part}" if store == "default" else f"state/{op_id}/{part}/{store}"
                ops = sorted(by_place.get((op_id, store, part), []))
                files.append((f"{rel}/1.delta", delta_file(ops, codec)) if cut.state_store == "hdfs" else
                             (f"{rel}/1.changelog", changelog_file(ops, codec)))
    if skeletons_sources:  # where the skeleton's run ended, as its sources recorded it (a file source's seen files)
        files += [(f.path, skel.read_bytes(f.path)) for f in cut.files if f.path.startswith("sources/")]
    else:
        for i, offsets in enumerate(sources):  # Kafka's initial offsets
            files.append((f"sources/{i}/0", b"\x00v1\n" + json.dumps(offsets, separators=(",", ":")).encode()))
    batch_meta = {**meta, "batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000)}
    lines = ["v1", json.dumps(batch_meta, separators=(",", ":"))] + \
        ["-" if s is None else json.dumps(s, separators=(",", ":")) for s in sources]
    files.append(("offsets/0", "\n".join(lines).encode()))
    files.append(("commits/0", b'v1\n{"nextBatchWatermarkMs":0}'))
    files.append(("metadata", json.dumps({"id": query_id}).encode()))
    for rel, data in files:
        if not out.create_record(rel, data):
            raise UsageError(f"{out.where(rel)} appeared while the bootstrap was written",
                             hint="give a new location nothing else writes to")
