"""Restoring a snapshot: materialise it as a checkpoint Spark can resume from, on any
filesystem a checkpoint lives on (engine/checkpoint/filesystems/).

Everything is written beside the target first (`CheckpointFS.stage`), every byte checked
against its sha256 on the way, and only then published whole (`Staging.publish`): by one
atomic directory swap where the filesystem renames directories (a local directory, HDFS),
behind an "incomplete" marker where it cannot (S3; the launcher and snapshots refuse a
marked checkpoint until a restore finishes it). A failure at any point before the publish
leaves the target exactly as it was; what a crash during one leaves is repaired by the next
restore of the target (`CheckpointFS.recover`). The manifest is untrusted: its paths were
validated when it was parsed, and each destination is checked again to stay below the
staging root.

A restore never touches the checkpoint of a running stream (`liveness`), and records in
the checkpoint what it was restored as (`timeline.Lineage`): restoring a snapshot that is
not the newest of the stream's current timeline is a rollback and starts a new timeline.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import LINEAGE_FILE
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import ChainedRewrite, SchemaPathRewrite
from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, Sidecar
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.errors import CorruptionError, UsageError
from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.lifecycle.restore_lineage import RestoreResult, lineage_for
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.restore")


class FileRewrite(Protocol):
    """Files a restore writes with other content than the snapshot's (failover points the
    offsets at another Kafka cluster: engine/dr/failover.py). Sidecars (`.crc`) come last and
    see what was rewritten."""

    def wants(self, rel: str) -> bool: ...

    def rewrite(self, rel: str, data: bytes, rewritten: dict[str, bytes] | None = None) -> bytes | None: ...


def open_target(target: str | Path | CheckpointFS, store: SnapshotStore, connection: Any = None) -> CheckpointFS:
    """The filesystem of a restore's target: as given, else opened with `connection`, else
    with the store's own connection when the target is on the store's service, else with
    the environment's."""
    if isinstance(target, CheckpointFS):
        return target
    location = str(target)
    return open_checkpoint_fs(location, connection=connection if connection is not None
                              else store.checkpoint_connection(location))


def restore_snapshot(
    store: SnapshotStore,
    stream: str,
    snapshot_id: str,
    target: str | Path | CheckpointFS,
    *,
    force: bool = False,
    connection: Any = None,
    new_query_id: bool = False,
    parallelism: int = 8,
    progress: Progress | None = None,
    fsync: bool = True,
    cancel: CancelToken | None = None,
    rewrite: FileRewrite | None = None,
) -> RestoreResult:
    """Write snapshot `snapshot_id` (an id or `latest`) of `stream` as a checkpoint at `target`.

    A non-empty target is refused unless `force`, which replaces its contents whole; the
    checkpoint of a running stream is always refused. `new_query_id` gives the copy a
    fresh query id (a clone: a new stream, not a new timeline of this one). `fsync=False`
    skips making the files durable (throwaway copies, benchmarks). `cancel` (or the
    enclosing `cancellation` block's token) stops it promptly, leaving the target as it was.
    A remote target is written through `connection` (see `open_target`). `rewrite` changes
    where the copy resumes in Kafka before it is published (failover, a pipeline restore).
    """
    with cancellation(cancel):
        fs = open_target(target, store, connection)
        return _restore(store, stream, snapshot_id, fs, force=force, new_query_id=new_query_id,
                        parallelism=parallelism, progress=progress, fsync=fsync, rewrite=rewrite)


