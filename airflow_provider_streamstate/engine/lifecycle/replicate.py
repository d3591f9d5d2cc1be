"""Replication: copy snapshots of a stream from one store to another (another region, another
endpoint, another kind of store), the same snapshot under the same id.

The guarantee is the one a snapshot gives: a snapshot is visible at the destination only
when it is complete there, and it is byte-identical to the source's. For each snapshot:

1. The source manifest is read and validated (it is untrusted input), and its timeline
   records are read: the records its timeline relies on are copied first, write-once. A
   delta manifest (docs/manifest.md) builds on earlier manifests of the stream: each one the
   destination holds neither published nor as a tombstone, byte for byte, is replicated
   first, as a snapshot of its own.
2. Only blobs the destination lacks are copied, in parallel; every byte is hashed while
   it streams from the source to the destination (`SnapshotStore.put_blob_stream`), and a
   blob whose bytes do not match its name is refused, naming it and the files of the
   manifest that use it. Nothing is published then.
3. The manifest is published last, the source's very bytes (same id), atomically and
   never over another one; then the validation records the source holds for it, and a
   write-once provenance record (`streams/<stream>/replicas/<snapshot id>.json`: where
   it came from, when, what was copied) that `snapshot list` shows.

A replication killed at any moment leaves no listed snapshot at the destination (only
orphan blobs, which a re-run reuses and garbage collection collects); a re-run copies
only what is missing. Where the destination can copy the source's blobs server side (two S3
stores on the same endpoint with the same credentials: `SnapshotStore.copy_in`), it does,
and then verifies each copy: by the SHA-256 checksum the endpoint returns for it, else
(moto and s3proxy return none for copies) by streaming it back from the destination (a
download, still no upload). A copy that does not match is deleted at once and the
replication stops as for any corrupt source blob.

The destination's blobs follow the blob protocol of docs/concepts.md ("Blobs, and what may
delete them"): a blob present at the destination is relied on only when a destination
manifest read in this operation references it (the snapshot itself, already there; or the
parent a delta builds on, published there: rule 3, without a request unless the
destination's blob census names the blob as lost) or this operation stored it; any other
present blob is refreshed first (rule 4), so garbage
collection's grace period covers the replication, and checked once more right before the
manifest that needs it is published (a GC that read its age before the refresh may have
deleted it after: it is copied again); and each manifest is published within
`gc.MAX_SNAPSHOT_SECONDS` of the moment its blobs were first relied on (rule 1).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.blob_census import suspect_blobs
from airflow_provider_streamstate.engine.catalog.gc import max_snapshot_seconds
from airflow_provider_streamstate.engine.catalog.manifests import manifest_fetcher, read_manifest
from airflow_provider_streamstate.engine.catalog.snapshots import (
    LATEST,
    refresh_head,
    resolve_snapshot,
)
from airflow_provider_streamstate.engine.catalog.timeline import load_timelines, timeline_key
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, check_cancelled
from airflow_provider_streamstate.engine.core.errors import (
    BrokenChainError,
    CorruptionError,
    MissingBlobError,
    NotFoundError,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import (
    Manifest,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.lifecycle.blob_refresh import RefreshedBlobs
from airflow_provider_streamstate.engine.lifecycle.replicate_select import checked_id, select_snapshots
from airflow_provider_streamstate.engine.stores.base import (
    PART_SIZE,
    ManifestExistsError,
    SnapshotStore,
    record_key,
)

log = logging.getLogger("streamstate.replicate")

REPLICA_KIND = "replicas"
REPLICA_FORMAT = "streamstate.replica/v1"
VALIDATIONS_KIND = "validations"
ALL = "all"


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


def _parse_iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class SnapshotReplication:
    """What replicating one snapshot did.

    `lag_seconds` is the replication lag: the destination's publish time minus the
    snapshot's creation time (for a snapshot that was already there, as its provenance
    record says; None when it has none, e.g. it was taken at the destination).
    """

    snapshot_id: str
    batch_id: int
    blobs_copied: int
    blobs_skipped: int  # already at the destination (or copied for an earlier snapshot of this run)
    bytes_copied: int
    bytes_skipped: int
    blobs_refreshed: int  # present at the destination but vouched for by nothing: refreshed (rule 4)
    seconds: float
    lag_seconds: float | None
    already_present: bool  # the destination held the manifest before this run
    records_copied: int  # timeline and validation records

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "batch_id": self.batch_id,
            "blobs_copied": self.blobs_copied,
            "blobs_skipped": self.blobs_skipped,
            "bytes_copied": self.bytes_copied,
            "bytes_skipped": self.bytes_skipped,
            "blobs_refreshed": self.blobs_refreshed,
            "seconds": round(self.seconds, 3),
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
            "already_present": self.already_present,
            "records_copied": self.records_copied,
        }


@dataclass(frozen=True)
class ReplicationResult:
    """Every snapshot one replication handled (oldest first), with totals."""

    stream: str
    source: str
    destination: str
    server_side_copy: bool
    snapshots: tuple[SnapshotReplication, ...]
    seconds: float

    @property
    def blobs_copied(self) -> int:
        return sum(s.blobs_copied for s in self.snapshots)

    @property
    def bytes_copied(self) -> int:
        return sum(s.bytes_copied for s in self.snapshots)

    @property
    def bytes_skipped(self) -> int:
        return sum(s.bytes_skipped for s in self.snapshots)

    @property
    def blobs_skipped(self) -> int:
        return sum(s.blobs_skipped for s in self.snapshots)

    @property
    def published(self) -> list[str]:
        """Ids this run published at the destination (not those already there)."""
        return [s.snapshot_id for s in self.snapshots if not s.already_present]

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "source": self.source,
            "destination": self.destination,
            "server_side_copy": self.server_side_copy,
            "snapshots": [s.to_json() for s in self.snapshots],
            "snapshots_published": len(self.published),
            "blobs_copied": self.blobs_copied,
            "blobs_skipped": self.blobs_skipped,
            "bytes_copied": self.bytes_copied,
            "bytes_skipped": self.bytes_skipped,
            "blobs_refreshed": sum(s.blobs_refreshed for s in self.snapshots),
            "seconds": round(self.seconds, 3),
        }


# --- copying blobs ------------------------------------------------------------------------


def copies_server_side(source: SnapshotStore, destination: SnapshotStore) -> bool:
    """Whether `destination` can copy `source`'s blobs without their bytes passing here
    (a reference names the service; no request is made)."""
    probe = source.blob_ref("0" * 64)
    return probe is not None and destination.can_copy_in(probe)


class _Replicator:
    """One replication: the destination blobs it may rely on, and when it started to."""

    def __init__(
        self, source: SnapshotStore, destination: SnapshotStore, stream: str, parallelism: int, server_side: bool,
    ) -> None:
        self.src, self.dst, self.stream = source, destination, stream
        self.parallelism = parallelism
        self.server_side = server_side
        # digest -> monotonic time since when it is safe at the destination for this run:
        # stored or refreshed by it, or referenced by a destination manifest it read and
        # checked present (rules 2-4).
        self.ready: dict[str, float] = {}
        self.refreshed = RefreshedBlobs()  # rule 4: checked again before publishing
        self.lock = threading.Lock()
        self._suspect: frozenset[str] | None = None
        self._suspect_read = False

    def suspect(self) -> frozenset[str] | None:
        """The destination blobs its census names as lost (None: check every vouched one)."""
        if not self._suspect_read:
            self._suspect, self._suspect_read = suspect_blobs(self.dst), True
        return self._suspect

    # rule 1: what a manifest relies on must be younger than D when it is published
    def _forget_old(self) -> None:
        limit = time.monotonic() - max_snapshot_seconds() / 2
        with self.lock:
            for d in [d for d, t in self.ready.items() if t < limit]:
                del self.ready[d]  # checked (and refreshed) again before it is relied on

    def _copy_blob(self, digest: str, size: int, sha256: str) -> int:
        if self.server_side:
            ref = self.src.blob_ref(digest)
            assert ref is not None
            try:
                return self.dst.copy_in(ref, digest, size, confirm=True, sha256=sha256)
            except FileNotFoundError:
                raise MissingBlobError(f"blob {digest} is missing from {self.src.url}") from None
        with self.src.open_blob(digest) as body:
            return self.dst.put_blob_stream(digest, body, size, sha256=sha256)

    def _place(self, digest: str, size: int, sha256: str, vouched: bool) -> tuple[int, bool]:
        """Make one blob safe at the destination: (bytes copied, refreshed).

        Presence is asked first (a HEAD) only where a wrong guess costs more than the
        question: blobs a destination manifest vouches for (rule 3; usually present) and blobs
        larger than a part (a multipart upload would go through before the conditional write
        refuses it); a server-side copy asks by itself (`copy_in`: CopyObject is not
        conditional). Any other blob is
        usually absent (new since the last replication), so it is read and written at once,
        and the destination's write-once put finds the present ones (0 bytes written); those
        were vouched for by nothing, so they are refreshed (rule 4).
        """
        started = time.monotonic()
        suspect = self.suspect() if vouched else None
        if vouched and suspect is not None and digest not in suspect:
            with self.lock:  # rule 3: a destination manifest marks it, and no collection found it lost
                self.ready[digest] = started
            return 0, False
        ask = vouched or size > PART_SIZE
        present = self.dst.has_blob(digest) if ask else False
        refreshed = False
        written = 0
        if present and not vouched:
            refreshed = self.dst.refresh_blob(digest)  # rule 4; False: it vanished meanwhile
            present = refreshed
        if not present:
            written = self._copy_blob(digest, size, sha256)
            if not written:  # present after all: an orphan, another writer's, a concurrent copy
                refreshed = self.dst.refresh_blob(digest)
                if not refreshed:
                    written = self._copy_blob(digest, size, sha256)
        with self.lock:
            self.ready[digest] = started
        if refreshed:
            self.refreshed.add(digest)
        return written, refreshed

    def recheck_refreshed(self, m: Manifest) -> int:
        """Right before publishing `m`, copy again any blob refreshed for it that a concurrent
        GC deleted since (`blob_refresh`). Returns the blobs copied again."""

        sizes, shas = m.blobs, m.blob_sha256

        def again(d: str) -> None:
            log.warning("blob %s vanished after it was refreshed (a concurrent GC): copying it again", d[:12])
            try:
                self._copy_blob(d, sizes[d], shas[d])  # absent a moment ago: stored now, or just now by another writer
            except CorruptionError as exc:
                raise self._damaged(m, d, exc) from None

        gone = self.refreshed.vanished(self.dst, sizes, self.parallelism)
        run_parallel(again, gone, self.parallelism)
        return len(gone)

    def place_blobs(self, m: Manifest, vouched: set[str]) -> tuple[int, int, int, int, int]:
        """(blobs copied, bytes copied, blobs skipped, bytes skipped, blobs refreshed)."""
        self._forget_old()
        blobs, shas = m.blobs, m.blob_sha256
        with self.lock:
            todo = [(d, s) for d, s in blobs.items() if d not in self.ready]

        def place(item: tuple[str, int]) -> tuple[str, int, bool]:
            d, s = item
            try:
                written, refreshed = self._place(d, s, shas[d], d in vouched)
            except CorruptionError as exc:  # MissingBlobError too: the source lost it
                raise self._damaged(m, d, exc) from None
            return d, written, refreshed

        done = run_parallel(place, todo, self.parallelism)
        copied = {d: w for d, w, _ in done if w}
        refreshed = sum(1 for _, _, r in done if r)
        skipped = [d for d in blobs if d not in copied]
        return len(copied), sum(copied.values()), len(skipped), sum(blobs[d] for d in skipped), refreshed

    def _damaged(self, m: Manifest, digest: str, exc: StreamstateError) -> CorruptionError:
        paths = sorted(f.path for f in m.files if f.blob_id == digest)
        shown = ", ".join(paths[:5]) + (f" (+{len(paths) - 5} more)" if len(paths) > 5 else "")
        missing = isinstance(exc, MissingBlobError)
        what = "is missing from" if missing else "is corrupt in"
        detail = "" if missing else f" ({exc.message})"
        return CorruptionError(
            f"blob {digest} {what} the source {self.src.url}{detail}; snapshot {m.snapshot_id} uses it for {shown}",
            hint=f"nothing was published at {self.dst.url}; verify the source (`streamstate verify`), replicate "
            "another snapshot, or repair this one from a healthy replica",
        )

    def relied_since(self, m: Manifest) -> float:
        with self.lock:
            return min((self.ready[d] for d in m.blobs), default=time.monotonic())

    # --- records ------------------------------------------------------------------------

    def _copy_record(self, key: str, *, must_match: bool) -> bool:
        """Copy one write-once record unless the destination has it; True when copied."""
        data = self.src.get_record(key)
        if data is None:
            return False
        have = self.dst.get_record(key)
        if have is None:
            try:
                self.dst.put_record(key, data)
                return True
            except ManifestExistsError:
                have = self.dst.get_record(key)  # a concurrent replication wrote it
        if have != data:
            if must_match:
                raise UsageError(
                    f"{key} differs between {self.src.url} and {self.dst.url}: the two stores hold different "
                    f"histories of stream {self.stream}",
                    hint="replicate into a store (or prefix) that holds no other history of this stream",
                )
            log.warning("%s differs in %s; keeping the destination's", key, self.dst.url)
        return False

    def copy_timelines(self, m: Manifest) -> int:
        """The timeline records `m`'s timeline relies on (it and its ancestors), before `m`."""
        tls = load_timelines(self.src, self.stream)
        copied = 0
        seen: set[int] = set()
        tl: int | None = m.timeline
        while tl is not None and tl not in seen:
            seen.add(tl)
            rec = tls.records.get(tl)
            if rec is None:
                break  # a root timeline without a record (timeline 1)
            copied += self._copy_record(timeline_key(self.stream, tl), must_match=True)
            tl = rec.parent_timeline
        return copied

    def copy_validations(self, snapshot_id: str) -> int:
        """Validation records of the snapshot the source holds and the destination lacks."""
        prefix = f"streams/{self.stream}/{VALIDATIONS_KIND}/{snapshot_id}/"
        return sum(self._copy_record(key, must_match=False) for key in self.src.list_records(prefix))


