"""Which snapshots a replication copies: named ones (ids, `latest`, `latest-good:<suite>`),
every one since a snapshot, or every one the destination lacks and has not deleted."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from airflow_provider_streamstate.engine.catalog.snapshots import (
    LATEST,
    LATEST_GOOD_PREFIX,
    no_snapshots_error,
    resolve_snapshot,
)
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UsageError
from airflow_provider_streamstate.engine.core.manifest import (
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.replicate")


def select_snapshots(
    source: SnapshotStore, destination: SnapshotStore, stream: str, *, snapshots: Sequence[str] = (),
    since: str | None = None, all_missing: bool = False,
) -> list[str]:
    """Source snapshot ids to replicate, oldest first (by creation time).

    Exactly one way of choosing: `snapshots` (ids or `latest`, the newest on the source's
    current timeline; the default when nothing is given), `since` (that snapshot and every
    one created after it, on any timeline), or `all_missing` (every snapshot the
    destination does not hold and has not deleted: a snapshot retention deleted there,
    whose tombstone remains, stays deleted rather than coming back on every run).
    """
    validate_stream_name(stream)
    chosen = sum(1 for x in (bool(snapshots), since is not None, all_missing) if x)
    if chosen > 1:
        raise UsageError("choose the snapshots one way", hint="give snapshot ids, or --since ID, or --all")
    ids = source.list_snapshot_ids(stream)
    if not ids:
        raise no_snapshots_error(source, stream)
    refs = sorted(SnapshotRef.parse(i) for i in ids if _valid_id(i))
    if all_missing:
        present = set(destination.list_snapshot_ids(stream)) | set(destination.list_tombstones(stream))
        return [r.snapshot_id for r in refs if r.snapshot_id not in present]
    if since is not None:
        try:
            start = SnapshotRef.parse(since)
        except UsageError as exc:
            raise UsageError(exc.message, hint="--since takes a snapshot id; see `streamstate snapshot list`") from None
        if since not in ids:
            raise NotFoundError(
                f"no snapshot {since} of stream {stream} in {source.url}",
                hint=f"list them with `streamstate snapshot list --store {source.url} --stream {stream}`",
            )
        return [r.snapshot_id for r in refs if r.created >= start.created]
    wanted: list[str] = []
    for spec in snapshots or [LATEST]:
        named = spec == LATEST or spec.startswith(LATEST_GOOD_PREFIX)  # `latest-good:<suite>` too
        sid = resolve_snapshot(source, stream, spec).snapshot_id if named else checked_id(spec)
        if sid not in ids:
            raise NotFoundError(
                f"no snapshot {sid} of stream {stream} in {source.url}",
                hint=f"list them with `streamstate snapshot list --store {source.url} --stream {stream}`",
            )
        if sid not in wanted:
            wanted.append(sid)
    return sorted(wanted, key=lambda s: SnapshotRef.parse(s))


def _valid_id(sid: str) -> bool:
    try:
        validate_snapshot_id(sid)
        return True
    except UsageError:
        log.warning("ignoring a manifest with an invalid id %r", sid)
        return False


def checked_id(spec: str) -> str:
    try:
        return validate_snapshot_id(spec)
    except UsageError as exc:
        raise UsageError(exc.message, hint="give snapshot ids or `latest`; see `streamstate snapshot list`") from None
