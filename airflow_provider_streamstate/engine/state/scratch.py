"""Scratch checkpoints: a snapshot laid out as a checkpoint directory for Spark's state reader,
inside the snapshot store itself, so a state job on a cluster reads it where it is.

An S3 store's scratch copy is made by server-side CopyObject from the store's blobs (no state
byte crosses the machine that asks; each copy verified against its sha256 as a restore's is);
a local store's lies below its root, where a cluster with a shared filesystem can read it.
Scratch copies live below `<store>/scratch/<job id>/`, outside `streams/` and `blobs/`, so no
catalog, retention or GC walk sees them; the job removes its own when it ends, the
submitter again after the application ended however it ended (failed, killed), and the
next job on the store those of jobs started long ago (`remove_stale_scratch`).
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.state")

SCRATCH_PREFIX = "scratch"
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


_JOB_TIME_RE = re.compile(r"-(\d{8}T\d{6})Z-")


def new_job_id(kind: str) -> str:
    """`<kind>-<UTC start, to the second>Z-<random>`: unique, and old leftovers are found by name."""
    return f"{kind}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}Z-{uuid.uuid4().hex[:12]}"


def job_started(job_id: str) -> float | None:
    """When job `job_id` started (epoch seconds), from its name; None for another name."""
    import calendar

    found = _JOB_TIME_RE.search(job_id)
    if found is None:
        return None
    return float(calendar.timegm(time.strptime(found.group(1), "%Y%m%dT%H%M%S")))


def _checked_job_id(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id):
        raise UsageError(f"invalid state job id {job_id!r}", hint="letters, digits, '.', '_' and '-' only")
    return job_id


def is_s3_store(store: SnapshotStore) -> bool:
    return getattr(store, "bucket", None) is not None


def scratch_root(store: SnapshotStore, job_id: str) -> str:
    """Where job `job_id` keeps its scratch checkpoints: an `s3a://` URL or a local path."""
    _checked_job_id(job_id)
    if is_s3_store(store):
        s: Any = store
        key = f"{s.prefix}/{SCRATCH_PREFIX}/{job_id}" if s.prefix else f"{SCRATCH_PREFIX}/{job_id}"
        return f"s3a://{s.bucket}/{key}"
    root = getattr(store, "root", None)
    if root is None:
        raise UsageError(f"store {store.url} cannot hold scratch checkpoints", hint="use a file:// or s3:// store")
    return str(root / SCRATCH_PREFIX / job_id)


def materialise_in_store(store: SnapshotStore, manifest: Manifest, job_id: str, index: int, *,
                         parallelism: int = 8) -> str:
    """Lay snapshot `manifest` out as a checkpoint below the job's scratch root; its location."""
    location = f"{scratch_root(store, job_id)}/{index:04d}-{manifest.snapshot_id}"
    if is_s3_store(store):
        from airflow_provider_streamstate.engine.checkpoint.filesystems import S3CheckpointFS
        from airflow_provider_streamstate.engine.checkpoint.operator_metadata import SchemaPathRewrite
        from airflow_provider_streamstate.engine.lifecycle.restore_s3 import VerifiedWriter, rewritten_files

        s: Any = store
        fs = S3CheckpointFS(location, s.client)
        writer = VerifiedWriter(fs, store)
        # transformWithState's operator metadata names its schema files where the copy is.
        rewritten = rewritten_files(store, manifest.files, SchemaPathRewrite(fs.location))
        run_parallel(lambda e: writer.write_blob(e, fs.key(e.path)),
                     [e for e in manifest.files if e.path not in rewritten], parallelism)
        for rel, data in rewritten.items():
            writer.put(fs.key(rel), data)
        log.info("scratch copy of %s at %s (%d files, %s server-side)", manifest.snapshot_id, location,
                 len(manifest.files), "all" if writer.server_side else "none")
        return location
    from pathlib import Path

    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot

    # A clone copy: nothing recorded in the store, no timeline; fsync buys nothing for scratch.
    restore_snapshot(store, manifest.stream, manifest.snapshot_id, Path(location), new_query_id=True, fsync=False,
                     parallelism=parallelism)
    return location


def remove_scratch(store: SnapshotStore, job_id: str) -> int:
    """Delete every scratch object of job `job_id`; how many were deleted (0: none left)."""
    root = scratch_root(store, job_id)
    if not is_s3_store(store):
        from pathlib import Path

        path = Path(root)
        n = sum(1 for p in path.rglob("*") if p.is_file()) if path.exists() else 0
        shutil.rmtree(path, ignore_errors=True)
        return n
    from airflow_provider_streamstate.engine.checkpoint.filesystems import S3CheckpointFS

    s3: Any = store
    deleted = S3CheckpointFS(root, s3.client).delete_all()
    if deleted:
        log.info("removed %d scratch objects below %s", deleted, root)
    return deleted


def remove_stale_scratch(store: SnapshotStore, older_than_s: float) -> int:
    """Delete the scratch copies of every job that started more than `older_than_s` ago (by
    its id): what a job killed without a chance to clean up left. How many objects went."""
    cutoff = time.time() - older_than_s
    deleted = 0
    for job_id in _scratch_jobs(store):
        started = job_started(job_id)
        if started is not None and started < cutoff:
            deleted += remove_scratch(store, job_id)
    return deleted


def _scratch_jobs(store: SnapshotStore) -> list[str]:
    if not is_s3_store(store):
        from pathlib import Path

        root = Path(getattr(store, "root", "/nonexistent")) / SCRATCH_PREFIX
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    s: Any = store
    prefix = f"{s.prefix}/{SCRATCH_PREFIX}/" if s.prefix else f"{SCRATCH_PREFIX}/"
    jobs: list[str] = []
    with s._errors(f"list scratch of {store.url}"):  # noqa: SLF001 - the store's own error mapping
        for page in s.client.get_paginator("list_objects_v2").paginate(Bucket=s.bucket, Prefix=prefix, Delimiter="/"):
            jobs += [c["Prefix"][len(prefix):].rstrip("/") for c in page.get("CommonPrefixes", [])]
    return [j for j in jobs if _JOB_ID_RE.match(j)]
