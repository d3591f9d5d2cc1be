"""Where a checkpoint lives, as one interface: what the planner reads, the records kept
beside it, and how a restore writes a whole new checkpoint there.

Every backend (a local or mounted directory, an S3 prefix, an HDFS directory) implements
the abstract methods; the capabilities with a default (`local_path`, `stored_sha256`,
`object_ref`) say where a backend can do better, and callers ask them instead of asking
which kind of filesystem they hold. A restore stages the new checkpoint beside the target
(`stage`, `Staging`) and puts it in place whole: by an atomic directory exchange where the
filesystem has one (Linux), else file by file behind a fence (engine/checkpoint/swap.py).
"""

from __future__ import annotations

import hashlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.stores.base import file_uri_path

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.core.manifest import FileEntry
    from airflow_provider_streamstate.engine.stores.base import ObjectRef, SnapshotStore

MAX_RECORD_BYTES = 1 << 20  # records are small; a bigger one is refused as unreadable
SIDECAR_DIR = "_streamstate"  # our files beside Spark's in a checkpoint; the one place it is spelled
SWAP_FILE = f"{SIDECAR_DIR}/swap.json"  # a swap's record while it changes the checkpoint (engine/checkpoint/swap.py)
LINEAGE_FILE = f"{SIDECAR_DIR}/lineage.json"  # the checkpoint's timeline (engine/catalog/timeline.py)
ENV_HOME = "STREAMSTATE_HOME"


def streamstate_home() -> Path:
    """This host's working directory of the engine: $STREAMSTATE_HOME, default ~/.streamstate."""
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".streamstate").expanduser()


def host_dir_for(location: str) -> Path:
    """This host's directory for a remote location (`scheme://authority/path`): below
    $STREAMSTATE_HOME, named after the location, unique to it."""
    scheme, _, rest = location.partition("://")
    authority, _, path = rest.partition("/")
    tag = hashlib.sha256(location.encode()).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", authority) or "_"
    kind = "s3" if scheme in ("s3", "s3a") else scheme
    return streamstate_home() / kind / safe / f"{path.replace('/', '_')[:100]}-{tag}"


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime_ns: int
    etag: str | None = None  # S3 only: what a read must still find
    regular: bool = True


