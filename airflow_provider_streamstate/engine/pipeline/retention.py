"""Retention of pipeline snapshots: keep the newest N of a pipeline, delete the rest as units.

A pipeline snapshot's members are pinned when it is taken, so a stream's own retention never
deletes a member a pipeline snapshot needs. Deleting a pipeline snapshot removes its record
first (from then on it does not exist: no half pipeline snapshot is ever listed), then its
channel records, then releases its members' pins; the members are then ordinary snapshots,
left to their streams' retention. A deletion interrupted after the record went leaves
channel records and pins behind; a later run finds them by the record they name and
finishes the job, once their id (the cut's time) is older than an hour: until then they may
belong to a pipeline snapshot still being taken or replicated, whose record comes last.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import pin_key, unpin_snapshot
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    get_pipeline_snapshot,
    list_pipeline_snapshots,
    pin_reason,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.pipeline")


@dataclass(frozen=True)
class PipelineRetentionResult:
    pipeline: str
    kept: list[str]
    deleted: list[str]
    pins_released: int
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "kept": self.kept, "deleted": self.deleted,
                "pins_released": self.pins_released, "dry_run": self.dry_run}


def _leftovers(store: SnapshotStore, pipeline: str, live: set[str],
               streams: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Channel records and member pins (of `streams`) of pipeline snapshots whose record is gone."""
    channels = [k for k in store.list_record_tree(f"pipelines/{pipeline}/channels/")
                if k.split("/")[3] not in live and _settled(k.split("/")[3])]
    pins: list[tuple[str, str]] = []
    for stream in sorted(streams):
        prefix = f"streams/{stream}/pins/"
        for key in store.list_records(prefix):
            data = store.get_record(key)
            try:
                reason = json.loads(data or b"{}").get("reason", "")
            except ValueError:
                continue
            head = f"member of pipeline snapshot {pipeline}/"
            sid = reason[len(head):] if isinstance(reason, str) and reason.startswith(head) else None
            if sid is not None and sid not in live and _settled(sid):
                pins.append((stream, key[len(prefix):].removesuffix(".json")))
    return channels, pins


LEFTOVER_GRACE_S = 3600.0  # a pipeline snapshot being written (or replicated) is younger than this


def _settled(snapshot_id: str) -> bool:
    """Whether leftovers of this id may be swept: its time (the id) is older than the grace,
    so no snapshot or replication still writing it can publish it afterwards."""
    try:
        taken = datetime.strptime(snapshot_id, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
    except ValueError:
        return False
    return (datetime.now(UTC) - taken).total_seconds() > LEFTOVER_GRACE_S


def apply_pipeline_retention(store: SnapshotStore, pipeline: str, *, keep_last: int,
                             dry_run: bool = False) -> PipelineRetentionResult:
    """Keep the newest `keep_last` snapshots of `pipeline`; delete the others as units."""
    if keep_last < 1:
        raise UsageError(f"keep_last must be >= 1, got {keep_last}", hint="keep at least the newest pipeline snapshot")
    ids = list_pipeline_snapshots(store, pipeline)
    kept, doomed = ids[-keep_last:], ids[:-keep_last]
    released = 0
    streams = set(get_pipeline_snapshot(store, pipeline, kept[-1], check_members=False).members) if kept else set()
    if not dry_run:
        for sid in doomed:
            snap = get_pipeline_snapshot(store, pipeline, sid, check_members=False)
            store.delete_record(f"pipelines/{pipeline}/snapshots/{sid}.json")  # the unit goes first
            for c in snap.channels:
                store.delete_record(c.key)
            streams.update(snap.members)
            for m in snap.members.values():
                if _pinned_for(store, m.stream, m.snapshot_id, pin_reason(pipeline, sid)):
                    released += unpin_snapshot(store, m.stream, m.snapshot_id)
        channels, pins = _leftovers(store, pipeline, set(kept), streams)
        for key in channels:
            store.delete_record(key)
        for stream, sid in pins:
            released += unpin_snapshot(store, stream, sid)
    log.info("pipeline retention of %s: kept %d, %s %d", pipeline, len(kept),
             "would delete" if dry_run else "deleted", len(doomed))
    return PipelineRetentionResult(pipeline, kept, doomed, released, dry_run)


def _pinned_for(store: SnapshotStore, stream: str, snapshot_id: str, reason: str) -> bool:
    """Whether the member's pin is this pipeline snapshot's (not one a person set)."""
    data = store.get_record(pin_key(stream, snapshot_id))
    try:
        return data is not None and json.loads(data).get("reason") == reason
    except ValueError:
        return False
