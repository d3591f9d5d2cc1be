"""Taking a snapshot: a consistent cut of a running stream's checkpoint, stored incrementally.

1. Find the timeline the checkpoint continues (`timeline`) and its newest snapshot there,
   the parent. A snapshot of the batch the parent already holds is the parent (idempotent).
2. When Spark's commit log says the checkpoint's newest committed batch is the one the
   parent holds (same checkpoint, same query: its files are immutable by name), nothing
   changed: the new manifest is a delta of the parent with no change, written from the
   parent's header alone. No other checkpoint file is listed or read.
3. Otherwise plan the cut at batch N (default: newest committed), see
   `checkpoint.reader.CheckpointReader`, and store its files (`snapshot_files.CutFiles`):
   only files the parent did not record are read, hashed or copied; blobs the store lacks
   are uploaded in parallel. Blobs the parent references are relied on without a request
   each: garbage collection cannot delete them (writer rule 3 in docs/concepts.md). Those
   the store's blob census (`catalog.blob_census`) names as lost are checked and stored
   again; `check_blobs` checks every one (a store damaged since its last collection).
4. Publish the manifest last, atomically, and only within the writers' bound D
   (`catalog.gc.MAX_SNAPSHOT_SECONDS`) of when the blobs it relies on were seen (the
   contract with garbage collection, see docs/concepts.md). Until then nothing is visible.
   It is a delta of the parent (the files that changed) or, every so often, a full
   manifest (`core.manifest.plan_delta`).

Spark keeps running throughout: when an essential file vanishes or changes under us
(maintenance replaced it with a newer snapshot), the cut is planned again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.blob_census import suspect_blobs
from airflow_provider_streamstate.engine.catalog.gc import max_snapshot_seconds
from airflow_provider_streamstate.engine.catalog.head import write_head
from airflow_provider_streamstate.engine.catalog.snapshots import RecentRefs, latest_snapshot, recent_refs
from airflow_provider_streamstate.engine.catalog.timeline import (
    Timelines,
    load_timelines,
    new_timeline,
    read_lineage,
    snapshot_refs,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.plans import CutPlan
from airflow_provider_streamstate.engine.checkpoint.reader import (
    CheckpointReader,
    checkpoint_where,
    committed_batches,
    read_query_id,
    resolve_committed,
)
from airflow_provider_streamstate.engine.checkpoint.sidecar import refuse_unfinished_restore
from airflow_provider_streamstate.engine.checkpoint.state_schemas import migration_after
from airflow_provider_streamstate.engine.core.anchor import anchors_to_json
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import (
    Manifest,
    OperatorInfo,
    SnapshotRef,
    new_snapshot_id,
    plan_delta,
    unchanged_delta,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.kafka.anchors import read_anchors
from airflow_provider_streamstate.engine.lifecycle.snapshot_files import CutFiles
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore

log = logging.getLogger("streamstate.snapshot")

MAX_PLAN_ATTEMPTS = 6


@dataclass(frozen=True)
class SnapshotResult:
    manifest: Manifest
    bytes_uploaded: int
    blobs_uploaded: int
    files_hashed: int
    bytes_hashed: int
    attempts: int
    seconds: float
    store: str
    reused: bool = False  # the newest snapshot of this timeline already held this batch
    blobs_missing: int = 0  # blobs the parent referenced that were gone from the store
    files_from_checksum: int = 0  # new files named by a SHA-256 S3 computed (a copy's, or stored with them), not read here
    blobs_inherited: int = 0  # blobs the parent referenced too, relied on without storing them again
    blobs_checked: int = 0  # of those, asked of the store (census-named, or all with check_blobs)
    anchor_problems: tuple[str, ...] = ()  # partitions whose anchor could not be read (kafka_bootstrap given)
    unchanged: bool = False  # the commit log said nothing changed since the parent: no cut was planned
    manifest_bytes: int = 0  # the size of the manifest as stored (a delta: what changed since the parent)

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "snapshot_id": m.snapshot_id,
            "stream": m.stream,
            "batch_id": m.batch_id,
            "timeline": m.timeline,
            "reused": self.reused,
            "store": self.store,
            "files": m.totals.files,
            "bytes_total": m.bytes_total,
            "bytes_uploaded": self.bytes_uploaded,
            "blobs_uploaded": self.blobs_uploaded,
            "files_hashed": self.files_hashed,
            "bytes_hashed": self.bytes_hashed,
            "files_from_checksum": self.files_from_checksum,
            "parent": m.parent,
            "kafka_offsets": m.kafka_offsets,
            "watermark_ms": m.watermark_ms,
            "state_store": m.state_store,
            "attempts": self.attempts,
            "blobs_missing": self.blobs_missing,
            "blobs_inherited": self.blobs_inherited,
            "blobs_checked": self.blobs_checked,
            "anchored_partitions": sum(len(t["partitions"]) for t in (m.kafka_anchors or {}).values()),
            "anchor_problems": list(self.anchor_problems),
            "unchanged": self.unchanged,
            "manifest": "delta" if m.delta is not None else "full",
            "manifest_bytes": self.manifest_bytes,
            "seconds": round(self.seconds, 3),
        }


def _creator() -> str:
    from airflow_provider_streamstate import __version__

    return f"streamstate {__version__}"


def _timeline_for(
    fs: CheckpointFS, store: SnapshotStore, stream: str, query_id: str, tls: Timelines, recent: RecentRefs, *,
    new_line: bool,
) -> tuple[int, Manifest | None]:
    """Which timeline of `stream` this checkpoint continues, and its newest snapshot when
    finding the timeline read it already (the parent).

    A checkpoint restored by streamstate says so in its lineage file; one that never was is
    on a root timeline whose history has its query id. A checkpoint with another query id
    (a clone, a stream started afresh) is refused unless `new_line` starts a new root
    timeline for it: silently mixing two histories under one name is what timelines prevent.
    """
    lineage = read_lineage(fs)
    if lineage is not None and lineage.stream == stream and lineage.query_id == query_id:
        return lineage.branch(store), None
    if new_line:
        line = new_timeline(store, stream, branch_from=None, reason=f"new line of history for query {query_id}")
        return line.timeline, None
    roots = sorted((t for t in {1, *tls.records} if tls.is_root(t)), reverse=True)
    heads = 0
    for tl in roots:
        head = latest_snapshot(store, stream, timeline=tl, timelines=tls, recent=recent)
        heads += head is not None
        if head is not None and head.query_id == query_id:
            return tl, head
    if not heads and not (recent.refs if recent.complete else snapshot_refs(store, stream)):
        return 1, None  # the stream's first snapshot
    raise UsageError(
        f"checkpoint {checkpoint_where(fs)} (query id {query_id}) is not a checkpoint of stream {stream}'s history: "
        "its snapshots come from another query",
        hint="snapshot a clone or a fresh start under its own --stream name, "
        "or pass --new-timeline to start a new line of history in this stream",
    )


def create_snapshot(
    checkpoint: str | CheckpointFS,
    store: SnapshotStore,
    stream: str,
    *,
    batch_id: int | None = None,
    labels: dict[str, str] | None = None,
    parallelism: int = 8,
    progress: Progress | None = None,
    spark_version: str | None = None,
    always: bool = False,
    new_timeline: bool = False,
    cancel: CancelToken | None = None,
    kafka_bootstrap: str | None = None,
    kafka_config: dict[str, Any] | None = None,
    checkpoint_connection: Any = None,
    check_blobs: bool = False,
) -> SnapshotResult:
    """Snapshot `checkpoint` at `batch_id` (newest committed by default) into `store`.

    When the newest snapshot of the checkpoint's timeline already holds that batch (same
    query, same labels) it is returned with `reused=True` instead of a duplicate, unless
    `always`. `spark_version` records the stream's Spark version (the checkpoint does not
    say it; the snapshotting machine's pyspark may differ); by default the one the stream's
    driver wrote in its heartbeat beside the checkpoint, when it is this query's. `new_timeline` accepts a
    checkpoint whose query id is not the stream's, starting a new root timeline. `cancel`
    (or the enclosing `cancellation` block's token) stops it promptly; nothing is published.
    `kafka_bootstrap` (and client `kafka_config`) names the cluster the stream reads: the last
    record batch N consumed in each partition is recorded as the manifest's `kafka_anchors`,
    which failover to a mirrored cluster needs (anchors.py); an unreachable cluster only
    leaves them out. A remote checkpoint is read through `checkpoint_connection` (an S3
    client, a WebHDFS client), else the store's own when it is on the same service (one
    connection for both, and server-side copies), else the environment's; or give it as an
    opened `CheckpointFS`. `check_blobs` asks the store for every blob the parent references
    instead of only those its blob census names as lost (a store damaged by hand since its
    last garbage collection).
    """
    with cancellation(cancel):
        return _create_snapshot(
            checkpoint, store, stream, batch_id=batch_id, labels=labels, parallelism=parallelism,
            progress=progress, spark_version=spark_version, always=always, new_timeline=new_timeline,
            kafka_bootstrap=kafka_bootstrap, kafka_config=kafka_config, checkpoint_connection=checkpoint_connection,
            check_blobs=check_blobs,
        )


def _create_snapshot(
    checkpoint: str | CheckpointFS, store: SnapshotStore, stream: str, *, batch_id: int | None, labels: dict[str, str] | None,
    parallelism: int, progress: Progress | None, spark_version: str | None, always: bool, new_timeline: bool,
    kafka_bootstrap: str | None = None, kafka_config: dict[str, Any] | None = None,
    checkpoint_connection: Any = None, check_blobs: bool = False,
) -> SnapshotResult:
    started = time.monotonic()
    validate_stream_name(stream)
    fs = checkpoint if isinstance(checkpoint, CheckpointFS) else open_checkpoint_fs(
        checkpoint, connection=checkpoint_connection if checkpoint_connection is not None
        else store.checkpoint_connection(checkpoint))
    if not fs.exists():
        fs.recover()  # a restore that crashed mid-swap left the old checkpoint aside
    refuse_unfinished_restore(fs)  # before anything else: it may not even look like a checkpoint
    where = checkpoint_where(fs)
    query_id = read_query_id(fs)
    if spark_version is None:  # the driver's own word, when its heartbeat is this query's
        beat = read_heartbeat(fs)
        spark_version = beat.spark_version if beat is not None and beat.query_id == query_id else None
    recent = recent_refs(store, stream)
    tls = recent.stream_timelines(store, stream)
    timeline, parent = _timeline_for(fs, store, stream, query_id, tls, recent, new_line=new_timeline)
    if parent is None:
        if timeline > tls.current or timeline not in tls.records:
            tls = load_timelines(store, stream, recent.refs)  # a timeline this call (or a restore) just started
        parent = latest_snapshot(store, stream, timeline=timeline, timelines=tls, recent=recent)
    labels = dict(labels or {})
    committed = committed_batches(fs)  # what Spark's commit log says, from two listings
    if not committed and not fs.is_dir("offsets"):
        CheckpointReader(fs.location, fs=fs)  # says what this directory is instead
    wanted = resolve_committed(committed, batch_id, where)
    if (
        parent is not None and not always and parent.timeline == timeline and parent.batch_id == wanted
        and parent.query_id == query_id and parent.labels == labels
    ):
        log.info("stream %s: snapshot %s already holds batch %d of this timeline", stream, parent.snapshot_id, wanted)
        return SnapshotResult(
            manifest=parent, bytes_uploaded=0, blobs_uploaded=0, files_hashed=0, bytes_hashed=0, attempts=0,
            seconds=time.monotonic() - started, store=store.url, reused=True,
        )
    # Hash reuse trusts (path, size, mtime) only for the same checkpoint location and query.
    same_source = parent is not None and parent.checkpoint == where and parent.query_id == query_id
    protected_since = time.monotonic()  # blobs of a live manifest, seen now: GC keeps them a grace period
    suspect = None if check_blobs or parent is None else suspect_blobs(store)
    delta = unchanged_delta(parent) if parent is not None and same_source and parent.batch_id == wanted else None
    if parent is not None and delta is not None:
        checked, lost = _lost_parent_blobs(store, parent, suspect, parallelism)
        if not lost:  # nothing changed, and every parent blob is there: no cut to plan
            log.info("stream %s: the commit log says batch %d is still the newest: a delta of %s with no change",
                     stream, wanted, parent.snapshot_id)
            return _publish(store, stream, parent, replace(
                parent, parent=parent.snapshot_id, spark_version=spark_version, labels=labels, created_by=_creator(),
                timeline=timeline, delta=delta, kafka_anchors=None, stored_sha256=None,
            ), started, protected_since, kafka_bootstrap, kafka_config, tls, blobs_checked=checked)
    reader = CheckpointReader(fs.location, fs=fs)
    worker = CutFiles(
        reader, store, {f.path: f for f in parent.files} if parent and same_source else {},
        set(parent.blobs) if parent else set(), parallelism, progress or NoProgress(), suspect,
        list(parent.files) if parent else None,
    )
    last_change: CheckpointChanged | None = None
    for attempt in range(1, MAX_PLAN_ATTEMPTS + 1):
        try:
            plan = reader.plan(batch_id)
            _refuse_before_migration(plan, reader.where)
            log.info(
                "stream %s: cut at batch %d: %d files, %d bytes (attempt %d)",
                stream, plan.batch_id, len(plan.files), sum(f.size for f in plan.files), attempt,
            )
            entries = worker.entries(plan)
            worker.upload(entries)
            worker.recheck_refreshed(entries)
            break
        except CheckpointChanged as exc:
            last_change = exc
            log.info("stream %s: the checkpoint changed while it was read (%s); planning the cut again", stream, exc)
            time.sleep(min(0.2 * attempt, 1.0))
    else:
        raise StreamstateError(
            f"the checkpoint kept changing under the snapshot ({MAX_PLAN_ATTEMPTS} attempts): {last_change}",
            hint="it may be missing state files; check that the stream is healthy, then retry",
        )
    if plan.query_id != query_id:
        raise CheckpointChanged(f"{reader.where} was replaced while it was read (query id changed); retry")
    new = Manifest(
        snapshot_id="", stream=stream, batch_id=plan.batch_id, created_at="", query_id=plan.query_id,
        kafka_offsets=plan.kafka_offsets, sources=plan.sources, watermark_ms=plan.watermark_ms,
        next_watermark_ms=plan.next_watermark_ms, batch_timestamp_ms=plan.batch_timestamp_ms,
        state_store=plan.state_store, operators=[OperatorInfo(**op) for op in plan.operators], spark_conf=plan.conf,
        files=entries, parent=parent.snapshot_id if parent else None, spark_version=spark_version, labels=labels,
        checkpoint=reader.where, created_by=_creator(), timeline=timeline, checkpoint_format=plan.checkpoint_format,
        delta=plan_delta(parent, entries),
    )
    return _publish(store, stream, parent, new, started, protected_since, kafka_bootstrap, kafka_config, tls,
                    worker=worker, attempts=attempt)


def _publish(
    store: SnapshotStore, stream: str, parent: Manifest | None, new: Manifest, started: float, protected_since: float,
    kafka_bootstrap: str | None, kafka_config: dict[str, Any] | None, timelines: Timelines, *,
    worker: CutFiles | None = None, attempts: int = 0, blobs_checked: int = 0,
) -> SnapshotResult:
    """Publish `new` (everything but its id and time) under a fresh id, last and atomically;
    then, when it is on the current timeline, record it as the catalog head."""
    anchors, anchor_problems = _anchors(new.kafka_offsets, kafka_bootstrap, kafka_config)
    check_cancelled()  # the last moment a cancellation can still stop the publish
    for _ in range(3):
        # Rule 1 of the blob protocol, checked at the publish itself (reading Kafka anchors
        # and a retried put come after the upload).
        bound = max_snapshot_seconds()
        if time.monotonic() - protected_since > bound:
            raise TransientError(
                f"the snapshot took over {bound:g} s; blobs it relies on may have been collected since",
                hint="nothing was published; retry (with more --parallelism on a large checkpoint)",
            )
        now = datetime.now(UTC)
        manifest = replace(new, snapshot_id=new_snapshot_id(new.batch_id, now, new.timeline),
                           created_at=now.isoformat().replace("+00:00", "Z"), kafka_anchors=anchors)
        data, header_sha = manifest.stored()
        try:
            store.put_manifest(stream, manifest.snapshot_id, data)
            break
        except ManifestExistsError:
            continue  # same microsecond as another writer: take a new id
    else:
        raise StreamstateError(
            f"could not find a free snapshot id for {stream} batch {new.batch_id}", hint="retry the snapshot"
        )
    if timelines.contains(SnapshotRef.parse(manifest.snapshot_id)):
        write_head(store, stream, manifest, data, timelines)
    manifest = replace(manifest, stored_sha256=header_sha)
    manifest.remember_files(header_sha)  # the next snapshot of this line reads it from memory
    log.info(
        "stream %s: published %s (batch %d, timeline %d, %s manifest of %d bytes): uploaded %d bytes in %d blobs, "
        "hashed %d files", stream, manifest.snapshot_id, manifest.batch_id, manifest.timeline,
        "delta" if manifest.delta else "full", len(data), worker.bytes_uploaded if worker else 0,
        worker.blobs_uploaded if worker else 0, worker.files_hashed if worker else 0,
    )
    if worker is None:  # unchanged: every blob is the parent's
        assert parent is not None
        return SnapshotResult(
            manifest=manifest, bytes_uploaded=0, blobs_uploaded=0, files_hashed=0, bytes_hashed=0, attempts=0,
            seconds=time.monotonic() - started, store=store.url, blobs_inherited=parent.totals.blobs,
            blobs_checked=blobs_checked, anchor_problems=tuple(anchor_problems), unchanged=True,
            manifest_bytes=len(data),
        )
    return SnapshotResult(
        manifest=manifest,
        bytes_uploaded=worker.bytes_uploaded,
        blobs_uploaded=worker.blobs_uploaded,
        files_hashed=worker.files_hashed,
        bytes_hashed=worker.bytes_hashed,
        attempts=attempts,
        seconds=time.monotonic() - started,
        store=store.url,
        blobs_missing=worker.blobs_missing,
        files_from_checksum=worker.files_from_checksum,
        blobs_inherited=len(manifest.blobs.keys() & parent.blobs.keys()) if parent else 0,
        blobs_checked=worker.blobs_checked,
        anchor_problems=tuple(anchor_problems),
        manifest_bytes=len(data),
    )


def _lost_parent_blobs(
    store: SnapshotStore, parent: Manifest, suspect: frozenset[str] | None, parallelism: int,
) -> tuple[int, set[str]]:
    """(blobs asked about, those missing) of the parent's: only those the census names, or
    every one when it cannot say (writer rule 3). None asked, and the file list not even
    read, when the census names none."""
    if suspect is not None and not suspect:
        return 0, set()
    blobs = sorted(parent.blobs.keys() if suspect is None else parent.blobs.keys() & suspect)
    present = run_parallel(store.has_blob, blobs, parallelism)
    return len(blobs), {b for b, ok in zip(blobs, present, strict=True) if not ok}


def _anchors(
    offsets: dict[str, dict[str, int]], bootstrap: str | None, config: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The batch's anchors from the primary cluster, or None (and why) when it cannot say."""
    if not bootstrap or not offsets:
        return None, []

    try:
        found, problems = read_anchors(bootstrap, offsets, config=config)
    except TransientError as exc:
        log.warning("no Kafka anchors recorded: %s", exc.one_line())
        return None, [exc.message]
    for p in problems:
        log.warning("no Kafka anchor recorded for %s", p)
    return anchors_to_json(found), problems


def _refuse_before_migration(plan: CutPlan, where: str) -> None:
    """A cut of a batch from before a migration would carry the migrated `schema` file beside
    state written in the old one: restored, Spark would read it wrongly."""
    later = migration_after((f.path for f in plan.files), plan.batch_id)
    if later is not None:
        raise UsageError(
            f"batch {plan.batch_id} of {where} was written before its state was migrated ({later[1]} keeps the "
            "schema it had): a snapshot of it would carry the new schema",
            hint="restore the snapshot the migration pinned (it holds that state and its schema), or snapshot a "
                 "batch from after the migration")
