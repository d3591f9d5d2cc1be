"""Every snapshot store reads a range of a blob (what key lookups read RocksDB tables by):
the bytes asked for, fewer only past the blob's end, a missing blob named as missing."""

from __future__ import annotations

import hashlib
import os

import pytest

from airflow_provider_streamstate.engine.core.errors import MissingBlobError

pytestmark = pytest.mark.integration


def test_a_store_reads_the_range_of_a_blob_it_was_asked_for(make_store, store_kind: str) -> None:
    store, _, _ = make_store(store_kind)
    data = os.urandom(300_000)
    digest = hashlib.sha256(data).hexdigest()
    store.put_blob_bytes(digest, data)
    for offset, length in ((0, 1), (0, 53), (123_456, 4_096), (len(data) - 32_768, 32_768), (len(data) - 10, 100)):
        assert store.read_blob_range(digest, offset, length) == data[offset:offset + length], (offset, length)
    with pytest.raises(MissingBlobError):
        store.read_blob_range("0" * 64, 0, 10)
