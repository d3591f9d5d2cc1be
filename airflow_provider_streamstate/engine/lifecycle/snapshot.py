"""Taking a snapshot: a consistent cut of a running stream's checkpoint, stored incrementally.

1. Find the timeline the checkpoint continues (`timeline`) and its newest snapshot there,
   the parent. A snapshot of the batch the parent already holds is the parent (idempotent).
2. Plan the cut at batch N (default: newest committed) — see `checkpoint.reader.CheckpointReader`.
3. Hash every file of the cut, reusing the parent's recorded hash when path, size and
   mtime are unchanged (checkpoint files are immutable by name) — only when the parent was
   taken from this checkpoint location and query. Each file is read once where that is
   enough to store it too: a local store hashes while it writes (`store_file`); a remote
   checkpoint's file up to `READ_ONCE_BYTES` is read into memory while it is hashed and
   stored from that buffer, unless the store copies it server side (`copy_in`: same S3
   endpoint and credentials); then a file whose filesystem recorded its SHA-256 when it
   was written (`stored_sha256`) is not read at all.
4. Upload only blobs the store lacks, in parallel. Blobs the parent references are relied
   on without a request each: garbage collection cannot delete them (writer rule 3 in
   docs/concepts.md). Those the store's blob census (`catalog.blob_census`) names as lost
   are checked and stored again; `check_blobs` checks every one (a store damaged since
   its last garbage collection).
5. Publish the manifest last, atomically, and only within the writers' bound D
   (`catalog.gc.MAX_SNAPSHOT_SECONDS`) of when the blobs it relies on were seen (the
   contract with garbage collection, see docs/concepts.md). Until then nothing is visible.

Spark keeps running throughout: when an essential file vanishes or changes under us
(maintenance replaced it with a newer snapshot), the cut is planned again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.blob_census import MAX_CENSUS_AGE_SECONDS, read_census
from airflow_provider_streamstate.engine.catalog.gc import max_snapshot_seconds
from airflow_provider_streamstate.engine.catalog.snapshots import latest_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import (
    Timelines,
    load_timelines,
    new_timeline,
    read_lineage,
    snapshot_refs,
)
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, CutPlan, PlannedFile
from airflow_provider_streamstate.engine.checkpoint.sidecar import refuse_unfinished_restore
from airflow_provider_streamstate.engine.core.anchor import anchors_to_json
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.digest import sha256_file, sha256_read, sha256_stream
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import (
    FileEntry,
    Manifest,
    OperatorInfo,
    new_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.kafka.anchors import read_anchors
from airflow_provider_streamstate.engine.lifecycle.blob_refresh import RefreshedBlobs
from airflow_provider_streamstate.engine.stores.base import PART_SIZE, ManifestExistsError, SnapshotStore

log = logging.getLogger("streamstate.snapshot")

MAX_PLAN_ATTEMPTS = 6
# A remote checkpoint's file up to this size, going to a store that cannot copy it server
# side, is read once into memory while it is hashed and stored from that buffer (one PUT to
# an S3 store). Memory stays below parallelism x this. Larger files are read twice: once to
# hash them, once streamed into the store (a multipart upload), as buffering them would not
# be bounded by a part.
READ_ONCE_BYTES = PART_SIZE
MAX_COPY_OBJECT_BYTES = 5 * 1024**3  # larger objects need UploadPartCopy; stream them instead


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
    files_from_checksum: int = 0  # new files named by the SHA-256 S3 stored with them, not read here
    blobs_inherited: int = 0  # blobs the parent referenced too, relied on without storing them again
    blobs_checked: int = 0  # of those, asked of the store (census-named, or all with check_blobs)
    anchor_problems: tuple[str, ...] = ()  # partitions whose anchor could not be read (kafka_bootstrap given)

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "snapshot_id": m.snapshot_id,
            "stream": m.stream,
            "batch_id": m.batch_id,
            "timeline": m.timeline,
            "reused": self.reused,
            "store": self.store,
            "files": len(m.files),
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
            "seconds": round(self.seconds, 3),
        }


def _creator() -> str:
    from airflow_provider_streamstate import __version__

    return f"streamstate {__version__}"


class _Snapshotter:
    def __init__(
        self, reader: CheckpointReader, store: SnapshotStore, known: dict[str, tuple[int, int, str]],
        known_blobs: set[str], parallelism: int, progress: Progress, suspect: frozenset[str] | None = None,
    ) -> None:
        self.reader = reader
        self.store = store
        self.known = known  # path -> (size, mtime_ns, sha256), from the parent and earlier attempts
        self.known_blobs = known_blobs  # blobs a live manifest already references, or we stored
        # Parent blobs to ask the store about: those the census names as lost, or (None) all.
        self.parent_blobs = set(known_blobs) if suspect is None else set(known_blobs) & suspect
        self.parallelism = parallelism
        self.progress = progress
        self.bytes_uploaded = self.blobs_uploaded = self.files_hashed = self.bytes_hashed = 0
        self.blobs_missing = 0
        self.blobs_checked = 0
        self.files_from_checksum = 0  # digests read from S3's stored checksums, no byte read here
        self.blobs_refreshed = 0
        self.vouched = set(known_blobs)  # referenced by the parent manifest this snapshot read
        self.stored: set[str] = set()  # stored (or refreshed) by this snapshot
        self.refreshed = RefreshedBlobs()  # found present and refreshed (rule 4): checked again at the end
        self.lock = threading.Lock()
        self.etags: dict[str, str | None] = {}  # remote checkpoints: path -> file version planned
        probe = reader.fs.object_ref("")
        self.server_side = probe is not None and store.can_copy_in(probe)
        self.blobs_copied_server_side = 0
        self.from_checksum: set[str] = set()  # paths whose digest is the object's stored S3 checksum
        self.read_once = reader.root is None and not self.server_side  # see READ_ONCE_BYTES
        self.storing: set[str] = set()  # blobs a worker is storing from what it read (read_once)

    def _put(self, e: FileEntry) -> int:
        """Store one checkpoint file as blob `e.sha256`; FileNotFoundError when it is gone."""
        if self.reader.root is not None:
            return self.store.put_blob(e.sha256, self.reader.root / e.path, e.size)
        fs = self.reader.fs
        etag = self.etags.get(e.path)
        identity = PlannedFile(e.path, e.size, e.mtime_ns, True, etag).identity
        ref = fs.object_ref(e.path, identity) if self.server_side and e.size <= MAX_COPY_OBJECT_BYTES else None
        if ref is not None:
            # The very version that was hashed (or named by its stored checksum: confirmed here).
            written = self.store.copy_in(ref, e.sha256, e.size, confirm=e.path in self.from_checksum)
            if written:
                with self.lock:
                    self.blobs_copied_server_side += 1
            return written
        if self.store.has_blob(e.sha256):
            return 0
        with fs.open_checked(e.path, identity) as src:
            return self.store.put_blob_stream(e.sha256, src, e.size)

    def _vouch(self, digest: str, store_again: Callable[[], int]) -> int:
        """Writer rule 4 (docs/concepts.md): a blob found already present that neither the
        parent manifest nor this snapshot vouches for (another writer's, or a crashed one's
        orphan) is refreshed so GC's grace period starts again; one that vanished meanwhile
        is stored again. Returns the bytes written."""
        with self.lock:
            if digest in self.vouched or digest in self.stored:
                return 0
        for _ in range(3):
            if self.store.refresh_blob(digest):
                with self.lock:
                    self.blobs_refreshed += 1
                self.refreshed.add(digest)
                return 0
            written = store_again()
            if written:
                return written
        raise TransientError(f"blob {digest[:12]} kept vanishing while it was stored", hint="retry the snapshot")

    def _read(self, pf: PlannedFile) -> FileEntry | None:
        """Hash one checkpoint file (storing it too when the store can do both in one read)."""
        if self.reader.root is None:
            return self._read_object(pf)
        path = self.reader.root / pf.path
        written = 0
        try:
            if self.store.hashes_while_storing:
                digest, size, written = self.store.store_file(path)
            else:
                digest, size = sha256_file(path)
            st = os.stat(path)
        except FileNotFoundError:
            if pf.essential:
                raise CheckpointChanged(f"{pf.path} vanished while it was read") from None
            return None  # history Spark cleaned up meanwhile: not needed to resume
        if size != pf.size or st.st_size != pf.size or st.st_mtime_ns != pf.mtime_ns:
            raise CheckpointChanged(f"{pf.path} changed while it was read")
        if self.store.hashes_while_storing:
            if not written:
                written = self._vouch(digest, lambda: self.store.store_file(path)[2])
            with self.lock:
                self.known_blobs.add(digest)
                self.stored.add(digest)
                self.bytes_uploaded += written
                self.blobs_uploaded += 1 if written else 0
        self.progress.advance(size)
        return FileEntry(pf.path, size, digest, pf.mtime_ns)

    def _read_object(self, pf: PlannedFile) -> FileEntry | None:
        """Hash one file of a remote checkpoint; the read fails when the file is no longer
        the version the plan listed. Up to READ_ONCE_BYTES (and no server-side copy) the
        bytes read are kept and stored from memory right here; otherwise it is only hashed,
        and stored later by `_put` (a server-side copy, or a second read streamed)."""
        data: bytearray | None = None
        try:
            if self.server_side and pf.size <= MAX_COPY_OBJECT_BYTES:
                entry = self._entry_from_checksum(pf)
                if entry is not None:
                    return entry
            with self.reader.fs.open_checked(pf.path, pf.identity) as f:
                if self.read_once and pf.size <= READ_ONCE_BYTES:
                    digest, data = sha256_read(f, pf.size)
                    size = len(data)
                else:
                    digest, size = sha256_stream(f)
        except FileNotFoundError:
            if pf.essential:
                raise CheckpointChanged(f"{pf.path} vanished while it was read") from None
            return None
        if size != pf.size:
            raise CheckpointChanged(f"{pf.path} changed while it was read")
        if data is not None:
            self._store_read(digest, data)
        self.progress.advance(size)
        return FileEntry(pf.path, size, digest, pf.mtime_ns)

    def _entry_from_checksum(self, pf: PlannedFile) -> FileEntry | None:
        """The entry of a file whose stored checksum names its content (to be copied server
        side and confirmed there); None when it has none: hash it by reading."""
        digest = self.reader.fs.stored_sha256(pf.path, pf.identity)  # FileNotFoundError: see _read_object
        if digest is None:
            with self.lock:
                self.from_checksum.discard(pf.path)  # named by a checksum in an earlier plan
            return None
        with self.lock:
            self.from_checksum.add(pf.path)
            self.files_from_checksum += 1
        self.progress.advance(pf.size)
        return FileEntry(pf.path, pf.size, digest, pf.mtime_ns)

    def _store_read(self, digest: str, data: bytearray) -> None:
        """Store the bytes just read and hashed to `digest` (the very buffer: the blob's name
        is computed from what is written), unless a live manifest already references the
        blob (the parent's are checked in the store before publishing, `upload`) or this
        snapshot stored it. Found present otherwise: writer rule 4, as any upload.

        Files of one content read at once are stored by one of them: the others would find
        the blob present and refresh it, and an S3 snapshot would then wait the store's
        settle time before publishing. Skipping is safe: the one storing it fails the whole
        read phase (and so the snapshot) if it fails."""
        with self.lock:
            if digest in self.known_blobs or digest in self.storing:
                return
            self.storing.add(digest)
        try:
            written = self.store.put_blob_bytes(digest, data)
            if not written:
                written = self._vouch(digest, lambda: self.store.put_blob_bytes(digest, data))
            with self.lock:
                self.known_blobs.add(digest)
                self.stored.add(digest)
                self.bytes_uploaded += written
                self.blobs_uploaded += 1 if written else 0
        finally:
            with self.lock:
                self.storing.discard(digest)

    def entries(self, plan: CutPlan) -> list[FileEntry]:
        """FileEntries for the plan; hashes only files not known by (path, size, mtime)."""
        out: list[FileEntry] = []
        to_hash: list[PlannedFile] = []
        self.etags.update((pf.path, pf.etag) for pf in plan.files)
        for pf in plan.files:
            k = self.known.get(pf.path)
            if k and k[0] == pf.size and k[1] == pf.mtime_ns:
                out.append(FileEntry(pf.path, pf.size, k[2], pf.mtime_ns))
            else:
                to_hash.append(pf)
        local_store = self.store.hashes_while_storing and self.reader.root is not None
        phase = "store" if local_store or self.read_once else "hash"
        self.progress.start(phase, len(to_hash), sum(p.size for p in to_hash))
        hashed = [e for e in run_parallel(self._read, to_hash, self.parallelism) if e is not None]
        self.progress.finish()
        for e in hashed:
            self.known[e.path] = (e.size, e.mtime_ns, e.sha256)
        read = [e for e in hashed if e.path not in self.from_checksum]
        self.files_hashed += len(read)
        self.bytes_hashed += sum(e.size for e in read)
        return sorted(out + hashed, key=lambda e: e.path)

    def check_parent_blobs(self, entries: list[FileEntry]) -> int:
        """Drop from `known_blobs` every suspect blob this cut shares with the parent that
        is no longer in the store (deleted by hand, a partial copy); it is uploaded again."""
        shared = sorted({e.sha256 for e in entries} & self.parent_blobs)
        self.parent_blobs.difference_update(shared)  # checked once per snapshot
        self.blobs_checked += len(shared)
        present = run_parallel(self.store.has_blob, shared, self.parallelism)
        missing = [d for d, ok in zip(shared, present, strict=True) if not ok]
        if missing:
            log.warning(
                "%d blob(s) the parent snapshot references are missing from %s (e.g. %s): uploading them again",
                len(missing), self.store.url, missing[0],
            )
        self.known_blobs.difference_update(missing)
        return len(missing)

    def recheck_refreshed(self, entries: list[FileEntry]) -> None:
        """Right before publishing, store again any blob this snapshot refreshed that a
        concurrent GC deleted since (`blob_refresh`); a vanished file plans the cut again."""
        by_digest = {e.sha256: e for e in entries}
        for digest in self.refreshed.vanished(self.store, by_digest, self.parallelism):
            e = by_digest[digest]
            log.warning("blob %s vanished after it was refreshed (a concurrent GC): storing it again", digest[:12])
            try:
                self._put(e)
            except FileNotFoundError:
                raise CheckpointChanged(f"{e.path} vanished before it was stored again") from None

    def upload(self, entries: list[FileEntry]) -> None:
        """Store each blob not referenced by a live manifest and not in the store yet."""
        self.blobs_missing += self.check_parent_blobs(entries)
        todo: dict[str, FileEntry] = {}
        for e in entries:
            if e.sha256 not in self.known_blobs:
                todo.setdefault(e.sha256, e)
        self.progress.start("upload", len(todo), sum(e.size for e in todo.values()))

        def put(e: FileEntry) -> int:
            try:
                written = self._put(e)
                if not written:
                    written = self._vouch(e.sha256, lambda: self._put(e))
            except FileNotFoundError:
                # Deleted by Spark between hashing and upload: plan the cut again.
                raise CheckpointChanged(f"{e.path} vanished before it was stored") from None
            with self.lock:
                self.stored.add(e.sha256)
            self.progress.advance(e.size)
            return written

        results = run_parallel(put, list(todo.values()), self.parallelism)
        self.progress.finish()
        self.known_blobs.update(todo)
        self.bytes_uploaded += sum(results)
        self.blobs_uploaded += sum(1 for r in results if r)


def _timeline_for(
    reader: CheckpointReader, store: SnapshotStore, stream: str, query_id: str, tls: Timelines, *,
    has_snapshots: bool, new_line: bool,
) -> int:
    """Which timeline of `stream` this checkpoint continues.

    A checkpoint restored by streamstate says so in its lineage file; one that never was is
    on a root timeline whose history has its query id. A checkpoint with another query id
    (a clone, a stream started afresh) is refused unless `new_line` starts a new root
    timeline for it: silently mixing two histories under one name is what timelines prevent.
    """
    lineage = read_lineage(reader.fs)
    if lineage is not None and lineage.stream == stream and lineage.query_id == query_id:
        return lineage.branch(store)
    if new_line:
        return new_timeline(store, stream, branch_from=None, reason=f"new line of history for query {query_id}").timeline
    if not has_snapshots:
        return 1
    roots = sorted((t for t in {1, *tls.records} if tls.is_root(t)), reverse=True)
    for tl in roots:
        head = latest_snapshot(store, stream, timeline=tl, timelines=tls)
        if head is not None and head.query_id == query_id:
            return tl
    raise UsageError(
        f"checkpoint {reader.where} (query id {query_id}) is not a checkpoint of stream {stream}'s history: "
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
    reader = CheckpointReader(fs.location, fs=fs)
    query_id = reader.query_id()
    if spark_version is None:  # the driver's own word, when its heartbeat is this query's
        beat = read_heartbeat(fs)
        spark_version = beat.spark_version if beat is not None and beat.query_id == query_id else None
    refs = snapshot_refs(store, stream)
    tls = load_timelines(store, stream, refs)
    timeline = _timeline_for(reader, store, stream, query_id, tls, has_snapshots=bool(refs), new_line=new_timeline)
    if timeline > tls.current or timeline not in tls.records:
        tls = load_timelines(store, stream)  # a timeline this call (or a restore) just started
    parent = latest_snapshot(store, stream, timeline=timeline, timelines=tls, refs=refs)
    labels = dict(labels or {})
    wanted = reader.resolve_batch(batch_id)
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
    same_source = parent is not None and parent.checkpoint == reader.where and parent.query_id == query_id
    known = {f.path: (f.size, f.mtime_ns, f.sha256) for f in parent.files} if parent and same_source else {}
    protected_since = time.monotonic()  # blobs of a live manifest, seen now: GC keeps them a grace period
    worker = _Snapshotter(
        reader, store, known, set(parent.blobs) if parent else set(), parallelism, progress or NoProgress(),
        None if check_blobs or parent is None else _suspect_blobs(store),
    )
    last_change: CheckpointChanged | None = None
    for attempt in range(1, MAX_PLAN_ATTEMPTS + 1):
        try:
            plan = reader.plan(batch_id)
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

    anchors, anchor_problems = _anchors(plan.kafka_offsets, kafka_bootstrap, kafka_config)
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
        manifest = Manifest(
            snapshot_id=new_snapshot_id(plan.batch_id, datetime.now(UTC), timeline),
            stream=stream,
            batch_id=plan.batch_id,
            created_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            query_id=plan.query_id,
            kafka_offsets=plan.kafka_offsets,
            sources=plan.sources,
            watermark_ms=plan.watermark_ms,
            next_watermark_ms=plan.next_watermark_ms,
            batch_timestamp_ms=plan.batch_timestamp_ms,
            state_store=plan.state_store,
            operators=[OperatorInfo(**op) for op in plan.operators],
            spark_conf=plan.conf,
            files=entries,
            parent=parent.snapshot_id if parent else None,
            spark_version=spark_version,
            labels=labels,
            checkpoint=reader.where,
            created_by=_creator(),
            timeline=timeline,
            kafka_anchors=anchors,
            checkpoint_format=plan.checkpoint_format,
        )
        try:
            store.put_manifest(stream, manifest.snapshot_id, manifest.to_json())
            break
        except ManifestExistsError:
            continue  # same microsecond as another writer: take a new id
    else:
        raise StreamstateError(
            f"could not find a free snapshot id for {stream} batch {plan.batch_id}", hint="retry the snapshot"
        )
    log.info(
        "stream %s: published %s (batch %d, timeline %d): uploaded %d bytes in %d blobs, hashed %d files",
        stream, manifest.snapshot_id, manifest.batch_id, timeline, worker.bytes_uploaded, worker.blobs_uploaded,
        worker.files_hashed,
    )
    return SnapshotResult(
        manifest=manifest,
        bytes_uploaded=worker.bytes_uploaded,
        blobs_uploaded=worker.blobs_uploaded,
        files_hashed=worker.files_hashed,
        bytes_hashed=worker.bytes_hashed,
        attempts=attempt,
        seconds=time.monotonic() - started,
        store=store.url,
        blobs_missing=worker.blobs_missing,
        files_from_checksum=worker.files_from_checksum,
        blobs_inherited=len(manifest.blobs.keys() & parent.blobs.keys()) if parent else 0,
        blobs_checked=worker.blobs_checked,
        anchor_problems=tuple(anchor_problems),
    )


def _suspect_blobs(store: SnapshotStore) -> frozenset[str] | None:
    """The blobs the store's census names as lost, or None (check all) when it cannot say."""
    try:
        census = read_census(store)
    except StreamstateError as exc:  # unreadable, or the store did not answer: check instead
        log.warning("%s: checking every blob the parent snapshot references", exc.one_line())
        return None
    if census is None:
        log.info("%s has no blob census (no garbage collection has listed it): checking every blob the parent "
                 "snapshot references; `streamstate gc` writes one", store.url)
        return None
    if census.age_seconds() > MAX_CENSUS_AGE_SECONDS:
        log.warning("the blob census of %s is from %s, older than %d days (is garbage collection running?): "
                    "checking every parent blob", store.url, census.taken_at, MAX_CENSUS_AGE_SECONDS // 86400)
        return None
    if not census.complete:
        log.warning("the blob census of %s (%s) found %d lost blobs and names %d: checking every parent blob",
                    store.url, census.taken_at, census.missing_total, len(census.missing))
        return None
    return census.missing


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
