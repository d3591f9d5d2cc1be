"""Where a checkpoint lives: a local (or mounted) directory, or an S3 prefix (`s3a://`, `s3://`).

The planner (`checkpoint.CheckpointReader`), the snapshot and the restore see a checkpoint
through this small interface, so there is one planner for both. The S3 side uses boto3,
already a dependency for the S3 store, rather than pyarrow.fs or fsspec/s3fs: the reader
needs four calls (a paginated listing, a conditional GET, CopyObject, PUT), the same client
as the store (endpoint, credentials, an Airflow connection's) and its error translation;
pyarrow (~120 MB wheel) or s3fs+aiobotocore (pins botocore) would add weight and a second
S3 client stack for none of it. See docs/deployment.md.

S3 has no directories and no rename. One listing of the whole prefix (1,000 keys a request)
answers every "which files are there" question of a plan: the plan then costs
ceil(objects / 1000) LIST requests plus a GET for each metadata-log file it parses. Each
file's identity is (size, LastModified, ETag): S3's LastModified has one-second resolution,
so its nanoseconds carry a fingerprint of the ETag, and (size, mtime_ns) — what manifests
record and hash reuse compares — changes whenever the object's content does. Reads are
`GetObject(IfMatch=<etag the plan saw>)`: a file rewritten after planning fails the read
(CheckpointChanged, the cut is planned again), as a changed (size, mtime) does locally.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.stores import file_uri_path, parse_s3_url, s3_client_from_env
from airflow_provider_streamstate.engine.stores.s3_errors import code, request_error, status

S3_SCHEMES = ("s3a://", "s3://")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime_ns: int
    etag: str | None = None  # S3 only: what a read must still find
    regular: bool = True


def is_s3_location(location: str) -> bool:
    return location.startswith(S3_SCHEMES)


def unsupported_scheme(location: str) -> UnsupportedCheckpointError | None:
    """The one-line refusal of a checkpoint URL whose scheme we cannot read, or None."""
    m = _SCHEME.match(location)
    if not m or re.match(r"^[a-zA-Z]:[\\/]", location) or is_s3_location(location) or location.startswith("file:"):
        return None
    scheme = m.group(1).lower()
    if scheme in ("s3", "s3a"):
        return None
    hint = "give a local path, a file:// URI, or an s3a://bucket/path (s3://) checkpoint location"
    if scheme in ("hdfs", "viewfs", "webhdfs"):
        hint += "; HDFS is not supported (docs/deployment.md says what it would take)"
    return UnsupportedCheckpointError(f"checkpoint {location!r}: the {scheme}:// scheme is not supported", hint=hint)


def parse_s3_location(location: str) -> tuple[str, str]:
    """(bucket, key prefix without trailing slash) of `s3a://bucket/path` or `s3://bucket/path`."""

    scheme = "s3a://" if location.startswith("s3a://") else "s3://"
    try:
        bucket, prefix = parse_s3_url("s3://" + location[len(scheme):])
    except UsageError as exc:  # worded for stores: name the checkpoint URL as the user wrote it
        reason = exc.message.split(": ", 1)[-1]
        raise UsageError(f"invalid checkpoint location {location!r}: {reason}",
                         hint=f"write it as {scheme}bucket/path/to/checkpoint") from None
    if not prefix:
        raise UsageError(
            f"checkpoint {location!r} is a whole bucket",
            hint="give the checkpoint's own prefix: s3a://bucket/path/to/checkpoint",
        )
    return bucket, prefix


class CheckpointFS:
    """Read access to one checkpoint's files by POSIX path relative to its root."""

    location: str  # canonical location, recorded in manifests and compared for hash reuse

    def refresh(self) -> None:
        """Start a new plan: forget cached listings (S3); nothing to do locally."""

    def exists(self) -> bool:
        raise NotImplementedError

    def is_dir(self, rel: str) -> bool:
        raise NotImplementedError

    def listdir(self, rel: str) -> list[str]:
        """Names directly below `rel`; FileNotFoundError when it is not there."""
        raise NotImplementedError

    def stat(self, rel: str) -> FileStat | None:
        """The file's identity, or None when absent."""
        raise NotImplementedError

    def read_bytes(self, rel: str) -> bytes:
        """A whole (small) file; FileNotFoundError when absent."""
        raise NotImplementedError

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """(dir rel, subdirectory names, file names) top-down, like os.walk."""
        raise NotImplementedError

    @contextmanager
    def open_checked(self, rel: str, expected: FileStat) -> Iterator[BinaryIO]:
        """Read a file the plan saw; CheckpointChanged when it is not that file any more
        (checked before for S3, by the caller's stat after reading locally)."""
        raise NotImplementedError
        yield  # pragma: no cover


