"""Reading a Spark Structured Streaming checkpoint, and planning a consistent cut of it.

We never change how Spark writes a checkpoint; we read it. A *cut* at committed batch N
is exactly the files Spark needs to resume right after N: `metadata`, `sources/`,
`offsets/` and `commits/` up to N, operator metadata, and for every state store the
files that rebuild state version N+1 — nothing above the cut, no temp files.

Spark keeps writing while we read: temp files come and go, the maintenance task adds
snapshots and deletes old versions. The plan therefore marks which files are
*essential* (without them the cut does not restore) and which are history that may
vanish; the snapshot engine re-plans when an essential file disappears.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    CheckpointFS,
    open_checkpoint_fs,
)
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import (
    OperatorMetadataV2,
    parse_metadata_v2,
    schema_file_batch,
)
from airflow_provider_streamstate.engine.checkpoint.plans import CutPlan, PartitionPlan, PlannedFile
from airflow_provider_streamstate.engine.checkpoint.swap import fenced_error, is_fenced
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    NotFoundError,
    UnsupportedCheckpointError,
    UsageError,
)

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
FORMAT_VERSION_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
# Since SPARK-53942 the state may have its own number of partitions, apart from the shuffles'.
STATE_PARTITIONS_CONF = "spark.sql.streaming.internal.stateStore.partitions"
STORE_LAYOUT_DIRS = {"_metadata", "SSTs", "logs", "_stateSchema"}


def store_kind(conf: dict[str, str], where: str, *, readers: str) -> str:
    """`hdfs` or `rocksdb`, the provider a checkpoint's pinned confs name; any other is refused
    in one line (`readers`: who needs one of the two, e.g. "key lookups read")."""
    provider = conf.get(PROVIDER_CONF, HDFS_PROVIDER)
    if provider == HDFS_PROVIDER:
        return "hdfs"
    if provider == ROCKSDB_PROVIDER:
        return "rocksdb"
    raise UnsupportedCheckpointError(f"{where} uses the state store provider {provider}",
                                     hint=f"{readers} the HDFS-backed and RocksDB state stores")
_VERSIONED = re.compile(r"^(\d+)\.(delta|snapshot|zip|changelog)$")
_V2_VERSIONED = re.compile(r"^(\d+)_([0-9a-fA-F-]{8,})\.(zip|changelog)$")
_UNIQUE_ID = re.compile(r"^[0-9a-fA-F-]{8,64}$")


def _read_log(fs: CheckpointFS, rel: str, path: str, versions: tuple[str, ...] = ("v1",)) -> list[str]:
    """A Spark metadata-log file: its version (`v1`; a commit of checkpoint format v2: `v2`)
    then JSON lines; the version line is dropped. Missing file -> CheckpointChanged."""
    try:
        lines = fs.read_bytes(rel).decode("utf-8").split("\n")
    except FileNotFoundError:
        raise CheckpointChanged(f"{path} vanished while reading the checkpoint") from None
    if not lines or lines[0] not in versions:
        understood = " or ".join(repr(v) for v in versions)
        if rel.startswith("offsets/") and lines and lines[0] == "v2":
            raise UnsupportedCheckpointError(
                f"{path} is in offset log format v2 (Spark 4.3's opt-in, sources keyed by name), which streamstate "
                "does not read yet", hint="run the stream with spark.sql.streaming.offsetLog.formatVersion=1, "
                "Spark's default; a checkpoint cannot go back once it wrote v2")
        raise UnsupportedCheckpointError(
            f"{path} has log version {lines[0][:10]!r}, only {understood} is understood",
            hint="this checkpoint was written by a Spark version streamstate does not support",
        )
    return lines[1:]


def _kafka_offsets(value: Any) -> dict[str, dict[str, int]] | None:
    """`{"topic": {"0": 123}}` -> the same with int offsets; None when not that shape."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[str, dict[str, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict) or not parts:
            return None
        try:
            out[str(topic)] = {str(int(p)): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            return None
    return out


def state_partitions(conf: dict[str, str]) -> int | None:
    """The number of state partitions a batch's pinned confs say (None when they say none)."""
    for key in (STATE_PARTITIONS_CONF, SHUFFLE_PARTITIONS_CONF):
        value = conf.get(key)
        if value and value.strip().isdigit() and int(value) > 0:
            return int(value)
    return None


def checkpoint_where(fs: CheckpointFS) -> str:
    """How manifests name the checkpoint (`Manifest.checkpoint`, `CheckpointReader.where`):
    its local directory, or its URL."""
    return str(fs.local_path) if fs.local_path is not None else fs.location


def read_query_id(fs: CheckpointFS) -> str:
    """The query id in the checkpoint's `metadata`, read now (one read, no listing)."""
    where = checkpoint_where(fs)
    data = fs.read_record("metadata")
    if data is None:
        if not fs.is_dir(""):
            raise NotFoundError(f"checkpoint {where} does not exist or is not a directory",
                                hint="pass the stream's checkpointLocation")
        raise UnsupportedCheckpointError(f"{where} has no metadata file", hint="Spark writes it when a query first starts")
    if is_fenced(data):
        raise fenced_error(fs)
    try:
        return str(json.loads(data)["id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UnsupportedCheckpointError(
            f"{where}/metadata is unreadable: {exc}",
            hint="check that --checkpoint is the query's checkpoint directory, as Spark wrote it",
        ) from None


def committed_batches(fs: CheckpointFS) -> list[int]:
    """Batch ids whose offsets and commit are both present, ascending, from two listings of
    the metadata logs now (not of the whole checkpoint): what Spark's commit log says."""
    commits = {int(n) for n in fs.record_names("commits") if n.isdigit()}
    return sorted(commits & {int(n) for n in fs.record_names("offsets") if n.isdigit()})


def resolve_committed(committed: list[int], batch_id: int | None, where: str) -> int:
    """`batch_id`, checked against the committed batches (default: the newest)."""
    if not committed:
        raise NotFoundError(
            f"checkpoint {where} has no committed batch yet",
            hint="wait until the stream commits its first batch",
        )
    if batch_id is None:
        return committed[-1]
    if batch_id < 0:
        raise UsageError(f"batch id must be >= 0, got {batch_id}",
                         hint="give a committed batch id, or leave --batch out for the newest")
    if batch_id not in committed:
        raise NotFoundError(
            f"batch {batch_id} is not a committed batch still retained in {where}",
            hint=f"retained committed batches are {committed[0]}..{committed[-1]}",
        )
    return batch_id


class CheckpointReader:
    """Read-only view of one checkpoint, on any filesystem (engine/checkpoint/filesystems/).

    A remote location is reached through `connection` (and `conn_id` names it in error
    hints); without one, with the environment's credentials. Or give the opened `fs`.
    """

    def __init__(
        self, location: str | CheckpointFS, *, connection: Any = None, conn_id: str | None = None,
        fs: CheckpointFS | None = None,
    ) -> None:
        if isinstance(location, CheckpointFS):
            fs = location
        self.location = fs.location if fs is not None else str(location)
        self._commits: dict[int, dict[str, Any]] = {}
        self.fs = fs or open_checkpoint_fs(self.location, connection=connection, conn_id=conn_id)
        # A directory of this host (snapshot and restore use it); None for a remote one.
        self.root: Path | None = self.fs.local_path
        self.where = str(self.root) if self.root is not None else self.fs.location
        if not self.fs.is_dir(""):
            raise NotFoundError(
                f"checkpoint {self.where} does not exist or is not a directory",
                hint="pass the stream's checkpointLocation",
            )
        if not self.fs.is_dir("offsets"):
            raise NotFoundError(
                f"{self.where} is not a Spark streaming checkpoint (no offsets/ directory)",
                hint="pass the directory the query's checkpointLocation points at",
            )

    def _path(self, rel: str) -> str:
        return f"{self.where}/{rel}"

    def _exists(self, rel: str) -> bool:
        return self.fs.stat(rel) is not None or self.fs.is_dir(rel)

    # --- the metadata logs -------------------------------------------------------

    def _log_ids(self, name: str) -> list[int]:
        if not self.fs.is_dir(name):
            return []
        return sorted(int(p) for p in self.fs.listdir(name) if p.isdigit())

    def committed_batches(self) -> list[int]:
        """Batch ids whose offsets and commit are both present, ascending."""
        offsets = set(self._log_ids("offsets"))
        return [b for b in self._log_ids("commits") if b in offsets]

    def query_id(self) -> str:
        return read_query_id(self.fs)

    def offset_batches(self) -> list[int]:
        """Batch ids with an offsets entry (planned, committed or not), ascending."""
        return self._log_ids("offsets")

    def offsets(self, batch_id: int) -> tuple[dict[str, Any], list[Any]]:
        """The batch's metadata (watermark, timestamp, pinned conf) and one entry per source."""
        lines = [ln for ln in _read_log(self.fs, f"offsets/{batch_id}", self._path(f"offsets/{batch_id}")) if ln != ""]
        if not lines:
            raise UnsupportedCheckpointError(
                f"offsets/{batch_id} of {self.where} has no metadata line",
                hint="the offset log is damaged or not Spark's; snapshot an earlier batch with --batch",
            )
        meta = json.loads(lines[0])
        sources = [None if ln == "-" else json.loads(ln) for ln in lines[1:]]
        return meta, sources

    def kafka_offsets(self, batch_id: int) -> dict[str, dict[str, int]]:
        """Per Kafka topic and partition, the offset batch `batch_id` read up to (exclusive):
        where the next batch starts."""
        kafka: dict[str, dict[str, int]] = {}
        for value in self.offsets(batch_id)[1]:
            for topic, parts in (_kafka_offsets(value) or {}).items():
                kafka.setdefault(topic, {}).update(parts)
        return kafka

    def started_batches(self) -> list[int]:
        """Batch ids with an offsets file (planned, perhaps not committed), ascending: a
        batch's offsets are written before it runs, so the newest is the one running or last run."""
        return self._log_ids("offsets")

    def commit(self, batch_id: int) -> dict[str, Any]:
        """`commits/<batch>`: the next watermark and, in checkpoint format v2, the unique id of
        every state store version the batch wrote (`stateUniqueIds`)."""
        rel = f"commits/{batch_id}"
        lines = [ln for ln in _read_log(self.fs, rel, self._path(rel), ("v1", "v2")) if ln != ""]
        return json.loads(lines[0]) if lines else {}

    def checkpoint_format(self, batch_id: int) -> int:
        """1, or 2 when the batch's commit names its state files by unique id."""
        return 2 if "stateUniqueIds" in self.commit(batch_id) else 1

    def resolve_batch(self, batch_id: int | None) -> int:
        return resolve_committed(self.committed_batches(), batch_id, self.where)

    # --- the cut -----------------------------------------------------------------

    def plan(self, batch_id: int | None = None) -> CutPlan:
        """Plan a consistent cut at `batch_id` (default: the newest committed batch)."""
        self.fs.refresh()  # S3: one fresh listing per plan
        n = self.resolve_batch(batch_id)
        meta, source_values = self.offsets(n)
        commit = self.commit(n)
        conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
        checkpoint_format = self._checkpoint_format(conf, commit)
        self._commits = {n: commit}  # commits the plan read (format v2's lineage walks them)
        store_kind = self._state_store_kind(conf)

        files: dict[str, PlannedFile] = {}
        self._add(files, "metadata", essential=True)
        for log in ("offsets", "commits"):
            for b in self._log_ids(log):
                if b <= n:
                    # Spark needs N (and offsets N-1) to resume; older entries are history.
                    self._add(files, f"{log}/{b}", essential=b == n or (log == "offsets" and b == n - 1))
        self._add_tree(files, "sources", essential=True)

        operators: list[dict[str, Any]] = []
        file_kinds: set[str] = set()  # kinds of versioned state files the stores hold
        # A stateless query (a filter, a projection) has no state/ at all: its cut is the
        # metadata logs and sources alone. Spark never removes state/ of a stateful one.
        if self.fs.is_dir("state"):
            for op_name in sorted((p for p in self.fs.listdir("state") if p.isdigit()), key=int):
                operators.append(self._plan_operator(files, int(op_name), n + 1, store_kind, file_kinds,
                                                     checkpoint_format, state_partitions(conf)))

        # The changelog flag is not pinned in the checkpoint: the stores' files tell (a cut
        # that starts at a fresh .zip needs no changelog, yet the stream writes them).
        if store_kind == "rocksdb" and "changelog" in file_kinds:
            store_kind = "rocksdb-changelog"
        kafka: dict[str, dict[str, int]] = {}
        sources = []
        for i, value in enumerate(source_values):
            offsets = _kafka_offsets(value)
            sources.append({"index": i, "kind": "kafka" if offsets is not None else "other", "offsets": value})
            for topic, parts in (offsets or {}).items():
                kafka.setdefault(topic, {}).update(parts)
        return CutPlan(
            batch_id=n,
            query_id=self.query_id(),
            files=sorted(files.values(), key=lambda f: f.path),
            sources=sources,
            kafka_offsets=kafka,
            watermark_ms=meta.get("batchWatermarkMs"),
            next_watermark_ms=commit.get("nextBatchWatermarkMs"),
            batch_timestamp_ms=meta.get("batchTimestampMs"),
            conf=conf,
            state_store=store_kind if operators else "none",
            operators=operators,
            checkpoint_format=checkpoint_format,
        )

    def _checkpoint_format(self, conf: dict[str, str], commit: dict[str, Any]) -> int:
        """1, or 2: the commit names each state store version's files by unique id."""
        pinned = conf.get(FORMAT_VERSION_CONF, "1")
        if pinned not in ("1", "2"):
            raise UnsupportedCheckpointError(
                f"{self.where} uses state checkpoint format {pinned}",
                hint=f"snapshots support {FORMAT_VERSION_CONF} 1 and 2",
            )
        if "stateUniqueIds" not in commit:
            return 1
        # A stateless query in format 2 commits an empty map (and Spark reads it back only
        # with format 2 set, whatever its store).
        if commit["stateUniqueIds"] and conf.get(PROVIDER_CONF, HDFS_PROVIDER) == HDFS_PROVIDER:
            raise UnsupportedCheckpointError(
                f"{self.where} names state files by unique id (checkpoint format v2) with the HDFS-backed state store",
                hint="Spark writes format v2 with the RocksDB state store only; the checkpoint is damaged",
            )
        return 2

    def _commit_of(self, batch_id: int) -> dict[str, Any]:
        if batch_id not in self._commits:
            self._commits[batch_id] = self.commit(batch_id)
        return self._commits[batch_id]

    def _unique_id(self, op_id: int, partition: int, version: int) -> str | None:
        """Format v2: the unique id of state version `version` of one store of an operator's
        partition, as the batch that wrote it (`version - 1`) committed it; None when Spark
        has already removed that commit (it keeps `minBatchesToRetain` of them)."""
        rel = f"commits/{version - 1}"
        if version - 1 not in self._commits and self.fs.stat(rel) is None:
            return None
        try:
            ids = self._commit_of(version - 1)["stateUniqueIds"][str(op_id)][partition]
        except (KeyError, IndexError, TypeError):
            raise UnsupportedCheckpointError(
                f"{self._path(rel)} names no state file id for operator {op_id}, partition {partition}",
                hint=f"the checkpoint mixes formats; snapshot a batch written with one {FORMAT_VERSION_CONF}",
            ) from None
        if not isinstance(ids, list) or len(ids) != 1 or not _UNIQUE_ID.match(str(ids[0])):
            raise UnsupportedCheckpointError(f"{self._path(rel)} has unexpected state file ids {ids!r} "
                                             f"for operator {op_id}, partition {partition}")
        return str(ids[0])

    def _state_store_kind(self, conf: dict[str, str]) -> str:
        provider = conf.get(PROVIDER_CONF, HDFS_PROVIDER)
        if provider == HDFS_PROVIDER:
            return "hdfs"
        if provider == ROCKSDB_PROVIDER:
            return "rocksdb"
        raise UnsupportedCheckpointError(
            f"state store provider {provider} is not supported",
            hint="snapshots support the HDFS-backed and RocksDB state store providers",
        )

    def plan_partition(self, batch_id: int | None, op_id: int, partition: int, store: str) -> PartitionPlan:
        """The files that rebuild one store of one partition of an operator at a committed
        batch (default: the newest), by the same rules as `plan` (a key lookup reads one
        partition, not the whole cut), with the operator's description and the pinned confs."""
        self.fs.refresh()
        n = self.resolve_batch(batch_id)
        meta, _ = self.offsets(n)
        commit = self.commit(n)
        conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
        checkpoint_format = self._checkpoint_format(conf, commit)
        self._commits = {n: commit}
        kind = self._state_store_kind(conf)
        if not self.fs.is_dir(f"state/{op_id}"):
            ops = sorted((p for p in self.fs.listdir("state") if p.isdigit()), key=int) if self.fs.is_dir("state") else []
            raise NotFoundError(f"{self.where} has no stateful operator {op_id}",
                                hint=f"its operators: {', '.join(ops) or 'none (a stateless query)'}")
        files: dict[str, PlannedFile] = {}
        info, partitions, stores = self._operator_info(files, op_id, n + 1, checkpoint_format,
                                                       state_partitions(conf))
        if store not in stores:
            raise NotFoundError(f"operator {op_id} ({info.get('name', 'unknown')}) of {self.where} has no state "
                                f"store {store!r}", hint=f"its stores: {', '.join(stores)}")
        if str(partition) not in partitions:
            raise NotFoundError(f"operator {op_id} of {self.where} has no partition {partition}",
                                hint=f"it has partitions 0..{len(partitions) - 1}")
        store_rel = f"state/{op_id}/{partition}" if store == "default" else f"state/{op_id}/{partition}/{store}"
        kinds: set[str] = set()
        if checkpoint_format == 2:
            self._plan_store_v2(files, store_rel, n + 1, op_id, partition, kinds)
        else:
            self._plan_store(files, store_rel, n + 1, kind, kinds)
        if kind == "rocksdb" and "changelog" in kinds:
            kind = "rocksdb-changelog"
        described = {"operator_id": op_id, "name": info.get("name", "unknown"), "stores": stores,
                     "partitions": len(partitions), "state_version": n + 1}
        if "state_variables" in info:
            described["state_variables"] = info["state_variables"]
            described["time_mode"] = info.get("time_mode")
        return PartitionPlan(n, sorted(files.values(), key=lambda f: f.path), conf, kind, described,
                             checkpoint_format)

    def _operator_info(
        self, files: dict[str, PlannedFile], op_id: int, version: int, checkpoint_format: int,
        pinned_partitions: int | None = None,
    ) -> tuple[dict[str, Any], list[str], list[str]]:
        """An operator's metadata (name, stores, state variables), its partition directories
        and store names; its metadata and schema files go into `files`.

        How many partitions the state has at a batch is what the batch's offsets pinned
        (`pinned_partitions`): Spark's offline repartition (4.2+) writes a batch with another
        number and leaves the operator metadata of batch 0 as it was, and the directories of
        the old partitions above the new number in place (12 -> 3 keeps 3..11, which no later
        version reads). Without a pinned number the metadata's is taken."""
        op_rel = f"state/{op_id}"
        op_dir = self._path(op_rel)
        if self._exists(f"{op_rel}/_metadata/v2"):
            info = self._plan_metadata_v2(files, op_id, version - 1)
        else:
            if self._exists(f"{op_rel}/_stateSchema"):
                raise UnsupportedCheckpointError(
                    f"operator {op_id} of {self.where} has state schema files but no operator metadata v2",
                    hint="the checkpoint is damaged or was written by an unsupported Spark version",
                )
            info = self._operator_metadata(op_rel)
            self._add_tree(files, f"{op_rel}/_metadata", essential=True)
        listed = sorted((p for p in self.fs.listdir(op_rel) if p.isdigit()), key=int)
        if not listed:
            raise UnsupportedCheckpointError(f"{op_dir} has no partition directories")
        count = pinned_partitions or info.get("partitions") or len(listed)
        partitions = [str(p) for p in range(count)]
        missing = sorted(set(partitions) - set(listed), key=int)
        if missing:
            raise CheckpointChanged(f"{op_dir} has no directory for partition {missing[0]} of the {count} "
                                    f"its batch {version - 1} pinned")
        info = {**info, "partitions": count}
        # Old checkpoints have no operator metadata: their store names come from the layout.
        stores: list[str] = info.get("stores") or self._infer_store_names(f"{op_rel}/{partitions[0]}")
        if checkpoint_format == 2 and len(stores) != 1:
            raise UnsupportedCheckpointError(
                f"operator {op_id} ({info.get('name', 'unknown')}) of {self.where} keeps {len(stores)} state stores "
                "in checkpoint format v2; snapshots support format v2 for single-store operators",
                hint=f"run this query with {FORMAT_VERSION_CONF}=1",
            )
        return info, partitions, stores

    def _plan_operator(
        self, files: dict[str, PlannedFile], op_id: int, version: int, kind: str, file_kinds: set[str],
        checkpoint_format: int = 1, pinned_partitions: int | None = None,
    ) -> dict[str, Any]:
        op_rel = f"state/{op_id}"
        info, partitions, stores = self._operator_info(files, op_id, version, checkpoint_format, pinned_partitions)
        for part in partitions:
            part_rel = f"{op_rel}/{part}"
            for store in stores:
                store_rel = part_rel if store == "default" else f"{part_rel}/{store}"
                if checkpoint_format == 2:
                    self._plan_store_v2(files, store_rel, version, op_id, int(part), file_kinds)
                else:
                    self._plan_store(files, store_rel, version, kind, file_kinds)
        out: dict[str, Any] = {
            "operator_id": op_id,
            "name": info.get("name", "unknown"),
            "stores": stores,
            "partitions": len(partitions),
            "state_version": version,
        }
        if "state_variables" in info:
            out["state_variables"] = info["state_variables"]
            out["time_mode"] = info.get("time_mode")
        return out

    def _plan_metadata_v2(self, files: dict[str, PlannedFile], op_id: int, batch_id: int) -> dict[str, Any]:
        """A transformWithState operator's metadata (engine/checkpoint/operator_metadata.py):
        every `_metadata/v2/<b>` with b <= the cut's batch (Spark writes one at the first batch
        of each run; later ones belong to batches above the cut) and the schema files they
        name. The newest of them, and its schema files, are what a restart reads: essential."""
        v2_rel = f"state/{op_id}/_metadata/v2"
        batches = sorted(int(n) for n in self.fs.listdir(v2_rel) if n.isdigit() and int(n) <= batch_id)
        if not batches:
            raise UnsupportedCheckpointError(
                f"operator {op_id} of {self.where} has no operator metadata v2 at or below batch {batch_id}",
                hint="snapshot a later batch; Spark writes it when a run of the query starts",
            )
        newest: OperatorMetadataV2 | None = None
        for b in reversed(batches):
            rel = f"{v2_rel}/{b}"
            essential = newest is None
            try:
                meta = parse_metadata_v2(self.fs.read_bytes(rel), op_id, self._path(rel))
            except FileNotFoundError:
                if essential:
                    raise CheckpointChanged(f"{rel} vanished while planning") from None
                continue  # history Spark purged meanwhile
            self._add(files, rel, essential=essential)
            for store in meta.stores:
                for schema in store.schema_files:
                    if schema_file_batch(schema) > batch_id:
                        raise UnsupportedCheckpointError(
                            f"{self._path(rel)} names {schema}, written after batch {batch_id}",
                            hint="the checkpoint is damaged: a batch's metadata names a later schema",
                        )
                    self._add(files, schema, essential=essential)
            newest = newest or meta
        assert newest is not None
        self._add(files, f"state/{op_id}/_metadata/metadata", essential=False)  # none seen; kept if written
        parts = {s.partitions for s in newest.stores}
        return {
            "name": newest.name,
            "stores": [s.store_name for s in newest.stores],
            "partitions": parts.pop() if len(parts) == 1 else None,
            "state_variables": [v.to_json() for v in newest.state_variables],
            "time_mode": newest.time_mode,
        }

    def _operator_metadata(self, op_rel: str) -> dict[str, Any]:
        rel = f"{op_rel}/_metadata/metadata"
        path = self._path(rel)
        if self.fs.stat(rel) is None:
            return {}
        try:
            lines = [ln for ln in _read_log(self.fs, rel, path) if ln]
            d = json.loads(lines[0])
            infos = d.get("stateStoreInfo", [])
            parts = {int(s["numPartitions"]) for s in infos}
            return {
                "name": d.get("operatorInfo", {}).get("operatorName", "unknown"),
                "stores": [str(s["storeName"]) for s in infos],
                "partitions": parts.pop() if len(parts) == 1 else None,
            }
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UnsupportedCheckpointError(f"{path} is unreadable: {exc}") from None

    def _infer_store_names(self, part_rel: str) -> list[str]:
        listing = self.fs.listdir(part_rel)
        names = [p for p in listing if self.fs.is_dir(f"{part_rel}/{p}") and p not in STORE_LAYOUT_DIRS]
        has_default = any(_VERSIONED.match(p) for p in listing)
        return (["default"] if has_default or not names else []) + sorted(names)

    def _plan_store(
        self, files: dict[str, PlannedFile], store_rel: str, version: int, kind: str, file_kinds: set[str]
    ) -> None:
        store_dir = self._path(store_rel)
        names = self._list_store(files, store_rel, _V2_VERSIONED,
                                 "checkpoint format v2 state files (<version>_<id>.zip) but the commit is format v1")
        by_kind: dict[str, set[int]] = {"delta": set(), "snapshot": set(), "zip": set(), "changelog": set()}
        for n in names:
            m = _VERSIONED.match(n)
            if m:
                by_kind[m.group(2)].add(int(m.group(1)))
        file_kinds.update(k for k, versions in by_kind.items() if versions)

        def need(name: str) -> None:
            self._add(files, f"{store_rel}/{name}", essential=True)

        if kind == "hdfs":
            base = max((v for v in by_kind["snapshot"] if v <= version), default=0)
            if base:
                need(f"{base}.snapshot")
            deltas = range(base + 1, version + 1)
            self._require(store_dir, by_kind["delta"], deltas, "delta")
            for v in deltas:
                need(f"{v}.delta")
        else:
            # One rule for both RocksDB modes: the newest .zip <= V (written at every commit
            # without changelog checkpointing, by maintenance with it), then the changelogs
            # after it. The changelog flag is not pinned in the checkpoint, so the files decide.
            base = max((v for v in by_kind["zip"] if v <= version), default=0)
            if base:
                self._add_rocksdb_snapshot(files, store_rel, base)
            changelogs = range(base + 1, version + 1)
            self._require(store_dir, by_kind["changelog"], changelogs, "changelog (or zip)")
            for v in changelogs:
                need(f"{v}.changelog")

    def _list_store(self, files: dict[str, PlannedFile], store_rel: str, foreign: re.Pattern[str],
                    what: str) -> list[str]:
        """A store directory's names, refused when it holds files of the other checkpoint
        format (`foreign`); its own state schema (`_metadata/`) goes into the cut."""
        try:
            names = self.fs.listdir(store_rel)
        except FileNotFoundError:
            raise CheckpointChanged(f"{self._path(store_rel)} vanished while planning") from None
        if any(foreign.match(n) for n in names):
            raise UnsupportedCheckpointError(
                f"{self._path(store_rel)} holds {what}",
                hint="a query's checkpoint format cannot change; snapshot a checkpoint written with one format",
            )
        # Each store directory keeps its own state schema (named join stores included).
        self._add_tree(files, f"{store_rel}/_metadata", essential=True)
        return names

    def _plan_store_v2(
        self, files: dict[str, PlannedFile], store_rel: str, version: int, op_id: int, partition: int,
        file_kinds: set[str],
    ) -> None:
        """Checkpoint format v2 (RocksDB): version V of a store is `V_<id>.zip`, or
        `V_<id>.changelog` replayed on version V-1 of the same lineage, back to a zip (or to
        version 0). The ids are the committed ones (`commits/<V-1>`): files of other attempts
        at the same version (a failed or retried batch) are never part of the cut."""
        store_dir = self._path(store_rel)
        names = set(self._list_store(files, store_rel, _VERSIONED,
                                     "state files of both checkpoint formats (<version>.zip and <version>_<id>.zip)"))
        for n in names:
            m = _V2_VERSIONED.match(n)
            if m:
                file_kinds.add(m.group(3))
        changelogs: list[str] = []
        v = version
        while v > 0:
            uid = self._unique_id(op_id, partition, v) or self._only_attempt(store_dir, names, v)
            if f"{v}_{uid}.zip" in names:
                self._add_rocksdb_snapshot(files, store_rel, f"{v}_{uid}")
                break
            if f"{v}_{uid}.changelog" not in names:
                # Maintenance may have replaced it with a newer zip between listings: re-plan.
                raise CheckpointChanged(f"{store_dir} lacks {v}_{uid}.changelog (or .zip) needed to rebuild the state")
            changelogs.append(f"{v}_{uid}.changelog")
            v -= 1
        for name in changelogs:
            self._add(files, f"{store_rel}/{name}", essential=True)

    def _only_attempt(self, store_dir: str, names: set[str], version: int) -> str:
        """Format v2, version `version` whose commit Spark already removed: the id of its one
        attempt still in the store (more than one cannot be told apart without that commit)."""
        ids = {m.group(2) for n in names if (m := _V2_VERSIONED.match(n)) and int(m.group(1)) == version}
        if len(ids) != 1:
            raise UnsupportedCheckpointError(
                f"{store_dir} needs state version {version}, whose commit is gone, and holds "
                f"{len(ids)} attempts of it",
                hint="snapshot a later batch (its lineage starts at a newer RocksDB snapshot)",
            )
        return ids.pop()

    def _require(self, store_dir: str, present: set[int], wanted: Any, ext: str) -> None:
        missing = [v for v in wanted if v not in present]
        if missing:
            # Maintenance may have replaced them with a newer snapshot between listings.
            raise CheckpointChanged(
                f"{store_dir} lacks {ext} files for versions {missing[:5]} needed to rebuild the state"
            )

    def _add_rocksdb_snapshot(self, files: dict[str, PlannedFile], store_rel: str, version: int | str) -> None:
        """`<version>.zip` (format v2: `version` is `<version>_<id>`) and the SST and log files
        its metadata names."""
        zip_rel = f"{store_rel}/{version}.zip"
        self._add(files, zip_rel, essential=True)
        try:
            with zipfile.ZipFile(io.BytesIO(self.fs.read_bytes(zip_rel))) as z:
                lines = z.read("metadata").decode().split("\n")
        except FileNotFoundError:
            raise CheckpointChanged(f"{zip_rel} vanished while planning") from None
        except (zipfile.BadZipFile, KeyError) as exc:
            raise UnsupportedCheckpointError(f"{zip_rel} is not a RocksDB checkpoint zip: {exc}") from None
        if not lines or lines[0] != "v1":
            raise UnsupportedCheckpointError(f"{zip_rel} has RocksDB metadata version {lines[0]!r}")
        meta = json.loads(lines[1])
        for sst in meta.get("sstFiles", []):
            self._add(files, f"{store_rel}/SSTs/{sst['dfsSstFileName']}", essential=True)
        for log in meta.get("logFiles", []):
            self._add(files, f"{store_rel}/logs/{log['dfsLogFileName']}", essential=True)

    # --- files -------------------------------------------------------------------

    def _add(self, files: dict[str, PlannedFile], rel: str, *, essential: bool) -> None:
        """Add a file and the checksum sidecars Spark/Hadoop keep next to it."""
        st = self.fs.stat(rel)
        if st is None:
            if essential:
                raise CheckpointChanged(f"{rel} vanished while planning")
            return
        if not st.regular:
            raise UnsupportedCheckpointError(f"{self._path(rel)} is not a regular file")
        files[rel] = PlannedFile(rel, st.size, st.mtime_ns, essential, st.etag)
        head, _, name = rel.rpartition("/")
        prefix = f"{head}/" if head else ""
        # Spark 4.1's own checksum file `<name>.crc`, and Hadoop's `.<name>.crc` for both.
        for side in (f"{name}.crc", f".{name}.crc", f".{name}.crc.crc"):
            sst = self.fs.stat(f"{prefix}{side}")
            if sst is None:
                continue
            files[f"{prefix}{side}"] = PlannedFile(f"{prefix}{side}", sst.size, sst.mtime_ns, False, sst.etag)

    def _add_tree(self, files: dict[str, PlannedFile], rel: str, *, essential: bool) -> None:
        """Every regular, non-temporary file below `rel` (absent directory: nothing)."""
        if not self.fs.is_dir(rel):
            return
        for dirpath, _dirnames, filenames in self.fs.walk(rel):
            for name in sorted(filenames):
                if name.startswith(".") or name.endswith(".tmp") or name.endswith(".crc"):
                    continue  # sidecars come with their file; temp files are never part of a cut
                self._add(files, f"{dirpath}/{name}", essential=essential)
