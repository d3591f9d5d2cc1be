"""Garbage collection: delete blobs no live manifest references, after a grace period.

Mark and sweep over a whole store (every stream shares its blobs), by the protocol in
docs/concepts.md ("Blobs, and what may delete them"):

1. Mark: read every published manifest of every stream, *then* every tombstone
   (a manifest retention deleted); a tombstone younger than the grace period `G` counts
   as a live manifest. Manifests first: retention writes the tombstone before removing
   the manifest, so a manifest that vanishes between the two listings is in the second.
   Each manifest marks the entries it lists itself; a delta (docs/manifest.md) lists only
   what changed, and the rest of its files are listed by the manifests it builds on, which
   are marked too: every one a live manifest or live tombstone builds on counts as live,
   published or a tombstone of any age (that tombstone is not expired while it is needed).
   A live delta whose chain names a manifest that is neither stops the collection: what it
   references cannot be known.
2. Sweep: stream the blob listing; an unmarked blob whose last write is older than `G`
   is deleted, its age re-read right before (a writer may have refreshed it since the
   listing). Temp files and incomplete multipart uploads older than `G`, and tombstones
   older than `G` (they protect nothing any more), go too.
3. Census: the blobs live manifests reference that the listing did not have (deleted
   outside the protocol) are recorded in the store (`blob_census`), so the next snapshot
   stores them again without checking every blob it inherits from its parent.

Why it is safe while snapshots, replication and retention run: a writer relies only on
blobs a manifest it read references (marked, or tombstoned for `G > D` after retention
deletes it, longer than the writer may take to publish) or blobs it wrote or refreshed
itself (younger than `G` until after it has published). Only one collection deletes from a
store at a time (`gc_lease.GcLease`): two sweepers could otherwise delete a blob a writer
stored again after the first one deleted it. A dry run deletes nothing and takes no lease.

Memory is bounded by the number of referenced blobs (one 32-byte digest each), never by
the store's history: listings are streamed page by page.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from airflow_provider_streamstate.engine.catalog import journal
from airflow_provider_streamstate.engine.catalog.blob_census import census_of, write_census
from airflow_provider_streamstate.engine.catalog.gc_lease import DEFAULT_TTL_SECONDS, GcLease
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest, is_blob_id
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.core.records import load_record
from airflow_provider_streamstate.engine.stores.base import (
    TOMBSTONE_FORMAT,
    BlobInfo,
    SnapshotStore,
    tombstone_key,
)

log = logging.getLogger("streamstate.gc")
T = TypeVar("T")

# The writers' bound D: a snapshot or replication publishes within this long of the moment
# it found the blobs it relies on, or not at all (docs/concepts.md, rule 1).
MAX_SNAPSHOT_SECONDS = 6 * 3600
# The default grace period. It must exceed D (6 h); the margin covers clock skew between hosts.
DEFAULT_GRACE_SECONDS = 24 * 3600
DELETE_BATCH = 256  # blobs handed to one parallel round of re-checks and deletes
EXAMPLES = 5  # examples kept per reason in the report


def max_snapshot_seconds() -> float:
    """The writers' bound D, read when it is checked (tests shrink it together with the grace)."""
    return float(MAX_SNAPSHOT_SECONDS)


@dataclass(frozen=True)
class Tombstone:
    """A manifest retention deleted, with when it did."""

    stream: str
    snapshot_id: str
    deleted_at: float  # epoch seconds
    manifest: bytes

    @classmethod
    def from_json(cls, data: bytes, *, stream: str, snapshot_id: str) -> Tombstone:
        try:
            d = load_record(data, TOMBSTONE_FORMAT, "tombstone")
            when = datetime.fromisoformat(str(d["deleted_at"]).replace("Z", "+00:00")).timestamp()
            return cls(stream, snapshot_id, when, str(d["manifest"]).encode())
        except (ValueError, KeyError, TypeError) as exc:
            raise UnsafeManifestError(f"tombstone of {stream}/{snapshot_id} is unreadable: {exc}") from None


