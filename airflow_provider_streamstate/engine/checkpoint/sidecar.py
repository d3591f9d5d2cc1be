"""The records streamstate keeps beside a checkpoint, wherever the checkpoint lives.

A stream outlives the task that started it, and the tasks that start, watch, stop,
snapshot and restore it may run on different hosts, so liveness (the heartbeat) and
control (launch record, driver record, stop request) live where every one of them can
reach: beside the checkpoint, in `<checkpoint>/_streamstate/` (Spark ignores the
directory; snapshots leave it out).

- A local (or mounted) checkpoint: files, each replaced atomically (temp file, rename).
- An S3 checkpoint (`s3a://bucket/path`, `s3://`): objects below the checkpoint's prefix,
  each written with one PUT (a reader sees the old object or the new one, never half) and
  read with one GET, through the client the caller gives (an Airflow connection's) or one
  built from the AWS environment (the driver's own).

Host-local things, the driver's log files and the lock that serialises launches on one
host, stay on the launching host: beside a local checkpoint, or for an S3 checkpoint in a
directory named after its location below `$STREAMSTATE_HOME` (default `~/.streamstate`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import (
    S3CheckpointFS,
    is_s3_location,
    open_checkpoint_fs,
    parse_s3_location,
)
from airflow_provider_streamstate.engine.core.durability import write_atomically, write_file
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores import file_uri_path

MAX_RECORD_BYTES = 1 << 20  # records are small; a bigger one is refused as unreadable
# The launches of the streams that ran on the checkpoint (engine/streams/launcher.py): kept by
# a restore that replaces the checkpoint, so launch generations (the drivers' fencing tokens)
# keep counting up across it.
LAUNCHES_DIR = "_streamstate/launches"
ENV_HOME = "STREAMSTATE_HOME"


def streamstate_home() -> Path:
    """This host's working directory of the engine: $STREAMSTATE_HOME, default ~/.streamstate."""
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".streamstate").expanduser()


