"""The last step of writer rule 4 (docs/concepts.md, "Blobs, and what may delete them"),
shared by snapshots and replication: a blob the writer found present and refreshed is
checked once more right before the manifest that needs it is published, because a GC that
read the blob's age before the refresh may have deleted it after (on S3 those are two
requests). The check waits for the store's `refresh_settle_seconds` after the last
refresh, so such a delete has landed by then; the writer stores again what vanished.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from airflow_provider_streamstate.engine.core.cancel import pause
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import SnapshotStore


class RefreshedBlobs:
    """Blobs one writer refreshed and has not found present since. Thread-safe."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._last = 0.0  # monotonic time of the latest refresh
        self._lock = threading.Lock()

    def add(self, digest: str) -> None:
        with self._lock:
            self._pending.add(digest)
            self._last = time.monotonic()

    def vanished(self, store: SnapshotStore, digests: Iterable[str], parallelism: int) -> list[str]:
        """Of `digests`, the refreshed ones now missing from `store` (the caller stores them
        again), asked once the store's settle time after the last refresh has passed. Those
        found present need no further check."""
        with self._lock:
            todo = [d for d in dict.fromkeys(digests) if d in self._pending]
            since = self._last
        if not todo:
            return []
        pause(since + store.refresh_settle_seconds - time.monotonic())
        present = run_parallel(store.has_blob, todo, parallelism)
        with self._lock:
            self._pending.difference_update(d for d, ok in zip(todo, present, strict=True) if ok)
        return [d for d, ok in zip(todo, present, strict=True) if not ok]
