"""A checkpoint in HDFS (`hdfs://namenode:8020/path`), where Spark-on-YARN streams keep it,
read and written through WebHDFS (backends/hdfs/webhdfs.py).

Reading. A file's identity is (length, modification time, inode id): Spark writes every
checkpoint file under a temp name and renames it into place, so a file rewritten under the
same name is a new inode. `open_checked` compares the inode and length before the read and
again after it: a file Spark replaced meanwhile fails the read (CheckpointChanged, the cut
is planned again). Directory listings are cached for one plan.

Records are files created complete under a hidden temp name and renamed into place:
`RENAME` without overwrite is create-only (of racing writers exactly one wins), with
`renameoptions=OVERWRITE` it replaces atomically.

Restoring. Every file is written into a staging directory beside the target, hashed as it
is streamed from the store and checked against its sha256 (a mismatch deletes it and fails
the restore), the staging is listed and compared with the manifest, and a swap then moves
it in file by file (RENAME: no byte is copied) behind a fence (engine/checkpoint/swap.py):
HDFS has no atomic exchange of two directories, and two renames would leave a moment with
no checkpoint at the path, where Spark would start a new query from nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, BinaryIO

from airflow_provider_streamstate.backends.hdfs.webhdfs import HdfsPath, WebHdfs, spark_access
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import (
    MAX_RECORD_BYTES,
    CheckpointFS,
    FileStat,
    Staging,
    listing_mismatch,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import CHUNK
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, CorruptionError, UsageError
from airflow_provider_streamstate.engine.core.manifest import FileEntry
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.streamstate-(?P<kind>restore|old)-[0-9a-f]+$")  # old: before swaps


def open_hdfs(location: str, client: Any = None, conn_id: str | None = None) -> HdfsCheckpointFS:
    """The filesystem of an `hdfs://` location, through `client` (a WebHdfs), else one
    configured from HADOOP_CONF_DIR."""
    where = HdfsPath.parse(location)
    if not isinstance(client, WebHdfs) or client.authority not in ("", where.authority):
        client = WebHdfs.for_authority(where.authority)  # none given, or another service's connection
    return HdfsCheckpointFS(where, client, given=location.rstrip("/"))


def _stat(s: dict[str, Any]) -> FileStat:
    return FileStat(int(s.get("length", 0)), int(s.get("modificationTime", 0)) * 1_000_000,
                    str(s.get("fileId", "")) or None, s.get("type") == "FILE")


class HdfsCheckpointFS(CheckpointFS):
    """A checkpoint directory in HDFS."""

    def __init__(self, where: HdfsPath, client: WebHdfs, *, given: str | None = None) -> None:
        self.where_ = where
        self.client = client
        self.location = where.uri
        self.spark_location = given or where.uri
        self._dirs: dict[str, list[dict[str, Any]] | None] = {}

    def path(self, rel: str) -> str:
        return self.where_.join(rel).path

    def spark_access(self, env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        """A connection's NameNodes and user for the application (`webhdfs.spark_access`)."""
        return spark_access(self.client, self.where_.authority, env)

    def as_user(self, user: str) -> HdfsCheckpointFS:
        if not user or user == self.client.user:
            return self
        return HdfsCheckpointFS(self.where_, replace(self.client.access(), user=user).connection(),
                                given=self.spark_location)

    # --- reading -------------------------------------------------------------------------

    def refresh(self) -> None:
        self._dirs.clear()

    def _list(self, rel: str) -> list[dict[str, Any]] | None:
        if rel not in self._dirs:
            self._dirs[rel] = self.client.list(self.path(rel))
        return self._dirs[rel]

    def exists(self) -> bool:
        return self.client.status(self.path("")) is not None

    def is_dir(self, rel: str) -> bool:
        entries = self._list(rel)
        if entries is None:
            return False
        if len(entries) == 1 and entries[0].get("pathSuffix") == "" and entries[0].get("type") == "FILE":
            return False  # LISTSTATUS of a file answers the file itself
        return True

    def listdir(self, rel: str) -> list[str]:
        entries = self._list(rel)
        if entries is None or not self.is_dir(rel):
            raise FileNotFoundError(rel)
        return sorted(e["pathSuffix"] for e in entries)

    def stat(self, rel: str) -> FileStat | None:
        parent, _, name = rel.rpartition("/")
        entries = self._list(parent)
        if entries is not None:
            for e in entries:
                if e.get("pathSuffix") == name:
                    return _stat(e)
            return None
        s = self.client.status(self.path(rel))
        return None if s is None else _stat(s)

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        entries = self._list(rel)
        if entries is None:
            return
        subdirs = sorted(e["pathSuffix"] for e in entries if e.get("type") == "DIRECTORY")
        files = sorted(e["pathSuffix"] for e in entries if e.get("type") == "FILE")
        yield rel, subdirs, files
        for d in subdirs:
            yield from self.walk(f"{rel}/{d}" if rel else d)

    def modified_times(self, rel_dir: str) -> dict[str, float]:
        entries = self.client.list(self.path(rel_dir))
        return {e["pathSuffix"]: int(e.get("modificationTime", 0)) / 1000 for e in entries or []
                if e.get("type") == "FILE"}

    @contextmanager
    def open_checked(self, rel: str, expected: FileStat) -> Iterator[BinaryIO]:
        def same() -> bool:
            s = self.client.status(self.path(rel))
            return s is not None and _stat(s).etag == expected.etag and int(s.get("length", -1)) == expected.size

        if expected.etag and not same():
            raise CheckpointChanged(f"{self.where(rel)}: the file changed since the plan listed it")
        with self.client.open(self.path(rel)) as f:
            yield f
        if expected.etag and not same():  # replaced while it was read: what was read may be the new one
            raise CheckpointChanged(f"{self.where(rel)}: the file changed while it was read")

    def read_range(self, rel: str, expected: FileStat, offset: int, length: int) -> bytes:
        """One WebHDFS OPEN with `offset` and `length`, the file's identity checked first."""
        if length <= 0:
            return b""
        s = self.client.status(self.path(rel))
        if s is None or (expected.etag and _stat(s).etag != expected.etag) or int(s.get("length", -1)) != expected.size:
            raise CheckpointChanged(f"{self.where(rel)}: the file changed since the plan listed it")
        return self.client.read(self.path(rel), offset=offset, length=length)

    # --- records -------------------------------------------------------------------------

    def read_record(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        try:
            return self.client.read(self.path(rel), length=limit + 1)
        except FileNotFoundError:
            return None

    def _temp(self, rel: str) -> str:
        parent, _, name = self.path(rel).rpartition("/")
        return f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"

    def write_record(self, rel: str, data: bytes, *, content_type: str = "application/json") -> None:
        tmp = self._temp(rel)
        self.client.create(tmp, data)
        if not self.client.rename(tmp, self.path(rel), overwrite=True):
            self.client.delete(tmp)
            raise CheckpointChanged(f"{self.where(rel)}: its temp file vanished before it was renamed")

    def create_record(self, rel: str, data: bytes) -> bool:
        tmp = self._temp(rel)
        self.client.create(tmp, data)
        won = self.client.rename(tmp, self.path(rel))  # false: it exists (another writer won)
        if not won:
            self.client.delete(tmp)
        return won

    def record_names(self, rel_dir: str) -> list[str]:
        entries = self.client.list(self.path(rel_dir))
        return sorted(e["pathSuffix"] for e in entries or [] if e.get("type") == "FILE"
                      and not e["pathSuffix"].startswith("."))

    def delete_record(self, rel: str) -> None:
        self.client.delete(self.path(rel))

    # --- writing -------------------------------------------------------------------------

    def child(self, rel: str) -> HdfsCheckpointFS:
        return HdfsCheckpointFS(self.where_.join(rel), self.client)

    def files(self) -> dict[str, int]:
        self.refresh()
        out: dict[str, int] = {}
        for d, _, names in self.walk(""):
            for name in names:
                st = self.stat(f"{d}/{name}" if d else name)
                if st is not None:
                    out[f"{d}/{name}" if d else name] = st.size
        return out

    def delete_all(self) -> int:
        n = len(self.files())
        self.client.delete(self.path(""), recursive=True)
        self.refresh()
        return n

    def relocated(self, location: str) -> HdfsCheckpointFS:
        where = HdfsPath.parse(location)
        if where.authority != self.where_.authority:
            raise UsageError(f"{location} is not on {self.where_.authority}, the NameNode of {self.location}",
                             hint="keep the copy beside the checkpoint, on the same HDFS")
        return HdfsCheckpointFS(where, self.client)

    def move_from(self, src: CheckpointFS, rel: str, *, exclusive: bool = False) -> bool:
        if not isinstance(src, HdfsCheckpointFS):
            raise UsageError(f"cannot move {rel} from {src.location} into {self.location}: another filesystem")
        dest = self.path(rel)
        self.client.mkdirs(dest.rpartition("/")[0])
        if self.client.rename(src.path(rel), dest, overwrite=not exclusive):
            self._dirs.clear()
            return True
        if self.client.status(src.path(rel)) is None:
            raise FileNotFoundError(src.where(rel))
        return False  # exclusive, and the destination exists

    def _sibling(self, kind: str) -> str:
        parent, _, name = self.where_.path.rpartition("/")
        return f"{parent}/.{name}.streamstate-{kind}-{os.getpid():x}{uuid.uuid4().hex[:8]}"

    def stage(self, *, fsync: bool = True, direct: bool = False, empty: bool = False) -> HdfsStaging:
        """Staging of crashed restores of this target is garbage: removed first (a swap that
        still needed one was finished before: engine/checkpoint/swap.py)."""
        if direct:
            return HdfsStaging(self, self.where_.path, direct=True)
        self.recover()
        return HdfsStaging(self, self._sibling("restore"), direct=False)

    def recover(self) -> list[str]:
        actions: list[str] = []
        parent, _, name = self.where_.path.rpartition("/")
        for e in self.client.list(parent or "/") or []:
            m = _LEFTOVER.match(e.get("pathSuffix", ""))
            if m and m.group("name") == name:
                self.client.delete(f"{parent}/{e['pathSuffix']}", recursive=True)
                actions.append(f"removed {e['pathSuffix']}")
        self.refresh()
        return actions


class HdfsStaging(Staging):
    """A staging directory beside the target (or the target itself, `direct`)."""

    target: HdfsCheckpointFS

    def __init__(self, target: HdfsCheckpointFS, path: str, *, direct: bool) -> None:
        self.target, self.dir, self.direct = target, path, direct
        self.client = target.client
        self._store: SnapshotStore | None = None

    def _path(self, rel: str) -> str:
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
            from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError

            raise UnsafeManifestError(f"manifest path {rel!r} escapes the restore target")
        return f"{self.dir}/{rel}"

    def write_blob(self, store: SnapshotStore, entry: FileEntry) -> None:
        self._store = store
        dest = self._path(entry.path)
        h = hashlib.sha256()
        n = 0

        def chunks() -> Iterator[bytes]:
            nonlocal n
            with store.open_blob(entry.blob_id) as src:
                while chunk := src.read(CHUNK):
                    check_cancelled()
                    h.update(chunk)
                    n += len(chunk)
                    yield chunk

        self.client.create(dest, chunks() if entry.size > CHUNK else b"".join(chunks()), overwrite=True)
        if h.hexdigest() != entry.sha256 or n != entry.size:
            self.client.delete(dest)
            raise CorruptionError(
                f"{entry.path}: stored blob {entry.blob_id} is corrupt (read {n} bytes with sha256 {h.hexdigest()})",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            )

    def copy(self, src_rel: str, entry: FileEntry) -> None:
        assert self._store is not None  # WebHDFS has no copy: the blob is streamed again, verified
        self.write_blob(self._store, entry)

    def put(self, rel: str, data: bytes) -> None:
        self.client.create(self._path(rel), data, overwrite=True)

    def check(self, want: dict[str, int]) -> None:
        staged = HdfsCheckpointFS(HdfsPath(self.target.where_.authority, self.dir), self.client).files()
        mismatch = listing_mismatch(staged, want)
        if mismatch:
            raise CorruptionError(f"the restored staging does not match the manifest ({mismatch.first_ones()})",
                                  hint="another writer may be using the target; retry the restore")

    def source(self) -> HdfsCheckpointFS:
        return HdfsCheckpointFS(HdfsPath(self.target.where_.authority, self.dir), self.client)

    def exchange(self) -> bool:
        """Into a target that does not exist (or is an empty directory) the staging is renamed
        whole: there was nothing to keep. Over a checkpoint HDFS has no exchange: False."""
        if self.direct:
            return True
        target = self.target.where_.path
        status = self.client.status(target)
        if status is not None:
            if status.get("type") != "DIRECTORY" or self.client.list(target):
                return False
            self.client.delete(target)
        parent = target.rpartition("/")[0]
        if parent:
            self.client.mkdirs(parent)
        if not self.client.rename(self.dir, target):
            raise CorruptionError(f"could not move the restored checkpoint to {self.target.location}",
                                  hint="another writer created it meanwhile; retry the restore with --force")
        self.target.refresh()
        return True

    def discard(self) -> None:
        if not self.direct:
            self.client.delete(self.dir, recursive=True)
