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
parts again and puts back any that went meanwhile; every later run checks the snapshots
already there the same way (a run that died in that check is finished by the next one), and
copies the validation records their members got since (a pipeline snapshot validated after
its replication is known-good in the DR store too: `failover --good-only` needs that).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_snapshot, pinned_ids
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError
from airflow_provider_streamstate.engine.lifecycle.replicate import copy_validation_records, replicate
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
    pins: dict[str, set[str]] = {}  # stream -> its pins at the destination, read once for the snapshots already there
    for sid in list_pipeline_snapshots(source, pipeline):
        if sid in there:
            present.append(sid)
            snap = get_pipeline_snapshot(source, pipeline, sid, check_members=False)
            members += _complete(source, destination, snap, None, parallelism, pins)
            for m in snap.members.values():
                copy_validation_records(source, destination, m.stream, m.snapshot_id)
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
        members += _complete(source, destination, snap, channels, parallelism, {})
        published.append(sid)
    log.info("replicated pipeline %s: %d published, %d already there", pipeline, len(published), len(present))
    return PipelineReplicationResult(pipeline, published, present, members, time.monotonic() - started)


def _complete(source: SnapshotStore, destination: SnapshotStore, snap: PipelineSnapshot,
              channels: dict[str, bytes] | None, parallelism: int, pins: dict[str, set[str]]) -> int:
    """Put back the parts of a published pipeline snapshot that the destination's retention
    swept before its record was there (`channels`: their bytes, else read from the source
    when missing; `pins`: the destination's pins per stream, filled as read); the member
    snapshots copied again."""
    again = 0
    for stream, m in sorted(snap.members.items()):
        for attempt in range(2):  # the member's own retention may take it between the copy and the pin
            if stream not in pins or attempt:
                pins[stream] = pinned_ids(destination, stream)
            if m.snapshot_id not in pins[stream]:
                if m.snapshot_id not in set(destination.list_snapshot_ids(stream)):
                    again += len(replicate(source, destination, stream, snapshots=[m.snapshot_id],
                                           parallelism=parallelism).published)
                try:
                    pin_snapshot(destination, stream, m.snapshot_id,
                                 reason=pin_reason(snap.pipeline, snap.snapshot_id))
                except NotFoundError:
                    if attempt:
                        raise
                    continue
                log.warning("pipeline snapshot %s of %s: the pin of %s/%s was missing; pinned again",
                            snap.snapshot_id, snap.pipeline, stream, m.snapshot_id)
            break
    for c in snap.channels:
        if destination.get_record(c.key) is None:
            data = (channels or {}).get(c.key) or source.get_record(c.key)
            if data is None or channel_mod.digest(data) != c.sha256:
                raise UnsafeManifestError(f"channel records {c.key} are missing at the destination, and at the source "
                                          "missing or damaged")
            log.warning("pipeline snapshot %s of %s: %s was missing; copied again",
                        snap.snapshot_id, snap.pipeline, c.key)
            _put_once(destination, c.key, data)
    return again


def _put_once(store: SnapshotStore, key: str, data: bytes) -> None:
    """Write-once, and a re-run finding the same bytes there is fine."""
    try:
        store.put_record(key, data)
    except ManifestExistsError:
        if store.get_record(key) != data:
            raise UnsafeManifestError(f"{key} exists at the destination with other content") from None
