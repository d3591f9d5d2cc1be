"""Restoring a snapshot: materialise it as a checkpoint directory Spark can resume from.

Everything is written into a staging directory next to the target, every byte checked
against its sha256, fsynced, and only then swapped into place — a failure at any point
(a crash included) leaves the target exactly as it was, and a swapped-in checkpoint is
on disk whole. The swap is one atomic `renameat2(RENAME_EXCHANGE)` where the filesystem
has it (Linux); elsewhere two renames, and a crash between them is repaired by the next
restore or snapshot of that target (`recover_leftovers`). The manifest is untrusted: its
paths were validated when it was parsed, and each destination is checked again to stay
below the staging root.

A restore never touches the checkpoint of a running stream (`liveness`), and records in
the checkpoint what it was restored as (`timeline.Lineage`): restoring a snapshot that is
not the newest of the stream's current timeline is a rollback and starts a new timeline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import write_lineage
from airflow_provider_streamstate.engine.checkpoint.filesystems import is_s3_location, unsupported_scheme
from airflow_provider_streamstate.engine.checkpoint.liveness import assert_not_running, pid_alive
from airflow_provider_streamstate.engine.checkpoint.offset_rewrite import (
    OffsetRewrite,
    rewrite_local_checkpoint,
)
from airflow_provider_streamstate.engine.checkpoint.operator_metadata import ChainedRewrite, SchemaPathRewrite
from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, local_root
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.digest import copy_hashing
from airflow_provider_streamstate.engine.core.durability import fsync_path, fsync_tree
from airflow_provider_streamstate.engine.core.errors import CorruptionError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import FileEntry
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.lifecycle.restore_lineage import RestoreResult, lineage_for
from airflow_provider_streamstate.engine.lifecycle.restore_s3 import restore_to_s3
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.restore")


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
    s3_client: Any = None,
    new_query_id: bool = False,
    parallelism: int = 8,
    progress: Progress | None = None,
    fsync: bool = True,
    cancel: CancelToken | None = None,
    rewrite: OffsetRewrite | None = None,
) -> RestoreResult:
    """Write snapshot `snapshot_id` (an id or `latest`) of `stream` as a checkpoint at `target`.

    A non-empty target is refused unless `force`, which replaces its contents whole; the
    checkpoint of a running stream is always refused. `new_query_id` gives the copy a
    fresh query id (a clone: a new stream, not a new timeline of this one). `fsync=False`
    skips making the files durable (throwaway copies, benchmarks). `cancel` (or the
    enclosing `cancellation` block's token) stops it promptly, leaving the target as it was.
    An `s3a://bucket/path` (or `s3://`) target is written through `s3_client` (default: the
    S3 store's client, else the AWS environment) with the guarantee of `restore_s3`.
    `rewrite` changes where the copy resumes in Kafka before it is published (a pipeline
    restore: engine/pipeline/restore.py).
    """
    with cancellation(cancel):
        if isinstance(target, str) and is_s3_location(target):
            return restore_to_s3(
                store, stream, snapshot_id, target, s3_client=s3_client, force=force, new_query_id=new_query_id,
                parallelism=parallelism, progress=progress, rewrite=rewrite,
            )
        refusal = unsupported_scheme(str(target))
        if refusal is not None:
            raise refusal
        return _restore(
            store, stream, snapshot_id, local_root(target, refusal=(
                f"cannot restore into {target}", "give a local path, a file:// URI or an s3a://bucket/path")),
            force=force, new_query_id=new_query_id,
            parallelism=parallelism, progress=progress, fsync=fsync, rewrite=rewrite,
        )


def _restore(
    store: SnapshotStore, stream: str, snapshot_id: str, target: Path, *, force: bool, new_query_id: bool,
    parallelism: int, progress: Progress | None, fsync: bool, rewrite: OffsetRewrite | None = None,
) -> RestoreResult:
    started = time.monotonic()
    manifest = resolve_snapshot(store, stream, snapshot_id)
    # Spark records a checkpoint's location as the query names it (symlinks unresolved).
    location = f"file:{os.path.abspath(Path(target).expanduser())}"
    target = Path(target).expanduser().resolve()
    recover_leftovers(target)
    if target.exists():
        if not target.is_dir():
            raise UsageError(
                f"restore target {target} exists and is not a directory",
                hint="give the path of a directory (new or empty) to restore the checkpoint into",
            )
        if any(target.iterdir()):
            if not force:
                raise UsageError(
                    f"restore target {target} is not empty",
                    hint="choose an empty directory, or pass --force to replace its contents",
                )
            assert_not_running(target, "replace its checkpoint")
    lineage = lineage_for(store, manifest, new_query_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.streamstate-restore-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    progress = progress or NoProgress()
    log.info(
        "restoring %s of %s (batch %d, %d files, %d bytes) to %s",
        manifest.snapshot_id, stream, manifest.batch_id, len(manifest.files), manifest.bytes_total, target,
    )
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
        # The copy's own location in its operator metadata v2 (transformWithState), and
        # where it resumes in Kafka when asked.
        t_rewrite = time.monotonic()
        rewritten = rewrite_local_checkpoint(root, ChainedRewrite(rewrite, SchemaPathRewrite(location)))
        seconds_rewrite = time.monotonic() - t_rewrite
        lineage = replace(lineage, query_id=query_id)
        write_lineage(root, lineage, fsync=fsync)
        if fsync:
            fsync_tree(root)  # every name in place before the swap publishes them
        check_cancelled()
        if target.exists():
            assert_not_running(target, "replace its checkpoint")  # again: it may have started meanwhile
            if (target / LAUNCHES_DIR).is_dir():  # launch generations keep counting up (the drivers' fence)
                shutil.copytree(target / LAUNCHES_DIR, root / LAUNCHES_DIR, dirs_exist_ok=True)
        _swap_into_place(staging, target)
        if fsync:
            fsync_path(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    branched = lineage.stream is not None and lineage.timeline is None
    if branched:
        # Recorded only once the checkpoint is in place: a failed restore starts no timeline.
        # A crash before this line is finished by the next snapshot (Lineage.branch).
        lineage = replace(lineage, timeline=lineage.branch(store))
        write_lineage(target, lineage, fsync=fsync)
    log.info("restored %s to %s (timeline %s%s)", manifest.snapshot_id, target, lineage.timeline,
             ", new" if branched else "")
    return RestoreResult(
        manifest, str(target), query_id, time.monotonic() - started,
        timeline=None if lineage.stream is None else lineage.timeline, branched=branched,
        rewritten=tuple(rewritten), seconds_rewrite=seconds_rewrite,
    )


# --- swapping a directory into place, and repairing what a crash left ---------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.streamstate-(?P<kind>restore|old)-(?P<pid>\d+)-[0-9a-f]+$")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_into_place(staging: Path, target: Path) -> None:
    """Replace `target` with `staging`; the old contents go only once the new are in."""
    if not target.exists():
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now holds the old contents
        return
    old = target.parent / f".{target.name}.streamstate-old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    # A crash here leaves no target: recover_leftovers() renames `old` back.
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def recover_leftovers(target: Path) -> list[str]:
    """Repair what a crashed restore left next to `target`; return what was done.

    A crash between the two renames of the fallback swap leaves no target and the old
    checkpoint under a `-old-` name: it is renamed back (the restore did not happen).
    Staging and old directories of restores whose process is gone are removed.
    """
    actions: list[str] = []
    parent = target.parent
    if not parent.is_dir():
        return actions
    mine: list[tuple[str, int, Path]] = []
    for name in os.listdir(parent):
        m = _LEFTOVER.match(name)
        if m and m.group("name") == target.name:
            mine.append((m.group("kind"), int(m.group("pid")), parent / name))
    for kind, pid, path in sorted(mine, key=lambda x: x[2].stat().st_mtime, reverse=True):
        if pid != os.getpid() and pid_alive(pid):
            continue  # another restore of this target is in progress
        if kind == "old" and not target.exists():
            os.rename(path, target)
            actions.append(f"renamed {path.name} back to {target.name}")
            log.warning("a crashed restore left %s without its checkpoint: put the old one back", target)
        else:
            shutil.rmtree(path, ignore_errors=True)
            actions.append(f"removed {path.name}")
            log.info("removed %s, left by a crashed restore", path)
    return actions
