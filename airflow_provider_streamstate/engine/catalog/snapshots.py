"""Finding snapshots in a store: list, show, newest on a timeline, streams. Every manifest
read is validated; a stream or store with nothing in it is an error that names what the
store does hold, so a typo never passes for an empty history."""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

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

log = logging.getLogger("streamstate.catalog")

LATEST = "latest"
LATEST_GOOD_PREFIX = "latest-good:"  # `latest-good:<suite>`


def get_snapshot(store: SnapshotStore, stream: str, snapshot_id: str) -> Manifest:
    validate_stream_name(stream)
    validate_snapshot_id(snapshot_id)
    try:
        return Manifest.from_json(store.get_manifest(stream, snapshot_id), expect_stream=stream, expect_id=snapshot_id)
    except UnsafeManifestError as exc:  # name the snapshot, and say what to do about it
        raise UnsafeManifestError(
            f"snapshot {snapshot_id} of {stream} in {store.url}: {exc.message}",
            hint=exc.hint,
        ) from None


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


def latest_snapshot(
    store: SnapshotStore, stream: str, *, timeline: int | None = None, timelines: Timelines | None = None,
    refs: list[SnapshotRef] | None = None,
) -> Manifest | None:
    """The newest readable snapshot on the history of `timeline` (default: the current
    timeline); an unreadable newest one is skipped with a warning. `refs`: the stream's
    snapshot ids, when the caller listed them already."""
    refs = snapshot_refs(store, stream) if refs is None else refs
    tls = timelines or load_timelines(store, stream, refs)
    for ref in sorted((r for r in refs if tls.contains(r, timeline)), key=lambda r: (r.batch_id, r.created), reverse=True):
        try:
            return get_snapshot(store, stream, ref.snapshot_id)
        except UnsafeManifestError as exc:
            log.warning("skipped an unreadable manifest: %s", exc.message)
    return None


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
    if not store.list_snapshot_ids(stream):
        raise no_snapshots_error(store, stream)
    m = get_snapshot(store, stream, spec)
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

        for m in run_parallel(read, refs, parallelism):
            blobs.update(m.blobs)
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
