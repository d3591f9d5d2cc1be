"""The snapshot store interface: content-addressed blobs plus per-stream manifests.

Layout (the same on every backend, below the store's root or prefix):

    blobs/sha256/<first two hex digits>/<sha256>     file contents, stored once
    streams/<stream>/snapshots/<snapshot id>.json    manifests, written last and atomically
    streams/<stream>/<kind>/<name>.json              small write-once records beside them
                                                     (timelines; later validations, pins...)
    streams/<stream>/deleted/<snapshot id>.json      tombstones: manifests retention deleted,
                                                     with their deletion time (GC keeps their
                                                     blobs for its grace period)

A blob's key is its content's sha256, so identical files across snapshots and streams
are stored once and any blob can be verified against its own name.
"""

from __future__ import annotations

import io
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_streamstate.engine.core.errors import NotFoundError, StreamstateError, UsageError

BLOB_PREFIX = "blobs/sha256"
# A write larger than this goes to a store in parts (S3's multipart upload), and a reader
# buffers at most this much of one file: what callers size their memory and requests by.
PART_SIZE = 16 << 20
STREAMS_PREFIX = "streams"
MANIFEST_SUFFIX = ".json"


class ManifestExistsError(StreamstateError):
    """A manifest with this id is already in the store (manifests are never overwritten)."""

    default_hint = "it is written once and never replaced: use the one in the store"


class RecordChanged(StreamstateError):
    """A compare-and-swap found the record changed since it was read (another writer won)."""


RECORD_KEY_RE = re.compile(r"^streams/[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._=-]{0,199}){2,3}$")


def record_key(stream: str, kind: str, name: str) -> str:
    """`streams/<stream>/<kind>/<name>.json`, checked so no key escapes its stream."""
    key = f"{STREAMS_PREFIX}/{stream}/{kind}/{name}{MANIFEST_SUFFIX}"
    if kind == "snapshots" or not RECORD_KEY_RE.match(key) or ".." in key:
        raise ValueError(f"invalid record key {key!r}")
    return key


def blob_key(digest: str) -> str:
    return f"{BLOB_PREFIX}/{digest[:2]}/{digest}"


