"""Replicating pipeline snapshots to another store (the DR region) as units.

For each pipeline snapshot the destination lacks: every member snapshot is replicated with
the stream replication (engine/lifecycle/replicate.py: verified bytes, manifest last), the
members are pinned there too, the channel records are copied and checked against their
sha256, and the pipeline record (the source's very bytes) is published last. So a
pipeline snapshot is listed at the destination only once every part of it is there; a run
killed before that leaves ordinary member snapshots and channel records a re-run reuses.

Until its record is published, the destination's pipeline retention sees those parts as
leftovers of an unpublished snapshot and may sweep them (it waits an hour after the cut,
but a DR store catching up after an outage copies older cuts). So, once the record is
published (from then on retention treats the snapshot as live), the replication checks its
parts again and puts back any that went meanwhile: a pipeline snapshot this run published
is whole when the run ends.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.pipeline import channel as channel_mod
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    PipelineSnapshot,
    get_pipeline_snapshot,
    list_pipeline_snapshots,
    pin_reason,
)
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore

log = logging.getLogger("streamstate.pipeline")


@dataclass(frozen=True)
class PipelineReplicationResult:
    pipeline: str
    published: list[str]  # pipeline snapshots this run published at the destination
    already_present: list[str]
    member_snapshots_published: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "published": self.published, "already_present": self.already_present,
                "member_snapshots_published": self.member_snapshots_published, "seconds": round(self.seconds, 3)}


def replicate_pipeline(source: SnapshotStore, destination: SnapshotStore, pipeline: str, *,
                       parallelism: int = 8) -> PipelineReplicationResult:
    """Copy every pipeline snapshot of `pipeline` the destination lacks, each as a unit."""
    started = time.monotonic()
    there = set(list_pipeline_snapshots(destination, pipeline))
    published: list[str] = []
    present: list[str] = []
    members = 0
    for sid in list_pipeline_snapshots(source, pipeline):
        if sid in there:
            present.append(sid)
            continue
        snap = get_pipeline_snapshot(source, pipeline, sid)
        for stream, m in sorted(snap.members.items()):
            r = replicate(source, destination, stream, snapshots=[m.snapshot_id], parallelism=parallelism)
            members += len(r.published)
            pin_snapshot(destination, stream, m.snapshot_id, reason=pin_reason(pipeline, sid))
        channels: dict[str, bytes] = {}
        for c in snap.channels:
            data = source.get_record(c.key)
            if data is None or channel_mod.digest(data) != c.sha256:
                raise UnsafeManifestError(f"channel records {c.key} at the source are missing or do not match their sha256")
            _put_once(destination, c.key, data)
            channels[c.key] = data
        record_key = f"pipelines/{pipeline}/snapshots/{sid}.json"
        data = source.get_record(record_key)
        if data is None:  # deleted by retention meanwhile: not published here either
            continue
        _put_once(destination, record_key, data)
        members += _complete(source, destination, snap, channels, parallelism)
        published.append(sid)
    log.info("replicated pipeline %s: %d published, %d already there", pipeline, len(published), len(present))
    return PipelineReplicationResult(pipeline, published, present, members, time.monotonic() - started)


def _complete(source: SnapshotStore, destination: SnapshotStore, snap: PipelineSnapshot, channels: dict[str, bytes],
              parallelism: int) -> int:
    """Put back the parts of a just published pipeline snapshot that the destination's
    retention swept before its record was there; the member snapshots copied again."""
    again = 0
    for stream, m in sorted(snap.members.items()):
        if m.snapshot_id not in set(destination.list_snapshot_ids(stream)):
            again += len(replicate(source, destination, stream, snapshots=[m.snapshot_id],
                                   parallelism=parallelism).published)
        if pin_snapshot(destination, stream, m.snapshot_id, reason=pin_reason(snap.pipeline, snap.snapshot_id)):
            log.warning("pipeline snapshot %s of %s: the pin of %s/%s was swept during its replication; pinned again",
                        snap.snapshot_id, snap.pipeline, stream, m.snapshot_id)
    for key, data in channels.items():
        if destination.get_record(key) is None:
            log.warning("pipeline snapshot %s of %s: %s was swept during its replication; copied again",
                        snap.snapshot_id, snap.pipeline, key)
            _put_once(destination, key, data)
    return again


def _put_once(store: SnapshotStore, key: str, data: bytes) -> None:
    """Write-once, and a re-run finding the same bytes there is fine."""
    try:
        store.put_record(key, data)
    except ManifestExistsError:
        if store.get_record(key) != data:
            raise UnsafeManifestError(f"{key} exists at the destination with other content") from None
