"""One garbage collector per store at a time: a lease record written by compare-and-swap.

Why: two collectors sweeping one store can delete a blob a writer has just stored again.
GC-2 finds blob X old and unreferenced; GC-1 deletes X; a writer finds X absent and stores
it fresh; GC-2's DELETE, decided on the old object's age, removes the new one. A writer
cannot guard against that (it wrote X, it did not refresh it), so the store allows one
sweeper at a time.

The lease is `gc/lease.json` below the store's root or prefix:
`{"format", "owner", "acquired_at", "expires_at", "released"}`. It is only ever written by
`SnapshotStore.swap_record` (S3: `If-None-Match: *` to create, `If-Match: <ETag>` to
replace; local: under an exclusive `flock`), so two collectors can never both hold it.

- Acquire: create the record, or take over one that is released or past `expires_at`.
- Hold: a thread renews it every `ttl / 4`. The holder acts (deletes) only while
  `valid_until = (start of the last successful renewal) + ttl - SAFETY` is in the future
  on its own monotonic clock, so a collector that stalls stops before another may take over.
  Another collector takes over only after `expires_at` on its wall clock: clocks of the
  two hosts may differ by up to `SAFETY` seconds.
- Release: written as `released` (by compare-and-swap, so a lease that was taken over is
  never released by its old holder).

A collector that dies keeps the lease until it expires (`ttl`, 5 minutes by default).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from types import TracebackType

from airflow_provider_streamstate.engine.core.errors import TransientError
from airflow_provider_streamstate.engine.core.records import load_record
from airflow_provider_streamstate.engine.stores.base import RecordChanged, SnapshotStore

log = logging.getLogger("streamstate.gc")

LEASE_KEY = "gc/lease.json"
LEASE_FORMAT = "streamstate.gc-lease/v1"
DEFAULT_TTL_SECONDS = 300.0
SAFETY_FRACTION = 0.2  # of the ttl: covers clock skew between hosts and a DELETE in flight


class GcLeaseHeldError(TransientError):
    """Another garbage collection holds the store's lease; a later run will get it."""


class GcLeaseLostError(TransientError):
    """This collection could not renew its lease in time (stalled, or the store was
    unreachable): it stopped deleting before another collection could take over."""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _epoch(s: object) -> float:
    return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()


class GcLease:
    """The store's GC lease, held from `__enter__` to `__exit__` (see the module docstring).

    `assert_held()` is the check to make right before every deletion.
    """

    def __init__(self, store: SnapshotStore, *, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        if ttl_seconds < 4:
            raise ValueError("a GC lease shorter than 4 s cannot be renewed in time")
        self.store = store
        self.ttl = ttl_seconds
        self.safety = ttl_seconds * SAFETY_FRACTION
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._version: str | None = None
        self._valid_until = 0.0  # monotonic
        self._lost: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._renewer: threading.Thread | None = None

    # --- the record ----------------------------------------------------------------------

    def _body(self, *, wall: float, released: bool = False, lasts: float | None = None) -> bytes:
        expires = wall if released else wall + (self.ttl if lasts is None else lasts)
        return json.dumps({
            "format": LEASE_FORMAT, "owner": self.owner, "acquired_at": _iso(wall),
            "expires_at": _iso(expires), "released": released,
        }).encode()

    def _swap(self, body: bytes, expect: str | None) -> str:
        """swap_record, where a write that landed but whose answer was lost (a retried PUT
        then finds its own record and gets 412) counts as the success it was."""
        try:
            return self.store.swap_record(LEASE_KEY, body, expect=expect)
        except RecordChanged:
            current = self.store.read_versioned(LEASE_KEY)
            if current is not None and current[0] == body:
                return current[1]
            raise

    def _describe_holder(self, data: bytes) -> tuple[bool, str]:
        """(may be taken over, who holds it) from a lease record; an unreadable record may be
        taken over once it is older than the ttl, which the caller cannot tell: refuse it."""
        try:
            d = load_record(data, LEASE_FORMAT, "GC lease")
            expires = _epoch(d["expires_at"])
            free = bool(d.get("released")) or expires < time.time()
            return free, f"{d.get('owner', '?')} (until {d['expires_at']})"
        except (ValueError, KeyError, TypeError) as exc:
            raise GcLeaseHeldError(
                f"the GC lease {LEASE_KEY} in {self.store.url} is unreadable ({exc})",
                hint=f"if no garbage collection is running, delete {LEASE_KEY} from the store and run GC again",
            ) from None

    def acquire(self) -> None:
        current = self.store.read_versioned(LEASE_KEY)
        expect: str | None = None
        if current is not None:
            data, expect = current
            free, holder = self._describe_holder(data)
            if not free:
                raise GcLeaseHeldError(
                    f"another garbage collection is running on {self.store.url}: {holder}",
                    hint="wait for it to finish (one GC per store at a time), or run GC again after the time shown",
                )
        started = time.monotonic()
        try:
            self._version = self._swap(self._body(wall=time.time()), expect)
        except RecordChanged:
            raise GcLeaseHeldError(
                f"another garbage collection took the GC lease of {self.store.url} just now",
                hint="wait for it to finish (one GC per store at a time), then run GC again",
            ) from None
        self._valid_until = started + self.ttl - self.safety
        log.info("gc %s: lease taken by %s for %.0fs", self.store.url, self.owner, self.ttl)

    def renew(self) -> None:
        """Extend the lease once (the renewal thread calls it every ttl / 4)."""
        started = time.monotonic()
        with self._lock:
            if self._lost or self._version is None:
                return
            try:
                self._version = self._swap(self._body(wall=time.time()), self._version)
            except RecordChanged:
                self._lost = "another garbage collection took the lease over"
                log.warning("gc %s: %s", self.store.url, self._lost)
                return
            self._valid_until = started + self.ttl - self.safety

    def assert_held(self) -> None:
        """Raise GcLeaseLostError unless this collection may still delete."""
        if self._lost:
            raise GcLeaseLostError(f"garbage collection of {self.store.url} stopped: {self._lost}",
                                   hint="run GC again; nothing it did not delete is lost")
        if time.monotonic() >= self._valid_until:
            raise GcLeaseLostError(
                f"garbage collection of {self.store.url} stopped: its lease could not be renewed in time",
                hint="check that the store is reachable and run GC again; nothing it did not delete is lost",
            )

    def release(self, *, cleanly: bool = True) -> None:
        """Hand the lease back. After a clean run it is free at once; after a failure or a
        cancellation, deletions may still be in flight on abandoned worker threads, so the
        lease is left to expire `safety` seconds from now instead."""
        with self._lock:
            if self._lost or self._version is None:
                return
            body = self._body(wall=time.time(), released=True) if cleanly else \
                self._body(wall=time.time(), lasts=self.safety)
            try:
                self._swap(body, self._version)
            except RecordChanged:
                return  # taken over meanwhile: the record is the new holder's
            finally:
                self._version = None

    # --- holding it ------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 - an unreachable store: validity runs out, deletions stop
                log.warning("gc %s: could not renew the lease: %s", self.store.url, exc)

    def __enter__(self) -> GcLease:
        self.acquire()
        self._renewer = threading.Thread(target=self._renew_loop, name="streamstate-gc-lease", daemon=True)
        self._renewer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        try:
            self.release(cleanly=exc_type is None)
        except Exception as release_exc:  # noqa: BLE001 - the lease expires on its own
            log.warning("gc %s: could not release the lease (it expires in %.0fs): %s",
                        self.store.url, self.ttl, release_exc)
