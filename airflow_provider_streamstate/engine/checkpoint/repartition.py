"""Batches of Spark's offline state repartition (4.2+), as a checkpoint shows them.

`spark._streamingCheckpointManager.repartition(checkpoint, n)` writes batch N+1 holding the
state of batch N spread over `n` partitions: it reads no input (its sources' offsets are
batch N's), keeps batch N's timestamp and watermark, and pins the new number of partitions
in its offsets. A repartition that fails after writing `offsets/N+1` and before its commit
(HDFS-backed state, a checkpoint without operator metadata) leaves a checkpoint Spark will
not start (STREAMING_UNFINISHED_REPARTITION_DETECTED); `verify` and `streams` say so, and a
restore of the newest good snapshot is the way out.

The repartition job (jobs/rescale_job.py) records beside the copy it repartitioned what it
did (`RepartitionRecord`, `_streamstate/repartition.json`): Spark's version and outcome,
and the verification it ran in the same Spark application: the state digests of batch N and
of the repartition batch (engine/lookup/digest.py, as `StateDigest.to_json()` writes them),
the problems found, how many tasks and executors computed them and how long each step took.
Pure Python.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, state_partitions
from airflow_provider_streamstate.engine.checkpoint.sidecar import SIDECAR_DIR
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    UnsupportedCheckpointError,
)

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


@dataclass(frozen=True)
class Verification:
    """The repartitioned copy checked where the repartition ran: the digests of batch N
    (`before`) and of the repartition batch (`after`), as `StateDigest.to_json()` writes
    them (None when the verification could not run), and what differs (`problems`, empty
    when it verified)."""

    problems: tuple[str, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    tasks: int  # Spark tasks: one per operator, store, partition and batch
    executors: int  # executors that ran them
    # plan, digests (the Spark stage), task_total (the tasks' wall seconds), task_cpu, total
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and self.before is not None and self.after is not None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": list(self.problems), "before": self.before, "after": self.after,
                "tasks": self.tasks, "executors": self.executors,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verification:
        before, after = d.get("before"), d.get("after")
        return cls(tuple(str(p) for p in d.get("problems") or ()), dict(before) if before else None,
                   dict(after) if after else None,
                   int(d.get("tasks", 0)), int(d.get("executors", 0)),
                   {str(k): float(v) for k, v in (d.get("seconds") or {}).items()})


@dataclass(frozen=True)
class RepartitionRecord:
    """What the repartition job recorded: Spark's outcome (`ok`, else `error`; `unsupported`
    when that Spark has no offline repartition) and, after a repartition, its verification."""

    ok: bool
    spark_version: str | None = None
    partitions: int | None = None
    batch_id: int | None = None  # the repartition batch (N+1)
    seconds: float | None = None  # Spark's repartition
    error: str | None = None
    unsupported: bool = False
    verification: Verification | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": REPARTITION_FORMAT, "ok": self.ok, "spark_version": self.spark_version}
        for key in ("partitions", "batch_id", "seconds", "error"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.unsupported:
            out["unsupported"] = True
        if self.verification is not None:
            out["verification"] = self.verification.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RepartitionRecord:
        v = d.get("verification")
        return cls(bool(d.get("ok")), d.get("spark_version"), d.get("partitions"), d.get("batch_id"),
                   d.get("seconds"), d.get("error"), bool(d.get("unsupported")),
                   Verification.from_json(v) if isinstance(v, dict) else None)


def read_repartition_record(fs: CheckpointFS) -> RepartitionRecord | None:
    """The record the repartition job left beside the checkpoint; None when there is none."""
    raw = fs.read_record(REPARTITION_RECORD)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != REPARTITION_FORMAT:
            raise ValueError(f"format {doc.get('format') if isinstance(doc, dict) else None!r}")
        return RepartitionRecord.from_json(doc)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(f"{fs.location}/{REPARTITION_RECORD} is not a repartition record: {exc}",
                              hint="run the rescale again: its job writes a new one") from None


def write_repartition_record(fs: CheckpointFS, record: RepartitionRecord) -> None:
    fs.write_record(REPARTITION_RECORD, json.dumps(record.to_json()).encode())
