"""Verifying stored snapshots: every blob they reference is present and hashes to its name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.catalog import get_snapshot
from airflow_provider_streamstate.engine.digest import sha256_stream
from airflow_provider_streamstate.engine.errors import CorruptionError, StreamstateError
from airflow_provider_streamstate.engine.manifest import validate_stream_name
from airflow_provider_streamstate.engine.parallel import run_parallel
from airflow_provider_streamstate.engine.progress import NoProgress, Progress
from airflow_provider_streamstate.engine.stores.base import SnapshotStore


@dataclass
class VerifyResult:
    stream: str
    snapshots: list[str]
    blobs_checked: int = 0
    bytes_checked: int = 0
    problems: list[dict[str, str]] = field(default_factory=list)
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
            "problems": self.problems,
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        """One line naming the damaged files (for the CLI's stderr and operators' errors)."""
        shown = "; ".join(
            f"{p['path']} in {p['snapshot_id']}: {p['problem']}" if p.get("path") else f"{p['snapshot_id']}: {p['problem']}"
            for p in self.problems[:5]
        )
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        return f"{len(self.problems)} problem(s) in stream {self.stream}: {shown}{more}"


def _check_blob(store: SnapshotStore, digest: str, size: int) -> str | None:
    """None when the blob is intact, else what is wrong with it."""
    try:
        with store.open_blob(digest) as f:
            got, n = sha256_stream(f)
    except CorruptionError:
        return "blob missing"
    if got != digest:
        return f"blob corrupt (sha256 {got[:16]}..., expected {digest[:16]}...)"
    if n != size:
        return f"blob has {n} bytes, manifest says {size}"
    return None


def verify_snapshots(
    store: SnapshotStore,
    stream: str,
    snapshot_id: str | None = None,
    *,
    parallelism: int = 8,
    progress: Progress | None = None,
) -> VerifyResult:
    """Re-hash every blob referenced by one snapshot (or all snapshots) of `stream`."""
    started = time.monotonic()
    validate_stream_name(stream)
    ids = [snapshot_id] if snapshot_id else store.list_snapshot_ids(stream)
    result = VerifyResult(stream, ids)
    # digest -> (size, [(snapshot id, path), ...]): each blob is read once however often it is used.
    uses: dict[str, tuple[int, list[tuple[str, str]]]] = {}
    for sid in ids:
        try:
            manifest = get_snapshot(store, stream, sid)
        except StreamstateError as exc:
            if snapshot_id:
                raise
            result.problems.append({"snapshot_id": sid, "path": "", "sha256": "", "problem": f"manifest unreadable: {exc.one_line()}"})
            continue
        for f in manifest.files:
            uses.setdefault(f.sha256, (f.size, []))[1].append((sid, f.path))
    progress = progress or NoProgress()
    progress.start("verify", len(uses), sum(s for s, _ in uses.values()))

    def check(item: tuple[str, tuple[int, list[tuple[str, str]]]]) -> tuple[str, str | None]:
        digest, (size, _) = item
        problem = _check_blob(store, digest, size)
        progress.advance(size)
        return digest, problem

    for digest, problem in run_parallel(check, list(uses.items()), parallelism):
        size, where = uses[digest]
        result.blobs_checked += 1
        result.bytes_checked += size
        if problem:
            for sid, path in where:
                result.problems.append({"snapshot_id": sid, "path": path, "sha256": digest, "problem": problem})
    progress.finish()
    result.seconds = time.monotonic() - started
    return result
