"""Batches of Spark's offline state repartition (4.2+), as a checkpoint shows them.

`spark._streamingCheckpointManager.repartition(checkpoint, n)` writes batch N+1 holding the
state of batch N spread over `n` partitions: it reads no input (its sources' offsets are
batch N's), keeps batch N's timestamp and watermark, and pins the new number of partitions
in its offsets. A repartition that fails after writing `offsets/N+1` and before its commit
(HDFS-backed state, a checkpoint without operator metadata) leaves a checkpoint Spark will
not start (STREAMING_UNFINISHED_REPARTITION_DETECTED); `verify` and `streams` say so, and a
restore of the newest good snapshot is the way out. Pure Python.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, state_partitions
from airflow_provider_streamstate.engine.checkpoint.sidecar import SIDECAR_DIR
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, UnsupportedCheckpointError

# What the repartition job (jobs/rescale_job.py) records beside the copy it repartitioned.
REPARTITION_RECORD = f"{SIDECAR_DIR}/repartition.json"
REPARTITION_FORMAT = "streamstate.repartition/v1"


@dataclass(frozen=True)
class Repartition:
    """A batch that changed the number of state partitions."""

    batch_id: int
    from_partitions: int
    to_partitions: int
    committed: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        done = "" if self.committed else ", not committed: Spark will not start the query on it"
        return f"batch {self.batch_id} repartitioned the state {self.from_partitions} -> {self.to_partitions}{done}"


def repartition_at(reader: CheckpointReader, batch_id: int) -> Repartition | None:
    """Batch `batch_id` when it is a repartition, else None."""
    if batch_id < 1 or not {batch_id - 1, batch_id} <= set(reader.offset_batches()):
        return None
    try:
        meta, sources = reader.offsets(batch_id)
        prev_meta, prev_sources = reader.offsets(batch_id - 1)
    except (CheckpointChanged, UnsupportedCheckpointError):
        return None  # purged meanwhile, or a log this reader cannot tell about
    before = state_partitions({str(k): str(v) for k, v in (prev_meta.get("conf") or {}).items()})
    after = state_partitions({str(k): str(v) for k, v in (meta.get("conf") or {}).items()})
    if (sources != prev_sources or meta.get("batchTimestampMs") != prev_meta.get("batchTimestampMs")
            or before is None or after is None or before == after):
        return None
    return Repartition(batch_id, before, after, batch_id in set(reader.committed_batches()))


def unfinished_repartition(reader: CheckpointReader) -> Repartition | None:
    """The newest batch when it is a repartition Spark did not commit."""
    offsets = reader.offset_batches()
    if not offsets or offsets[-1] in set(reader.committed_batches()):
        return None
    return repartition_at(reader, offsets[-1])