def _restore(
    store: SnapshotStore, stream: str, snapshot_id: str, fs: CheckpointFS, *, force: bool, new_query_id: bool,
    parallelism: int, progress: Progress | None, fsync: bool, rewrite: FileRewrite | None,
) -> RestoreResult:
    started = time.monotonic()
    manifest = resolve_snapshot(store, stream, snapshot_id)
    fs.recover()  # what a crashed restore of this target left
    existing = _existing(fs)
    if existing:
        if not force:
            raise UsageError(
                f"restore target {fs.location} is not empty ({len(existing)} files)",
                hint="choose an empty location, or pass --force to replace its contents",
            )
        assert_not_running(Sidecar(fs), "replace its checkpoint")
    lineage = lineage_for(store, manifest, new_query_id)
    progress = progress or NoProgress()
    # The whole file list (a delta's through the manifests it builds on): a broken chain fails
    # here, before anything is written.
    files = [e for e in manifest.files if not (new_query_id and e.path == ".metadata.crc")]
    log.info("restoring %s of %s (batch %d, %d files, %d bytes) to %s", manifest.snapshot_id, stream,
             manifest.batch_id, len(manifest.files), manifest.bytes_total, fs.location)
    # The copy's own location in its operator metadata v2 (transformWithState), as Spark will
    # name it, and where it resumes in Kafka when asked.
    t_rewrite = time.monotonic()
    rewritten = rewritten_files(store, files, ChainedRewrite(rewrite, SchemaPathRewrite(fs.spark_location)))
    seconds_rewrite = time.monotonic() - t_rewrite
    query_id = str(uuid.uuid4()) if new_query_id else manifest.query_id
    lineage = replace(lineage, query_id=query_id)
    extra: dict[str, bytes] = dict(rewritten)
    if new_query_id:
        extra["metadata"] = json.dumps({"id": query_id}).encode()
    extra[LINEAGE_FILE] = lineage.to_json()
    staging = fs.stage(fsync=fsync, empty=not existing)
    try:
        _stage(store, staging, [e for e in files if e.path not in extra], parallelism, progress)
        for rel, data in extra.items():
            staging.put(rel, data)
        staging.check({e.path: e.size for e in files if e.path not in extra} | {r: len(d) for r, d in extra.items()})
        check_cancelled()
        if existing:
            assert_not_running(Sidecar(fs), "replace its checkpoint")  # again: it may have started meanwhile
        staging.publish(carry=(LAUNCHES_DIR,))  # launch generations keep counting up (the drivers' fence)
    finally:
        staging.discard()
    branched = lineage.stream is not None and lineage.timeline is None
    if branched:
        # Recorded only once the checkpoint is in place: a failed restore starts no timeline.
        # A crash before this line is finished by the next snapshot (Lineage.branch).
        lineage = replace(lineage, timeline=lineage.branch(store))
        fs.write_record(LINEAGE_FILE, lineage.to_json())
    log.info("restored %s to %s (timeline %s%s)", manifest.snapshot_id, fs.location, lineage.timeline,
             ", new" if branched else "")
    return RestoreResult(
        manifest, fs.shared_location, query_id, time.monotonic() - started,
        timeline=None if lineage.stream is None else lineage.timeline, branched=branched,
        rewritten=tuple(sorted(rewritten)), seconds_rewrite=seconds_rewrite,
    )


def _existing(fs: CheckpointFS) -> dict[str, int]:
    """The target's files, but the launch records a restore keeps."""
    if fs.local_path is not None and fs.local_path.exists() and not fs.local_path.is_dir():
        raise UsageError(
            f"restore target {fs.location} exists and is not a directory",
            hint="give the path of a directory (new or empty) to restore the checkpoint into",
        )
    return {rel: n for rel, n in fs.files().items() if not rel.startswith(LAUNCHES_DIR + "/")}


def _stage(store: SnapshotStore, staging: Any, files: Sequence[FileEntry], parallelism: int,
           progress: Progress) -> None:
    """Every file from its blob, fetched and verified once per blob; identical files are
    copies of the first."""
    by_blob: dict[str, list[FileEntry]] = {}
    for e in files:
        by_blob.setdefault(e.blob_id, []).append(e)
    progress.start("restore", len(files), sum(e.size for e in files))

    def write(entries: list[FileEntry]) -> None:
        first = entries[0]
        staging.write_blob(store, first)
        for e in entries[1:]:
            staging.copy(first.path, e)
        progress.advance(sum(e.size for e in entries))

    run_parallel(write, list(by_blob.values()), parallelism)
    progress.finish()


def materialise(store: SnapshotStore, manifest: Manifest, target: CheckpointFS, *, parallelism: int = 8) -> None:
    """Lay `manifest` out at an empty `target` that nothing runs on and nobody publishes (a
    state job's scratch copy): written straight into place, verified, with the copy's own
    schema paths; no lineage, no timeline."""
    rewritten = rewritten_files(store, manifest.files, SchemaPathRewrite(target.spark_location))
    staging = target.stage(fsync=False, direct=True)
    _stage(store, staging, [e for e in manifest.files if e.path not in rewritten], parallelism, NoProgress())
    for rel, data in rewritten.items():
        staging.put(rel, data)


def rewritten_files(store: SnapshotStore, files: Sequence[FileEntry], rewrite: FileRewrite) -> dict[str, bytes]:
    """The new content of the files `rewrite` changes, from their blobs read and verified."""
    out: dict[str, bytes] = {}
    wanted = sorted((e for e in files if rewrite.wants(e.path)), key=lambda e: e.path.endswith(".crc"))
    for e in wanted:
        check_cancelled()
        with store.open_blob(e.blob_id) as src:
            data = src.read()
        if hashlib.sha256(data).hexdigest() != e.sha256 or len(data) != e.size:
            raise CorruptionError(f"{e.path}: stored blob {e.blob_id} is corrupt",
                                  hint="restore another snapshot, or re-replicate this one from a healthy store")
        new = rewrite.rewrite(e.path, data, out)
        if new is not None:
            out[e.path] = new
    return out