def replica_key(stream: str, snapshot_id: str) -> str:
    return record_key(stream, REPLICA_KIND, snapshot_id)


def _lag(created_at: str, published: datetime) -> float | None:
    created = _parse_iso(created_at)
    return (published - created).total_seconds() if created else None


def _header_sha(data: bytes) -> str:
    return hashlib.sha256(data.partition(b"\n")[0]).hexdigest()


def _chain_first(r: _Replicator, m: Manifest) -> tuple[list[SnapshotReplication], bool]:
    """Replicate, oldest first, each manifest `m`'s delta builds on that the destination
    holds neither published nor as a tombstone with the same bytes (the sha256 of its header,
    as the link names it). Returns those replications, and whether the delta's parent is
    published at the destination (its blobs are then relied on per rule 3)."""
    done: list[SnapshotReplication] = []
    parent_published = False
    fetch_dst = manifest_fetcher(r.dst, r.stream)
    for i, link in enumerate(m.delta.chain if m.delta is not None else ()):
        try:
            have = r.dst.get_manifest(r.stream, link.snapshot_id)
            published = True
        except NotFoundError:
            published = False
            try:
                have = fetch_dst(link.snapshot_id)  # retention's tombstone
            except NotFoundError:
                done.extend(_replicate_one(r, link.snapshot_id))
                have, published = r.dst.get_manifest(r.stream, link.snapshot_id), True
        if _header_sha(have) != link.sha256:
            raise CorruptionError(
                f"{r.dst.url} holds another manifest under snapshot id {link.snapshot_id} of {r.stream}, which "
                f"snapshot {m.snapshot_id} builds on",
                hint="the two stores hold different histories of this stream; replicate into another store or prefix",
            )
        parent_published = published and i == len(m.delta.chain) - 1 if m.delta is not None else False
    return done, parent_published


