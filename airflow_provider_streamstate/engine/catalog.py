"""Finding snapshots in a store: list, show, newest. Every manifest read is validated."""

from __future__ import annotations

from airflow_provider_streamstate.engine.errors import UnsafeManifestError
from airflow_provider_streamstate.engine.manifest import Manifest, validate_snapshot_id, validate_stream_name
from airflow_provider_streamstate.engine.stores.base import SnapshotStore


def get_snapshot(store: SnapshotStore, stream: str, snapshot_id: str) -> Manifest:
    validate_stream_name(stream)
    validate_snapshot_id(snapshot_id)
    return Manifest.from_json(store.get_manifest(stream, snapshot_id), expect_stream=stream, expect_id=snapshot_id)


def list_snapshots(store: SnapshotStore, stream: str) -> list[Manifest]:
    """Every snapshot of `stream`, oldest first."""
    validate_stream_name(stream)
    return [get_snapshot(store, stream, sid) for sid in store.list_snapshot_ids(stream)]


def latest_snapshot(store: SnapshotStore, stream: str) -> Manifest | None:
    """The newest readable snapshot of `stream` (an unreadable newest one is skipped)."""
    for sid in reversed(store.list_snapshot_ids(validate_stream_name(stream))):
        try:
            return get_snapshot(store, stream, sid)
        except UnsafeManifestError:
            continue
    return None
