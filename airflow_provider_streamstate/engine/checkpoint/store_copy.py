"""Moving a checkpoint file of an S3 checkpoint into a snapshot store.

The content address needs the file's sha256. When the checkpoint object carries the
SHA-256 S3 checked when it was written (S3A with `fs.s3a.create.checksum.algorithm=SHA256`,
a single-part upload), a `HEAD` of the planned version reads it and no byte crosses this
host; otherwise a snapshot streams each new file once through this host to hash it
(`GetObject(IfMatch=etag)`). Storing it then costs no second
transfer when the store is on the same S3 endpoint with the same credentials: the blob is
a server-side `CopyObject` of the very object version that was hashed
(`CopySourceIfMatch=<etag>`; a file Spark rewrote meanwhile fails the copy and the cut is
planned again). The copy asks S3 for a SHA-256 checksum; when the endpoint returns one it
must equal the blob's name, or the copy is deleted and the snapshot fails; a digest taken
from the object's own checksum that the copy does not confirm this way is confirmed by
reading the copy back. Such a name rests on S3 having checked, when the object was written,
the checksum its writer sent (S3 does); a blob already in the store under that name is
not copied, so not confirmed again. On another
endpoint (or into a local store) there is no copy: an object up to the S3 store's part size
is kept in memory from that one read and stored from it (`snapshot.READ_ONCE_BYTES`); a
larger one is streamed a second time into the store, which checks the bytes against the
digest as it writes them.
"""

from __future__ import annotations

import base64
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import S3CheckpointFS
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.digest import sha256_stream
from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.stores.base import SnapshotStore, blob_key
from airflow_provider_streamstate.engine.stores.s3 import S3Store, same_s3_account

MAX_COPY_OBJECT_BYTES = 5 * 1024**3  # larger objects need UploadPartCopy; stream them instead


def server_side_possible(fs: Any, store: SnapshotStore) -> bool:
    """The checkpoint and the store are on one S3 endpoint with one set of credentials."""

    return isinstance(fs, S3CheckpointFS) and isinstance(store, S3Store) and same_s3_account(fs.client, store.client)


def copy_into_store(
    fs: S3CheckpointFS, store: Any, rel: str, etag: str | None, digest: str, size: int, *, from_checksum: bool = False,
) -> int:
    """Store checkpoint object `rel` (version `etag`, hashed to `digest`) as a blob by
    CopyObject; returns the bytes copied, 0 when the store had the blob already.
    `from_checksum`: `digest` is the object's stored S3 checksum, not a hash of bytes read here."""
    check_cancelled()
    if store.has_blob(digest):
        return 0
    key = f"{store.prefix}/{blob_key(digest)}" if store.prefix else blob_key(digest)
    source: dict[str, Any] = {"Bucket": fs.bucket, "Key": fs.key(rel)}
    with fs.errors(f"copy {fs.location}/{rel} to {store.url}"):
        args: dict[str, Any] = {"Bucket": store.bucket, "Key": key, "CopySource": source, "ChecksumAlgorithm": "SHA256"}
        if etag:
            args["CopySourceIfMatch"] = etag
        r = fs.client.copy_object(**args)
    checksum = (r.get("CopyObjectResult") or {}).get("ChecksumSHA256")
    if checksum and "-" not in checksum:
        actual = base64.b64decode(checksum).hex()
    elif from_checksum:
        actual = _read_back(fs, store, key)  # nothing here has seen these bytes: hash the copy
    else:
        return size
    if actual != digest:
        with fs.errors(f"delete a bad copy of blob {digest[:12]}"):
            store.client.delete_object(Bucket=store.bucket, Key=key)
        raise CorruptionError(
            f"{rel}: the server-side copy has sha256 {actual}, not {digest}",
            hint="retry the snapshot; if it persists, the S3 endpoint corrupts copies or misreports checksums",
        )
    return size


def _read_back(fs: S3CheckpointFS, store: Any, key: str) -> str:
    """The sha256 of a blob just copied, read from the store."""
    with fs.errors(f"read back {store.url}/{key}"):
        body = store.client.get_object(Bucket=store.bucket, Key=key)["Body"]
        try:
            return sha256_stream(body)[0]
        finally:
            body.close()