@dataclass(frozen=True)
class GcResult:
    store: str
    dry_run: bool
    grace_seconds: float
    manifests: int  # published manifests marked
    tombstones_live: int  # deleted less than the grace period ago: marked too
    blobs_kept: int  # referenced by a live manifest or a live tombstone
    bytes_kept: int
    blobs_deleted: int  # or, on a dry run, that would be
    bytes_deleted: int
    blobs_young: int  # unreferenced, but written less than the grace period ago
    bytes_young: int
    blobs_missing: int  # referenced by a live manifest but not in the listing: lost outside the protocol
    temp_deleted: int  # stale temp files and aborted multipart uploads
    tombstones_deleted: int  # tombstones older than the grace period, removed
    seconds: float
    tombstones_needed: int = 0  # older than the grace period, kept: a live delta builds on them
    hints_pruned: int = 0  # journal hints older than journal.KEEP_SECONDS, removed
    # Why blobs that looked unreferenced were kept: reason -> {"blobs", "bytes", "examples"}.
    kept_unreferenced: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing_examples: tuple[str, ...] = ()  # a few of the missing blobs (all are in gc/census.json)

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "dry_run": self.dry_run,
            "grace_seconds": self.grace_seconds,
            "manifests": self.manifests,
            "tombstones_live": self.tombstones_live,
            "blobs_kept": self.blobs_kept,
            "bytes_kept": self.bytes_kept,
            "blobs_deleted": self.blobs_deleted,
            "bytes_deleted": self.bytes_deleted,
            "blobs_young": self.blobs_young,
            "bytes_young": self.bytes_young,
            "blobs_missing": self.blobs_missing,
            "temp_deleted": self.temp_deleted,
            "tombstones_deleted": self.tombstones_deleted,
            "tombstones_needed": self.tombstones_needed,
            "hints_pruned": self.hints_pruned,
            "kept_unreferenced": self.kept_unreferenced,
            "missing_examples": list(self.missing_examples),
            "seconds": round(self.seconds, 3),
        }


def _referenced(data: bytes, what: str) -> tuple[list[str], list[str]]:
    """The blobs a manifest lists itself, and the ids of the manifests it builds on (a
    delta). One that does not validate is still read for both (its blobs stay); one that
    is not even JSON stops GC: sweeping without knowing what it references could delete a
    snapshot's state."""
    try:
        m = Manifest.from_json(data)
        return [f.blob_id for f in m.own_files], m.chain_ids
    except StreamstateError:
        pass
    try:
        head, _, body = data.partition(b"\n")
        try:
            doc, chain = json.loads(data), []
        except ValueError:  # v3: a header line, then the file list
            doc = json.loads(body)
            delta = json.loads(head).get("delta") or {}
            chain = [str(link[0]) for link in delta.get("chain", []) if isinstance(link, list) and link]
        blobs = []
        for f in doc.get("files", []):
            if isinstance(f, dict):
                blob = f.get("blob") or f.get("sha256")
                if is_blob_id(blob):
                    blobs.append(str(blob))
        return blobs, chain
    except (ValueError, AttributeError, TypeError) as exc:
        raise UnsafeManifestError(
            f"{what} is unreadable ({exc}); GC cannot tell which blobs it references",
            hint="repair or delete that manifest by hand, then run GC again",
        ) from None


class _Reasons:
    """Counts and a few examples per reason a blob that looked unreferenced was kept."""

    def __init__(self) -> None:
        self.by: dict[str, dict[str, Any]] = {}

    def add(self, reason: str, blob: BlobInfo, example: str | None = None) -> None:
        r = self.by.setdefault(reason, {"blobs": 0, "bytes": 0, "examples": []})
        r["blobs"] += 1
        r["bytes"] += blob.size
        if len(r["examples"]) < EXAMPLES:
            r["examples"].append(example or blob.digest)


def collect_garbage(
    store: SnapshotStore,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    parallelism: int = 8,
    now: float | None = None,
    cancel: CancelToken | None = None,
    lease_ttl_seconds: float = DEFAULT_TTL_SECONDS,
) -> GcResult:
    """Mark and sweep `store`; see the module docstring. `dry_run` deletes nothing and
    reports what would go. `now` (epoch seconds) is for tests of the age rules only.
    `lease_ttl_seconds`: how long the store's GC lease outlives a collection that died.
    GcLeaseHeldError when another collection is deleting from the store."""
    d = max_snapshot_seconds()
    if not grace_seconds > d:
        raise UsageError(
            f"GC grace period {grace_seconds:g}s must exceed the longest a snapshot may take ({d:g}s)",
            hint=f"give --grace longer than {d:g}s (default {DEFAULT_GRACE_SECONDS // 3600} h)",
        )
    with cancellation(cancel):
        if dry_run:
            return _collect(store, grace_seconds, dry_run, parallelism, now, None)
        with GcLease(store, ttl_seconds=lease_ttl_seconds) as lease:
            return _collect(store, grace_seconds, dry_run, parallelism, now, lease)