def _replicate_one(r: _Replicator, snapshot_id: str) -> list[SnapshotReplication]:
    """Replicate one snapshot (after what its delta builds on): the replications done, oldest first."""
    started = time.monotonic()
    check_cancelled()
    data = r.src.get_manifest(r.stream, snapshot_id)
    m = read_manifest(r.src, r.stream, snapshot_id, data)
    try:
        have = r.dst.get_manifest(r.stream, snapshot_id)
    except NotFoundError:
        have = None
    if have is not None and have != data:
        raise CorruptionError(
            f"{r.dst.url} holds another manifest under snapshot id {snapshot_id} of {r.stream}",
            hint="the two stores hold different histories of this stream; replicate into another store or prefix",
        )
    before: list[SnapshotReplication] = []
    if have is None:
        before, parent_published = _chain_first(r, m)
        # A delta's unchanged files are its parent's: published at the destination, it vouches for them.
        changed = {e.path for e in m.delta.changed} if m.delta is not None and parent_published else None
        vouched = set() if changed is None else {e.blob_id for e in m.files if e.path not in changed}
    else:
        vouched = set(m.blobs)  # a manifest already there vouches for its own blobs (repaired when lost)
    records = 0
    if have is None:
        records += r.copy_timelines(m)
    copied, nbytes, skipped, bskipped, refreshed = r.place_blobs(m, vouched)
    lag = None
    if have is None:
        copied += r.recheck_refreshed(m)
        bound = max_snapshot_seconds()  # D, read now: the same value GC checks its grace against
        if time.monotonic() - r.relied_since(m) > bound:
            raise TransientError(
                f"replicating {snapshot_id} took over {bound:g} s; blobs it relies on may have been "
                "collected since",
                hint="nothing was published; run it again (with more --parallelism)",
            )
        check_cancelled()  # the last moment a cancellation can still stop the publish
        try:
            r.dst.put_manifest(r.stream, snapshot_id, data)
            published = _now()
        except ManifestExistsError:  # a concurrent replication published it first
            if r.dst.get_manifest(r.stream, snapshot_id) != data:
                raise
            published = None
        if published is not None:
            lag = _lag(m.created_at, published)
            record = {
                "format": REPLICA_FORMAT, "stream": r.stream, "snapshot_id": snapshot_id, "source": r.src.url,
                "source_endpoint": r.src.endpoint,
                "created_at": m.created_at, "copied_at": _iso(published), "lag_seconds": lag,
                "blobs_copied": copied, "bytes_copied": nbytes, "blobs_skipped": skipped, "bytes_skipped": bskipped,
                "server_side_copy": r.server_side,
            }
            try:
                r.dst.put_record(replica_key(r.stream, snapshot_id), json.dumps(record, indent=1).encode())
            except ManifestExistsError:
                pass  # left by an earlier run that was killed right after its manifest
            log.info(
                "stream %s: replicated %s to %s: %d blobs (%d bytes) copied, %d skipped, lag %.1f s",
                r.stream, snapshot_id, r.dst.url, copied, nbytes, skipped, lag or 0.0,
            )
    if lag is None:
        lag = replica_origin(r.dst, r.stream, snapshot_id).get("lag_seconds")
    records += r.copy_validations(snapshot_id)
    return [*before, SnapshotReplication(
        snapshot_id=snapshot_id, batch_id=m.batch_id, blobs_copied=copied, blobs_skipped=skipped,
        bytes_copied=nbytes, bytes_skipped=bskipped, blobs_refreshed=refreshed, seconds=time.monotonic() - started,
        lag_seconds=lag, already_present=have is not None, records_copied=records,
    )]


