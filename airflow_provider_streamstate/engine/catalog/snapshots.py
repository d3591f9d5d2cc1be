"""Finding snapshots in a store: list, show, newest on a timeline, streams. Every manifest
read is validated; a stream or store with nothing in it is an error that names what the
store does hold, so a typo never passes for an empty history.

`latest` lists only the ids at and after the one the catalog head names (catalog/head.py: a
record read and one listing, which also shows the timelines, and the head carries the
manifest), else the newest one the catalog index knew (the names of its segments carry it:
catalog/index.py), not every id: any snapshot newer than that one sorts after it (ids sort
by batch, then time), so the newest on a timeline is among them whenever any of them is on
that timeline's history; otherwise, and when none of them can be read, every id is listed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.catalog.head import read_head_view, write_head
from airflow_provider_streamstate.engine.catalog.index import newest_hint
from airflow_provider_streamstate.engine.catalog.manifests import get_snapshot, no_snapshots_error
from airflow_provider_streamstate.engine.catalog.timeline import Timelines, load_timelines, snapshot_refs
from airflow_provider_streamstate.engine.catalog.validation_records import get_validation, validate_suite_name
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import (
    Manifest,
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

__all__ = [  # get_snapshot and no_snapshots_error live in catalog.manifests; callers import them here too
    "LATEST", "LATEST_GOOD_PREFIX", "RecentRefs", "SnapshotListing", "StreamSummary", "get_snapshot",
    "latest_good_snapshot", "latest_ref", "latest_snapshot", "list_snapshots", "list_streams",
    "no_snapshots_error", "recent_refs", "refresh_head", "resolve_snapshot",
]

log = logging.getLogger("streamstate.catalog")

LATEST = "latest"
LATEST_GOOD_PREFIX = "latest-good:"  # `latest-good:<suite>`


@dataclass(frozen=True)
class SnapshotListing:
    """A stream's snapshots (oldest first) with their place in its timelines."""

    manifests: list[Manifest]
    timelines: Timelines

    def on_current_timeline(self, m: Manifest) -> bool:
        return self.timelines.contains(SnapshotRef.parse(m.snapshot_id))


def list_snapshots(store: SnapshotStore, stream: str, *, parallelism: int = 8) -> SnapshotListing:
    """Every snapshot of `stream`, oldest first; NotFoundError when it has none."""
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    manifests = run_parallel(lambda r: get_snapshot(store, stream, r.snapshot_id), refs, parallelism)
    return SnapshotListing(manifests, load_timelines(store, stream, refs))


def latest_ref(
    store: SnapshotStore, stream: str, *, timeline: int | None = None, timelines: Timelines | None = None
) -> SnapshotRef | None:
    """The newest snapshot (highest batch, then newest) on a timeline's history."""
    refs = snapshot_refs(store, stream)
    tls = timelines or load_timelines(store, stream, refs)
    on = [r for r in refs if tls.contains(r, timeline)]
    return max(on, key=lambda r: (r.batch_id, r.created)) if on else None


@dataclass(frozen=True)
class RecentRefs:
    """The ids `latest` looks at: every id (`complete`), or those from the catalog head's
    snapshot (or the one the index knew as newest) on; with the head, the stream's
    timelines and the head's manifest too, from the same listing."""

    refs: list[SnapshotRef]
    complete: bool
    timelines: Timelines | None = None
    manifests: dict[str, Manifest] = field(default_factory=dict)

    def stream_timelines(self, store: SnapshotStore, stream: str) -> Timelines:
        """The stream's timelines: as the head's listing showed them, else loaded now."""
        return self.timelines or load_timelines(store, stream, self.refs)


def recent_refs(store: SnapshotStore, stream: str) -> RecentRefs:
    """Ids from the catalog head's snapshot on (a record read and one listing: catalog/head.py),
    else from the index's newest on (two listings: segment names, ids after), else all."""
    view = read_head_view(store, stream)
    if view is not None:
        carried = {view.manifest.snapshot_id: view.manifest} if view.manifest is not None else {}
        return RecentRefs(view.refs, False, view.timelines, carried)
    hint = newest_hint(store, stream)
    if hint is None:
        return RecentRefs(snapshot_refs(store, stream), True)
    refs = []
    for sid in [hint, *store.list_snapshot_ids_after(stream, hint)]:
        try:
            refs.append(SnapshotRef.parse(sid))
        except UsageError:
            log.warning("ignoring a manifest with an invalid id %r in stream %s", sid, stream)
    return RecentRefs(sorted(refs), False)


def latest_snapshot(
    store: SnapshotStore, stream: str, *, timeline: int | None = None, timelines: Timelines | None = None,
    refs: list[SnapshotRef] | None = None, recent: RecentRefs | None = None,
) -> Manifest | None:
    """The newest readable snapshot on the history of `timeline` (default: the current
    timeline); an unreadable newest one is skipped with a warning. `refs`: the stream's
    snapshot ids, when the caller listed them already; `recent`: what `recent_refs` found
    (default: found now)."""
    if refs is not None:
        recent = RecentRefs(refs, True)
    elif recent is None:
        recent = recent_refs(store, stream)
    tls = timelines or recent.stream_timelines(store, stream)
    tried: set[str] = set()
    for source in (recent, None):
        if source is None:
            if recent.complete:
                break
            source = RecentRefs(snapshot_refs(store, stream), True)  # none of the recent ones: all ids
        on = sorted((r for r in source.refs if tls.contains(r, timeline) and r.snapshot_id not in tried),
                    key=lambda r: (r.batch_id, r.created), reverse=True)
        for ref in on:
            tried.add(ref.snapshot_id)
            if ref.snapshot_id in recent.manifests:
                return recent.manifests[ref.snapshot_id]  # the head's copy: listed just now, so still published
            try:
                return get_snapshot(store, stream, ref.snapshot_id)
            except NotFoundError:
                continue  # deleted since it was listed (or the index's newest is gone)
            except UnsafeManifestError as exc:
                log.warning("skipped an unreadable manifest: %s", exc.message)
    return None


