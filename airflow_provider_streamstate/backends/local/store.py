"""A snapshot store on a local (or mounted) filesystem: the embedded default."""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO

from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import copy_hashing
from airflow_provider_streamstate.engine.core.durability import fsync_path, write_atomically, write_file
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
    file_uri_path,
    manifest_key,
)


class LocalStore(SnapshotStore):
    """Blobs and manifests as files. Every write goes to `tmp/` first and is renamed into
    place, so a crash leaves at most an orphan temp file, never a partial blob or manifest."""

    hashes_while_storing = True

    def __init__(self, root: Path | str, *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().resolve()
        self.url = f"file://{self.root}"
        self.fsync = fsync
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"store {self.root} exists and is not a directory",
                             hint="give --store a directory, or a path that does not exist yet")
        self._tmp = self.root / "tmp"
        self._unsynced_dirs: set[Path] = set()  # blob directories with new entries
        self._lock = threading.Lock()

    def _tmp_path(self) -> Path:
        self._tmp.mkdir(parents=True, exist_ok=True)
        return self._tmp / f"{uuid.uuid4().hex}.part"

    def location_of(self, rel: str) -> str:
        return str(self.root / rel)

    def has_blob(self, blob: str) -> bool:
        return (self.root / blob_key(blob)).is_file()

    def _durable_later(self, *dirs: Path) -> None:
        """Directories whose entries must reach the disk before the next manifest does."""
        with self._lock:
            self._unsynced_dirs.update(dirs)

    def _makedirs(self, d: Path) -> list[Path]:
        """`mkdir -p d`; returns the parents whose entries changed (each new directory's parent)."""
        missing = []
        p = d
        while not p.exists():
            missing.append(p)
            p = p.parent
        d.mkdir(parents=True, exist_ok=True)
        return [m.parent for m in missing]

    def put_blob(self, digest: str, source: Path, size: int) -> int:
        if self.has_blob(digest):
            # Perhaps written by another process that has not made it durable yet: a manifest
            # naming it must not reach the disk before the blob's name does.
            self._durable_later((self.root / blob_key(digest)).parent)
            return 0
        got, _, written = self.store_file(source)
        if got != digest:
            # What was stored is named by its own content (an orphan for GC), never by `digest`.
            raise CheckpointChanged(f"{source} changed while it was being stored (sha256 {got[:12]} != {digest[:12]})")
        return written

    def put_blob_stream(self, blob: str, src: BinaryIO, size: int, *, sha256: str | None = None) -> int:
        if self.has_blob(blob):
            self._durable_later((self.root / blob_key(blob)).parent)
            return 0
        expected = sha256 or blob
        tmp = self._tmp_path()
        try:
            with open(tmp, "wb") as dst:
                got, n = copy_hashing(src, dst)
                if self.fsync:
                    dst.flush()
                    os.fsync(dst.fileno())
            if got != expected or n != size:
                raise CorruptionError(
                    f"the bytes read for blob {blob} hash to {got} ({n} bytes, expected {expected}, {size} bytes)",
                    hint="the source copy of this blob is damaged",
                )
            return self._publish_blob(tmp, blob, n)
        finally:
            tmp.unlink(missing_ok=True)

    def _publish_blob(self, tmp: Path, blob: str, size: int) -> int:
        """Give a fully written temp file its blob name; exactly one concurrent writer wins."""
        final = self.root / blob_key(blob)
        self._durable_later(*self._makedirs(final.parent))
        try:
            os.link(tmp, final)
        except FileExistsError:
            self._durable_later(final.parent)  # stored by another writer, maybe not yet durable
            return 0
        self._durable_later(final.parent)
        return size

    def store_file(self, source: Path) -> tuple[str, int, int]:
        tmp = self._tmp_path()
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                digest, size = copy_hashing(src, dst)
                if self.fsync:
                    dst.flush()
                    os.fsync(dst.fileno())
            return digest, size, self._publish_blob(tmp, digest, size)
        finally:
            tmp.unlink(missing_ok=True)

    def open_blob(self, blob: str) -> AbstractContextManager[BinaryIO]:
        try:
            return open(self.root / blob_key(blob), "rb")
        except FileNotFoundError:
            raise MissingBlobError(
                f"blob {blob} is missing from {self.url}",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            ) from None

    def read_blob_range(self, blob: str, offset: int, length: int) -> bytes:
        with self.open_blob(blob) as f:
            f.seek(offset)
            return f.read(length)

    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        for info in self.iter_blob_info():
            yield info.digest, info.size

    def _put_manifest_object(self, stream: str, snapshot_id: str, data: bytes) -> None:
        check_cancelled()  # the commit point of a snapshot: a cancelled one publishes nothing
        if self.fsync:
            # The blobs' names must be durable before the manifest that points at them.
            with self._lock:
                dirs, self._unsynced_dirs = self._unsynced_dirs, set()
            for d in dirs:
                fsync_path(d)
        self._publish_once(
            self.root / manifest_key(stream, snapshot_id), data, what=f"snapshot {snapshot_id} of {stream}"
        )

    def _publish_once(self, final: Path, data: bytes, *, what: str) -> None:
        """Write `data` at `final` atomically, never overwriting: the commit point of a write."""
        new_dirs = self._makedirs(final.parent)
        if self.fsync:
            for d in new_dirs:
                fsync_path(d)  # the path to the manifest is durable before the manifest is
        tmp = self._tmp_path()
        try:
            write_file(tmp, data, fsync=self.fsync)
            try:
                os.link(tmp, final)  # atomic and never overwrites
            except FileExistsError:
                raise ManifestExistsError(f"{what} already exists in {self.url}") from None
            if self.fsync:
                fsync_path(final.parent)
        finally:
            tmp.unlink(missing_ok=True)

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        try:
            return (self.root / manifest_key(stream, snapshot_id)).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(
                f"no snapshot {snapshot_id} of stream {stream} in {self.url}",
                hint=f"list them with `streamstate snapshot list --store {self.url} --stream {stream}`",
            ) from None

    def list_snapshot_ids(self, stream: str) -> list[str]:
        d = self.root / STREAMS_PREFIX / stream / "snapshots"
        if not d.is_dir():
            return []
        return sorted(n[: -len(MANIFEST_SUFFIX)] for n in os.listdir(d) if n.endswith(MANIFEST_SUFFIX))

    def list_streams(self) -> list[str]:
        d = self.root / STREAMS_PREFIX
        return sorted(os.listdir(d)) if d.is_dir() else []

    def put_record(self, key: str, data: bytes) -> None:
        self._publish_once(self.root / key, data, what=f"record {key}")

    def get_record(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None

    def list_records(self, prefix: str) -> list[str]:
        d, top = self.root / prefix, prefix.rstrip("/")
        if not d.is_dir():
            return []
        return sorted(f"{top}/{n}" for n in os.listdir(d) if n.endswith(MANIFEST_SUFFIX))

    def list_record_tree(self, prefix: str) -> list[str]:
        out: list[str] = []
        dirs = [prefix.rstrip("/")]
        while dirs:  # os.walk without its lstat per directory: entries' types come with the listing
            rel = dirs.pop()
            try:
                entries = list(os.scandir(self.root / rel))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    dirs.append(f"{rel}/{e.name}")
                elif e.name.endswith(MANIFEST_SUFFIX):
                    out.append(f"{rel}/{e.name}")
        return sorted(out)

    # --- deletion (retention and GC) ------------------------------------------------------

    def replace_record(self, key: str, data: bytes) -> None:
        final = self.root / key
        new_dirs = self._makedirs(final.parent)
        write_atomically(final, data, fsync=self.fsync, tmp=self._tmp_path())
        if self.fsync:
            for d in new_dirs:
                fsync_path(d)

    def delete_record(self, key: str) -> None:
        path = self.root / key
        path.unlink(missing_ok=True)
        if self.fsync and path.parent.is_dir():
            fsync_path(path.parent)

    def _delete_manifest_object(self, stream: str, snapshot_id: str) -> None:
        self.delete_record(manifest_key(stream, snapshot_id))

    def refresh_blob(self, blob: str) -> bool:
        try:
            os.utime(self.root / blob_key(blob))  # its age starts again
        except FileNotFoundError:
            return False
        return True

    def iter_blob_info(self) -> Iterator[BlobInfo]:
        for prefix in BLOB_PREFIXES:
            top = self.root / prefix
            if not top.is_dir():
                continue
            for shard in sorted(os.listdir(top)):
                try:
                    entries = sorted(os.scandir(top / shard), key=lambda e: e.name)
                except FileNotFoundError:
                    continue
                for e in entries:
                    try:
                        st = e.stat()
                    except FileNotFoundError:
                        continue  # deleted by a concurrent GC
                    yield BlobInfo(e.name, st.st_size, st.st_mtime)

    def blob_modified(self, blob: str) -> float | None:
        try:
            return (self.root / blob_key(blob)).stat().st_mtime
        except FileNotFoundError:
            return None

    def delete_blob(self, blob: str, *, written_before: float,
                    still_held: Callable[[], None] | None = None) -> bool:
        """Rename the blob out of its name first (atomic), then check its age on the renamed
        file: a writer that refreshed it before the rename is seen and the blob is put back;
        one that refreshes it after finds it absent and stores it again."""
        final = self.root / blob_key(blob)
        st = self.blob_modified(blob)
        if st is None or st >= written_before:
            return False
        self._tmp.mkdir(parents=True, exist_ok=True)
        doomed = self._tmp / f"{uuid.uuid4().hex}.gc"
        if still_held is not None:
            still_held()
        try:
            os.rename(final, doomed)
        except FileNotFoundError:
            return False  # another GC got there first
        try:
            if doomed.stat().st_mtime >= written_before:  # refreshed between the stat and the rename
                try:
                    os.link(doomed, final)
                except FileExistsError:
                    pass  # stored again meanwhile: same content
                return False
        finally:
            doomed.unlink(missing_ok=True)
        if self.fsync:
            fsync_path(final.parent)
        return True

    def iter_stale_temp(self, written_before: float) -> Iterator[StaleTemp]:
        if not self._tmp.is_dir():
            return
        for e in os.scandir(self._tmp):
            try:
                st = e.stat()
            except FileNotFoundError:
                continue  # finished meanwhile
            if st.st_mtime < written_before:
                yield StaleTemp(f"tmp/{e.name}", st.st_size, st.st_mtime)

    def delete_temp(self, temp: StaleTemp) -> None:
        (self.root / temp.key).unlink(missing_ok=True)

    # --- compare-and-swap records (the GC lease) ---------------------------------------------

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The version is the content's sha256 (lease records carry a unique owner)."""
        data = self.get_record(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def swap_record(self, key: str, data: bytes, *, expect: str | None) -> str:
        """Read, compare and replace under an exclusive `flock` on `<key>.lock`: every
        process that swaps this record on this host (or on a filesystem with working
        POSIX locks) sees the others' writes in order."""
        final = self.root / key
        self._makedirs(final.parent)
        with open(final.with_name(final.name + ".lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            current = self.read_versioned(key)
            if (current[1] if current else None) != expect:
                raise RecordChanged(f"record {key} in {self.url} changed since it was read")
            self.replace_record(key, data)
        return hashlib.sha256(data).hexdigest()


def open_local(url: str, options: StoreOptions) -> LocalStore:
    """`file:///abs`, `file:/abs` or an absolute path."""
    options.refuse_connection(url)
    return LocalStore(file_uri_path(url) if url.startswith("file:") else url)
