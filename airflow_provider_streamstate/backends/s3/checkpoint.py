"""A checkpoint below an S3 key prefix (`s3a://bucket/path`, `s3://`), read and written
through a boto3 client: the caller's (an Airflow connection's, the store's) or one built
from the AWS environment.

The client is boto3, already a dependency for the S3 store, rather than pyarrow.fs or
fsspec/s3fs: the reader needs four calls (a paginated listing, a conditional GET,
CopyObject, PUT), the same client as the store (endpoint, credentials, an Airflow
connection's) and its error translation.

Reading. S3 has no directories and no rename. One listing of the whole prefix (1,000 keys a
request) answers every "which files are there" question of a plan: the plan then costs
ceil(objects / 1000) LIST requests plus a GET for each metadata-log file it parses. Each
file's identity is (size, LastModified, ETag): S3's LastModified has one-second resolution,
so its nanoseconds carry a fingerprint of the ETag, and (size, mtime_ns) — what manifests
record and hash reuse compares — changes whenever the object's content does. Reads are
`GetObject(IfMatch=<etag the plan saw>)`: a file rewritten after planning fails the read
(CheckpointChanged, the cut is planned again).

Records are objects, each written with one PUT (a reader sees the old object or the new)
and created create-only with `If-None-Match: *`.

Restoring. With no rename, a restore stages every file below a prefix beside the target
(`<parent>/.<name>.streamstate-restore-<id>/`), each verified against its sha256 — a
server-side CopyObject from the store when it is on the same endpoint with the same
credentials (verified by the SHA-256 checksum S3 returns, or by reading the copy back when
the endpoint returns none), else streamed from the store, hashed as it is read, and
uploaded only once it matched — and a swap then puts it in place behind a fence
(engine/checkpoint/swap.py): server-side copies from the staging (same bucket: no bytes
through this host), the old objects deleted, the `metadata` last. Into an empty target the
files are written in place, behind the fence written first: one copy each instead of two.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, BinaryIO

from airflow_provider_streamstate.backends.s3.clients import (
    copy_with_sha256,
    full_object_sha256,
    parse_s3_url,
    s3_client_from_env,
    same_s3_account,
)
from airflow_provider_streamstate.backends.s3.errors import S3Body, code, request_error, status
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import (
    MAX_RECORD_BYTES,
    SWAP_FILE,
    CheckpointFS,
    FileStat,
    Staging,
    listing_mismatch,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import CHUNK, sha256_stream
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    StreamstateError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import FileEntry
from airflow_provider_streamstate.engine.stores.base import ObjectRef, SnapshotStore

S3_SCHEMES = ("s3a://", "s3://")


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


def open_s3(location: str, client: Any = None, conn_id: str | None = None) -> S3CheckpointFS:
    """The filesystem of an `s3a://`/`s3://` location, through `client` (a boto3 client: an
    Airflow connection's, a store's), else one built from the AWS environment."""
    if client is None:
        client = s3_client_from_env()
    return S3CheckpointFS(location, client, aws_conn_id=conn_id)


def _fingerprint_ns(last_modified: Any, etag: str) -> int:
    """LastModified (whole seconds on S3) in ns, its sub-second part a fingerprint of the ETag."""
    seconds = int(last_modified.timestamp())
    return seconds * 1_000_000_000 + int(hashlib.sha256(etag.encode()).hexdigest()[:8], 16) % 1_000_000_000


class S3CheckpointFS(CheckpointFS):
    """A checkpoint below an S3 key prefix, read through a boto3 client."""

    def __init__(self, location: str, client: Any, *, aws_conn_id: str | None = None) -> None:
        self.bucket, self.prefix = parse_s3_location(location)
        self.location = f"s3a://{self.bucket}/{self.prefix}"
        self.spark_location = location.rstrip("/")  # with the scheme it was given in, as Spark records it
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

    # --- reading -------------------------------------------------------------------------

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
                        if "SHA256" in (obj.get("ChecksumAlgorithm") or ()) and obj.get("ChecksumType") != "COMPOSITE":
                            summed.add(rel)  # a full-object one (a multipart upload's is of its parts)
                        parts = rel.split("/")
                        for i in range(len(parts)):
                            dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])
            self._files, self._dirs, self._sha256 = files, dirs, summed
        return self._files

    def exists(self) -> bool:
        if self._files is not None:
            return bool(self._files)
        with self.errors("list checkpoint"):  # one key is enough: the plan lists them all
            r = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + "/", MaxKeys=1)
        return bool(r.get("Contents"))

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

    def versions(self) -> dict[str, tuple[int, str]]:
        """From one new listing (a request per 1,000 objects): the token is the ETag S3
        computed from the stored bytes (and LastModified)."""
        self._files = None
        return {rel: (st.size, f"{st.mtime_ns}:{st.etag}") for rel, st in self._listing().items()}

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
            yield io.BufferedReader(S3Body(body, lambda: self.errors(f"read checkpoint file {rel}")), buffer_size=1 << 20)  # type: ignore[arg-type]
        finally:
            body.close()

    def read_range(self, rel: str, expected: FileStat, offset: int, length: int) -> bytes:
        """One ranged GetObject, conditional on the planned version (`If-Match`)."""
        if length <= 0:
            return b""
        with self.errors(f"read checkpoint file {rel}"):
            args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(rel),
                                    "Range": f"bytes={offset}-{offset + length - 1}"}
            if expected.etag:
                args["IfMatch"] = expected.etag
            body = self.client.get_object(**args)["Body"]
        try:
            return S3Body(body, lambda: self.errors(f"read checkpoint file {rel}")).read()
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
        return full_object_sha256(r.get("ChecksumSHA256"), r.get("ChecksumType"))

    def object_ref(self, rel: str, expected: FileStat | None = None) -> ObjectRef:
        carried = (rel in self._sha256) if self._files is not None else None  # as the listing said
        return ObjectRef(self.client, self.bucket, self.key(rel), expected.etag if expected else None, carried)

    # --- records -------------------------------------------------------------------------

    def read_record(self, rel: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        try:
            with self.errors(f"read {rel}"):
                body = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))["Body"]
                try:
                    return bytes(body.read(limit + 1))
                finally:
                    body.close()
        except FileNotFoundError:
            return None

    def write_record(self, rel: str, data: bytes, *, content_type: str = "application/json") -> None:
        with self.errors(f"write {rel}"):
            self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, ContentType=content_type)

    def create_record(self, rel: str, data: bytes, *, content_type: str = "application/json") -> bool:
        from botocore.exceptions import ClientError

        with self.errors(f"create {rel}"):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data,
                                       ContentType=content_type, IfNoneMatch="*")
            except ClientError as exc:
                err = exc.response.get("Error", {})
                http = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if err.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or http in (409, 412):
                    return False  # another writer created it first (409: while we raced it)
                raise
        return True

    def record_names(self, rel_dir: str) -> list[str]:
        prefix = self.key(rel_dir).rstrip("/") + "/"
        out: list[str] = []
        with self.errors(f"list {rel_dir}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                out.extend(o["Key"][len(prefix):] for o in page.get("Contents", []))
        return sorted(out)

    def modified_times(self, rel_dir: str) -> dict[str, float]:
        """One listing of that "directory" alone (with a delimiter): not the whole checkpoint."""
        prefix = self.key(rel_dir).rstrip("/") + "/"
        out: dict[str, float] = {}
        with self.errors(f"list {rel_dir}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                for o in page.get("Contents", []):
                    out[o["Key"][len(prefix):]] = o["LastModified"].timestamp()
        return out

    def delete_record(self, rel: str) -> None:
        with self.errors(f"delete {rel}"):
            self.client.delete_object(Bucket=self.bucket, Key=self.key(rel))

    # --- writing -------------------------------------------------------------------------

    def child(self, rel: str) -> S3CheckpointFS:
        return S3CheckpointFS(f"{self.location}/{rel.strip('/')}", self.client, aws_conn_id=self.aws_conn_id)

    def relocated(self, location: str) -> S3CheckpointFS:
        return S3CheckpointFS(location, self.client, aws_conn_id=self.aws_conn_id)

    def move_from(self, src: CheckpointFS, rel: str, *, exclusive: bool = False) -> bool:
        """A server-side copy; with `exclusive`, the (small: a log file) object is read and
        written create-only (`If-None-Match: *`)."""
        if not isinstance(src, S3CheckpointFS):
            raise UsageError(f"cannot move {rel} from {src.location} into {self.location}: another filesystem")
        self._files = None
        if exclusive:
            data = src.read_record(rel, limit=MAX_RECORD_BYTES)
            if data is None:
                raise FileNotFoundError(src.where(rel))
            if len(data) > MAX_RECORD_BYTES:
                raise UsageError(f"{src.where(rel)} is too large to be written create-only")
            return self.create_record(rel, data, content_type="application/octet-stream")
        with self.errors(f"copy {rel} from {src.location}"):
            self.client.copy_object(Bucket=self.bucket, Key=self.key(rel), ChecksumAlgorithm="SHA256",
                                    CopySource={"Bucket": src.bucket, "Key": src.key(rel)})
        return True

    def delete_files(self, rels: list[str]) -> None:
        self.delete_keys([self.key(rel) for rel in rels])
        self._files = None

    def keys(self, prefix: str) -> dict[str, int]:
        """Every object below the key prefix `prefix` now (key -> size)."""
        out: dict[str, int] = {}
        with self.errors(f"list s3a://{self.bucket}/{prefix}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    out[obj["Key"]] = int(obj["Size"])
        return out

    def files(self) -> dict[str, int]:
        base = self.prefix + "/"
        return {k[len(base):]: n for k, n in self.keys(base).items() if not k.endswith("/")}

    def delete_keys(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            with self.errors(f"delete objects below {self.location}"):
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def delete_all(self) -> int:
        keys = sorted(self.keys(self.prefix + "/"))
        self.delete_keys(keys)
        self._files = None
        return len(keys)

    def _staging_root(self) -> str:
        parent, _, name = self.prefix.rpartition("/")
        return f"{parent}/.{name}.streamstate-restore-" if parent else f".{name}.streamstate-restore-"

    def stage(self, *, fsync: bool = True, direct: bool = False, empty: bool = False) -> S3Staging:
        """Staging left by crashed restores of this target is garbage: removed first (a swap
        that still needed one was finished before: engine/checkpoint/swap.py). Into an
        `empty` target the files are written in place (`in_place`), behind the fence the
        caller puts up first."""
        if direct:
            return S3Staging(self, self.prefix + "/", direct=True)
        self.delete_keys(sorted(self.keys(self._staging_root())))
        if empty:
            return S3Staging(self, self.prefix + "/", direct=False, in_place=True)
        return S3Staging(self, f"{self._staging_root()}{uuid.uuid4().hex[:12]}/", direct=False)

    def copy_from(self, ref: ObjectRef, key: str, digest: str, size: int, what: str) -> bool:
        """Copy `ref` into `key` server-side when it is on this endpoint with these
        credentials, verified (S3's returned SHA-256, else read back); False when it is not."""
        if not same_s3_account(ref.client, self.client):
            return False
        self._checked_copy(key, {"Bucket": ref.bucket, "Key": ref.key}, digest, size, what, ref.sha256)
        return True

    def _checked_copy(self, key: str, source: dict[str, str], digest: str, size: int, what: str,
                      carried: bool | None = None) -> None:
        """CopyObject verified by the SHA-256 S3 returns (`copy_with_sha256`: the source's own
        when it carries one, as a store's blobs do), else by reading the copy back."""
        c = self.client

        def copy(ask: bool) -> dict[str, Any]:
            with self.errors(what):
                extra = {"ChecksumAlgorithm": "SHA256"} if ask else {}
                return dict(c.copy_object(Bucket=self.bucket, Key=key, CopySource=source, **extra))
        sha = copy_with_sha256(copy, carried)
        if sha is not None:
            ok = sha == digest
        else:
            with self.errors(what):
                body = c.get_object(Bucket=self.bucket, Key=key)["Body"]
                try:
                    got, n = sha256_stream(body)
                finally:
                    body.close()
            ok = got == digest and n == size
        if not ok:
            with self.errors(f"delete a bad copy {key}"):
                c.delete_object(Bucket=self.bucket, Key=key)
            raise CorruptionError(
                f"{what}: the copy does not match sha256 {digest}",
                hint="restore another snapshot, or re-replicate this one from a healthy store",
            )

    def put_checked(self, key: str, data: bytes) -> None:
        with self.errors(f"write {key}"):
            # With its SHA-256 attached, the next snapshot names it without reading it back.
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256")


class S3Staging(Staging):
    """Objects staged below a prefix beside the target (or the target itself, `direct`)."""

    target: S3CheckpointFS

    def __init__(self, target: S3CheckpointFS, base: str, *, direct: bool, in_place: bool = False) -> None:
        self.target, self.base, self.direct, self.in_place = target, base, direct, in_place
        self.bytes_copied_server_side = 0

    def write_blob(self, store: SnapshotStore, entry: FileEntry) -> None:
        check_cancelled()
        fs, what = self.target, f"restore {entry.path}"
        ref = store.blob_ref(entry.blob_id)
        if ref is not None and fs.copy_from(ref, self.base + entry.path, entry.sha256, entry.size, what):
            self.bytes_copied_server_side += entry.size
        else:
            with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as spool:
                h = hashlib.sha256()
                n = 0
                with store.open_blob(entry.blob_id) as src:
                    while chunk := src.read(CHUNK):
                        check_cancelled()
                        h.update(chunk)
                        spool.write(chunk)
                        n += len(chunk)
                if h.hexdigest() != entry.sha256 or n != entry.size:
                    raise CorruptionError(
                        f"{entry.path}: stored blob {entry.blob_id} is corrupt (read {n} bytes with sha256 "
                        f"{h.hexdigest()})",
                        hint="restore another snapshot, or re-replicate this one from a healthy store",
                    )
                spool.seek(0)
                with fs.errors(what):
                    fs.client.upload_fileobj(spool, fs.bucket, self.base + entry.path,
                                             ExtraArgs={"ChecksumAlgorithm": "SHA256"})

    def copy(self, src_rel: str, entry: FileEntry) -> None:
        self.target._checked_copy(self.base + entry.path, {"Bucket": self.target.bucket, "Key": self.base + src_rel},
                                  entry.sha256, entry.size, f"copy {entry.path}")

    def put(self, rel: str, data: bytes) -> None:
        self.target.put_checked(self.base + rel, data)

    def check(self, want: dict[str, int]) -> None:
        staged = self.target.keys(self.base)
        if self.in_place:  # beside what the fence put there
            for rel in (SWAP_FILE, "metadata"):
                staged.pop(self.base + rel, None)
        mismatch = listing_mismatch({k[len(self.base):]: n for k, n in staged.items()}, want)
        if mismatch:
            raise CorruptionError(f"the restored staging does not match the manifest ({mismatch.first_ones()})",
                                  hint="another writer may be using the target; retry the restore with --force")

    def source(self) -> S3CheckpointFS:
        return self.target.relocated(f"s3a://{self.target.bucket}/{self.base.rstrip('/')}")

    def discard(self) -> None:
        if self.in_place and not self.kept:  # the target as it was: empty (its fence goes last, by the caller)
            written = sorted(k for k in self.target.keys(self.base)
                             if k not in (self.base + SWAP_FILE, self.base + "metadata"))
            self.target.delete_keys(written)
        elif not self.direct and not self.in_place:
            self.target.delete_keys(sorted(self.target.keys(self.base)))
        self.target._files = None

    def stats(self) -> dict[str, Any]:
        return {"bytes_copied_server_side": self.bytes_copied_server_side}
