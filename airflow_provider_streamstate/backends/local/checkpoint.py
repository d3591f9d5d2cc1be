"""A checkpoint in a directory of this host's filesystem (local disk, or a shared mount).

Records are files replaced atomically (a temp file renamed over them) and created
create-only with a hard link of a complete temp file (atomic on NFS too). A restore
writes the new checkpoint into a staging directory beside the target, every byte checked
against its sha256 and fsynced, and exchanges it with the target in one atomic
`renameat2(RENAME_EXCHANGE)` where Linux has it; elsewhere a swap moves it in file by file
behind a fence (engine/checkpoint/swap.py): two renames of the directories would leave a
moment with no checkpoint at the path, where Spark would start a new query from nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from airflow_provider_streamstate.engine.checkpoint.filesystems.base import (
    MAX_RECORD_BYTES,
    SIDECAR_DIR,
    CheckpointFS,
    FileStat,
    Staging,
    given_path,
    pid_alive,
)
from airflow_provider_streamstate.engine.core.digest import copy_hashing
from airflow_provider_streamstate.engine.core.durability import (
    fsync_path,
    fsync_tree,
    write_atomically,
    write_file,
)
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import FileEntry
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.restore")


class LocalCheckpointFS(CheckpointFS):
    """A directory on a local or mounted filesystem. `root` is resolved (what the planner
    reads); `given` is the path as the caller named it (what Spark records)."""

    def __init__(self, root: Path, location: str | None = None, *, given: Path | None = None) -> None:
        self.root = root
        self.location = location or str(root)
        self.local_path = root
        self.given = given if given is not None else root
        self.spark_location = f"file:{self.given}"

    @property
    def shared_location(self) -> str:
        return str(self.given)

    # --- reading -------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.root.exists()

    def is_dir(self, rel: str) -> bool:
        return (self.root / rel).is_dir()

    def listdir(self, rel: str) -> list[str]:
        return os.listdir(self.root / rel)

    def stat(self, rel: str) -> FileStat | None:
        try:
            st = os.stat(self.root / rel)
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mtime_ns, None, stat.S_ISREG(st.st_mode))

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def modified_times(self, rel_dir: str) -> dict[str, float]:
        try:
            with os.scandir(self.root / rel_dir) as it:
                return {e.name: e.stat().st_mtime for e in it if e.is_file(follow_symlinks=False)}
        except (FileNotFoundError, NotADirectoryError):
            return {}

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        for dirpath, dirnames, filenames in os.walk(self.root / rel):
            dirnames.sort()
            yield Path(dirpath).relative_to(self.root).as_posix(), dirnames, filenames

    @contextmanager
    def open_checked(self, rel: str, expected: FileStat) -> Iterator[BinaryIO]:
        with open(self.root / rel, "rb") as f:
            yield f

    def read_range(self, rel: str, expected: FileStat, offset: int, length: int) -> bytes:
        """A seek and a read; the file's size and mtime checked against the plan's after it."""
        try:
            with open(self.root / rel, "rb") as f:
                f.seek(offset)
                data = f.read(length)
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            raise CheckpointChanged(f"{self.where(rel)} vanished since the plan listed it") from None
        if st.st_size != expected.size or (expected.mtime_ns and st.st_mtime_ns != expected.mtime_ns):
            raise CheckpointChanged(f"{self.where(rel)}: the file changed since the plan listed it")
        return data

    # --- records -------------------------------------------------------------------------

    def read_record(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        try:
            with open(self.root / rel, "rb") as f:
                return f.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write_record(self, rel: str, data: bytes, *, content_type: str = "application/json") -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data, fsync=False)

    def create_record(self, rel: str, data: bytes) -> bool:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            write_file(tmp, data, fsync=True)
            try:
                os.link(tmp, path)  # atomic and create-only, on NFS too (unlike O_EXCL on old clients)
                return True
            except FileExistsError:
                # NFS may answer a retransmitted LINK that did succeed with EEXIST: then ours is the link.
                return tmp.stat().st_nlink == 2
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
            # A mount without hard links (FUSE object stores, some SMB): O_EXCL is create-only there.
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def record_names(self, rel_dir: str) -> list[str]:
        try:
            return sorted(p.name for p in (self.root / rel_dir).iterdir() if not p.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete_record(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    # --- writing -------------------------------------------------------------------------

    def child(self, rel: str) -> LocalCheckpointFS:
        return LocalCheckpointFS(self.root / rel, given=self.given / rel)

    def files(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                path = Path(dirpath) / name
                try:
                    out[path.relative_to(self.root).as_posix()] = path.stat().st_size
                except FileNotFoundError:
                    continue  # a running query's temporary file, renamed or deleted since the listing
        return out

    def versions(self) -> dict[str, tuple[int, str]]:
        """The token is (device, inode, mtime, ctime): a file written again, or replaced by
        another under its name, changes it, and the ctime cannot be set back by anyone."""
        out: dict[str, tuple[int, str]] = {}
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                path = Path(dirpath) / name
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue  # a running query's temporary file, renamed or deleted since the listing
                if stat.S_ISREG(st.st_mode):
                    out[path.relative_to(self.root).as_posix()] = (
                        st.st_size, f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}")
        return out

    def sync(self, rels: list[str]) -> None:
        dirs: set[Path] = set()
        for rel in rels:
            path = _destination(self.root, rel)
            if path.exists():
                fsync_path(path)
            parent = path.parent
            while parent != self.root and self.root in parent.parents:  # new directories' names too
                dirs.add(parent)
                parent = parent.parent
            dirs.add(self.root)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            if d.is_dir():
                fsync_path(d)

    def delete_all(self) -> int:
        n = sum(len(f) for _, _, f in os.walk(self.root)) if self.root.exists() else 0
        shutil.rmtree(self.root, ignore_errors=True)
        return n

    def relocated(self, location: str) -> LocalCheckpointFS:
        return open_local(location)

    def move_from(self, src: CheckpointFS, rel: str, *, exclusive: bool = False) -> bool:
        if not isinstance(src, LocalCheckpointFS):
            raise UsageError(f"cannot move {rel} from {src.location} into {self.location}: another filesystem")
        source, dest = _destination(src.root, rel), _destination(self.root, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not source.is_file():
            raise FileNotFoundError(str(source))
        if exclusive:
            try:
                os.link(source, dest)  # create-only and atomic
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                tmp = _copied_beside(source, dest)
                try:
                    os.link(tmp, dest)
                except FileExistsError:
                    return False
                finally:
                    tmp.unlink(missing_ok=True)
            source.unlink()
            return True
        try:
            os.replace(source, dest)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            os.replace(_copied_beside(source, dest), dest)
            source.unlink()
        return True

    def delete_files(self, rels: list[str]) -> None:
        for rel in rels:
            _destination(self.root, rel).unlink(missing_ok=True)

    def stage(self, *, fsync: bool = True, direct: bool = False, empty: bool = False) -> LocalStaging:
        self.root.parent.mkdir(parents=True, exist_ok=True)
        if direct:
            self.root.mkdir(parents=True, exist_ok=True)
            return LocalStaging(self, self.root, fsync=fsync, direct=True)
        staging = self.root.parent / f".{self.root.name}.streamstate-restore-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        return LocalStaging(self, staging, fsync=fsync, direct=False)

    def recover(self) -> list[str]:
        return recover_leftovers(self.root)


def local_checkpoint_path(location: str) -> Path:
    """A checkpoint location as an absolute local path, symlinks resolved.

    Accepts a path and the URI forms Spark and Hadoop print for local files
    (`file:///abs`, `file:/abs`, `file://localhost/abs`); a relative `file:` URI would
    silently resolve under the current directory, so it is refused.
    """
    return given_path(location).resolve()


def open_local(location: str, connection: object = None, conn_id: str | None = None) -> LocalCheckpointFS:
    """The filesystem of a path or `file:` URI (no connection: this host's own)."""
    given = given_path(location)
    return LocalCheckpointFS(given.resolve(), given=given)


def _copied_beside(source: Path, dest: Path) -> Path:
    """A durable copy of `source` under a temp name in `dest`'s directory (a move across
    devices: rename cannot)."""
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    shutil.copyfile(source, tmp)
    fsync_path(tmp)
    return tmp


def _destination(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if os.path.commonpath([root, dest]) != str(root) or dest == root:
        raise UnsafeManifestError(f"manifest path {rel!r} escapes the restore target")
    return dest


class LocalStaging(Staging):
    """A staging directory beside the target (or the target itself, `direct`)."""

    target: LocalCheckpointFS

    def __init__(self, target: LocalCheckpointFS, staging: Path, *, fsync: bool, direct: bool) -> None:
        self.target, self.dir, self.fsync, self.direct = target, staging, fsync, direct
        self.root = staging.resolve()

    def write_blob(self, store: SnapshotStore, entry: FileEntry) -> None:
        dest = _destination(self.root, entry.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with store.open_blob(entry.blob_id) as src, open(dest, "xb") as out:
            digest, size = copy_hashing(src, out)
            if self.fsync:
                out.flush()
                os.fsync(out.fileno())
        if digest != entry.sha256 or size != entry.size:
            raise CorruptionError(
                f"{entry.path}: stored blob {entry.blob_id} is corrupt (read {size} bytes with sha256 {digest})",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            )

    def copy(self, src_rel: str, entry: FileEntry) -> None:
        dest = _destination(self.root, entry.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_destination(self.root, src_rel), dest)
        if self.fsync:
            fsync_path(dest)

    def put(self, rel: str, data: bytes) -> None:
        dest = _destination(self.root, rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_file(dest, data, fsync=self.fsync)

    def check(self, want: dict[str, int]) -> None:
        # Every byte was hashed as it was written; what remains is making the names durable.
        if self.fsync:
            fsync_tree(self.root)  # every name in place before the swap publishes them

    def source(self) -> LocalCheckpointFS:
        return LocalCheckpointFS(self.root, given=self.dir)

    def exchange(self) -> bool:
        if self.direct:
            return True
        target = self.target.root
        if not target.exists():
            os.rename(self.dir, target)
        else:
            records = target / SIDECAR_DIR  # the target's records stay with it, unless staged anew
            if records.is_dir():
                shutil.copytree(records, self.root / SIDECAR_DIR, dirs_exist_ok=True, copy_function=_copy_if_absent)
            if not _exchange(self.dir, target):
                return False
            shutil.rmtree(self.dir, ignore_errors=True)  # now holds the old contents
        if self.fsync:
            fsync_path(target.parent)
        return True

    def discard(self) -> None:
        if not self.direct:  # after a publish, nothing is left there (the swap moved or removed it)
            shutil.rmtree(self.dir, ignore_errors=True)


# --- swapping a directory into place, and repairing what a crash left ---------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.streamstate-(?P<kind>restore|old)-(?P<pid>\d+)-[0-9a-f]+$")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _copy_if_absent(src: str, dst: str) -> None:
    """Copy a file unless the destination has one (a record the staging holds anew)."""
    if not os.path.exists(dst):
        shutil.copy2(src, dst)


def recover_leftovers(target: Path) -> list[str]:
    """Remove what crashed restores left next to `target` (staging, and old directories of
    an earlier version's two-rename swap: one is renamed back where it left no target);
    return what was done."""
    actions: list[str] = []
    parent = target.parent
    if not parent.is_dir():
        return actions
    mine: list[tuple[str, int, Path]] = []
    for name in os.listdir(parent):
        m = _LEFTOVER.match(name)
        if m and m.group("name") == target.name:
            mine.append((m.group("kind"), int(m.group("pid")), parent / name))
    for kind, pid, path in sorted(mine, key=lambda x: x[2].stat().st_mtime, reverse=True):
        if pid != os.getpid() and pid_alive(pid):
            continue  # another restore of this target is in progress
        if kind == "old" and not target.exists():
            os.rename(path, target)
            actions.append(f"renamed {path.name} back to {target.name}")
            log.warning("a crashed restore left %s without its checkpoint: put the old one back", target)
        else:
            shutil.rmtree(path, ignore_errors=True)
            actions.append(f"removed {path.name}")
            log.info("removed %s, left by a crashed restore", path)
    return actions