class Sidecar(ABC):
    """Small records at paths like `_streamstate/heartbeat.json` beside one checkpoint."""

    location: str  # the checkpoint as every host names it: an absolute path or an s3a:// URL
    local_dir: Path  # where this host keeps the stream's logs and launch lock

    @property
    def is_local(self) -> bool:
        return isinstance(self, LocalSidecar)

    @abstractmethod
    def read(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        """The record's bytes (at most `limit` + 1 of them), or None when there is none."""

    @abstractmethod
    def write(self, rel: str, data: bytes) -> None:
        """Create or replace the record atomically."""

    @abstractmethod
    def create(self, rel: str, data: bytes) -> bool:
        """Create the record only if there is none (S3 `If-None-Match: *`, a hard link of a
        complete temp file locally): True when this call created it, False when it was there.
        Of writers racing from any hosts, exactly one wins."""

    @abstractmethod
    def names(self, rel_dir: str) -> list[str]:
        """The names of the records directly in `rel_dir` (none when it does not exist)."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Remove the record; an absent one is not an error."""

    @abstractmethod
    def where(self, rel: str) -> str:
        """The record's full path or URL, for messages."""


class LocalSidecar(Sidecar):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)
        self.local_dir = root

    def read(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        try:
            with open(self.root / rel, "rb") as f:
                return f.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data, fsync=False)

    def create(self, rel: str, data: bytes) -> bool:
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

    def names(self, rel_dir: str) -> list[str]:
        try:
            return sorted(p.name for p in (self.root / rel_dir).iterdir() if not p.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def where(self, rel: str) -> str:
        return str(self.root / rel)


class S3Sidecar(Sidecar):
    def __init__(self, fs: S3CheckpointFS) -> None:
        self.fs = fs
        self.location = fs.location
        home = streamstate_home()
        tag = hashlib.sha256(fs.location.encode()).hexdigest()[:12]
        self.local_dir = home / "s3" / fs.bucket / f"{fs.prefix.replace('/', '_')[:100]}-{tag}"

    def read(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        try:
            with self.fs.errors(f"read {rel}"):
                body = self.fs.client.get_object(Bucket=self.fs.bucket, Key=self.fs.key(rel))["Body"]
                try:
                    return bytes(body.read(limit + 1))
                finally:
                    body.close()
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes) -> None:
        with self.fs.errors(f"write {rel}"):
            self.fs.client.put_object(Bucket=self.fs.bucket, Key=self.fs.key(rel), Body=data,
                                      ContentType="application/json")

    def create(self, rel: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        with self.fs.errors(f"create {rel}"):
            try:
                self.fs.client.put_object(Bucket=self.fs.bucket, Key=self.fs.key(rel), Body=data,
                                          ContentType="application/json", IfNoneMatch="*")
            except ClientError as exc:
                err = exc.response.get("Error", {})
                http = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if err.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or http in (409, 412):
                    return False  # another writer created it first (409: while we raced it)
                raise
        return True

    def names(self, rel_dir: str) -> list[str]:
        prefix = self.fs.key(rel_dir).rstrip("/") + "/"
        out: list[str] = []
        with self.fs.errors(f"list {rel_dir}"):
            for page in self.fs.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.fs.bucket, Prefix=prefix, Delimiter="/"):
                out.extend(o["Key"][len(prefix):] for o in page.get("Contents", []))
        return sorted(out)

    def delete(self, rel: str) -> None:
        with self.fs.errors(f"delete {rel}"):
            self.fs.client.delete_object(Bucket=self.fs.bucket, Key=self.fs.key(rel))

    def where(self, rel: str) -> str:
        return f"{self.location}/{rel}"


_S3_SIDECARS: dict[str, S3Sidecar] = {}  # one client per location and process (a driver beats every few s)
_lock = threading.Lock()


def open_sidecar(checkpoint: str | Path | Sidecar, *, s3_client: Any = None) -> Sidecar:
    """The sidecar of a checkpoint: a local path or `file:` URI, or an S3 location.

    An S3 location's client is made once per process: `s3_client` when given (an Airflow
    connection's; it then serves that location for the rest of the process, so a task that
    opened it with its connection's client keeps using it), else one from the AWS
    environment (a driver's own credentials, an instance role)."""
    if isinstance(checkpoint, Sidecar):
        return checkpoint
    text = str(checkpoint)
    if is_s3_location(text):
        key = location_key(text)
        with _lock:
            if s3_client is not None or key not in _S3_SIDECARS:
                fs = open_checkpoint_fs(text, s3_client=s3_client)
                assert isinstance(fs, S3CheckpointFS)
                _S3_SIDECARS[key] = S3Sidecar(fs)
            return _S3_SIDECARS[key]
    return LocalSidecar(local_root(text, refusal=(
        f"cannot keep a stream's records beside {text}: the checkpoint must be a local or mounted path, "
        "or in S3 (s3a://bucket/path)",
        "give the checkpoint as a path, a file:// URI or an s3a:// location (docs/deployment.md)")))


def location_key(s3_location: str) -> str:
    """`bucket/prefix`: `s3://b/p/` and `s3a://b/p` are one location."""
    return "/".join(parse_s3_location(s3_location))


def local_root(checkpoint: str | Path, *, refusal: tuple[str, str]) -> Path:
    """A checkpoint given as a path or `file:` URI, as an absolute path (symlinks kept: every
    host names the directory the same way); UsageError(`refusal` message, hint) otherwise."""
    text = str(checkpoint)
    if text.startswith("file:"):

        text = file_uri_path(text, "checkpoint")
    elif "://" in text:
        raise UsageError(refusal[0], hint=refusal[1])
    if not text:
        raise UsageError("the checkpoint path is empty", hint="give the stream's checkpoint directory")
    return Path(text).expanduser().absolute()


def s3_client_for(checkpoint: str | Path | Sidecar) -> Any:
    """The client the records of an S3 checkpoint are read with (so the checkpoint itself is
    read with the same connection); None for a local checkpoint."""
    side = open_sidecar(checkpoint)
    return side.fs.client if isinstance(side, S3Sidecar) else None
