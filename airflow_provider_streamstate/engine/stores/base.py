"""The snapshot store interface: blobs plus per-stream manifests.

Layout (the same on every backend, below the store's root or prefix):

    blobs/sha256/<first two hex digits>/<sha256>     file contents named by their sha256
    blobs/unique/<first two hex digits>/<32 hex>     file contents under a unique key
    streams/<stream>/snapshots/<snapshot id>.json    manifests, written last and atomically
    streams/<stream>/<kind>/<name>.json              small write-once records beside them
                                                     (timelines; later validations, pins...)
    streams/<stream>/deleted/<snapshot id>.json      tombstones: manifests retention deleted,
                                                     with their deletion time (GC keeps their
                                                     blobs for its grace period)
    streams/<stream>/journal/<time>-<p|d>-<id>.json  a hint per manifest published (p) or
                                                     deleted (d), written just before it, named
                                                     by the writer's clock: lets the catalog
                                                     list only what changed since its index

A blob has an id: its content's sha256 (content-addressed: identical files across snapshots
and streams are stored once and any blob can be verified against its own name), or a unique
id (a blob copied server side before anyone knew its sha256; the manifest entry names the
blob and the sha256 of its content, which every read checks). The manifest says which.
"""

from __future__ import annotations

import io
import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import SHA256_RE
from airflow_provider_streamstate.engine.core.errors import NotFoundError, StreamstateError, UsageError
from airflow_provider_streamstate.engine.core.manifest import UNIQUE_BLOB_RE

BLOB_PREFIX = "blobs/sha256"
UNIQUE_BLOB_PREFIX = "blobs/unique"
BLOB_PREFIXES = (BLOB_PREFIX, UNIQUE_BLOB_PREFIX)
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


def blob_key(blob: str) -> str:
    """Where blob `blob` (a sha256, or a unique id) is stored below the store's root."""
    if SHA256_RE.match(blob):
        return f"{BLOB_PREFIX}/{blob[:2]}/{blob}"
    if UNIQUE_BLOB_RE.match(blob):
        return f"{UNIQUE_BLOB_PREFIX}/{blob[:2]}/{blob}"
    raise ValueError(f"invalid blob id {blob!r}")


def new_unique_blob_id() -> str:
    """A blob id no writer has used (128 random bits): a server-side copy's destination
    before the sha256 of its content is known."""
    return secrets.token_hex(16)


JOURNAL_KIND = "journal"
PUBLISHED, DELETED = "p", "d"
JOURNAL_NAME_RE = re.compile(r"^(\d{8}T\d{12}Z)-([pd])-(.+)$")


def journal_key(stream: str, event: str, snapshot_id: str, now: datetime | None = None) -> str:
    """`streams/<stream>/journal/<UTC time to the µs>Z-<p|d>-<snapshot id>.json`."""
    when = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%f")
    return record_key(stream, JOURNAL_KIND, f"{when}Z-{event}-{snapshot_id}")


