"""sha256 of files and streams, in chunks (hashlib releases the GIL on large updates).

Each chunk is a cancellation point: a cancelled operation stops within one chunk.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.errors import CorruptionError

CHUNK = 1 << 20
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")  # a sha256 as blobs are named: 64 lowercase hex digits


def sha256_stream(src: BinaryIO) -> tuple[str, int]:
    """(hex digest, size) of everything left in a readable stream."""
    h = hashlib.sha256()
    size = 0
    while chunk := src.read(CHUNK):
        check_cancelled()
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def sha256_read(src: BinaryIO, size: int) -> tuple[str, bytearray]:
    """(hex digest, bytes) of a stream expected to hold `size` bytes, read into one buffer.

    Reads at most `size` + 1 bytes, so a stream longer than expected is noticed without
    buffering it whole: the caller compares len(bytes) with `size`. The digest is of exactly
    the bytes returned (the caller must not change them), so what is stored under it later
    is what was hashed.
    """
    h = hashlib.sha256()
    buf = bytearray(size + 1)
    view = memoryview(buf)
    n = 0
    while n <= size:
        got = src.readinto(view[n : min(n + CHUNK, size + 1)])  # type: ignore[attr-defined]
        if not got:
            break
        check_cancelled()
        h.update(view[n : n + got])
        n += got
    view.release()
    del buf[n:]
    return h.hexdigest(), buf


def sha256_file(path: Path | str) -> tuple[str, int]:
    """(hex digest, size) of a file's content."""
    with open(path, "rb") as f:
        return sha256_stream(f)


def copy_hashing(src: BinaryIO, dst: BinaryIO) -> tuple[str, int]:
    """Copy `src` into `dst`; return (hex digest, size) of what was copied."""
    h = hashlib.sha256()
    size = 0
    while chunk := src.read(CHUNK):
        check_cancelled()
        h.update(chunk)
        dst.write(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def require_digest(digest: str, size: int, hasher: Any, read: int) -> None:
    """Refuse bytes that are not the blob they were read as (`hasher` fed the `read` bytes):
    a damaged source copy."""
    if hasher.hexdigest() != digest or read != size:
        what = f"{read}+ bytes" if read > size else f"{read} bytes"
        raise CorruptionError(
            f"the bytes read for blob {digest} hash to {hasher.hexdigest()} ({what}, expected {size})",
            hint="the source copy of this blob is damaged",
        )
