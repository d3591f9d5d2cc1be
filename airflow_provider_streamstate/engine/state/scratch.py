"""Scratch checkpoints: a snapshot laid out as a checkpoint directory for Spark's state reader,
inside the snapshot store itself, so a state job on a cluster reads it where it is.

The copy is laid out through the store's own filesystem: an S3 store's by server-side
CopyObject from its blobs (no state byte crosses the machine that asks; each copy verified
against its sha256 as a restore's is), an HDFS store's in HDFS where the cluster reads it, a
local store's below its root, where a cluster with a shared filesystem can read it.
Scratch copies live below `<store>/scratch/<job id>/`, outside `streams/` and `blobs/`, so no
catalog, retention or GC walk sees them; the job removes its own when it ends, the
submitter again after the application ended however it ended (failed, killed), and the
next job on the store those of jobs started long ago (`remove_stale_scratch`).
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import materialise
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


def _scratch_area(store: SnapshotStore) -> CheckpointFS:
    """`<store>/scratch/` as a filesystem, through the store's own connection."""
    try:
        location = store.location_of(SCRATCH_PREFIX)
    except NotImplementedError:
        raise UsageError(f"store {store.url} cannot hold scratch checkpoints",
                         hint="use a file://, s3:// or hdfs:// store") from None
    return open_checkpoint_fs(location, connection=store.checkpoint_connection(location))


def scratch_root(store: SnapshotStore, job_id: str) -> str:
    """Where job `job_id` keeps its scratch checkpoints: a location Spark reads (a local
    path, an `s3a://` or `hdfs://` URL)."""
    return _scratch_area(store).child(_checked_job_id(job_id)).location


def materialise_in_store(store: SnapshotStore, manifest: Manifest, job_id: str, index: int, *,
                         parallelism: int = 8) -> str:
    """Lay snapshot `manifest` out as a checkpoint below the job's scratch root; its location.
    Blobs are copied server side where the store's service can (S3), each verified against
    its sha256; nothing is recorded in the store (no timeline, no lineage)."""
    target = _scratch_area(store).child(f"{_checked_job_id(job_id)}/{index:04d}-{manifest.snapshot_id}")
    materialise(store, manifest, target, parallelism=parallelism)
    log.info("scratch copy of %s at %s (%d files)", manifest.snapshot_id, target.location, len(manifest.files))
    return target.location


def remove_scratch(store: SnapshotStore, job_id: str) -> int:
    """Delete every scratch file of job `job_id`; how many were deleted (0: none left)."""
    deleted = _scratch_area(store).child(_checked_job_id(job_id)).delete_all()
    if deleted:
        log.info("removed %d scratch files of job %s in %s", deleted, job_id, store.url)
    return deleted


def remove_stale_scratch(store: SnapshotStore, older_than_s: float) -> int:
    """Delete the scratch copies of every job that started more than `older_than_s` ago (by
    its id): what a job killed without a chance to clean up left. How many files went."""
    cutoff = time.time() - older_than_s
    deleted = 0
    area = _scratch_area(store)
    jobs = area.listdir("") if area.is_dir("") else []
    for job_id in (j for j in jobs if _JOB_ID_RE.match(j)):
        started = job_started(job_id)
        if started is not None and started < cutoff:
            deleted += remove_scratch(store, job_id)
    return deleted