def manifest_key(stream: str, snapshot_id: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/snapshots/{snapshot_id}{MANIFEST_SUFFIX}"


TOMBSTONE_KIND = "deleted"
TOMBSTONE_FORMAT = "streamstate.tombstone/v1"


def tombstone_key(stream: str, snapshot_id: str) -> str:
    """Where a deleted manifest is kept, with its deletion time, until GC's grace period ends."""
    return record_key(stream, TOMBSTONE_KIND, snapshot_id)


@dataclass(frozen=True)
class BlobInfo:
    """A stored blob as a listing sees it; `modified` is its last write (or refresh), epoch seconds."""

    digest: str
    size: int
    modified: float


@dataclass(frozen=True)
class StaleTemp:
    """Something a crashed writer left behind: a local temp file or an S3 multipart upload."""

    key: str  # below the store's root or prefix
    size: int
    modified: float  # last write (local) or initiation (multipart), epoch seconds
    upload_id: str | None = None  # set for an incomplete multipart upload


@dataclass(frozen=True)
class ObjectRef:
    """An object a store (or checkpoint filesystem) on the same service can copy server side,
    without its bytes passing through this host (S3's CopyObject)."""

    client: Any  # the connection it is read with: endpoint and credentials decide who can copy it
    bucket: str
    key: str
    etag: str | None = None  # copy only this version


@dataclass(frozen=True)
class StoreOptions:
    """What `open_store` passes a store's opener besides the URL: the connection to use as
    given (an S3 client), the Airflow connection id it came from (for error hints), the
    parallelism its clients are sized for, and a Spark application's conf (a driver opens
    the store with what `spark_access` gave the application)."""

    connection: Any = None
    conn_id: str | None = None
    parallelism: int = 8
    spark_conf: Callable[[str], str | None] | None = None

    def refuse_connection(self, url: str) -> None:
        """For stores that take no connection: refuse one named rather than ignore it."""
        if self.conn_id:
            raise UsageError(
                f"an AWS connection ({self.conn_id!r}) applies only to s3:// stores, not {url!r}",
                hint="drop --aws-conn-id (aws_conn_id), or give an s3://bucket/prefix store",
            )


class SnapshotStore(ABC):
    """Where snapshots live. Implementations are safe to call from several threads.

    The methods below the abstract ones are capabilities: a default that works everywhere
    (or says "not here"), overridden where a backend does better. Callers ask them, never
    which kind of store they hold.
    """

    url: str
    # True when `store_file` can hash while it stores (one read instead of two).
    hashes_while_storing: bool = False
    # How long after refreshing a blob a writer waits before its last check that the blob is
    # still there (writer rule 4): long enough for a GC that read the blob's age before the
    # refresh to have deleted it, when checking the age and deleting are two requests.
    refresh_settle_seconds: float = 0.0

    def store_file(self, source: Path) -> tuple[str, int, int]:
        """Store a file whose digest is not known yet: (digest, size, bytes written).

        Only for stores with `hashes_while_storing`; the blob's name is computed from the
        very bytes written, so it can never disagree with its content.
        """
        raise NotImplementedError

    @abstractmethod
    def has_blob(self, digest: str) -> bool: ...

    @abstractmethod
    def put_blob(self, digest: str, source: Path, size: int) -> int:
        """Store `source` under `digest` unless present; return bytes written (0 if present).

        The implementation re-hashes what it sends and refuses to publish a blob whose
        bytes do not match `digest` (the source changed since it was hashed).
        """

    def put_blob_stream(self, digest: str, src: BinaryIO, size: int) -> int:
        """Store the bytes read from `src` (another store's blob) under `digest` unless
        present; return bytes written (0 if present).

        Every byte is hashed as it is read, in chunks (memory stays bounded, nothing goes
        to a temp file beyond what the backend itself needs), and nothing is published
        unless the bytes hash to `digest` and number `size`: a CorruptionError says what
        was read instead. Replication uses it to copy between any two stores.
        """
        raise NotImplementedError

    def put_blob_bytes(self, digest: str, data: bytes | bytearray) -> int:
        """Store bytes already in memory under `digest` unless present; return bytes written
        (0 if present). `digest` must be the sha256 of exactly `data`, computed from these
        bytes by the caller (`digest.sha256_read`): a snapshot hashes a checkpoint object
        while it reads it once, then stores that same buffer, never a second read. Writes
        are as conditional as `put_blob`'s; by default the bytes go through
        `put_blob_stream`, which hashes them again as it writes."""
        return self.put_blob_stream(digest, io.BytesIO(data), len(data))

    @abstractmethod
    def open_blob(self, digest: str) -> AbstractContextManager[BinaryIO]:
        """A readable stream of the blob; MissingBlobError when it is absent.

        A failure while the stream is read (a connection cut mid-body) is a TransientError.
        """

    @abstractmethod
    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        """Every stored blob as (digest, size)."""

    @abstractmethod
    def put_manifest(self, stream: str, snapshot_id: str, data: bytes) -> None:
        """Publish a manifest atomically; ManifestExistsError if the id is taken."""

    @abstractmethod
    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        """NotFoundError when there is no such snapshot."""

    @abstractmethod
    def list_snapshot_ids(self, stream: str) -> list[str]:
        """Snapshot ids of a stream, ascending (by batch, then time)."""

    @abstractmethod
    def list_streams(self) -> list[str]: ...

    # --- capabilities ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str | None:
        """The service the store is reached at (an S3 endpoint, a NameNode), for reports:
        a store's URL alone does not say which region or cluster it is in."""
        return None

    def location_of(self, rel: str) -> str:
        """The location Spark (and `open_checkpoint_fs`) reaches `rel` below the store's root
        at: where a state job's scratch checkpoint is laid out for a cluster to read."""
        raise NotImplementedError(f"store {self.url} cannot hold scratch checkpoints")

    def checkpoint_connection(self, location: str) -> Any:
        """The store's own connection when `location` is on the same service (one client for
        the store and an `s3a://` checkpoint beside it), else None: the caller's or the
        environment's is used."""
        return None

    def spark_access(self) -> tuple[dict[str, str], dict[str, str]]:
        """What a Spark application of this package needs to reach the store as this client
        does: Spark confs (for its executors, and for its driver on a cluster: no secret in a
        container's environment) and the environment of a driver that runs here. Nothing
        for a store the cluster reaches by itself (a shared path, HDFS)."""
        return {}, {}

    def blob_ref(self, digest: str) -> ObjectRef | None:
        """The blob as an object a sibling on the same service can copy server side; None
        where there is no such copy."""
        return None

    def can_copy_in(self, ref: ObjectRef) -> bool:
        """Whether `copy_in` can copy `ref` server side (same endpoint, same credentials)."""
        return False

    def copy_in(self, ref: ObjectRef, digest: str, size: int, *, confirm: bool) -> int:
        """Store object `ref` as blob `digest` by a server-side copy unless present; the bytes
        copied (0 if present). The copy is checked against `digest` where the service returns
        a checksum; else, with `confirm`, by reading the copy back (a digest nobody here
        computed from these bytes). A copy that does not match is deleted: CorruptionError.
        FileNotFoundError when `ref` is gone; CheckpointChanged when it is not `ref.etag`."""
        raise NotImplementedError(f"store {self.url} cannot copy objects server side")

    # --- small write-once records beside the manifests (timelines, ...) ---------------

    @abstractmethod
    def put_record(self, key: str, data: bytes) -> None:
        """Publish a record atomically; ManifestExistsError if the key is taken (write-once)."""

    @abstractmethod
    def get_record(self, key: str) -> bytes | None:
        """The record's bytes, or None when there is none."""

    @abstractmethod
    def list_records(self, prefix: str) -> list[str]:
        """Keys of the records below `prefix` (e.g. `streams/orders/timelines/`), sorted."""

    def list_record_tree(self, prefix: str) -> list[str]:
        """Keys of the records at any depth below `prefix`, sorted: one listing of a
        stream's validation records, whatever their number of snapshots."""
        raise NotImplementedError

    # --- deletion: retention and garbage collection (docs/concepts.md, "Blobs") -------------
    # Not abstract, so stores written before deletion existed still load; both backends
    # implement them.

    def replace_record(self, key: str, data: bytes) -> None:
        """Write a record atomically, replacing any previous one (tombstones, clone records)."""
        raise NotImplementedError

    def delete_record(self, key: str) -> None:
        """Delete a record; deleting one that is absent is not an error."""
        raise NotImplementedError

    def _delete_manifest_object(self, stream: str, snapshot_id: str) -> None:
        raise NotImplementedError

    def delete_manifest(self, stream: str, snapshot_id: str, *, now: datetime | None = None) -> bool:
        """Move a manifest aside as a tombstone carrying its bytes and deletion time; False
        when there was no such manifest. The tombstone is written before the manifest
        disappears, so a GC that misses the manifest in its listing finds the tombstone."""

        try:
            data = self.get_manifest(stream, snapshot_id)
        except NotFoundError:
            return False
        deleted_at = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
        body = {"format": TOMBSTONE_FORMAT, "stream": stream, "snapshot_id": snapshot_id,
                "deleted_at": deleted_at, "manifest": data.decode("utf-8", errors="replace")}
        self.replace_record(tombstone_key(stream, snapshot_id), json.dumps(body).encode())
        self._delete_manifest_object(stream, snapshot_id)
        return True

    def list_tombstones(self, stream: str) -> list[str]:
        """Snapshot ids of the stream's deleted manifests whose tombstones remain."""
        prefix = f"{STREAMS_PREFIX}/{stream}/{TOMBSTONE_KIND}/"
        return [k[len(prefix) : -len(MANIFEST_SUFFIX)] for k in self.list_records(prefix) if "/" not in k[len(prefix) :]]

    def refresh_blob(self, digest: str) -> bool:
        """Start a present blob's age again, so GC's grace period covers a writer about to
        rely on it (writer rule 4); False when the blob is absent (store it instead)."""
        raise NotImplementedError

    def iter_blob_info(self) -> Iterator[BlobInfo]:
        """Every stored blob with its size and last write, streamed (never the whole listing in memory)."""
        raise NotImplementedError

    def blob_modified(self, digest: str) -> float | None:
        """The blob's last write (or refresh) in epoch seconds, read now; None when it is absent."""
        raise NotImplementedError

    def delete_blob(self, digest: str, *, written_before: float,
                    still_held: Callable[[], None] | None = None) -> bool:
        """Delete the blob only if its last write, re-read right now, is before `written_before`
        (epoch seconds); True when it was deleted. A blob refreshed meanwhile stays.
        `still_held` is called right before the deleting request and raises when the caller
        may no longer delete (the GC lease lapsed)."""
        raise NotImplementedError

    def iter_stale_temp(self, written_before: float) -> Iterator[StaleTemp]:
        """Temp files and incomplete multipart uploads last written before `written_before`."""
        raise NotImplementedError

    def delete_temp(self, temp: StaleTemp) -> None:
        """Remove a temp file or abort a multipart upload (absent already is not an error)."""
        raise NotImplementedError

    # --- compare-and-swap records (the GC lease) ---------------------------------------------

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """A record (any key below the root) with a version token for `swap_record`; None when absent."""
        raise NotImplementedError

    def swap_record(self, key: str, data: bytes, *, expect: str | None) -> str:
        """Write the record only if it is still at version `expect` (None: only if absent) and
        return its new version; RecordChanged when another writer changed it first."""
        raise NotImplementedError