class CheckpointFS(ABC):
    """One checkpoint's files, by POSIX path relative to its root."""

    location: str  # canonical location, recorded in manifests and compared for hash reuse
    # The location as Spark names it for a query started on it (scheme and symlinks as given):
    # what operator metadata v2 records, and so what a restore writes into a copy's.
    spark_location: str
    # The directory on this host's filesystem, when it is one: what only a local directory
    # allows (hashing while storing, renaming a whole directory atomically, file locks).
    local_path: Path | None = None

    def __str__(self) -> str:  # messages name the checkpoint
        return self.location

    @property
    def shared_location(self) -> str:
        """The checkpoint as every host names it (what the records and drivers are told): a
        local path with its symlinks kept, or the URL."""
        return self.location

    def spark_access(self, env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        """What a Spark application on this checkpoint (the stream's driver, the engine's
        jobs) needs to reach it as this filesystem's connection does, beyond its own
        configuration: Spark confs, and spark-submit's environment (given `env`, its own).
        Nothing by default: the application reaches it as its cluster is configured."""
        return {}, {}

    def as_user(self, user: str) -> CheckpointFS:
        """The same directory, acting as `user` where the filesystem is told who acts
        (HDFS's simple authentication: a YARN application's staging is its submitter's);
        itself elsewhere."""
        return self

    # --- reading: the planner ------------------------------------------------------------

    def refresh(self) -> None:  # noqa: B027 - a capability: most filesystems cache nothing
        """Start a new plan: forget cached listings; nothing to do where nothing is cached."""

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def is_dir(self, rel: str) -> bool: ...

    @abstractmethod
    def listdir(self, rel: str) -> list[str]:
        """Names directly below `rel`; FileNotFoundError when it is not there."""

    @abstractmethod
    def stat(self, rel: str) -> FileStat | None:
        """The file's identity, or None when absent."""

    def read_bytes(self, rel: str) -> bytes:
        """A whole (small) file of the plan; FileNotFoundError when absent."""
        st = self.stat(rel)
        if st is None:
            raise FileNotFoundError(rel)
        with self.open_checked(rel, st) as f:
            return f.read()

    def modified_times(self, rel_dir: str) -> dict[str, float]:
        """The files directly in `rel_dir` and when each was last written (seconds since the
        epoch, by the filesystem's clock), from one fresh listing; empty when it is absent."""
        try:
            names = self.fresh().listdir(rel_dir)
        except FileNotFoundError:
            return {}
        out: dict[str, float] = {}
        for name in names:
            st = self.stat(f"{rel_dir}/{name}")
            if st is not None and st.regular:
                out[name] = st.mtime_ns / 1e9
        return out

    @abstractmethod
    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """(dir rel, subdirectory names, file names) top-down, like os.walk."""

    @abstractmethod
    def open_checked(self, rel: str, expected: FileStat) -> AbstractContextManager[BinaryIO]:
        """Read a file the plan saw; CheckpointChanged when it is not that file any more
        (checked before the read where the backend can, else by the caller's stat after)."""

    def read_range(self, rel: str, expected: FileStat, offset: int, length: int) -> bytes:
        """`length` bytes of a file the plan saw, from `offset` (fewer only past its end);
        CheckpointChanged when it is not that file any more. This default reads the whole
        file; filesystems that can read a range override it."""
        with self.open_checked(rel, expected) as f:
            data = f.read()
        if len(data) != expected.size:
            raise CheckpointChanged(f"{self.where(rel)}: the file changed while it was read")
        return bytes(data[offset:offset + length])

    def stored_sha256(self, rel: str, expected: FileStat) -> str | None:
        """The file's SHA-256 as the filesystem recorded it when it was written (hex), so
        that it need not be read to be named; None where there is none."""
        return None

    def object_ref(self, rel: str, expected: FileStat | None = None) -> ObjectRef | None:
        """The file as an object a store on the same service can copy server-side
        (`SnapshotStore.copy_in`); None where there is no such copy."""
        return None

    # --- small records beside the checkpoint (engine/checkpoint/sidecar.py) ----------------

    @abstractmethod
    def read_record(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        """The record's bytes (at most `limit` + 1 of them), or None when there is none.
        Read now, never from a plan's listing."""

    @abstractmethod
    def write_record(self, rel: str, data: bytes, *, content_type: str = "application/json") -> None:
        """Create or replace the record (or any whole file: Data Docs) atomically: a reader
        sees the old or the new. `content_type` where the filesystem keeps one (S3)."""

    @abstractmethod
    def create_record(self, rel: str, data: bytes) -> bool:
        """Create the record only if there is none: True when this call created it. Of
        writers racing from any hosts, exactly one wins."""

    @abstractmethod
    def record_names(self, rel_dir: str) -> list[str]:
        """The names of the records directly in `rel_dir` (none when it does not exist)."""

    @abstractmethod
    def delete_record(self, rel: str) -> None:
        """Remove the record; an absent one is not an error."""

    def where(self, rel: str) -> str:
        """The file's full path or URL, for messages."""
        return f"{self.location.rstrip('/')}/{rel}"

    # --- writing: restores, clone expiry, scratch copies ----------------------------------

    @abstractmethod
    def child(self, rel: str) -> CheckpointFS:
        """The location `rel` below this one, on the same filesystem and connection."""

    def fresh(self) -> CheckpointFS:
        """The same location on the same connection, with nothing cached (a new plan's view)."""
        return self.child("")

    @abstractmethod
    def files(self) -> dict[str, int]:
        """Every file below the location now (rel -> size), from a fresh listing."""

    @abstractmethod
    def delete_all(self) -> int:
        """Delete everything below the location (what is there now); how many files went."""

    @abstractmethod
    def stage(self, *, fsync: bool = True, direct: bool = False, empty: bool = False) -> Staging:
        """Begin writing a new checkpoint for this location: beside it (`Staging`); `direct`
        writes straight into the location (a scratch copy nobody runs: nothing to put in
        place). `empty`: the caller found nothing at the location to replace, so a
        filesystem that cannot rename may write into it (`Staging.in_place`: the caller
        fences it first, engine/checkpoint/swap.py)."""

    def recover(self) -> list[str]:
        """Remove what restores of this location that crashed left beside it (staging of
        a process that is gone); what was done. (A crashed swap is engine/checkpoint/swap.py's.)"""
        return []

    # --- changing a checkpoint in place, file by file (engine/checkpoint/swap.py) ----------

    @abstractmethod
    def relocated(self, location: str) -> CheckpointFS:
        """Another location on this filesystem, reached through this one's connection: the
        work copy or staging a swap moves files from. UsageError when it is elsewhere."""

    @abstractmethod
    def move_from(self, src: CheckpointFS, rel: str, *, exclusive: bool = False) -> bool:
        """Put file `rel` of `src` (a location of `relocated`) at `rel` here, atomically: a
        reader sees no file (or the one it replaces) or the whole new one. `exclusive`
        creates it only if there is none: False, nothing changed, when there is (how a swap
        loses a race with a query that wrote the same batch). The source is gone after a
        rename (local, HDFS) and stays after a copy (S3); FileNotFoundError when it is absent."""

    def delete_files(self, rels: list[str]) -> None:
        """Remove these files; absent ones are not an error."""
        for rel in rels:
            self.delete_record(rel)

    # --- keeping a copy up to date in place (a warm standby: engine/dr/standby.py) ---------

    def versions(self) -> dict[str, tuple[int, str]]:
        """Every regular file below the location now, from a fresh listing: rel -> (size, a
        token that changes whenever the file is written again). A file found later with
        the token it had right after it was written and verified still holds those bytes,
        and need not be read again: here (size, mtime, the backend's own identity: S3's
        ETag, HDFS's inode id)."""
        self.refresh()
        out: dict[str, tuple[int, str]] = {}
        for d, _, names in self.walk(""):
            for name in names:
                rel = f"{d}/{name}" if d not in ("", ".") else name
                st = self.stat(rel)
                if st is not None and st.regular:
                    out[rel] = (st.size, f"{st.mtime_ns}:{st.etag or ''}")
        return out

    def sync(self, rels: list[str]) -> None:  # noqa: B027 - a capability: most filesystems need nothing
        """Make the files `rels`, written in place, and their names durable; nothing to do
        where a write is durable when it returns (S3, HDFS)."""

    def host_dir(self) -> Path:
        """Where this host keeps what belongs to this location but not on it (a stream's
        driver logs, the launch lock): the directory itself when it is local."""
        return self.local_path if self.local_path is not None else host_dir_for(self.location)


class Staging(ABC):
    """A checkpoint being written beside its target (or into the target itself: `direct` for
    a copy nobody runs, `in_place` for an empty target behind a swap's fence), then put in
    place whole: by `exchange` where the filesystem swaps directories atomically, else file
    by file behind a fence (engine/checkpoint/swap.py) from `source()`."""

    target: CheckpointFS
    in_place: bool = False  # written into the empty target itself (no second copy)
    kept = False  # what was staged in place is the target's now: `discard` leaves it

    def keep(self) -> None:
        """What was written in place is the target's now (its swap finished)."""
        self.kept = True

    @abstractmethod
    def write_blob(self, store: SnapshotStore, entry: FileEntry) -> None:
        """Blob `entry.sha256` as file `entry.path`, every byte checked against its sha256
        (CorruptionError naming the file) before anything relies on it."""

    @abstractmethod
    def copy(self, src_rel: str, entry: FileEntry) -> None:
        """`entry.path` with the content of the staged `src_rel` (identical files)."""

    @abstractmethod
    def put(self, rel: str, data: bytes) -> None:
        """A file written from bytes (rewritten offsets, lineage, metadata)."""

    @abstractmethod
    def check(self, want: dict[str, int]) -> None:
        """The staged files are exactly `want` (rel -> size), durably: CorruptionError else."""

    @abstractmethod
    def source(self) -> CheckpointFS:
        """The staged files as a location on the target's filesystem: what a swap moves in."""

    def exchange(self) -> bool:
        """Put the staged checkpoint in place of the target in one atomic step, the target's
        records beside it (`_streamstate/`) kept unless staged anew; False where the
        filesystem has no such step (then a swap puts it in place file by file)."""
        return False

    @abstractmethod
    def discard(self) -> None:
        """Remove whatever is left staged (after a failure, or after a swap moved it in)."""

    def stats(self) -> dict[str, Any]:
        """What the staging did that a result reports (bytes copied server side)."""
        return {}


def given_path(location: str | Path) -> Path:
    """A local location as an absolute path with its symlinks kept: how every host (and
    Spark) names the directory."""
    text = str(location)
    if text.startswith("file:"):
        text = file_uri_path(text, "checkpoint location")
    elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", text) and not re.match(r"^[a-zA-Z]:[\\/]", text):
        raise UnsupportedCheckpointError(
            f"checkpoint {text!r} is not on a local or mounted filesystem",
            hint="this operation needs a local path or file:// URI",
        )
    if not text:
        raise UsageError("the checkpoint path is empty", hint="give the stream's checkpoint directory")
    return Path(text).expanduser().absolute()


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ListingMismatch:
    """How a listing of files (rel -> size) differs from the files a manifest wants: each
    list sorted, all three empty when they match."""

    missing: list[str]
    unexpected: list[str]
    wrong_size: list[str]

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.wrong_size)

    def first_ones(self) -> str:
        """The first three of each, for an error message."""
        return (f"missing {self.missing[:3]}, unexpected {self.unexpected[:3]}, "
                f"wrong size {self.wrong_size[:3]}")


def listing_mismatch(listed: Mapping[str, int], want: Mapping[str, int]) -> ListingMismatch:
    """Compare what a listing found (rel -> size) with what a manifest wants (rel -> size):
    what restores, staging checks and standbys all ask before they trust a directory."""
    return ListingMismatch(
        missing=sorted(set(want) - set(listed)),
        unexpected=sorted(set(listed) - set(want)),
        wrong_size=sorted(r for r in set(want) & set(listed) if listed[r] != want[r]),
    )