def manifest_key(stream: str, snapshot_id: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/snapshots/{snapshot_id}{MANIFEST_SUFFIX}"


TOMBSTONE_KIND = "deleted"
TOMBSTONE_FORMAT = "streamstate.tombstone/v1"


def tombstone_key(stream: str, snapshot_id: str) -> str:
    """Where a deleted manifest is kept, with its deletion time, until GC's grace period ends."""
    return record_key(stream, TOMBSTONE_KIND, snapshot_id)


TIMELINES_KIND = "timelines"


def timelines_prefix(stream: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/{TIMELINES_KIND}/"


@dataclass(frozen=True)
class RecentListing:
    """A listing from a snapshot id on (`SnapshotStore.list_from`)."""

    snapshot_ids: list[str]  # at and after the first id, ascending
    timeline_keys: list[str]  # every timeline record of the stream
    # The ETags of the manifests (by id) and of the records listed with them (by key: the
    # timeline records, the catalog head's split header), where the store gives them (S3): a
    # copy the catalog head carries is used only when they are its MD5.
    etags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlobInfo:
    """A stored blob as a listing sees it; `modified` is its last write (or refresh), epoch seconds."""

    digest: str  # the blob's id: its sha256, or a unique id
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
    # Whether it carries a full-object SHA-256 checksum (S3 checked it when the object was
    # written, and a copy keeps it): True as its listing said, False when it has none or one
    # of its parts (a copy asks S3 for one), None when unknown (tried plain, then asked).
    sha256: bool | None = None


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
                f"a connection ({self.conn_id!r}) does not apply to {url!r}: this kind of store takes none",
                hint="drop the connection id (--storage-conn-id, storage_conn_id), or give a store that takes one "
                "(s3://bucket/prefix, hdfs://namenode/path)",
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
    # True when `copy_in_unique` works (for objects `can_copy_in` accepts): a server-side
    # copy to a blob under a unique id, named by the checksum the service computes.
    copies_to_unique_blobs: bool = False
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
    def has_blob(self, blob: str) -> bool:
        """Whether blob `blob` (a sha256 or a unique id) is stored."""

    @abstractmethod
    def put_blob(self, digest: str, source: Path, size: int) -> int:
        """Store `source` under its sha256 `digest` unless present; return bytes written (0 if present).

        The implementation re-hashes what it sends and refuses to publish a blob whose
        bytes do not match `digest` (the source changed since it was hashed).
        """

    def put_blob_stream(self, blob: str, src: BinaryIO, size: int, *, sha256: str | None = None) -> int:
        """Store the bytes read from `src` (another store's blob) as blob `blob` unless
        present; return bytes written (0 if present). `sha256` is the content's (default:
        `blob` itself, a content-addressed id; required for a unique id).

        Every byte is hashed as it is read, in chunks (memory stays bounded, nothing goes
        to a temp file beyond what the backend itself needs), and nothing is published
        unless the bytes hash to `sha256` and number `size`: a CorruptionError says what
        was read instead. Replication uses it to copy between any two stores.
        """
        raise NotImplementedError

    def put_blob_bytes(self, digest: str, data: bytes | bytearray) -> int:
        """Store bytes already in memory under their sha256 `digest` unless present; return
        bytes written (0 if present). `digest` must be the sha256 of exactly `data`, computed
        from these bytes by the caller (`digest.sha256_read`): a snapshot hashes a checkpoint
        object while it reads it once, then stores that same buffer, never a second read.
        Writes are as conditional as `put_blob`'s; by default the bytes go through
        `put_blob_stream`, which hashes them again as it writes."""
        return self.put_blob_stream(digest, io.BytesIO(data), len(data))

    @abstractmethod
    def open_blob(self, blob: str) -> AbstractContextManager[BinaryIO]:
        """A readable stream of blob `blob`; MissingBlobError when it is absent. The caller
        checks the bytes against the sha256 the manifest records.

        A failure while the stream is read (a connection cut mid-body) is a TransientError.
        """

    def read_blob_range(self, blob: str, offset: int, length: int) -> bytes:
        """`length` bytes of blob `blob` from `offset` (fewer only past its end);
        MissingBlobError when it is absent. A range cannot be checked against the blob's
        sha256: the caller verifies it by what it holds (a RocksDB block's own checksum).
        This default reads the whole blob; stores that can read a range override it."""
        with self.open_blob(blob) as f:
            data = f.read()
        return bytes(data[offset:offset + length])

    @abstractmethod
    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        """Every stored blob as (blob id, size)."""

    def put_manifest(self, stream: str, snapshot_id: str, data: bytes) -> None:
        """Publish a manifest atomically; ManifestExistsError if the id is taken. A journal
        hint is written first (see the module docstring): a reader that finds the hint may
        not find the manifest yet (or ever, if this writer dies); one that lists after the
        manifest appeared finds both."""
        check_cancelled()  # the commit point of a snapshot: a cancelled one publishes nothing, not even a hint
        self._journal(stream, PUBLISHED, snapshot_id)
        self._put_manifest_object(stream, snapshot_id, data)

    def _journal(self, stream: str, event: str, snapshot_id: str) -> None:
        try:
            self.put_record(journal_key(stream, event, snapshot_id), b"{}")
        except ManifestExistsError:
            pass  # the same event in the same microsecond: the hint is there

    @abstractmethod
    def _put_manifest_object(self, stream: str, snapshot_id: str, data: bytes) -> None:
        """The manifest's own atomic, never-overwriting put; ManifestExistsError if taken."""

    @abstractmethod
    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        """NotFoundError when there is no such snapshot."""

    @abstractmethod
    def list_snapshot_ids(self, stream: str) -> list[str]:
        """Snapshot ids of a stream, ascending (by batch, then time)."""

    def list_snapshot_ids_after(self, stream: str, after: str) -> list[str]:
        """Snapshot ids of a stream that sort after `after`, ascending: the ids a listing
        past a known one finds (S3: `StartAfter`; elsewhere the names are filtered)."""
        return [i for i in self.list_snapshot_ids(stream) if i > after]

    def list_from(self, stream: str, first: str) -> RecentListing:
        """The snapshot ids of a stream at and after `first`, ascending, and the keys of its
        timeline records: what the catalog head is checked against (catalog/head.py). S3
        answers both from one listing that starts at `first` (the records of the kinds that
        sort between `snapshots` and `timelines`, the timeline records too, sort after the
        manifests), with ETags; elsewhere two listings, without."""
        ids = [i for i in self.list_snapshot_ids(stream) if i >= first]
        return RecentListing(ids, self.list_records(timelines_prefix(stream)))

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

    def spark_access(self, env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        """What a Spark application of this package needs to reach the store as this client
        does, spark-submit running with `env`: Spark confs (for its executors, and for its
        driver on a cluster: no secret in a container's environment) and the environment of
        a driver that runs here (an HDFS connection's: its user, which spark-submit is given
        in cluster mode too). Nothing for a store the application reaches by itself (a shared
        path, HDFS through the Hadoop configuration)."""
        return {}, {}

    def blob_ref(self, blob: str) -> ObjectRef | None:
        """The blob as an object a sibling on the same service can copy server side; None
        where there is no such copy."""
        return None

    def can_copy_in(self, ref: ObjectRef) -> bool:
        """Whether `copy_in` can copy `ref` server side (same endpoint, same credentials)."""
        return False

    def copy_in(self, ref: ObjectRef, blob: str, size: int, *, confirm: bool, sha256: str | None = None) -> int:
        """Store object `ref` as blob `blob` by a server-side copy unless present; the bytes
        copied (0 if present). `sha256` is the content's (default: `blob`, a content-addressed
        id). The copy is checked against it where the service returns a checksum; else, with
        `confirm`, by reading the copy back (a digest nobody here computed from these bytes).
        A copy that does not match is deleted: CorruptionError. FileNotFoundError when `ref`
        is gone; CheckpointChanged when it is not `ref.etag`."""
        raise NotImplementedError(f"store {self.url} cannot copy objects server side")

    def copy_in_unique(self, ref: ObjectRef, size: int) -> tuple[str, str]:
        """Copy object `ref` server side into a new blob under a unique id, in one request
        where the service computes the copy's SHA-256 (else the copy is read back and
        hashed): (blob id, sha256 of its content). Nothing is asked first: no blob has that
        id. FileNotFoundError when `ref` is gone; CheckpointChanged when it is not `ref.etag`;
        a copy of another size is deleted (CheckpointChanged)."""
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

    def list_records_after(self, prefix: str, after: str) -> list[str]:
        """Keys of the records below `prefix` that sort after the key `after`, sorted (S3:
        one listing from `StartAfter`; elsewhere the names are filtered)."""
        return [k for k in self.list_records(prefix) if k > after]

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
        when there was no such manifest. A journal hint and the tombstone are written before
        the manifest disappears, so a GC that misses the manifest in its listing finds the
        tombstone, and a catalog that lists only what changed finds the hint."""

        try:
            data = self.get_manifest(stream, snapshot_id)
        except NotFoundError:
            return False
        self._journal(stream, DELETED, snapshot_id)
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

    def refresh_blob(self, blob: str) -> bool:
        """Start a present blob's age again, so GC's grace period covers a writer about to
        rely on it (writer rule 4); False when the blob is absent (store it instead)."""
        raise NotImplementedError

    def iter_blob_info(self) -> Iterator[BlobInfo]:
        """Every stored blob with its size and last write, streamed (never the whole listing in memory)."""
        raise NotImplementedError

    def blob_modified(self, blob: str) -> float | None:
        """The blob's last write (or refresh) in epoch seconds, read now; None when it is absent."""
        raise NotImplementedError

    def delete_blob(self, blob: str, *, written_before: float,
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


def file_uri_path(url: str, what: str = "file store URL") -> str:
    """The absolute path of `file:/abs`, `file:///abs` or `file://localhost/abs` (the forms
    Hadoop and Spark print); a relative one or another host is refused, never resolved
    against the current directory."""
    rest = url[len("file:") :]
    if rest.startswith("//"):
        host, _, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise UsageError(
                f"invalid {what} {url!r}: {host!r} would be a host name, not part of the path",
                hint=f"use three slashes for an absolute path: file:///{host}/{path}",
            )
        rest = "/" + path
    if not rest.startswith("/"):
        raise UsageError(
            f"invalid {what} {url!r}: the path is relative",
            hint="use an absolute path: file:///abs/path or file:/abs/path",
        )
    return rest