def refresh_head(store: SnapshotStore, stream: str) -> None:
    """Point the catalog head at the newest snapshot on the current timeline, found as `latest`
    finds it: for writers that publish several snapshots, or older ones (replication)."""
    recent = recent_refs(store, stream)
    tls = recent.stream_timelines(store, stream)
    newest = latest_snapshot(store, stream, timelines=tls, recent=recent)
    if newest is not None and newest.snapshot_id not in recent.manifests:
        write_head(store, stream, newest, store.get_manifest(stream, newest.snapshot_id), tls)


def resolve_snapshot(store: SnapshotStore, stream: str, spec: str, *, labels: dict[str, str] | None = None) -> Manifest:
    """A snapshot named by id, by `latest` (newest on the stream's current timeline) or by
    `latest-good:<suite>` (newest there that passed the suite); with `labels`, `latest` is
    the newest there that carries all of them."""
    validate_stream_name(stream)
    if spec.startswith(LATEST_GOOD_PREFIX):  # newest that passed a suite (validation records)
        good = latest_good_snapshot(store, stream, spec[len(LATEST_GOOD_PREFIX):])
        if labels and not labels.items() <= good.labels.items():
            raise NotFoundError(f"snapshot {good.snapshot_id} of {stream} ({spec}) does not carry labels {labels}",
                                hint="drop the labels or name another snapshot")
        return good
    if spec == LATEST:
        if labels:
            return _latest_labelled(store, stream, labels)
        m = latest_snapshot(store, stream)
        if m is None:
            if not snapshot_refs(store, stream):
                raise no_snapshots_error(store, stream)
            raise NotFoundError(
                f"stream {stream} has no readable snapshot on its current timeline in {store.url}",
                hint="`streamstate verify` names the damaged manifests; name an older snapshot by id",
            )
        return m
    try:
        validate_snapshot_id(spec)
    except UsageError as exc:
        raise UsageError(exc.message, hint="give a snapshot id, `latest` or `latest-good:<suite>`; see `streamstate snapshot list`") from None
    try:
        m = get_snapshot(store, stream, spec)
    except NotFoundError:
        if not store.list_snapshot_ids(stream):
            raise no_snapshots_error(store, stream) from None
        raise
    if labels and not labels.items() <= m.labels.items():
        raise NotFoundError(f"snapshot {spec} of {stream} does not carry labels {labels}", hint="drop the labels or name another snapshot")
    return m


def _latest_labelled(store: SnapshotStore, stream: str, labels: dict[str, str]) -> Manifest:
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    tls = load_timelines(store, stream, refs)
    for ref in sorted((r for r in refs if tls.contains(r)), key=lambda r: (r.batch_id, r.created), reverse=True):
        m = get_snapshot(store, stream, ref.snapshot_id)
        if labels.items() <= m.labels.items():
            return m
    shown = ",".join(f"{k}={v}" for k, v in labels.items())
    raise NotFoundError(
        f"no snapshot of {stream} on its current timeline carries {shown}",
        hint=f"check the labels with `streamstate snapshot list --store {store.url} --stream {stream}`",
    )


@dataclass(frozen=True)
class StreamSummary:
    stream: str
    snapshots: int
    newest: str | None  # newest on the current timeline
    current_timeline: int
    bytes: int  # distinct blob bytes its snapshots reference

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "snapshots": self.snapshots,
            "newest": self.newest,
            "current_timeline": self.current_timeline,
            "bytes": self.bytes,
        }


def list_streams(store: SnapshotStore, *, parallelism: int = 8) -> list[StreamSummary]:
    """Every stream the store holds snapshots of, with counts and sizes."""
    out = []
    for stream in store.list_streams():
        refs = snapshot_refs(store, stream)
        if not refs:
            continue
        tls = load_timelines(store, stream, refs)
        blobs: dict[str, int] = {}
        def read(ref: SnapshotRef, s: str = stream) -> Manifest:
            return get_snapshot(store, s, ref.snapshot_id)

        # Each manifest's own entries: a delta's others are its chain's, listed here too.
        for m in run_parallel(read, refs, parallelism):
            blobs.update((f.blob_id, f.size) for f in m.own_files)
        newest = latest_ref(store, stream, timelines=tls)
        out.append(StreamSummary(stream, len(refs), newest.snapshot_id if newest else None, tls.current, sum(blobs.values())))
    return out


def latest_good_snapshot(store: SnapshotStore, stream: str, suite: str) -> Manifest:
    """The newest snapshot on the stream's current timeline that passed `suite`."""
    validate_suite_name(suite)
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    tls = load_timelines(store, stream, refs)
    for ref in sorted((r for r in refs if tls.contains(r)), key=lambda r: (r.batch_id, r.created), reverse=True):
        try:
            rec = get_validation(store, stream, ref.snapshot_id, suite)
        except UnsafeManifestError as exc:
            log.warning("skipping %s: %s", ref.snapshot_id, exc.one_line())
            continue
        if rec is not None and rec.success:
            return get_snapshot(store, stream, ref.snapshot_id)
    raise NotFoundError(
        f"no snapshot of {stream} on its current timeline has passed suite {suite}",
        hint=f"validate one first: streamstate validate --store {store.url} --stream {stream} SNAPSHOT --suite FILE",
    )
