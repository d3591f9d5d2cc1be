"""`FlatStore`: one directory, one file per object (see the package docstring)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, unquote

from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    MissingBlobError,
    NotFoundError,
    UsageError,
)
from airflow_provider_streamstate.engine.stores.base import (
    BLOB_PREFIXES,
    MANIFEST_SUFFIX,
    STREAMS_PREFIX,
    ManifestExistsError,
    SnapshotStore,
    StoreOptions,
    blob_key,
    manifest_key,
)

CHUNK = 1 << 20


class FlatStore(SnapshotStore):
    """Every object a file of `root`, named by its percent-encoded key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"flat://{root}"
        root.mkdir(parents=True, exist_ok=True)

    def _file(self, key: str) -> Path:
        return self.root / quote(key, safe="")

    def _keys(self, prefix: str) -> list[str]:
        return sorted(k for k in (unquote(n) for n in os.listdir(self.root) if not n.startswith(".")) if
                      k.startswith(prefix))

    def _create_once(self, key: str, chunks: Iterator[bytes]) -> tuple[bool, str, int]:
        """Write `chunks` under `key` unless it exists: (written, sha256, size)."""
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        h, n = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    n += len(chunk)
                    f.write(chunk)
            try:
                os.link(tmp, self._file(key))
            except FileExistsError:
                return False, h.hexdigest(), n
            return True, h.hexdigest(), n
        finally:
            tmp.unlink(missing_ok=True)

    # --- blobs ---------------------------------------------------------------------------

    def has_blob(self, blob: str) -> bool:
        return self._file(blob_key(blob)).is_file()

    def put_blob(self, digest: str, source: Path, size: int) -> int:
        if self.has_blob(digest):
            return 0
        data = source.read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != digest:
            raise CheckpointChanged(f"{source} changed while it was being stored")
        written, _, n = self._create_once(blob_key(digest), iter([data]))
        return n if written else 0

    def put_blob_stream(self, blob: str, src: BinaryIO, size: int, *, sha256: str | None = None) -> int:
        if self.has_blob(blob):
            return 0
        expected = sha256 or blob
        data = src.read()
        got = hashlib.sha256(data).hexdigest()
        if got != expected or len(data) != size:
            raise CorruptionError(f"the bytes read for blob {blob} hash to {got} ({len(data)} bytes)",
                                  hint="the source copy of this blob is damaged")
        written, _, n = self._create_once(blob_key(blob), iter([data]))
        return n if written else 0

    def open_blob(self, blob: str) -> AbstractContextManager[BinaryIO]:
        try:
            return open(self._file(blob_key(blob)), "rb")
        except FileNotFoundError:
            raise MissingBlobError(f"blob {blob} is missing from {self.url}",
                                   hint="restore another snapshot, or re-replicate this one") from None

    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        for prefix in BLOB_PREFIXES:
            for key in self._keys(prefix + "/"):
                yield key.rsplit("/", 1)[1], self._file(key).stat().st_size

    # --- manifests and records -------------------------------------------------------------

    def _put_manifest_object(self, stream: str, snapshot_id: str, data: bytes) -> None:
        self.put_record(manifest_key(stream, snapshot_id), data)

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        data = self.get_record(manifest_key(stream, snapshot_id))
        if data is None:
            raise NotFoundError(f"no snapshot {snapshot_id} of stream {stream} in {self.url}")
        return data

    def list_snapshot_ids(self, stream: str) -> list[str]:
        prefix = f"{STREAMS_PREFIX}/{stream}/snapshots/"
        return sorted(k[len(prefix):-len(MANIFEST_SUFFIX)] for k in self._keys(prefix)
                      if "/" not in k[len(prefix):] and k.endswith(MANIFEST_SUFFIX))

    def list_streams(self) -> list[str]:
        return sorted({k.split("/")[1] for k in self._keys(STREAMS_PREFIX + "/")})

    def put_record(self, key: str, data: bytes) -> None:
        written, _, _ = self._create_once(key, iter([data]))
        if not written:
            raise ManifestExistsError(f"{key} already exists in {self.url}")

    def get_record(self, key: str) -> bytes | None:
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError:
            return None

    def list_records(self, prefix: str) -> list[str]:
        prefix = prefix.rstrip("/") + "/"
        return [k for k in self._keys(prefix) if "/" not in k[len(prefix):] and k.endswith(MANIFEST_SUFFIX)]

    def list_record_tree(self, prefix: str) -> list[str]:
        return [k for k in self._keys(prefix.rstrip("/") + "/") if k.endswith(MANIFEST_SUFFIX)]

    def replace_record(self, key: str, data: bytes) -> None:
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        tmp.write_bytes(data)
        os.replace(tmp, self._file(key))

    def delete_record(self, key: str) -> None:
        self._file(key).unlink(missing_ok=True)

    def _delete_manifest_object(self, stream: str, snapshot_id: str) -> None:
        self.delete_record(manifest_key(stream, snapshot_id))


def open_flat(url: str, options: StoreOptions) -> FlatStore:
    """`flat:///abs/path` (no connection: a directory of this host)."""
    options.refuse_connection(url)
    path = url[len("flat://"):]
    if not path.startswith("/"):
        raise UsageError(f"invalid flat store URL {url!r}: the path is relative", hint="write it as flat:///abs/path")
    return FlatStore(Path(path))
