"""What a restore writes into the checkpoint's lineage and what it reports, shared by the
local (engine/lifecycle/restore.py) and the S3 (restore_s3.py) restores: a clone is a new
stream; restoring the newest snapshot of the current timeline continues it; restoring any
other snapshot (a rollback) branches a new timeline once the restore has landed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import latest_ref
from airflow_provider_streamstate.engine.catalog.timeline import Lineage, load_timelines
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.restore")


@dataclass(frozen=True)
class RestoreResult:
    manifest: Manifest
    target: str
    query_id: str
    seconds: float
    timeline: int | None  # the timeline the restored checkpoint continues (None for a clone)
    branched: bool  # True when this restore started that timeline (a rollback)
    rewritten: tuple[str, ...] = ()  # files written with other content than the snapshot's
    seconds_rewrite: float = 0.0  # of `seconds`: rewriting them

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.manifest.snapshot_id,
            "stream": self.manifest.stream,
            "batch_id": self.manifest.batch_id,
            "target": self.target,
            "files": self.manifest.totals.files,
            "bytes": self.manifest.bytes_total,
            "query_id": self.query_id,
            "clone": self.timeline is None,
            "timeline": self.timeline,
            "new_timeline": self.branched,
            "kafka_offsets": self.manifest.kafka_offsets,
            "seconds": round(self.seconds, 3),
        }


def lineage_for(store: SnapshotStore, manifest: Manifest, new_query_id: bool) -> Lineage:
    """What the restored checkpoint will be: a clone, the head of the current timeline
    continued, or a rollback that branches a new timeline (timeline left None until then)."""
    base = {
        "snapshot_id": manifest.snapshot_id, "query_id": manifest.query_id, "restore_id": uuid.uuid4().hex,
        "restored_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "source_stream": manifest.stream,
    }
    if new_query_id:
        return Lineage(stream=None, timeline=None, **base)
    tls = load_timelines(store, manifest.stream)
    head = latest_ref(store, manifest.stream, timelines=tls)
    if head is not None and head.snapshot_id == manifest.snapshot_id:
        return Lineage(stream=manifest.stream, timeline=tls.current, **base)
    log.info("%s is not the newest snapshot of %s's current timeline %d: the restore starts a new timeline",
             manifest.snapshot_id, manifest.stream, tls.current)
    return Lineage(stream=manifest.stream, timeline=None, **base)
