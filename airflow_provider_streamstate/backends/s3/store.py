"""A snapshot store in S3 or any S3-compatible endpoint.

Takes a boto3 S3 client, so callers choose how it is configured: `clients.s3_client()`
builds one from the standard AWS environment variables (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, ...) or from an Airflow connection (`S3Hook(aws_conn_id=...)`).
Every failure is an engine error (see `errors`), including a connection cut while a
blob's body is read; a cancelled upload aborts its multipart upload.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, cast

from airflow_provider_streamstate.backends.s3.clients import (
    S3Access,
    copy_with_sha256,
    parse_s3_url,
    s3_client_from_env,
    same_s3_account,
)
from airflow_provider_streamstate.backends.s3.errors import (
    S3Body,
    code,
    request_error,
    status,
    stream_errors,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import SHA256_RE, require_digest, sha256_stream
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    MissingBlobError,
    NotFoundError,
    StreamstateError,
)
from airflow_provider_streamstate.engine.stores.base import (
    BLOB_PREFIXES,
    MANIFEST_SUFFIX,
    PART_SIZE,
    STREAMS_PREFIX,
    TIMELINES_KIND,
    BlobInfo,
    ManifestExistsError,
    ObjectRef,
    RecentListing,
    RecordChanged,
    SnapshotStore,
    StaleTemp,
    StoreOptions,
    blob_key,
    manifest_key,
    new_unique_blob_id,
)

CHUNK = 1 << 20  # reads from a stream: a cancellation point each
# GC sends a blob's DELETE within this long of starting the HEAD that found it old, or not at
# all; writers re-check refreshed blobs REFRESH_SETTLE_SECONDS after refreshing them, so a
# DELETE decided before a refresh has landed by then (the rest is the request's own latency).
DELETE_DECISION_SECONDS = 2.0
REFRESH_SETTLE_SECONDS = 5.0


LIST_PAGE_KEYS = 1000  # S3's own maximum: a listing's requests are its keys / 1000
FIRST_PAGE_KEYS = 100  # the catalog head's check: the newest ids, state jobs' and timeline records


class S3Store(SnapshotStore):
    refresh_settle_seconds = REFRESH_SETTLE_SECONDS
    copies_to_unique_blobs = True

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, aws_conn_id: str | None = None) -> None:
        """`aws_conn_id`: the Airflow connection the client came from, named in error hints."""
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.aws_conn_id = aws_conn_id

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate boto3 failures into one-line errors that say whether to retry."""
        from botocore.exceptions import BotoCoreError, ClientError
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            yield
        except StreamstateError:
            raise
        except (ClientError, BotoCoreError, Urllib3Error) as exc:
            raise request_error(
                exc, what=what, url=self.url, bucket=self.bucket, conn_id=self.aws_conn_id
            ) from None

    def _read(self, body: Any, what: str) -> bytes:
        """A whole (small) response body; a connection cut while reading is a TransientError."""
        with S3Body(body, lambda: stream_errors(what, self.url)) as b:
            return b.read()

    # --- capabilities ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str | None:
        return str(self.client.meta.endpoint_url)

    def location_of(self, rel: str) -> str:
        return f"s3a://{self.bucket}/{self._key(rel)}"

    def checkpoint_connection(self, location: str) -> Any:
        return self.client if location.startswith(("s3://", "s3a://")) else None

    def blob_ref(self, blob: str) -> ObjectRef:
        # A unique blob made by a CopyObject carries a SHA-256 (kept or computed), one uploaded
        # in parts by a replication none: unknown, tried plain. A blob named by its sha256 was
        # put with that checksum, which an endpoint may not keep (moto): a copy asks for one.
        return ObjectRef(self.client, self.bucket, self._key(blob_key(blob)),
                         sha256=False if SHA256_RE.match(blob) else None)

    def can_copy_in(self, ref: ObjectRef) -> bool:
        return same_s3_account(ref.client, self.client)

    def _copy_object(self, ref: ObjectRef, key: str, what: str, *, ask: bool) -> dict[str, Any]:
        """CopyObject of `ref` (its planned version: `CopySourceIfMatch`) to `key`; with `ask`,
        S3 computes a SHA-256 checksum of the new object."""
        from botocore.exceptions import ClientError

        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "CopySource": {"Bucket": ref.bucket, "Key": ref.key}}
        if ask:
            args["ChecksumAlgorithm"] = "SHA256"
        if ref.etag:
            args["CopySourceIfMatch"] = ref.etag
        with self._errors(what):
            try:
                return dict(self.client.copy_object(**args))
            except ClientError as exc:
                if status(exc) == 404 or code(exc) in ("NoSuchKey", "404"):
                    raise FileNotFoundError(f"s3://{ref.bucket}/{ref.key}") from None
                if status(exc) == 412 or code(exc) == "PreconditionFailed":
                    raise CheckpointChanged(f"s3://{ref.bucket}/{ref.key}: the object changed since it was "
                                            "listed") from None
                raise

    def _copy_blob(self, ref: ObjectRef, key: str, blob: str, size: int, what: str, *, confirm: bool) -> str | None:
        """Copy `ref` to blob `blob` (at `key`): its sha256 is the full-object checksum S3
        returned (`copy_with_sha256`: the source's own when it carries one), else (with
        `confirm`) the copy read back and hashed (its size checked too); None: neither."""
        sha = copy_with_sha256(lambda ask: self._copy_object(ref, key, what, ask=ask), ref.sha256)
        if sha is not None or not confirm:
            return sha
        with self.open_blob(blob) as f:
            actual, n = sha256_stream(f)
        return actual if n == size else f"{actual} ({n} bytes, expected {size})"

    def _delete_copy(self, key: str, blob: str) -> None:
        with self._errors(f"delete a bad copy of blob {blob[:12]}"):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def copy_in(self, ref: ObjectRef, blob: str, size: int, *, confirm: bool, sha256: str | None = None) -> int:
        """CopyObject asking for a SHA-256 checksum of the new object (`CopySourceIfMatch`
        when `ref` names a version); when the endpoint returns a full-object checksum it must
        equal the content's sha256, else (moto and s3proxy return none for copies) the copy
        is read back when `confirm`. A blob already stored is not copied (HEAD first); a
        concurrent writer of the same blob writes the same bytes."""
        check_cancelled()
        if not self.can_copy_in(ref):
            raise NotImplementedError(f"{ref.bucket}/{ref.key} is not on {self.url}'s endpoint with its credentials")
        if self.has_blob(blob):
            return 0
        expected = sha256 or blob
        key = self._key(blob_key(blob))
        actual = self._copy_blob(ref, key, blob, size, f"copy s3://{ref.bucket}/{ref.key} to blob {blob[:12]}",
                                 confirm=confirm)
        if actual is not None and actual != expected:
            self._delete_copy(key, blob)
            raise CorruptionError(
                f"s3://{ref.bucket}/{ref.key}: the server-side copy has sha256 {actual}, not {expected}",
                hint="retry; if it persists, the S3 endpoint corrupts copies or misreports checksums",
            )
        return size  # unchecked only when not `confirm`: the bytes were hashed as they were read, and this is that version

    def copy_in_unique(self, ref: ObjectRef, size: int) -> tuple[str, str]:
        """One CopyObject into `blobs/unique/`: S3 computes the copy's SHA-256 and returns it;
        an endpoint that returns none (s3proxy) has the copy read back and hashed here."""
        check_cancelled()
        if not self.can_copy_in(ref):
            raise NotImplementedError(f"{ref.bucket}/{ref.key} is not on {self.url}'s endpoint with its credentials")
        blob = new_unique_blob_id()
        key = self._key(blob_key(blob))
        actual = self._copy_blob(ref, key, blob, size, f"copy s3://{ref.bucket}/{ref.key} to a new blob", confirm=True)
        assert actual is not None
        if len(actual) != 64:  # read back with another size: the object changed under its ETag
            self._delete_copy(key, blob)
            raise CheckpointChanged(f"s3://{ref.bucket}/{ref.key}: its copy is {actual.split(' ', 1)[1]}")
        return blob, actual

    def spark_access(self, env: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        return S3Access.from_client(self.client).spark_access(self.bucket)

    def has_blob(self, blob: str) -> bool:
        from botocore.exceptions import ClientError

        with self._errors(f"check blob {blob[:12]}"):
            try:
                self.client.head_object(Bucket=self.bucket, Key=self._key(blob_key(blob)))
                return True
            except ClientError as exc:
                if status(exc) == 404 or code(exc) in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise

    def put_blob(self, digest: str, source: Path, size: int) -> int:
        """Store a blob once: writes are conditional, so a concurrent writer of the same
        content (another snapshot, another stream) makes this one a no-op returning 0."""
        from botocore.exceptions import ClientError

        check_cancelled()
        if self.has_blob(digest):
            return 0
        key = self._key(blob_key(digest))
        with self._errors(f"upload {source.name}"):
            try:
                if size <= PART_SIZE:
                    data = Path(source).read_bytes()
                    sha = hashlib.sha256(data)
                    if sha.hexdigest() != digest:
                        raise CheckpointChanged(f"{source} changed while it was being stored")
                    self.client.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=data,
                        IfNoneMatch="*",
                        ChecksumSHA256=base64.b64encode(sha.digest()).decode(),
                    )
                    return len(data)
                return self._put_multipart(digest, source, key)
            except ClientError as exc:
                if self._already_stored(exc, digest):
                    return 0
                raise

    def put_blob_stream(self, blob: str, src: BinaryIO, size: int, *, sha256: str | None = None) -> int:
        """Up to PART_SIZE: read whole (hashing chunk by chunk), checked, then one conditional
        PUT that also asks S3 to verify the sha256; larger: a multipart upload whose parts
        are hashed as they go, completed only when the whole hash matches (else aborted).
        Memory per call stays below one part; no temp file on local disk. No HEAD first: the
        conditional write alone keeps an existing blob (replication checks presence itself
        before it opens the source)."""
        from botocore.exceptions import ClientError

        check_cancelled()
        digest = sha256 or blob
        key = self._key(blob_key(blob))
        with self._errors(f"upload blob {blob[:12]}"):
            try:
                if size <= PART_SIZE:
                    h = hashlib.sha256()
                    buf = bytearray()
                    while chunk := src.read(min(CHUNK, PART_SIZE + 1 - len(buf))):
                        check_cancelled()
                        h.update(chunk)
                        buf += chunk
                        if len(buf) > size:
                            break
                    require_digest(digest, size, h, len(buf))
                    self.client.put_object(
                        Bucket=self.bucket, Key=key, Body=buf, IfNoneMatch="*",
                        ChecksumSHA256=base64.b64encode(h.digest()).decode(),
                    )
                    return len(buf)
                return self._put_multipart_stream(digest, src, size, key)
            except ClientError as exc:
                if self._already_stored(exc, blob):
                    return 0
                raise

    def put_blob_bytes(self, digest: str, data: bytes | bytearray) -> int:
        """Up to PART_SIZE: one conditional PUT (`If-None-Match: *`) of bytes the caller
        hashed to `digest` while reading them, asking S3 to verify them against it
        (`ChecksumSHA256` = the digest: real S3 refuses a body that is not the blob; on an
        endpoint that ignores the checksum, such as moto, the name rests on the caller's hash
        of these very bytes). They are not hashed a second time here: this is the hot path of
        a snapshot of an S3 checkpoint into a store on another endpoint. No HEAD first, as in
        `put_blob_stream`. Larger: a multipart upload through `put_blob_stream`, which hashes
        each part as it goes."""
        from botocore.exceptions import ClientError

        if len(data) > PART_SIZE:
            return self.put_blob_stream(digest, io.BytesIO(data), len(data))
        check_cancelled()
        with self._errors(f"upload blob {digest[:12]}"):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=self._key(blob_key(digest)), Body=data, IfNoneMatch="*",
                    ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(),
                )
            except ClientError as exc:
                if self._already_stored(exc, digest):
                    return 0
                raise
        return len(data)

    def _already_stored(self, exc: Exception, blob: str) -> bool:
        """A conditional blob write refused because the blob is there: stored before (412),
        or by a concurrent writer of the same content that won the race (409, then present)."""
        if code(exc) == "PreconditionFailed" or status(exc) == 412:
            return True
        return code(exc) == "ConditionalRequestConflict" and self.has_blob(blob)

    def _upload_parts(self, key: str, parts: Iterator[bytes | bytearray], verify: Callable[[], None]) -> int:
        """One multipart upload of `parts`; `verify()` runs after the last part, before the
        completion (`IfNoneMatch`) that makes the object appear. A failure or a cancellation
        aborts the upload: no object, no parts left behind. Returns the bytes uploaded."""
        upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:
            done: list[dict[str, Any]] = []
            written = 0
            for body in parts:
                check_cancelled()  # a cancelled upload is aborted below, within one part
                r = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=len(done) + 1, Body=body
                )
                done.append({"PartNumber": len(done) + 1, "ETag": r["ETag"]})
                written += len(body)
                del body  # sent: let it go before the next part is read
            verify()
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}, IfNoneMatch="*"
            )
            return written
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - the original failure matters more
                pass
            raise

    def _put_multipart_stream(self, digest: str, src: BinaryIO, size: int, key: str) -> int:
        """Upload a stream in parts, hashing as we go; the object appears only if its bytes
        are the blob (a stream longer than `size` is refused before its excess is sent)."""
        h = hashlib.sha256()
        read = 0

        def parts() -> Iterator[bytes | bytearray]:
            nonlocal read
            part = bytearray()
            while True:
                chunk = src.read(min(CHUNK, PART_SIZE - len(part)))
                check_cancelled()
                h.update(chunk)
                read += len(chunk)
                if read > size:
                    return  # longer than the manifest says: refused by the check
                part += chunk
                if len(part) >= PART_SIZE or (not chunk and part):
                    full, part = part, bytearray()
                    yield full  # no copy: one part in memory at a time
                    del full
                if not chunk:
                    return

        return self._upload_parts(key, parts(), lambda: require_digest(digest, size, h, read))

    def _put_multipart(self, digest: str, source: Path, key: str) -> int:
        """Upload a file in parts, hashing as we go; the object appears only if the hash matches."""
        h = hashlib.sha256()

        def verify() -> None:
            if h.hexdigest() != digest:
                raise CheckpointChanged(f"{source} changed while it was being stored")

        with open(source, "rb") as f:

            def parts() -> Iterator[bytes]:
                while chunk := f.read(PART_SIZE):
                    h.update(chunk)
                    yield chunk

            return self._upload_parts(key, parts(), verify)

    def open_blob(self, blob: str) -> AbstractContextManager[BinaryIO]:
        return cast("AbstractContextManager[BinaryIO]", S3Body(self._get_blob(blob), lambda: stream_errors(f"blob {blob[:12]}", self.url)))

    def read_blob_range(self, blob: str, offset: int, length: int) -> bytes:
        """One ranged GetObject (`Range: bytes=offset-end`)."""
        if length <= 0:
            return b""
        body = self._get_blob(blob, Range=f"bytes={offset}-{offset + length - 1}")
        with S3Body(body, lambda: stream_errors(f"blob {blob[:12]}", self.url)) as f:
            return f.read()

    def _get_blob(self, blob: str, **extra: Any) -> Any:
        from botocore.exceptions import ClientError

        with self._errors(f"read blob {blob[:12]}"):
            try:
                return self.client.get_object(Bucket=self.bucket, Key=self._key(blob_key(blob)), **extra)["Body"]
            except ClientError as exc:
                if code(exc) in ("NoSuchKey", "404") or status(exc) == 404:
                    raise MissingBlobError(
                        f"blob {blob} is missing from {self.url}",
                        hint="restore another snapshot, or re-replicate this one from a healthy store",
                    ) from None
                raise

    def _list(self, prefix: str, delimiter: str | None = None, start_after: str | None = None) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._key(prefix)}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if start_after:
            kwargs["StartAfter"] = self._key(start_after)
        with self._errors(f"list {prefix}"):
            yield from self.client.get_paginator("list_objects_v2").paginate(
                **kwargs, PaginationConfig={"PageSize": LIST_PAGE_KEYS})

    def iter_blobs(self) -> Iterator[tuple[str, int]]:
        for info in self.iter_blob_info():
            yield info.digest, info.size

    def _put_manifest_object(self, stream: str, snapshot_id: str, data: bytes) -> None:
        check_cancelled()  # the commit point of a snapshot: a cancelled one publishes nothing
        self._put_once(manifest_key(stream, snapshot_id), data, what=f"snapshot {snapshot_id} of {stream}")

    def _put_once(self, rel: str, data: bytes, *, what: str) -> None:
        """Conditional put: never overwrites, so two writers cannot both win."""
        from botocore.exceptions import ClientError

        with self._errors(f"write {what}"):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=self._key(rel), Body=data, IfNoneMatch="*", ContentType="application/json"
                )
            except ClientError as exc:
                if code(exc) == "PreconditionFailed" or status(exc) == 412:
                    raise ManifestExistsError(f"{what} already exists in {self.url}") from None
                raise

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        from botocore.exceptions import ClientError

        with self._errors(f"read manifest {snapshot_id}"):
            try:
                obj = self.client.get_object(Bucket=self.bucket, Key=self._key(manifest_key(stream, snapshot_id)))
                return self._read(obj["Body"], f"manifest {snapshot_id}")
            except ClientError as exc:
                if code(exc) in ("NoSuchKey", "404") or status(exc) == 404:
                    raise NotFoundError(
                        f"no snapshot {snapshot_id} of stream {stream} in {self.url}",
                        hint=f"list them with `streamstate snapshot list --store {self.url} --stream {stream}`",
                    ) from None
                raise

    def list_snapshot_ids(self, stream: str) -> list[str]:
        return self._snapshot_ids(stream, None)

    def list_snapshot_ids_after(self, stream: str, after: str) -> list[str]:
        # From the id itself, not `<id>.json`: `<id>-t2.json` sorts between the two.
        return [i for i in self._snapshot_ids(stream, f"{STREAMS_PREFIX}/{stream}/snapshots/{after}") if i > after]

    def list_from(self, stream: str, first: str) -> RecentListing:
        # One listing of the stream's records from `first`: its manifests, then the records
        # sorting between them and the timelines (split-header, state-jobs), then the timeline records.
        # The first page is short (the validation records that follow are not wanted, and a
        # page of 1,000 keys costs more to send and parse than the rest of `latest`); more
        # pages only while the timelines may not all have been seen.
        base = f"{STREAMS_PREFIX}/{stream}/"
        snapshots, timelines = f"{base}snapshots/", f"{base}{TIMELINES_KIND}/"
        beyond = f"{base}{TIMELINES_KIND}0"  # '0' follows '/': every timeline record sorts before
        strip = len(self._key(""))
        found = RecentListing([], [])
        # `<first>.json` (and `<first>-t2.json`) sort after `<first>`
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._key(base), "StartAfter": self._key(snapshots + first),
                                "MaxKeys": min(FIRST_PAGE_KEYS, LIST_PAGE_KEYS)}
        while True:
            with self._errors(f"list {base}"):
                page = self.client.list_objects_v2(**args)
            last = ""
            for obj in page.get("Contents", []):
                last = key = obj["Key"][strip:]
                if not key.endswith(MANIFEST_SUFFIX):
                    continue
                etag = str(obj.get("ETag", "")).strip('"')
                if key.startswith(snapshots) and "/" not in key[len(snapshots):]:
                    sid = key[len(snapshots):-len(MANIFEST_SUFFIX)]
                    if sid >= first:
                        found.snapshot_ids.append(sid)
                        found.etags[sid] = etag
                    continue
                found.etags[key] = etag  # a record: a timeline's, the catalog head's split header
                if key.startswith(timelines):
                    found.timeline_keys.append(key)
            if last >= beyond or not page.get("IsTruncated"):
                break
            args.update(ContinuationToken=page["NextContinuationToken"], MaxKeys=LIST_PAGE_KEYS)
        found.snapshot_ids.sort()
        found.timeline_keys.sort()
        return found

    def _snapshot_ids(self, stream: str, start_after: str | None) -> list[str]:
        ids = []
        for page in self._list(f"{STREAMS_PREFIX}/{stream}/snapshots/", start_after=start_after):
            for obj in page.get("Contents", []):
                name = obj["Key"].rsplit("/", 1)[-1]
                if name.endswith(MANIFEST_SUFFIX):
                    ids.append(name[: -len(MANIFEST_SUFFIX)])
        return sorted(ids)

    def list_streams(self) -> list[str]:
        out = []
        for page in self._list(f"{STREAMS_PREFIX}/", delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                out.append(cp["Prefix"].rstrip("/").rsplit("/", 1)[-1])
        return sorted(out)

    def put_record(self, key: str, data: bytes) -> None:
        self._put_once(key, data, what=f"record {key}")

    def get_record(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        with self._errors(f"read record {key}"):
            try:
                return self._read(self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"], f"record {key}")
            except ClientError as exc:
                if code(exc) in ("NoSuchKey", "404") or status(exc) == 404:
                    return None
                raise

    def list_records(self, prefix: str) -> list[str]:
        strip = len(self._key(""))
        keys = [
            obj["Key"][strip:]
            for page in self._list(prefix)
            for obj in page.get("Contents", [])
            if obj["Key"].endswith(MANIFEST_SUFFIX)
        ]
        return sorted(keys)

    def list_records_after(self, prefix: str, after: str) -> list[str]:
        strip = len(self._key(""))
        keys = [
            obj["Key"][strip:]
            for page in self._list(prefix, start_after=after)
            for obj in page.get("Contents", [])
            if obj["Key"].endswith(MANIFEST_SUFFIX)
        ]
        return sorted(k for k in keys if k > after)

    def list_record_tree(self, prefix: str) -> list[str]:
        return self.list_records(prefix)  # an S3 listing of a prefix is already every depth

    # --- deletion (retention and GC) ------------------------------------------------------

    def replace_record(self, key: str, data: bytes) -> None:
        with self._errors(f"write record {key}"):
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType="application/json")

    def delete_record(self, key: str) -> None:
        with self._errors(f"delete {key}"):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def _delete_manifest_object(self, stream: str, snapshot_id: str) -> None:
        self.delete_record(manifest_key(stream, snapshot_id))

    def refresh_blob(self, blob: str) -> bool:
        """A server-side copy of the blob onto itself: a new LastModified, no bytes moved
        through this host (S3 refuses a self-copy that changes nothing, hence REPLACE)."""
        from botocore.exceptions import ClientError

        key = self._key(blob_key(blob))
        with self._errors(f"refresh blob {blob[:12]}"):
            try:
                self.client.copy_object(
                    Bucket=self.bucket, Key=key, CopySource={"Bucket": self.bucket, "Key": key},
                    MetadataDirective="REPLACE", Metadata={"streamstate-refreshed": str(int(time.time()))},
                )
            except ClientError as exc:
                if code(exc) in ("NoSuchKey", "404") or status(exc) == 404:
                    return False
                raise
        return True

    def iter_blob_info(self) -> Iterator[BlobInfo]:
        for prefix in BLOB_PREFIXES:
            for page in self._list(f"{prefix}/"):
                for obj in page.get("Contents", []):
                    yield BlobInfo(obj["Key"].rsplit("/", 1)[-1], int(obj["Size"]), obj["LastModified"].timestamp())

    def blob_modified(self, blob: str) -> float | None:
        from botocore.exceptions import ClientError

        with self._errors(f"check blob {blob[:12]}"):
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=self._key(blob_key(blob)))
            except ClientError as exc:
                if status(exc) == 404 or code(exc) in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
        return float(head["LastModified"].timestamp())

    def delete_blob(self, blob: str, *, written_before: float,
                    still_held: Callable[[], None] | None = None) -> bool:
        """HEAD right before DELETE: a blob refreshed since the listing stays. S3 has no
        delete conditional on the last write for general-purpose buckets, so the DELETE is
        sent only within DELETE_DECISION_SECONDS of starting the HEAD: a writer that refreshed
        the blob in between finds it gone when it re-checks (`refresh_settle_seconds` after
        its refresh) and stores it again."""
        asked = time.monotonic()
        modified = self.blob_modified(blob)
        if modified is None or modified >= written_before:
            return False
        if time.monotonic() - asked > DELETE_DECISION_SECONDS:
            return False  # the answer is too old to act on; the next GC asks again
        if still_held is not None:
            still_held()
        with self._errors(f"delete blob {blob[:12]}"):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(blob_key(blob)))
        return True

    def iter_stale_temp(self, written_before: float) -> Iterator[StaleTemp]:
        """Incomplete multipart uploads (an S3 store writes no temp objects otherwise)."""
        strip = len(self._key(""))
        with self._errors("list multipart uploads"):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=self._key(""))
            for page in pages:
                for up in page.get("Uploads", []) or []:
                    initiated = up["Initiated"].timestamp()
                    if initiated < written_before:
                        yield StaleTemp(up["Key"][strip:], 0, initiated, up["UploadId"])

    def delete_temp(self, temp: StaleTemp) -> None:
        from botocore.exceptions import ClientError

        if temp.upload_id is None:
            self.delete_record(temp.key)
            return
        with self._errors(f"abort multipart upload of {temp.key}"):
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(temp.key), UploadId=temp.upload_id)
            except ClientError as exc:
                if code(exc) != "NoSuchUpload":
                    raise

    # --- compare-and-swap records (the GC lease) ---------------------------------------------

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The version is the object's ETag."""
        from botocore.exceptions import ClientError

        with self._errors(f"read record {key}"):
            try:
                obj = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if code(exc) != "NoSuchBucket" and (code(exc) in ("NoSuchKey", "404") or status(exc) == 404):
                    return None
                raise
            return self._read(obj["Body"], f"record {key}"), str(obj["ETag"])

    def swap_record(self, key: str, data: bytes, *, expect: str | None) -> str:
        """One conditional PUT: `If-None-Match: *` to create, `If-Match: <ETag>` to replace.
        412 (and 409, a concurrent conditional write) means another writer won; 404 on
        If-Match means the record was deleted since it was read."""
        from botocore.exceptions import ClientError

        cond = {"IfNoneMatch": "*"} if expect is None else {"IfMatch": expect}
        with self._errors(f"write record {key}"):
            try:
                r = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                           ContentType="application/json", **cond)
            except ClientError as exc:
                if code(exc) != "NoSuchBucket" and (
                        code(exc) in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey")
                        or status(exc) in (404, 409, 412)):
                    raise RecordChanged(f"record {key} in {self.url} changed since it was read") from None
                raise
        return str(r["ETag"])


def open_s3(url: str, options: StoreOptions) -> S3Store:
    """`s3://bucket[/prefix]` with the given client, else one from the AWS environment, else
    (in a Spark application's driver) from the access its conf carries."""
    bucket, prefix = parse_s3_url(url)
    client = options.connection
    if client is None and options.spark_conf is not None and not os.environ.get("AWS_ACCESS_KEY_ID"):
        access = S3Access.from_spark_conf(options.spark_conf, bucket)
        client = access.s3_client(options.parallelism * 2) if access is not None else None
    if client is None:
        client = s3_client_from_env(options.parallelism * 2)
    return S3Store(client, bucket, prefix, aws_conn_id=options.conn_id)