class LocalCheckpointFS(CheckpointFS):
    """A directory on a local or mounted filesystem (today's behaviour, unchanged)."""

    def __init__(self, root: Path, location: str | None = None) -> None:
        self.root = root
        self.location = location or str(root)

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

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        for dirpath, dirnames, filenames in os.walk(self.root / rel):
            dirnames.sort()
            yield Path(dirpath).relative_to(self.root).as_posix(), dirnames, filenames

    @contextmanager
    def open_checked(self, rel: str, expected: FileStat) -> Iterator[BinaryIO]:
        with open(self.root / rel, "rb") as f:
            yield f


def _fingerprint_ns(last_modified: Any, etag: str) -> int:
    """LastModified (whole seconds on S3) in ns, its sub-second part a fingerprint of the ETag."""
    seconds = int(last_modified.timestamp())
    return seconds * 1_000_000_000 + int(hashlib.sha256(etag.encode()).hexdigest()[:8], 16) % 1_000_000_000


class S3CheckpointFS(CheckpointFS):
    """A checkpoint below an S3 key prefix, read through a boto3 client."""

    def __init__(self, location: str, client: Any, *, aws_conn_id: str | None = None) -> None:
        self.bucket, self.prefix = parse_s3_location(location)
        self.location = f"s3a://{self.bucket}/{self.prefix}"
        self.client = client
        self.aws_conn_id = aws_conn_id
        self._files: dict[str, FileStat] | None = None
        self._planned = False
        self._dirs: dict[str, set[str]] = {}
        self._sha256: set[str] = set()  # files the listing says carry a SHA-256 checksum

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if rel else self.prefix

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """boto3 failures as one-line errors naming the checkpoint (404 stays FileNotFoundError)."""
        from botocore.exceptions import BotoCoreError, ClientError
        from urllib3.exceptions import HTTPError as Urllib3Error


        try:
            yield
        except (StreamstateError, FileNotFoundError):
            raise
        except ClientError as exc:
            if code(exc) in ("NoSuchKey", "404", "NotFound") and code(exc) != "NoSuchBucket":
                raise FileNotFoundError(what) from None
            if status(exc) == 412 or code(exc) == "PreconditionFailed":
                raise CheckpointChanged(f"{what}: the object changed since the plan listed it") from None
            raise self._error(exc, what) from None
        except (BotoCoreError, Urllib3Error) as exc:
            raise self._error(exc, what) from None

    def _error(self, exc: BaseException, what: str) -> StreamstateError:
        """The store's translation of an S3 failure, its hints speaking of the checkpoint."""

        err = request_error(exc, what=what, url=self.location, bucket=self.bucket, conn_id=self.aws_conn_id)
        if err.hint:
            err.hint = err.hint.replace("the store URL", "the checkpoint location")
        return err

    def refresh(self) -> None:
        # The listing made when the reader opened serves its first plan; later plans list again.
        if self._planned:
            self._files = None
        self._planned = True

    def _listing(self) -> dict[str, FileStat]:
        if self._files is None:
            files: dict[str, FileStat] = {}
            summed: set[str] = set()
            dirs: dict[str, set[str]] = {"": set()}
            base = self.prefix + "/"
            with self.errors("list checkpoint"):
                for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
                    for obj in page.get("Contents", []):
                        rel = obj["Key"][len(base):]
                        if not rel or rel.endswith("/"):
                            parts = rel.rstrip("/").split("/") if rel else []
                            for i in range(len(parts)):  # a directory marker (S3A's mkdirs)
                                dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])
                                dirs.setdefault("/".join(parts[: i + 1]), set())
                            continue
                        etag = str(obj.get("ETag", "")).strip('"')
                        files[rel] = FileStat(int(obj["Size"]), _fingerprint_ns(obj["LastModified"], etag), etag)
                        if "SHA256" in (obj.get("ChecksumAlgorithm") or ()):
                            summed.add(rel)
                        parts = rel.split("/")
                        for i in range(len(parts)):
                            dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])
            self._files, self._dirs, self._sha256 = files, dirs, summed
        return self._files

    def exists(self) -> bool:
        return bool(self._listing())

    def delete_all(self) -> int:
        """Delete every object below the prefix (what is there now, not the cached listing);
        how many were deleted."""
        n = 0
        with self.errors(f"delete the objects below {self.location}"):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + "/")
            for page in pages:
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                    n += len(keys)
        self._files = None
        return n

    def is_dir(self, rel: str) -> bool:
        self._listing()
        return rel in self._dirs and (rel != "" or bool(self._dirs[""]))  # "": the checkpoint has objects

    def listdir(self, rel: str) -> list[str]:
        self._listing()
        if rel not in self._dirs:
            raise FileNotFoundError(rel)
        return sorted(self._dirs[rel])

    def stat(self, rel: str) -> FileStat | None:
        return self._listing().get(rel)

    def read_bytes(self, rel: str) -> bytes:
        st = self._listing().get(rel)
        if st is None:
            raise FileNotFoundError(rel)
        with self.open_checked(rel, st) as f:
            return f.read()

    def walk(self, rel: str) -> Iterator[tuple[str, list[str], list[str]]]:
        self._listing()
        if rel not in self._dirs:
            return
        names = sorted(self._dirs[rel])
        subdirs = [n for n in names if f"{rel}/{n}" in self._dirs]
        yield rel, subdirs, [n for n in names if n not in subdirs]
        for d in subdirs:
            yield from self.walk(f"{rel}/{d}")

    @contextmanager
    def open_checked(self, rel: str, expected: FileStat) -> Iterator[BinaryIO]:
        with self.errors(f"read checkpoint file {rel}"):
            args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(rel)}
            if expected.etag:
                args["IfMatch"] = expected.etag
            body = self.client.get_object(**args)["Body"]
        try:
            yield io.BufferedReader(_Reader(body, self, rel), buffer_size=1 << 20)  # type: ignore[arg-type]
        finally:
            body.close()

    def stored_sha256(self, rel: str, expected: FileStat) -> str | None:
        """The SHA-256 of the whole object as S3 recorded it when the object was written
        (hex), read by a HEAD of the planned version: S3 checks a checksum the writer sends
        against the bytes it receives (S3A: `fs.s3a.create.checksum.algorithm=SHA256`).
        None when the object carries none, or only a composite one of its parts (multipart);
        no request is sent for an object whose listing named no SHA-256."""
        if rel not in self._sha256:
            return None
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(rel), "ChecksumMode": "ENABLED"}
        if expected.etag:
            args["IfMatch"] = f'"{expected.etag}"'  # a HEAD compares the quoted entity tag
        with self.errors(f"read the checksum of checkpoint file {rel}"):
            r = self.client.head_object(**args)
        value = r.get("ChecksumSHA256")
        if not value or "-" in value or r.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
            return None
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return None
        return raw.hex() if len(raw) == 32 else None

    def get_text(self, rel: str) -> bytes | None:
        """A small object outside the plan (lineage, heartbeat), or None when absent."""
        try:
            with self.errors(f"read checkpoint file {rel}"):
                body = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))["Body"]
                try:
                    return bytes(body.read())
                finally:
                    body.close()
        except FileNotFoundError:
            return None