def replicate(
    source: SnapshotStore,
    destination: SnapshotStore,
    stream: str,
    *,
    snapshots: Sequence[str] = (),
    since: str | None = None,
    all_missing: bool = False,
    parallelism: int = 8,
    server_side: bool | None = None,
    cancel: CancelToken | None = None,
) -> ReplicationResult:
    """Replicate snapshots of `stream` from `source` to `destination` (see the module doc).

    Choose them with `snapshots` (ids or `latest`; the default), `since` or `all_missing`
    (`select_snapshots`). `server_side` forces or forbids server-side copies (default: used
    where the destination can copy the source's blobs: `copies_server_side`). `cancel`
    (or the enclosing `cancellation` block's token) stops it promptly: the snapshot being
    copied is not published; those before it are complete.
    """
    with cancellation(cancel):
        started = time.monotonic()
        same = copies_server_side(source, destination)
        if source.url == destination.url and (same or source.endpoint is None):
            raise UsageError(f"source and destination are the same store ({source.url})", hint="give another --to")
        ids = select_snapshots(source, destination, stream, snapshots=snapshots, since=since, all_missing=all_missing)
        if server_side and not same:
            raise UsageError(
                "server-side copy needs two stores on one service with the same credentials (two S3 stores on "
                "the same endpoint)",
                hint="leave server_side unset to copy through this host",
            )
        use_server_side = same if server_side is None else server_side
        r = _Replicator(source, destination, stream, max(1, parallelism), use_server_side)
        log.info(
            "stream %s: replicating %d snapshot(s) from %s to %s%s", stream, len(ids), source.url, destination.url,
            " (server-side copy)" if use_server_side else "",
        )
        done: list[SnapshotReplication] = []
        for sid in ids:
            if any(d.snapshot_id == sid for d in done):
                continue  # replicated already, as what a later one builds on
            done.extend(_replicate_one(r, sid))
        if any(not d.already_present for d in done):
            try:
                refresh_head(destination, stream)  # `latest` there: one record and one listing
            except (StreamstateError, OSError) as exc:  # a cache: the replication itself is done
                why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
                log.warning("could not update the catalog head of %s in %s: %s", stream, destination.url, why)
        return ReplicationResult(
            stream=stream, source=source.url, destination=destination.url, server_side_copy=use_server_side,
            snapshots=tuple(done), seconds=time.monotonic() - started,
        )


