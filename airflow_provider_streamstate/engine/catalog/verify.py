"""Verifying stored snapshots: every blob they reference is present and hashes to its name.

A missing blob (deleted, or never copied) and a corrupt one (bytes that no longer match
their sha256) are reported apart: the first points at retention, GC or an incomplete
replication, the second at the storage. Either way the snapshot cannot be restored as
it is; the summary says so and what to do. A network failure while reading is not a
finding: it is raised (TransientError), and verify can be run again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation
from airflow_provider_streamstate.engine.core.digest import sha256_stream
from airflow_provider_streamstate.engine.core.errors import MissingBlobError, StreamstateError
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.verify")

WHAT_TO_DO = "restore another snapshot, or re-replicate the damaged one(s) from a healthy store"


class ProblemKind(Enum):
    MANIFEST_UNREADABLE = "manifest unreadable"
    BLOB_MISSING = "blob missing"
    BLOB_CORRUPT = "blob corrupt"


@dataclass(frozen=True)
class Problem:
    """One damaged file (or unreadable manifest) of one snapshot."""

    kind: ProblemKind
    snapshot_id: str
    path: str = ""  # the checkpoint file; empty for a manifest problem
    sha256: str = ""
    detail: str = ""  # e.g. which digest was read instead

    @property
    def description(self) -> str:
        return f"{self.kind.value} ({self.detail})" if self.detail else self.kind.value

    def to_json(self) -> dict[str, str]:
        return {"snapshot_id": self.snapshot_id, "path": self.path, "sha256": self.sha256, "problem": self.description}


@dataclass
class VerifyResult:
    stream: str
    snapshots: list[str]
    blobs_checked: int = 0
    bytes_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "snapshots": self.snapshots,
            "ok": self.ok,
            "blobs_checked": self.blobs_checked,
            "bytes_checked": self.bytes_checked,
            "problems": [p.to_json() for p in self.problems],
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        """One line naming the damaged files and what to do (for the CLI's stderr and operators' errors)."""
        shown = "; ".join(
            f"{p.path} in {p.snapshot_id}: {p.description}" if p.path else f"{p.snapshot_id}: {p.description}"
            for p in self.problems[:5]
        )
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        return f"{len(self.problems)} problem(s) in stream {self.stream}: {shown}{more}; {WHAT_TO_DO}"


def _check_blob(store: SnapshotStore, blob: str, digest: str, size: int) -> tuple[ProblemKind, str] | None:
    """None when blob `blob` is intact (`size` bytes hashing to `digest`), else what is wrong with it."""
    try:
        with store.open_blob(blob) as f:
            got, n = sha256_stream(f)
    except MissingBlobError:
        return ProblemKind.BLOB_MISSING, ""
    if got != digest:
        return ProblemKind.BLOB_CORRUPT, f"sha256 {got[:16]}..., expected {digest[:16]}..."
    if n != size:
        return ProblemKind.BLOB_CORRUPT, f"{n} bytes, manifest says {size}"
    return None


def verify_snapshots(
    store: SnapshotStore,
    stream: str,
    snapshot_id: str | None = None,
    *,
    parallelism: int = 8,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
) -> VerifyResult:
    """Re-hash every blob referenced by one snapshot (or all snapshots) of `stream`.

    `cancel` stops it promptly from another thread (errors.Cancelled).
    """
    with cancellation(cancel):
        return _verify(store, stream, snapshot_id, parallelism, progress or NoProgress())


def _verify(store: SnapshotStore, stream: str, snapshot_id: str | None, parallelism: int, progress: Progress) -> VerifyResult:
    started = time.monotonic()
    validate_stream_name(stream)
    ids = [snapshot_id] if snapshot_id else store.list_snapshot_ids(stream)
    result = VerifyResult(stream, ids)
    # blob id -> (size, sha256, [(snapshot id, path), ...]): each blob is read once however often it is used.
    uses: dict[str, tuple[int, str, list[tuple[str, str]]]] = {}
    for sid in ids:
        try:
            manifest = get_snapshot(store, stream, sid)
            files = list(manifest.files)  # a delta's whole list: a broken chain is a finding too
        except StreamstateError as exc:
            if snapshot_id:
                raise
            result.problems.append(Problem(ProblemKind.MANIFEST_UNREADABLE, sid, detail=exc.one_line()))
            continue
        for f in files:
            uses.setdefault(f.blob_id, (f.size, f.sha256, []))[2].append((sid, f.path))
    progress.start("verify", len(uses), sum(s for s, _, _ in uses.values()))

    def check(item: tuple[str, tuple[int, str, list[tuple[str, str]]]]) -> tuple[str, tuple[ProblemKind, str] | None]:
        blob, (size, digest, _) = item
        problem = _check_blob(store, blob, digest, size)
        progress.advance(size)
        return blob, problem

    log.info("stream %s: verifying %d snapshot(s) in %s: %d blobs, %d bytes",
             stream, len(ids), store.url, len(uses), sum(s for s, _, _ in uses.values()))
    for blob, problem in run_parallel(check, list(uses.items()), parallelism):
        size, digest, where = uses[blob]
        result.blobs_checked += 1
        result.bytes_checked += size
        if problem:
            kind, detail = problem
            log.warning("%s: %s (%s, used %d time(s)): %s", kind.value, blob[:12], where[0][1], len(where), detail)
            result.problems.extend(Problem(kind, sid, path, digest, detail) for sid, path in where)
    progress.finish()
    result.seconds = time.monotonic() - started
    log.info("stream %s: verified %d blobs in %.1fs, %d problem(s)",
             stream, result.blobs_checked, result.seconds, len(result.problems))
    return result
