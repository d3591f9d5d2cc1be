"""Restoring a snapshot: materialise it as a checkpoint directory Spark can resume from.

Everything is written into a staging directory next to the target, every byte checked
against its sha256, fsynced, and only then swapped into place — a failure at any point
(a crash included) leaves the target exactly as it was, and a swapped-in checkpoint is
on disk whole. The manifest is untrusted: its paths were validated when
it was parsed, and each destination is checked again to stay below the staging root.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog import get_snapshot
from airflow_provider_streamstate.engine.digest import copy_hashing
from airflow_provider_streamstate.engine.durability import fsync_path, fsync_tree
from airflow_provider_streamstate.engine.errors import CorruptionError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.manifest import FileEntry, Manifest
from airflow_provider_streamstate.engine.parallel import run_parallel
from airflow_provider_streamstate.engine.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.stores.base import SnapshotStore


@dataclass(frozen=True)
class RestoreResult:
    manifest: Manifest
    target: str
    query_id: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.manifest.snapshot_id,
            "stream": self.manifest.stream,
            "batch_id": self.manifest.batch_id,
            "target": self.target,
            "files": len(self.manifest.files),
            "bytes": self.manifest.bytes_total,
            "query_id": self.query_id,
            "kafka_offsets": self.manifest.kafka_offsets,
            "seconds": round(self.seconds, 3),
        }


def _destination(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if os.path.commonpath([root, dest]) != str(root) or dest == root:
        raise UnsafeManifestError(f"manifest path {rel!r} escapes the restore target")
    return dest


def _write_blob(store: SnapshotStore, entry: FileEntry, dest: Path, fsync: bool) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with store.open_blob(entry.sha256) as src, open(dest, "xb") as out:
        digest, size = copy_hashing(src, out)
        if fsync:
            out.flush()
            os.fsync(out.fileno())
    if digest != entry.sha256 or size != entry.size:
        raise CorruptionError(
            f"{entry.path}: stored blob {entry.sha256} is corrupt (read {size} bytes with sha256 {digest})",
            hint="restore another snapshot, or re-replicate this one from a healthy store",
        )


def restore_snapshot(
    store: SnapshotStore,
    stream: str,
    snapshot_id: str,
    target: str | Path,
    *,
    force: bool = False,
    new_query_id: bool = False,
    parallelism: int = 8,
    progress: Progress | None = None,
    fsync: bool = True,
) -> RestoreResult:
    """Write snapshot `snapshot_id` of `stream` as a checkpoint at `target`.

    A non-empty target is refused unless `force`, which replaces its contents whole.
    `new_query_id` gives the copy a fresh query id (a clone, not the same stream).
    `fsync=False` skips making the files durable (throwaway copies, benchmarks).
    """
    started = time.monotonic()
    manifest = get_snapshot(store, stream, snapshot_id)
    target = Path(target).expanduser().resolve()
    if target.exists():
        if not target.is_dir():
            raise UsageError(f"restore target {target} exists and is not a directory")
        if any(target.iterdir()) and not force:
            raise UsageError(
                f"restore target {target} is not empty",
                hint="choose an empty directory, or pass --force to replace its contents",
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.streamstate-restore-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    progress = progress or NoProgress()
    try:
        root = staging.resolve()
        by_blob: dict[str, list[tuple[FileEntry, Path]]] = {}
        for e in manifest.files:  # every destination is checked before anything is written
            by_blob.setdefault(e.sha256, []).append((e, _destination(root, e.path)))
        progress.start("restore", len(manifest.files), manifest.bytes_total)

        def write(copies: list[tuple[FileEntry, Path]]) -> None:
            """Fetch and verify a blob once; identical files are local copies of it."""
            first, first_dest = copies[0]
            _write_blob(store, first, first_dest, fsync)
            for _, dest in copies[1:]:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(first_dest, dest)
                if fsync:
                    fsync_path(dest)
            progress.advance(sum(entry.size for entry, _ in copies))

        run_parallel(write, list(by_blob.values()), parallelism)
        progress.finish()
        query_id = manifest.query_id
        if new_query_id:
            query_id = str(uuid.uuid4())
            (root / "metadata").write_text(json.dumps({"id": query_id}))
            # Hadoop's checksum of the old content would fail the read of the new one.
            (root / ".metadata.crc").unlink(missing_ok=True)
            if fsync:
                fsync_path(root / "metadata")
        if fsync:
            fsync_tree(root)  # every name in place before the swap publishes them
        _swap_into_place(staging, target)
        if fsync:
            fsync_path(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RestoreResult(manifest, str(target), query_id, time.monotonic() - started)


def _swap_into_place(staging: Path, target: Path) -> None:
    """Replace `target` with `staging` by renames: the old contents go only once the new are in."""
    if not target.exists():
        os.rename(staging, target)
        return
    old = target.parent / f".{target.name}.streamstate-old-{uuid.uuid4().hex[:12]}"
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