# --- provenance and presence ----------------------------------------------------------------


def copy_validation_records(source: SnapshotStore, destination: SnapshotStore, stream: str, snapshot_id: str) -> int:
    """The validation records of a snapshot already at the destination that the destination
    lacks (it was validated after its replication); the number copied."""
    return _Replicator(source, destination, stream, 1, False).copy_validations(snapshot_id)


def replica_origin(store: SnapshotStore, stream: str, snapshot_id: str) -> dict[str, Any]:
    """The provenance record of a replicated snapshot ({} when it was taken in this store)."""
    data = store.get_record(replica_key(stream, snapshot_id))
    if data is None:
        return {}
    try:
        d = json.loads(data)
    except ValueError:
        return {}
    return d if isinstance(d, dict) and d.get("format") == REPLICA_FORMAT else {}


def snapshot_origins(store: SnapshotStore, stream: str, *, parallelism: int = 8) -> dict[str, str]:
    """snapshot id -> the store it was replicated from, for the stream's replicated snapshots."""
    prefix = f"streams/{validate_stream_name(stream)}/{REPLICA_KIND}/"
    ids = [k[len(prefix) : -len(".json")] for k in store.list_records(prefix)]
    found = run_parallel(lambda sid: (sid, replica_origin(store, stream, sid).get("source")), ids, parallelism)
    return {sid: str(src) for sid, src in found if src}


