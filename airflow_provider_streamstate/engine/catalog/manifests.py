"""Reading one snapshot's manifest from a store: validated, named in every error, and able
to give its whole file list whatever the stored form.

A delta manifest (docs/manifest.md) builds on earlier manifests of its stream; they are read
through `manifest_fetcher`, which finds each one where it is kept: published, or moved aside
as a tombstone by retention (a manifest a live delta needs is never lost: retention keeps
it, and garbage collection never expires the tombstone of one; docs/concepts.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from airflow_provider_streamstate.engine.catalog.gc import Tombstone
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import (
    Fetch,
    Manifest,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore, tombstone_key


def manifest_fetcher(store: SnapshotStore, stream: str) -> Fetch:
    """The bytes of a manifest of `stream` by id: published, else kept in its tombstone;
    NotFoundError when it is neither."""

    def fetch(snapshot_id: str) -> bytes:
        try:
            return store.get_manifest(stream, snapshot_id)
        except NotFoundError:
            pass
        data = store.get_record(tombstone_key(stream, snapshot_id))
        if data is None:
            raise NotFoundError(f"{store.url} holds neither manifest {snapshot_id} nor its tombstone")
        return Tombstone.from_json(data, stream=stream, snapshot_id=snapshot_id).manifest

    return fetch


def read_manifest(store: SnapshotStore, stream: str, snapshot_id: str, data: bytes, *,
                  file_list: Callable[[], bytes] | None = None) -> Manifest:
    """Manifest `snapshot_id` of `stream` from bytes read from `store`, its file list read
    (through the manifests it builds on) from the same store when first used; `data` may be
    a v3 header alone, its file-list line then read through `file_list`."""
    try:
        return Manifest.from_json(data, expect_stream=stream, expect_id=snapshot_id,
                                  fetch=manifest_fetcher(store, stream), file_list=file_list)
    except UnsafeManifestError as exc:  # name the snapshot, and say what to do about it
        raise UnsafeManifestError(
            f"snapshot {snapshot_id} of {stream} in {store.url}: {exc.message}",
            hint=exc.hint,
        ) from None


def get_snapshot(store: SnapshotStore, stream: str, snapshot_id: str) -> Manifest:
    """The published manifest `snapshot_id` of `stream` (NotFoundError when there is none)."""
    validate_stream_name(stream)
    validate_snapshot_id(snapshot_id)
    return read_manifest(store, stream, snapshot_id, store.get_manifest(stream, snapshot_id))


def no_snapshots_error(store: SnapshotStore, stream: str) -> NotFoundError:
    """'stream X has no snapshots in S', naming the streams S does hold, closest first."""
    streams = store.list_streams()
    if not streams:
        return NotFoundError(
            f"stream {stream} has no snapshots in {store.url}, which holds no snapshots of any stream",
            hint="check the store URL (bucket, prefix, endpoint) or take a snapshot first",
        )
    close = difflib.get_close_matches(stream, streams, n=len(streams), cutoff=0.0)
    shown = ", ".join(close[:8]) + (f" (+{len(close) - 8} more)" if len(close) > 8 else "")
    return NotFoundError(
        f"stream {stream} has no snapshots in {store.url}",
        hint=f"streams there: {shown}; check --stream (see `streamstate streams --store {store.url}`)",
    )
