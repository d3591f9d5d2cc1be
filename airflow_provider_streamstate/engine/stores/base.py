"""The snapshot store interface: content-addressed blobs plus per-stream manifests.

Layout (the same on every backend, below the store's root or prefix):

    blobs/sha256/<first two hex digits>/<sha256>     file contents, stored once
    streams/<stream>/snapshots/<snapshot id>.json    manifests, written last and atomically
    streams/<stream>/<kind>/<name>.json              small write-once records beside them
                                                     (timelines; later validations, pins...)

A blob's key is its content's sha256, so identical files across snapshots and streams
are stored once and any blob can be verified against its own name.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO

from airflow_provider_streamstate.engine.errors import StreamstateError

BLOB_PREFIX = "blobs/sha256"
STREAMS_PREFIX = "streams"
MANIFEST_SUFFIX = ".json"


class ManifestExistsError(StreamstateError):
    """A manifest with this id is already in the store (manifests are never overwritten)."""


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


class SnapshotStore(ABC):
    """Where snapshots live. Implementations are safe to call from several threads."""

    url: str
    # True when `store_file` can hash while it stores (one read instead of two).
    hashes_while_storing: bool = False

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
