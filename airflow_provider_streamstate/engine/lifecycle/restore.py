"""Restoring a snapshot: materialise it as a checkpoint Spark can resume from, on any
filesystem a checkpoint lives on (engine/checkpoint/filesystems/).

Everything is written beside the target first (`CheckpointFS.stage`), every byte checked
against its sha256 on the way, and only then put in place whole: by one atomic exchange of
the two directories where the filesystem has one (a local directory on Linux), else by a
swap behind a fence (engine/checkpoint/swap.py: S3, HDFS), which no Spark starts on while it
lasts. A failure before that leaves the target exactly as it was; a crash during a swap
leaves it fenced, and `streamstate stream recover` (or the next restore of the target)
finishes it. Into an empty target on S3 the files are written in place, behind the fence
put up first. The target's records (`_streamstate/`: launches, the driver, its heartbeat)
stay with it. The manifest is untrusted: its paths were validated when it was parsed, and
each destination is checked again to stay below the staging root.

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
from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, SIDECAR_DIR, Sidecar
from airflow_provider_streamstate.engine.checkpoint.swap import (
    METADATA,
    SWAP_FILE,
    Put,
    apply_swap,
    fence_in_place,
    finish_in_place,
    new_record,
    recover_swap,
    unfence_empty,
)
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.errors import (
    CorruptionError,
    UnsupportedCheckpointError,
    UsageError,
)
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
    _recover(fs, force=force)
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
        extra[METADATA] = json.dumps({"id": query_id}).encode()
    extra[LINEAGE_FILE] = lineage.to_json()
    # `metadata` is written last, whatever puts the copy in place: it lifts a swap's fence.
    metadata = extra.pop(METADATA, None)
    if metadata is None:
        entry = next((e for e in files if e.path == METADATA), None)
        metadata = read_verified(store, entry) if entry is not None else None
    staged = [e for e in files if e.path not in extra and e.path != METADATA]
    want = {e.path: e.size for e in staged} | {r: len(d) for r, d in extra.items()}
    staging = fs.stage(fsync=fsync, empty=not existing)
    record = new_record(
        "restore", f"restore of snapshot {manifest.snapshot_id} of {manifest.stream} (batch {manifest.batch_id})",
        staging.source(), _put_order(want), _removes(existing, want), metadata=metadata,
        metadata_before=fs.read_record(METADATA) if existing else None)

    def not_running() -> None:
        if existing:  # again: it may have started meanwhile
            assert_not_running(Sidecar(fs), "replace its checkpoint")

    if staging.in_place:
        fence_in_place(fs, record)
    try:
        _stage(store, staging, staged, parallelism, progress)
        for rel, data in extra.items():
            staging.put(rel, data)
        if not staging.in_place and metadata is not None:
            staging.put(METADATA, metadata)
        staging.check(want if staging.in_place or metadata is None else want | {METADATA: len(metadata)})
        check_cancelled()
        if staging.in_place:
            finish_in_place(fs, record)
            staging.keep()
        else:
            not_running()
            if not staging.exchange():
                apply_swap(fs, staging.source(), record, check=not_running)
    except BaseException:
        if staging.in_place and not staging.kept:
            staging.discard()
            unfence_empty(fs)
        raise
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


def _recover(fs: CheckpointFS, *, force: bool) -> None:
    """Finish a swap a crash left on the target (and clear leftovers beside it); with
    `force`, a swap that cannot be finished is dropped: this restore replaces it all."""
    try:
        for action in recover_swap(fs):
            log.warning("%s: %s", fs.location, action)
    except UnsupportedCheckpointError:
        if not force:
            raise
        log.warning("%s: dropping a swap that cannot be finished; the restore replaces the checkpoint", fs.location)
        fs.delete_record(SWAP_FILE)
    fs.recover()


def _put_order(want: dict[str, int]) -> list[Put]:
    """The staged files, the lineage record last (after it, a restore's files are known as its
    own: liveness.unmanaged_writer)."""
    return [Put(rel, want[rel]) for rel in sorted(want, key=lambda r: (r == LINEAGE_FILE, r))]


def _removes(existing: dict[str, int], want: dict[str, int]) -> list[str]:
    """The target's files the copy does not have: all but its records (which stay) and
    `metadata` (which the swap replaces last)."""
    return sorted(rel for rel in existing if rel not in want and rel != METADATA
                  and not rel.startswith(SIDECAR_DIR + "/"))


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


def read_verified(store: SnapshotStore, entry: FileEntry) -> bytes:
    """A (small) file of a snapshot, from its blob, checked against its sha256."""
    with store.open_blob(entry.blob_id) as src:
        data = src.read()
    if hashlib.sha256(data).hexdigest() != entry.sha256 or len(data) != entry.size:
        raise CorruptionError(f"{entry.path}: stored blob {entry.blob_id} is corrupt",
                              hint="restore another snapshot, or re-replicate this one from a healthy store")
    return data


def rewritten_files(store: SnapshotStore, files: Sequence[FileEntry], rewrite: FileRewrite) -> dict[str, bytes]:
    """The new content of the files `rewrite` changes, from their blobs read and verified."""
    out: dict[str, bytes] = {}
    wanted = sorted((e for e in files if rewrite.wants(e.path)), key=lambda e: e.path.endswith(".crc"))
    for e in wanted:
        check_cancelled()
        new = rewrite.rewrite(e.path, read_verified(store, e), out)
        if new is not None:
            out[e.path] = new
    return out
