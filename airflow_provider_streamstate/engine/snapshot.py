"""Taking a snapshot: a consistent cut of a running stream's checkpoint, stored incrementally.

1. Plan the cut at batch N (default: newest committed) — see `checkpoint.CheckpointReader`.
2. Hash every file of the cut, reusing the hash recorded by the stream's newest snapshot
   when path, size and mtime are unchanged (checkpoint files are immutable by name).
3. Upload only blobs the store does not have, in parallel.
4. Publish the manifest last, atomically. Until then nothing is visible.

Spark keeps running throughout: when an essential file vanishes or changes under us
(maintenance replaced it with a newer snapshot), the cut is planned again.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from airflow_provider_streamstate.engine.catalog import latest_snapshot
from airflow_provider_streamstate.engine.checkpoint import CheckpointReader, CutPlan, PlannedFile
from airflow_provider_streamstate.engine.digest import sha256_file
from airflow_provider_streamstate.engine.errors import CheckpointChanged, StreamstateError
from airflow_provider_streamstate.engine.manifest import (
    FileEntry,
    Manifest,
    OperatorInfo,
    new_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.parallel import run_parallel
from airflow_provider_streamstate.engine.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore

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

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "snapshot_id": m.snapshot_id,
            "stream": m.stream,
            "batch_id": m.batch_id,
            "store": self.store,
            "files": len(m.files),
            "bytes_total": m.bytes_total,
            "bytes_uploaded": self.bytes_uploaded,
            "blobs_uploaded": self.blobs_uploaded,
            "files_hashed": self.files_hashed,
            "bytes_hashed": self.bytes_hashed,
            "parent": m.parent,
            "kafka_offsets": m.kafka_offsets,
            "watermark_ms": m.watermark_ms,
            "state_store": m.state_store,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 3),
        }


def _installed_spark_version() -> str | None:
    try:
        return version("pyspark")
    except PackageNotFoundError:
        return None


def _creator() -> str:
    from airflow_provider_streamstate import __version__

    return f"streamstate {__version__}"


class _Snapshotter:
    def __init__(
        self, reader: CheckpointReader, store: SnapshotStore, known: dict[str, tuple[int, int, str]],
        known_blobs: set[str], parallelism: int, progress: Progress,
    ) -> None:
        self.reader = reader
        self.store = store
        self.known = known  # path -> (size, mtime_ns, sha256), from the parent and earlier attempts
        self.known_blobs = known_blobs  # blobs a live manifest already references
        self.parallelism = parallelism
        self.progress = progress
        self.bytes_uploaded = self.blobs_uploaded = self.files_hashed = self.bytes_hashed = 0
        self.lock = threading.Lock()

    def _read(self, pf: PlannedFile) -> FileEntry | None:
        """Hash one checkpoint file (storing it too when the store can do both in one read)."""
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
            with self.lock:
                self.known_blobs.add(digest)
                self.bytes_uploaded += written
                self.blobs_uploaded += 1 if written else 0
        self.progress.advance(size)
        return FileEntry(pf.path, size, digest, pf.mtime_ns)

    def entries(self, plan: CutPlan) -> list[FileEntry]:
        """FileEntries for the plan; hashes only files not known by (path, size, mtime)."""
        out: list[FileEntry] = []
        to_hash: list[PlannedFile] = []
        for pf in plan.files:
            k = self.known.get(pf.path)
            if k and k[0] == pf.size and k[1] == pf.mtime_ns:
                out.append(FileEntry(pf.path, pf.size, k[2], pf.mtime_ns))
            else:
                to_hash.append(pf)
        phase = "store" if self.store.hashes_while_storing else "hash"
        self.progress.start(phase, len(to_hash), sum(p.size for p in to_hash))
        hashed = [e for e in run_parallel(self._read, to_hash, self.parallelism) if e is not None]
        self.progress.finish()
        for e in hashed:
            self.known[e.path] = (e.size, e.mtime_ns, e.sha256)
        self.files_hashed += len(hashed)
        self.bytes_hashed += sum(e.size for e in hashed)
        return sorted(out + hashed, key=lambda e: e.path)

    def upload(self, entries: list[FileEntry]) -> None:
        """Store each blob not referenced by a live manifest and not in the store yet."""
        todo: dict[str, FileEntry] = {}
        for e in entries:
            if e.sha256 not in self.known_blobs:
                todo.setdefault(e.sha256, e)
        self.progress.start("upload", len(todo), sum(e.size for e in todo.values()))

        def put(e: FileEntry) -> int:
            try:
                written = self.store.put_blob(e.sha256, self.reader.root / e.path, e.size)
            except FileNotFoundError:
                # Deleted by Spark between hashing and upload: plan the cut again.
                raise CheckpointChanged(f"{e.path} vanished before it was stored") from None
            self.progress.advance(e.size)
            return written

        results = run_parallel(put, list(todo.values()), self.parallelism)
        self.progress.finish()
        self.known_blobs.update(todo)
        self.bytes_uploaded += sum(results)
        self.blobs_uploaded += sum(1 for r in results if r)


def create_snapshot(
    checkpoint: str,
    store: SnapshotStore,
    stream: str,
    *,
    batch_id: int | None = None,
    labels: dict[str, str] | None = None,
    parallelism: int = 8,
    progress: Progress | None = None,
    spark_version: str | None = None,
) -> SnapshotResult:
    """Snapshot `checkpoint` at `batch_id` (newest committed by default) into `store`."""
    started = time.monotonic()
    validate_stream_name(stream)
    reader = CheckpointReader(checkpoint)
    parent = latest_snapshot(store, stream)
    known = {f.path: (f.size, f.mtime_ns, f.sha256) for f in parent.files} if parent else {}
    worker = _Snapshotter(
        reader, store, known, set(parent.blobs) if parent else set(), parallelism, progress or NoProgress()
    )
    last_change: CheckpointChanged | None = None
    for attempt in range(1, MAX_PLAN_ATTEMPTS + 1):
        try:
            plan = reader.plan(batch_id)
            entries = worker.entries(plan)
            worker.upload(entries)
            break
        except CheckpointChanged as exc:
            last_change = exc
            time.sleep(min(0.2 * attempt, 1.0))
    else:
        raise StreamstateError(
            f"the checkpoint kept changing under the snapshot ({MAX_PLAN_ATTEMPTS} attempts): {last_change}",
            hint="it may be missing state files; check that the stream is healthy, then retry",
        )

    spark = spark_version or _installed_spark_version()
    for _ in range(3):
        manifest = Manifest(
            snapshot_id=new_snapshot_id(plan.batch_id, datetime.now(UTC)),
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
            spark_version=spark,
            labels=dict(labels or {}),
            checkpoint=str(reader.root),
            created_by=_creator(),
        )
        try:
            store.put_manifest(stream, manifest.snapshot_id, manifest.to_json())
            break
        except ManifestExistsError:
            continue  # same microsecond as another writer: take a new id
    else:
        raise StreamstateError(f"could not find a free snapshot id for {stream} batch {plan.batch_id}")
    return SnapshotResult(
        manifest=manifest,
        bytes_uploaded=worker.bytes_uploaded,
        blobs_uploaded=worker.blobs_uploaded,
        files_hashed=worker.files_hashed,
        bytes_hashed=worker.bytes_hashed,
        attempts=attempt,
        seconds=time.monotonic() - started,
        store=store.url,
    )
