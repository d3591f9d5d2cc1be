"""Restoring a snapshot onto an S3 checkpoint location (`s3a://bucket/path`, `s3://...`).

S3 has no rename, so the local guarantee (one atomic swap) becomes:

1. Stage: every file is written below a staging prefix beside the target
   (`<parent>/.<name>.streamstate-restore-<id>/`) and verified against its sha256 — a
   server-side CopyObject from the store when it is on the same endpoint with the same
   credentials (verified by the SHA-256 checksum S3 returns, or by reading the copy back
   when the endpoint returns none), else streamed from the store, hashed as it is read,
   and uploaded only once it matched. A failure here leaves the target untouched.
2. Publish: a marker `_streamstate/restore-incomplete.json` is written into the target
   first, then the old objects are deleted (only with `force`; a non-empty target is
   refused otherwise), the staged files are copied into place server-side (same bucket:
   no bytes through this host) — state and sources first, then offsets and commits, the
   `metadata` file and the lineage last — the result is listed and compared with the
   manifest (every key, every size), and the marker is deleted last.

A crash or error during step 2 leaves the marker: snapshots refuse such a checkpoint and
the launcher must not start on it; running the restore again (with force) finishes the
job from scratch. A checkpoint without the marker was restored whole. The staging prefix
is deleted at the end (a crashed restore's staging prefix is garbage any restore of the
same target removes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.checkpoint.filesystems import S3CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import ChainedRewrite, SchemaPathRewrite
from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, S3Sidecar
from airflow_provider_streamstate.engine.checkpoint.store_copy import server_side_possible
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import CHUNK, sha256_stream
from airflow_provider_streamstate.engine.core.errors import (
    CorruptionError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.lifecycle.restore_lineage import RestoreResult, lineage_for
from airflow_provider_streamstate.engine.stores import s3_client_from_env
from airflow_provider_streamstate.engine.stores.base import SnapshotStore, blob_key

log = logging.getLogger("streamstate.restore")

INCOMPLETE_FILE = "_streamstate/restore-incomplete.json"
_LAST = ("metadata", "_streamstate/lineage.json")


def refuse_unfinished_restore(fs: Any) -> None:
    """A checkpoint a restore left half-published is never read as a checkpoint."""
    if isinstance(fs, S3CheckpointFS) and fs.get_text(INCOMPLETE_FILE) is not None:
        raise UnsupportedCheckpointError(
            f"checkpoint {fs.location} is the target of a restore that did not finish",
            hint="run the restore into it again (with --force) to finish it",
        )


def _publish_order(rel: str) -> int:
    if rel in _LAST:
        return 3
    if rel.startswith(("offsets/", "commits/")):
        return 2 if rel.startswith("commits/") else 1
    return 0


def _assert_not_running(fs: S3CheckpointFS) -> None:
    """The stream's heartbeat beside the S3 checkpoint is checked as locally (the same
    parser and staleness rule, engine/checkpoint/liveness.py)."""

    assert_not_running(S3Sidecar(fs), "replace its checkpoint")


class VerifiedWriter:
    """Writes verified objects below one prefix of the target's bucket."""

    def __init__(self, fs: S3CheckpointFS, store: SnapshotStore) -> None:
        self.fs, self.store = fs, store
        self.server_side = server_side_possible(fs, store)
        self.bytes_copied_server_side = 0

    def _checked_copy(self, key: str, source: dict[str, str], digest: str, size: int, what: str) -> None:
        c = self.fs.client
        with self.fs.errors(what):
            r = c.copy_object(Bucket=self.fs.bucket, Key=key, CopySource=source, ChecksumAlgorithm="SHA256")
        checksum = (r.get("CopyObjectResult") or {}).get("ChecksumSHA256")
        if checksum and "-" not in checksum:
            ok = checksum == base64.b64encode(bytes.fromhex(digest)).decode()
        else:
            with self.fs.errors(what):
                body = c.get_object(Bucket=self.fs.bucket, Key=key)["Body"]
                try:
                    got, n = sha256_stream(body)
                finally:
                    body.close()
            ok = got == digest and n == size
        if not ok:
            with self.fs.errors(f"delete a bad copy {key}"):
                c.delete_object(Bucket=self.fs.bucket, Key=key)
            raise CorruptionError(
                f"{what}: the copy does not match sha256 {digest}",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            )

    def write_blob(self, entry: FileEntry, key: str) -> None:
        """Blob -> object `key`, verified before it is relied on."""
        check_cancelled()
        what = f"restore {entry.path}"
        if self.server_side:
            store: Any = self.store
            src_key = f"{store.prefix}/{blob_key(entry.sha256)}" if store.prefix else blob_key(entry.sha256)
            self._checked_copy(key, {"Bucket": store.bucket, "Key": src_key}, entry.sha256, entry.size, what)
            self.bytes_copied_server_side += entry.size
            return
        with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as spool:
            h = hashlib.sha256()
            n = 0
            with self.store.open_blob(entry.sha256) as src:
                while chunk := src.read(CHUNK):
                    check_cancelled()
                    h.update(chunk)
                    spool.write(chunk)
                    n += len(chunk)
            if h.hexdigest() != entry.sha256 or n != entry.size:
                raise CorruptionError(
                    f"{entry.path}: stored blob {entry.sha256} is corrupt (read {n} bytes with sha256 {h.hexdigest()})",
                    hint="restore another snapshot, or re-replicate this one from a healthy store",
                )
            spool.seek(0)
            with self.fs.errors(what):
                self.fs.client.upload_fileobj(spool, self.fs.bucket, key, ExtraArgs={"ChecksumAlgorithm": "SHA256"})

    def copy_within(self, src_key: str, key: str, entry: FileEntry) -> None:
        self._checked_copy(key, {"Bucket": self.fs.bucket, "Key": src_key}, entry.sha256, entry.size,
                           f"publish {entry.path}")

    def put(self, key: str, data: bytes) -> None:
        with self.fs.errors(f"write {key}"):
            # With its SHA-256 attached, the next snapshot names it without reading it back.
            self.fs.client.put_object(Bucket=self.fs.bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256")

    def listing(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.fs.errors(f"list s3a://{self.fs.bucket}/{prefix}"):
            for page in self.fs.client.get_paginator("list_objects_v2").paginate(Bucket=self.fs.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    out[obj["Key"]] = int(obj["Size"])
        return out

    def delete(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            with self.fs.errors(f"delete objects below {self.fs.location}"):
                self.fs.client.delete_objects(Bucket=self.fs.bucket, Delete={"Objects": batch, "Quiet": True})


class FileRewrite(Protocol):
    """Files a restore writes with other content than the snapshot's (failover points the
    offsets at another Kafka cluster: engine/dr/failover.py). Sidecars (`.crc`) come last and
    see what was rewritten."""

    def wants(self, rel: str) -> bool: ...

    def rewrite(self, rel: str, data: bytes, rewritten: dict[str, bytes] | None = None) -> bytes | None: ...


def restore_to_s3(
    store: SnapshotStore, stream: str, snapshot_id: str, target: str, *, s3_client: Any = None,
    force: bool, new_query_id: bool, parallelism: int, progress: Progress | None,
    rewrite: FileRewrite | None = None,
) -> Any:
    """Restore onto `s3a://bucket/path` with the guarantee in the module docstring.
    `s3_client` defaults to the store's own (an S3 store) or the AWS environment's.
    `rewrite` changes some files on the way (read from the store and verified first), so
    the target is published once, already rewritten."""
    started = time.monotonic()
    manifest: Manifest = resolve_snapshot(store, stream, snapshot_id)
    if s3_client is None and getattr(store, "bucket", None) is not None:
        s3_client = store.client  # type: ignore[attr-defined]
    if s3_client is None:

        s3_client = s3_client_from_env(parallelism * 2)
    fs = S3CheckpointFS(target, s3_client)
    w = VerifiedWriter(fs, store)
    base = fs.prefix + "/"
    # Launch records stay (launch generations, the drivers' fence, keep counting up).
    existing = {k: n for k, n in w.listing(base).items() if not k.startswith(base + LAUNCHES_DIR + "/")}
    if existing:
        if not force:
            raise UsageError(
                f"restore target {fs.location} is not empty ({len(existing)} objects)",
                hint="choose an empty prefix, or pass --force to replace its contents",
            )
        _assert_not_running(fs)
    parent, _, name = fs.prefix.rpartition("/")
    staging_root = f"{parent}/.{name}.streamstate-restore-" if parent else f".{name}.streamstate-restore-"
    w.delete(sorted(w.listing(staging_root)))  # staging left by crashed restores of this target
    staging = f"{staging_root}{uuid.uuid4().hex[:12]}/"
    lineage = lineage_for(store, manifest, new_query_id)
    progress = progress or NoProgress()
    log.info("restoring %s of %s (batch %d, %d files) to %s", manifest.snapshot_id, stream, manifest.batch_id,
             len(manifest.files), fs.location)
    files = [e for e in manifest.files if not (new_query_id and e.path == ".metadata.crc")]
    # The copy's own location in its operator metadata v2 (transformWithState), and where
    # it resumes in Kafka when asked.
    # (With the scheme the target was given in: Spark records the location as the query names it.)
    t_rewrite = time.monotonic()
    rewritten = rewritten_files(store, files, ChainedRewrite(rewrite, SchemaPathRewrite(target.rstrip("/"))))
    seconds_rewrite = time.monotonic() - t_rewrite
    by_blob: dict[str, list[FileEntry]] = {}
    for e in files:
        if e.path not in rewritten:
            by_blob.setdefault(e.sha256, []).append(e)
    try:
        progress.start("restore", len(files), sum(e.size for e in files))

        def stage(entries: list[FileEntry]) -> None:
            first = entries[0]
            w.write_blob(first, staging + first.path)
            for e in entries[1:]:
                w.copy_within(staging + first.path, staging + e.path, e)
            progress.advance(sum(e.size for e in entries))

        run_parallel(stage, list(by_blob.values()), parallelism)
        progress.finish()
        query_id = manifest.query_id
        extra: dict[str, bytes] = dict(rewritten)
        if new_query_id:
            query_id = str(uuid.uuid4())
            extra["metadata"] = json.dumps({"id": query_id}).encode()
        lineage = replace(lineage, query_id=query_id)
        extra["_streamstate/lineage.json"] = lineage.to_json()
        for rel, data in extra.items():
            w.put(staging + rel, data)
        want = {e.path: e for e in files if e.path not in extra}
        _compare(w.listing(staging), staging, want, extra, "staging")
        check_cancelled()

        # Publish: marker first, old objects out, staged objects in (in Spark's reading order), marker last.
        if existing:
            _assert_not_running(fs)  # again: it may have started meanwhile
        w.put(base + INCOMPLETE_FILE, json.dumps({"snapshot_id": manifest.snapshot_id, "staging": staging}).encode())
        w.delete(sorted(k for k in existing if k != base + INCOMPLETE_FILE))
        for order in range(4):
            todo = [e for e in want.values() if _publish_order(e.path) == order]
            run_parallel(lambda e: w.copy_within(staging + e.path, base + e.path, e), todo, parallelism)
            for rel, data in extra.items():
                if _publish_order(rel) == order:
                    w.put(base + rel, data)
        published = {k: n for k, n in w.listing(base).items() if not k.startswith(base + LAUNCHES_DIR + "/")}
        published.pop(base + INCOMPLETE_FILE, None)
        _compare(published, base, want, extra, "target")
        w.delete([base + INCOMPLETE_FILE])
    finally:
        w.delete(sorted(w.listing(staging)))
    branched = lineage.stream is not None and lineage.timeline is None
    if branched:
        lineage = replace(lineage, timeline=lineage.branch(store))
        w.put(base + "_streamstate/lineage.json", lineage.to_json())
    log.info("restored %s to %s (timeline %s)", manifest.snapshot_id, fs.location, lineage.timeline)
    return RestoreResult(
        manifest, fs.location, query_id, time.monotonic() - started,
        timeline=None if lineage.stream is None else lineage.timeline, branched=branched,
        rewritten=tuple(sorted(rewritten)), seconds_rewrite=seconds_rewrite,
    )


def rewritten_files(store: SnapshotStore, files: Sequence[FileEntry], rewrite: FileRewrite) -> dict[str, bytes]:
    """The new content of the files `rewrite` changes, from their blobs read and verified."""
    out: dict[str, bytes] = {}
    wanted = sorted((e for e in files if rewrite.wants(e.path)), key=lambda e: e.path.endswith(".crc"))
    for e in wanted:
        check_cancelled()
        with store.open_blob(e.sha256) as src:
            data = src.read()
        if hashlib.sha256(data).hexdigest() != e.sha256 or len(data) != e.size:
            raise CorruptionError(f"{e.path}: stored blob {e.sha256} is corrupt",
                                  hint="restore another snapshot, or re-replicate this one from a healthy store")
        new = rewrite.rewrite(e.path, data, out)
        if new is not None:
            out[e.path] = new
    return out


def _compare(listed: dict[str, int], base: str, want: dict[str, FileEntry], extra: dict[str, bytes], what: str) -> None:
    """The listing below `base` is exactly the manifest's files (and our extra records)."""
    expected = {base + p: e.size for p, e in want.items()} | {base + p: len(d) for p, d in extra.items()}
    if listed != expected:
        missing = sorted(set(expected) - set(listed))[:3]
        extra_keys = sorted(set(listed) - set(expected))[:3]
        wrong = sorted(k for k in set(listed) & set(expected) if listed[k] != expected[k])[:3]
        raise CorruptionError(
            f"the restored {what} does not match the manifest (missing {missing}, unexpected {extra_keys}, "
            f"wrong size {wrong})",
            hint="another writer may be using the target; retry the restore with --force",
        )