class _Reader(io.RawIOBase):
    """A GetObject body whose connection errors are one-line, retryable errors."""

    def __init__(self, body: Any, fs: S3CheckpointFS, rel: str) -> None:
        self.body, self.fs, self.rel = body, fs, rel

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        with self.fs.errors(f"read checkpoint file {self.rel}"):
            return bytes(self.body.read(None if size is None or size < 0 else size))

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def open_checkpoint_fs(location: str, *, s3_client: Any = None, aws_conn_id: str | None = None) -> CheckpointFS:
    """The filesystem of a checkpoint location: local path / file: URI, or s3a:// / s3://.

    An S3 location uses `s3_client` as given (the store's, or the Airflow connection's), else
    one built from the AWS environment, exactly as `stores.open_store` does.
    """
    refusal = unsupported_scheme(location)
    if refusal is not None:
        raise refusal
    if is_s3_location(location):
        if s3_client is None:

            s3_client = s3_client_from_env()
        return S3CheckpointFS(location, s3_client, aws_conn_id=aws_conn_id)
    return LocalCheckpointFS(local_checkpoint_path(location))


def local_checkpoint_path(location: str) -> Path:
    """A checkpoint location as an absolute local path.

    Accepts a path and the URI forms Spark and Hadoop print for local files
    (`file:///abs`, `file:/abs`, `file://localhost/abs`); a relative `file:` URI would
    silently resolve under the current directory, so it is refused.
    """
    if location.startswith("file:"):

        location = file_uri_path(location, "checkpoint location")
    elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", location) and not re.match(r"^[a-zA-Z]:[\\/]", location):
        refusal = unsupported_scheme(location)
        raise refusal or UnsupportedCheckpointError(
            f"checkpoint {location!r} is not on a local or mounted filesystem",
            hint="this operation needs a local path or file:// URI",
        )
    return Path(location).expanduser().resolve()