def _collect(store: SnapshotStore, grace: float, dry_run: bool, parallelism: int, now: float | None,
             lease: GcLease | None) -> GcResult:
    started = time.monotonic()
    clock = now if now is not None else time.time()
    cutoff = clock - grace
    streams = store.list_streams()

    # Mark, 1: every published manifest (all streams share blobs).
    live: set[bytes] = set()
    manifests = 0
    read_ids: dict[str, set[str]] = {}  # stream -> manifests read
    needs: dict[str, dict[str, str]] = {}  # stream -> id a live delta builds on -> that delta
    for stream in streams:
        ids = store.list_snapshot_ids(stream)

        def read(sid: str, s: str = stream) -> tuple[str, list[str], list[str]] | None:
            try:
                return (sid, *_referenced(store.get_manifest(s, sid), f"manifest {s}/{sid}"))
            except NotFoundError:
                return None  # deleted meanwhile: its tombstone is read below
        for got in run_parallel(read, ids, parallelism):
            if got is None:
                continue
            sid, blobs, chain = got
            live.update(bytes.fromhex(x) for x in blobs)
            read_ids.setdefault(stream, set()).add(sid)
            needs.setdefault(stream, {}).update((c, sid) for c in chain)
            manifests += 1
        check_cancelled()

    # Mark, 2: tombstones (after the manifests, see the module docstring).
    protected: dict[bytes, str] = {}  # blob -> the deleted snapshot that keeps it
    expired: dict[tuple[str, str], Tombstone] = {}
    tombstones_live = 0
    for stream in streams:
        ids = store.list_tombstones(stream)

        def read_tomb(sid: str, s: str = stream) -> Tombstone | None:
            data = store.get_record(tombstone_key(s, sid))
            return None if data is None else Tombstone.from_json(data, stream=s, snapshot_id=sid)
        for t in run_parallel(read_tomb, ids, parallelism):
            if t is None:
                continue
            if t.deleted_at < cutoff:
                expired[(t.stream, t.snapshot_id)] = t
                continue
            tombstones_live += 1
            blobs, chain = _referenced(t.manifest, f"tombstone {t.stream}/{t.snapshot_id}")
            read_ids.setdefault(stream, set()).add(t.snapshot_id)
            needs.setdefault(stream, {}).update((c, t.snapshot_id) for c in chain)
            for x in blobs:
                ref = bytes.fromhex(x)
                if ref not in live:
                    protected.setdefault(ref, f"{t.stream}/{t.snapshot_id}")

    # Mark, 3: what live deltas build on (published, a live tombstone, or one kept past its time).
    needed = 0
    for stream, wanted in needs.items():
        for sid, by in sorted(wanted.items()):
            if sid in read_ids.get(stream, set()):
                continue
            t = expired.pop((stream, sid), None)
            if t is None:
                raise UnsafeManifestError(
                    f"snapshot {by} of {stream} builds on manifest {sid}, which {store.url} holds neither published "
                    "nor as a tombstone; GC cannot tell which blobs it references",
                    hint=f"replicate {sid} back from a store that holds it, or delete {by} (it cannot be "
                         "restored), then run GC again")
            needed += 1
            live.update(bytes.fromhex(x) for x in _referenced(t.manifest, f"tombstone {stream}/{sid}")[0])
    log.info("gc %s: %d manifests and %d live tombstones reference %d + %d blobs (%d tombstones kept for deltas)",
             store.url, manifests, tombstones_live, len(live), len(protected), needed)

    # Sweep: stream the listing; blobs are checked and deleted in parallel batches.
    reasons = _Reasons()
    kept = kept_bytes = young = young_bytes = deleted = deleted_bytes = 0
    batch: list[BlobInfo] = []

    def held(delete: Callable[[], T]) -> T:
        """Every deletion happens while this collection holds the store's GC lease."""
        if lease is not None:
            lease.assert_held()
        return delete()

    def sweep(blobs: list[BlobInfo]) -> tuple[int, int]:
        if dry_run:
            return len(blobs), sum(b.size for b in blobs)
        # The store checks the lease itself, right before each blob's deleting request.
        still_held = lease.assert_held if lease is not None else None
        done = run_parallel(lambda b: store.delete_blob(b.digest, written_before=cutoff, still_held=still_held),
                            blobs, parallelism)
        n = nbytes = 0
        for b, ok in zip(blobs, done, strict=True):
            if ok:
                n, nbytes = n + 1, nbytes + b.size
            else:
                reasons.add("refreshed or deleted by another writer since the listing", b)
        return n, nbytes

    listing_began = datetime.now(UTC)
    for blob in _blobs(store):
        key = bytes.fromhex(blob.digest) if is_blob_id(blob.digest) else None
        if key is not None and key in live:
            live.discard(key)  # each blob is listed once: what is left at the end is missing
            kept, kept_bytes = kept + 1, kept_bytes + blob.size
            continue
        if key is not None and key in protected:
            reasons.add("referenced by a snapshot deleted less than the grace period ago", blob,
                        f"{blob.digest[:12]} ({protected.pop(key)})")
            kept, kept_bytes = kept + 1, kept_bytes + blob.size
            continue
        if blob.modified >= cutoff:
            reasons.add("unreferenced, written less than the grace period ago", blob)
            young, young_bytes = young + 1, young_bytes + blob.size
            continue
        if key is None:
            reasons.add("not named by a blob id (not a blob streamstate wrote)", blob)
            continue
        batch.append(blob)
        if len(batch) >= DELETE_BATCH:
            n, nb = sweep(batch)
            deleted, deleted_bytes, batch = deleted + n, deleted_bytes + nb, []
    if batch:
        n, nb = sweep(batch)
        deleted, deleted_bytes = deleted + n, deleted_bytes + nb

    # Leftovers of crashed writers, tombstones that protect nothing any more, old journal hints.
    temps = list(store.iter_stale_temp(cutoff))
    hints = 0
    if not dry_run:
        run_parallel(lambda t: held(lambda: store.delete_temp(t)), temps, parallelism)
        run_parallel(lambda st: held(lambda: store.delete_record(tombstone_key(*st))), list(expired), parallelism)
        old_hints = datetime.fromtimestamp(clock - journal.KEEP_SECONDS, UTC)
        still_held = lease.assert_held if lease is not None else None
        hints = sum(journal.prune(store, stream, old_hints, still_held) for stream in streams)
    # What is left of `live` was referenced by a manifest marked before the listing began,
    # so its blob was stored before then: not listed means lost (this sweep keeps marked blobs).
    missing = sorted(x.hex() for x in live)
    if missing:
        log.warning("gc %s: %d blob(s) referenced by live manifests are missing (e.g. %s); "
                    "the next snapshot of their streams stores them again, `verify` names the snapshots",
                    store.url, len(missing), missing[0])
    if not dry_run:
        census = census_of(missing, manifests=manifests, taken_at=listing_began)
        held(lambda: write_census(store, census))
    result = GcResult(
        store=store.url, dry_run=dry_run, grace_seconds=grace, manifests=manifests, tombstones_live=tombstones_live,
        blobs_kept=kept, bytes_kept=kept_bytes, blobs_deleted=deleted, bytes_deleted=deleted_bytes,
        blobs_young=young, bytes_young=young_bytes, blobs_missing=len(live), temp_deleted=len(temps),
        tombstones_deleted=len(expired), seconds=time.monotonic() - started, kept_unreferenced=reasons.by,
        missing_examples=tuple(missing[:EXAMPLES]), tombstones_needed=needed, hints_pruned=hints,
    )
    log.info("gc %s%s: deleted %d blobs (%d bytes), kept %d, young %d, %d temp, %d tombstones in %.1fs",
             store.url, " (dry run)" if dry_run else "", deleted, deleted_bytes, kept, young, len(temps),
             len(expired), result.seconds)
    return result


def _blobs(store: SnapshotStore) -> Iterator[BlobInfo]:
    for i, blob in enumerate(store.iter_blob_info()):
        if i % 1000 == 0:
            check_cancelled()
        yield blob