@dataclass(frozen=True)
class ReplicaCheck:
    """Whether a snapshot is present and complete in a store (a sensor's poke)."""

    outcome: str  # ready | waiting | failed
    message: str
    snapshot_id: str | None
    store: str
    blobs: int = 0
    blobs_missing: int = 0
    lag_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "snapshot_id": self.snapshot_id,
            "store": self.store,
            "blobs": self.blobs,
            "blobs_missing": self.blobs_missing,
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
        }


def check_replica(
    store: SnapshotStore, stream: str, snapshot: str = LATEST, *, source: SnapshotStore | None = None,
    parallelism: int = 8,
) -> ReplicaCheck:
    """Is `snapshot` (an id, or `latest`: the newest on the current timeline of `source`, or
    of `store` itself without a source) present in `store` with its manifest and every blob?

    `waiting` while the manifest is absent (the replication publishes it last); `failed`
    when a published manifest misses blobs (waiting cannot help: replicate it again to
    repair it); `ready` otherwise.
    """
    validate_stream_name(stream)
    if snapshot == LATEST:
        where = source if source is not None else store
        if not where.list_snapshot_ids(stream):
            return ReplicaCheck("waiting", f"no snapshot of {stream} in {where.url} yet", None, store.url)
        snapshot_id = resolve_snapshot(where, stream, LATEST).snapshot_id
    else:
        snapshot_id = checked_id(snapshot)
    try:
        data = store.get_manifest(stream, snapshot_id)
    except NotFoundError:
        return ReplicaCheck("waiting", f"snapshot {snapshot_id} is not in {store.url} yet", snapshot_id, store.url)
    m = read_manifest(store, stream, snapshot_id, data)
    try:
        digests = sorted(m.blobs)
    except BrokenChainError as exc:
        return ReplicaCheck("failed", f"{exc.message}; replicate it again to repair it", snapshot_id, store.url)
    present = run_parallel(store.has_blob, digests, parallelism)
    missing = [d for d, ok in zip(digests, present, strict=True) if not ok]
    lag = replica_origin(store, stream, snapshot_id).get("lag_seconds")
    if missing:
        return ReplicaCheck(
            "failed",
            f"snapshot {snapshot_id} is in {store.url} but {len(missing)} of its {len(digests)} blobs are missing "
            f"(e.g. {missing[0]}); replicate it again to repair it",
            snapshot_id, store.url, len(digests), len(missing), lag,
        )
    return ReplicaCheck(
        "ready", f"snapshot {snapshot_id} is complete in {store.url} ({len(digests)} blobs)",
        snapshot_id, store.url, len(digests), 0, lag,
    )
