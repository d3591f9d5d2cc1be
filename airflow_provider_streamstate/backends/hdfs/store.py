"""A snapshot store in HDFS (`hdfs://namenode:8020/path`): where a Hadoop platform keeps
what its Spark-on-YARN streams need, reached through WebHDFS (backends/hdfs/webhdfs.py).

The layout is the one every store has (engine/stores/base.py). Every write goes to `tmp/`
below the store's root first and is renamed into place; HDFS renames are atomic and a
rename onto an existing file fails, so a crash leaves at most an orphan temp file, never a
partial blob or manifest, and of two writers of one manifest or record exactly one wins.
Blobs are hashed as they are streamed to the NameNode's DataNodes and only renamed to
their name when the bytes hash to it. Ages (GC's grace period) are HDFS modification
times, restarted by `SETTIMES`. The GC lease's compare-and-swap is a create-only file per
version (`gc/lease.json.d/<version>`): of two writers of the next version exactly one wins,
and version 1 is kept, so the record is created once.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_streamstate.backends.hdfs.webhdfs import (
    HdfsPath,
    WebHdfs,
    reach_from_spark_conf,
    spark_access,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import CHUNK
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
    BlobInfo,
    ManifestExistsError,
    RecordChanged,
    SnapshotStore,
    StaleTemp,
    StoreOptions,
    blob_key,
    manifest_key,
)

TMP = "tmp"
KEEP_VERSIONS = 2  # of a compare-and-swap record: the current one, and the one a slow reader may still read


class HdfsStore(SnapshotStore):
    """Blobs, manifests and records as files of an HDFS directory."""

    hashes_while_storing = True

    def __init__(self, url: str, *, client: WebHdfs | None = None) -> None:
        self.root = HdfsPath.parse(url)
        self.url = self.root.uri
        self.client = client if client is not None else WebHdfs.for_authority(self.root.authority)

    def _path(self, rel: str) -> str:
        return self.root.join(rel).path

    def _tmp(self, suffix: str = "part") -> str:
        return self._path(f"{TMP}/{uuid.uuid4().hex}.{suffix}")

    # --- capabilities ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str | None:
        return self.client.urls[0]

    def location_of(self, rel: str) -> str:
        return self.root.join(rel).uri

    def checkpoint_connection(self, location: str) -> Any:
        same = location.startswith("hdfs://") and HdfsPath.parse(location).authority == self.root.authority
        return self.client if same else None

    def spark_access(self, env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        return spark_access(self.client, self.root.authority, env)

    # --- blobs -------------------------------------------------------------------------------

    def has_blob(self, blob: str) -> bool:
        return self.client.status(self._path(blob_key(blob))) is not None

    def _upload_hashing(self, src: BinaryIO) -> tuple[str, str, int]:
        """Stream `src` into a temp file, hashing it: (temp path, sha256, size)."""
        tmp = self._tmp()
        h = hashlib.sha256()
        n = 0

        def chunks() -> Iterator[bytes]:
            nonlocal n
            while chunk := src.read(CHUNK):
                check_cancelled()
                h.update(chunk)
                n += len(chunk)
                yield chunk

        try:
            self.client.create(tmp, chunks())
        except BaseException:
            self.client.delete(tmp)
            raise
        return tmp, h.hexdigest(), n

    def _publish_blob(self, tmp: str, blob: str, size: int) -> int:
        """Give a complete temp file its blob name; exactly one concurrent writer wins."""
        final = self._path(blob_key(blob))
        self.client.mkdirs(final.rpartition("/")[0])
        if self.client.rename(tmp, final):
            return size
        self.client.delete(tmp)  # stored by another writer: the same bytes
        return 0

    def store_file(self, source: Path) -> tuple[str, int, int]:
        with open(source, "rb") as src:
            tmp, digest, size = self._upload_hashing(src)
        return digest, size, self._publish_blob(tmp, digest, size)

    def put_blob(self, digest: str, source: Path, size: int) -> int:
        if self.has_blob(digest):
            return 0
        got, _, written = self.store_file(source)
        if got != digest:
            # What was stored is named by its own content (an orphan for GC), never by `digest`.
            raise CheckpointChanged(f"{source} changed while it was being stored (sha256 {got[:12]} != {digest[:12]})")
        return written

    def put_blob_stream(self, blob: str, src: BinaryIO, size: int, *, sha256: str | None = None) -> int:
        if self.has_blob(blob):
            return 0
        expected = sha256 or blob
        tmp, got, n = self._upload_hashing(src)
        if got != expected or n != size:
            self.client.delete(tmp)
            raise CorruptionError(
                f"the bytes read for blob {blob} hash to {got} ({n} bytes, expected {expected}, {size} bytes)",
                hint="the source copy of this blob is damaged",
            )
        return self._publish_blob(tmp, blob, n)

    def open_blob(self, blob: str) -> AbstractContextManager[BinaryIO]:
        @contextmanager
        def opened() -> Iterator[BinaryIO]:
            try:
                cm = self.client.open(self._path(blob_key(blob)))
                f = cm.__enter__()
            except FileNotFoundError:
                raise MissingBlobError(
                    f"blob {blob} is missing from {self.url}",
                    hint="restore another snapshot, or re-replicate this one from a healthy store",
                ) from None
            try:
                yield f
            finally:
                cm.__exit__(None, None, None)

        return opened()

    def read_blob_range(self, blob: str, offset: int, length: int) -> bytes:
        """One WebHDFS OPEN with `offset` and `length`."""
        if length <= 0:
            return b""
        try:
            return self.client.read(self._path(blob_key(blob)), offset=offset, length=length)
        except FileNotFoundError:
            raise MissingBlobError(
                f"blob {blob} is missing from {self.url}",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            ) from None

    def _shards(self, prefix: str) -> list[str]:
        entries = self.client.list(self._path(prefix)) or []
        return sorted(e["pathSuffix"] for e in entries if e.get("type") == "DIRECTORY")

    def iter_blob_info(self) -> Iterator[BlobInfo]:
        for prefix in BLOB_PREFIXES:
            for shard in self._shards(prefix):
                entries = self.client.list(self._path(f"{prefix}/{shard}")) or []
                for e in sorted(entries, key=lambda e: e["pathSuffix"]):
                    if e.get("type") == "FILE":
                        yield BlobInfo(e["pathSuffix"], int(e["length"]), int(e["modificationTime"]) / 1000)

    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        for info in self.iter_blob_info():
            yield info.digest, info.size

    def refresh_blob(self, blob: str) -> bool:
        return self.client.set_modified(self._path(blob_key(blob)), int(time.time() * 1000))

    def blob_modified(self, blob: str) -> float | None:
        s = self.client.status(self._path(blob_key(blob)))
        return None if s is None else int(s["modificationTime"]) / 1000

    def delete_blob(self, blob: str, *, written_before: float,
                    still_held: Callable[[], None] | None = None) -> bool:
        """Rename the blob out of its name first (atomic; a rename keeps its modification
        time), then check its age on the renamed file: a writer that refreshed it before the
        rename is seen and the blob is put back; one that refreshes it after finds it absent
        and stores it again."""
        final = self._path(blob_key(blob))
        modified = self.blob_modified(blob)
        if modified is None or modified >= written_before:
            return False
        doomed = self._tmp("gc")
        self.client.mkdirs(doomed.rpartition("/")[0])
        if still_held is not None:
            still_held()
        if not self.client.rename(final, doomed):
            return False  # another GC got there first
        s = self.client.status(doomed)
        if s is not None and int(s["modificationTime"]) / 1000 >= written_before:  # refreshed meanwhile
            self.client.rename(doomed, final)  # false: stored again meanwhile, the same content
            self.client.delete(doomed)
            return False
        self.client.delete(doomed)
        return True

    def iter_stale_temp(self, written_before: float) -> Iterator[StaleTemp]:
        for e in self.client.list(self._path(TMP)) or []:
            modified = int(e.get("modificationTime", 0)) / 1000
            if e.get("type") == "FILE" and modified < written_before:
                yield StaleTemp(f"{TMP}/{e['pathSuffix']}", int(e.get("length", 0)), modified)

    def delete_temp(self, temp: StaleTemp) -> None:
        self.client.delete(self._path(temp.key))

    # --- manifests and records ---------------------------------------------------------------

    def _publish_once(self, key: str, data: bytes, *, what: str) -> None:
        """Write `data` at `key` atomically, never overwriting: the commit point of a write."""
        tmp = self._tmp("json")
        self.client.create(tmp, data)
        final = self._path(key)
        self.client.mkdirs(final.rpartition("/")[0])
        if not self.client.rename(tmp, final):
            self.client.delete(tmp)
            raise ManifestExistsError(f"{what} already exists in {self.url}")

    def _put_manifest_object(self, stream: str, snapshot_id: str, data: bytes) -> None:
        check_cancelled()  # the commit point of a snapshot: a cancelled one publishes nothing
        self._publish_once(manifest_key(stream, snapshot_id), data, what=f"snapshot {snapshot_id} of {stream}")

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        try:
            return self.client.read(self._path(manifest_key(stream, snapshot_id)))
        except FileNotFoundError:
            raise NotFoundError(
                f"no snapshot {snapshot_id} of stream {stream} in {self.url}",
                hint=f"list them with `streamstate snapshot list --store {self.url} --stream {stream}`",
            ) from None

    def _names(self, rel_dir: str, *, files: bool = True) -> list[str]:
        kind = "FILE" if files else "DIRECTORY"
        return sorted(e["pathSuffix"] for e in self.client.list(self._path(rel_dir)) or [] if e.get("type") == kind)

    def list_snapshot_ids(self, stream: str) -> list[str]:
        return sorted(n[: -len(MANIFEST_SUFFIX)] for n in self._names(f"{STREAMS_PREFIX}/{stream}/snapshots")
                      if n.endswith(MANIFEST_SUFFIX))

    def list_streams(self) -> list[str]:
        return self._names(STREAMS_PREFIX, files=False)

    def put_record(self, key: str, data: bytes) -> None:
        self._publish_once(key, data, what=f"record {key}")

    def get_record(self, key: str) -> bytes | None:
        try:
            return self.client.read(self._path(key))
        except FileNotFoundError:
            return None

    def list_records(self, prefix: str) -> list[str]:
        return sorted(f"{prefix.rstrip('/')}/{n}" for n in self._names(prefix) if n.endswith(MANIFEST_SUFFIX))

    def list_record_tree(self, prefix: str) -> list[str]:
        out: list[str] = []
        stack = [prefix.rstrip("/")]
        while stack:
            rel = stack.pop()
            for e in self.client.list(self._path(rel)) or []:
                child = f"{rel}/{e['pathSuffix']}"
                if e.get("type") == "DIRECTORY":
                    stack.append(child)
                elif child.endswith(MANIFEST_SUFFIX):
                    out.append(child)
        return sorted(out)

    def replace_record(self, key: str, data: bytes) -> None:
        tmp = self._tmp("json")
        self.client.create(tmp, data)
        final = self._path(key)
        self.client.mkdirs(final.rpartition("/")[0])
        self.client.rename(tmp, final, overwrite=True)

    def delete_record(self, key: str) -> None:
        if not self.client.delete(self._path(key)):  # else a compare-and-swap record: its versions
            self.client.delete(self._path(f"{key}.d"), recursive=True)

    def _delete_manifest_object(self, stream: str, snapshot_id: str) -> None:
        self.delete_record(manifest_key(stream, snapshot_id))

    # --- compare-and-swap records (the GC lease) ---------------------------------------------

    def _versions(self, key: str) -> list[int]:
        return sorted(int(n) for n in self._names(f"{key}.d") if n.isdigit())

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The newest version file of the record; its number is the version."""
        for _ in range(3):
            versions = self._versions(key)
            if not versions:
                return None
            try:
                return self.client.read(self._path(f"{key}.d/{versions[-1]:010d}")), str(versions[-1])
            except FileNotFoundError:
                continue  # pruned by a writer of a newer version meanwhile: read again
        raise RecordChanged(f"record {key} in {self.url} kept changing while it was read")

    def swap_record(self, key: str, data: bytes, *, expect: str | None) -> str:
        """Create version `expect + 1` create-only: it exists when another writer swapped
        first (RecordChanged), or when `expect` is None and the record exists."""
        version = int(expect) + 1 if expect is not None else 1
        try:
            self._publish_once(f"{key}.d/{version:010d}", data, what=f"version {version} of record {key}")
        except ManifestExistsError:
            raise RecordChanged(f"record {key} in {self.url} changed since it was read") from None
        for old in self._versions(key):  # version 1 stays: it is what makes a second creation fail
            if 1 < old <= version - KEEP_VERSIONS:
                self.client.delete(self._path(f"{key}.d/{old:010d}"))
        return str(version)


def open_hdfs(url: str, options: StoreOptions) -> HdfsStore:
    """`hdfs://namenode[:port]/path`, reached through WebHDFS (backends/hdfs/webhdfs.py): with
    the given client (an Airflow connection's), else, in a Spark application's driver, the
    NameNodes its submitter gave it (`spark_access`), else one configured from HADOOP_CONF_DIR."""
    client = options.connection
    if client is not None and not isinstance(client, WebHdfs):
        raise UsageError(f"an HDFS store ({url}) is reached through a WebHDFS client, not a {type(client).__name__}",
                         hint="give an hdfs connection (conn_type streamstate_hdfs), or none (HADOOP_CONF_DIR)")
    if client is None and options.spark_conf is not None:
        access = reach_from_spark_conf(options.spark_conf, url)
        client = access.connection() if access is not None else None
    return HdfsStore(url, client=client)
