"""What a plan of a checkpoint's cut says: the files a snapshot of batch N holds (`CutPlan`)
or that rebuild one store partition (`PartitionPlan`), each as the plan saw it
(`PlannedFile`). The planner is `reader.CheckpointReader`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import FileStat


@dataclass(frozen=True)
class PlannedFile:
    path: str  # relative to the checkpoint root, POSIX
    size: int
    mtime_ns: int
    essential: bool  # False: history that Spark may delete at any moment
    etag: str | None = None  # S3 checkpoints: the object version the plan saw

    @property
    def identity(self) -> FileStat:
        return FileStat(self.size, self.mtime_ns, self.etag)


@dataclass
class CutPlan:
    """Everything a snapshot of batch N must contain, and what it says about the query."""

    batch_id: int
    query_id: str
    files: list[PlannedFile]
    sources: list[dict[str, Any]]
    kafka_offsets: dict[str, dict[str, int]]
    watermark_ms: int | None
    next_watermark_ms: int | None
    batch_timestamp_ms: int | None
    conf: dict[str, str]
    state_store: str
    operators: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_format: int = 1  # 2: state files named <version>_<uniqueId> (RocksDB)


@dataclass
class PartitionPlan:
    """The files of one store partition of one operator at batch N (`plan_partition`): the
    operator's metadata and schema files and the state files that rebuild version N+1."""

    batch_id: int
    files: list[PlannedFile]
    conf: dict[str, str]
    state_store: str  # hdfs | rocksdb | rocksdb-changelog
    operator: dict[str, Any]  # as CutPlan.operators describes it
    checkpoint_format: int = 1
