"""The stack's S3 server (dev/moto_server.py) lists a prefix from each bucket's sorted key names:
the same answer as moto's own listing, which scans every key of the bucket, for prefixes,
delimiters, markers, page sizes, overwritten and deleted keys and delete markers."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from moto.s3 import models as s3_models

from dev import moto_server

NAMES = ["a", "a/", "a/b", "a/b/c", "a/b/c/d", "a/bc", "a/b0", "ab", "b/x/1", "b/x/2", "b/y", "c", "ü/x", "ü/y/z",
         *(f"tests/{i % 7}/ckpt/{i:03d}" for i in range(40))]


def answers(backend: Any, bucket: Any, list_objects: Any) -> list[Any]:
    out = []
    for prefix, delimiter, marker, max_keys in itertools.product(
            [None, "", "a", "a/", "a/b", "b/", "tests/3/", "tests/", "ü", "zz"], [None, "/"], [None, "a/b/c", "tests/3"],
            [None, 1, 3, 1000]):
        keys, folders, truncated, next_marker = list_objects(backend, bucket, prefix, delimiter, marker, max_keys)
        out.append(([k.name for k in keys], list(folders), truncated, next_marker))
    return out


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(s3_models, "_VersionedKeyStore", moto_server.IndexedKeyStore)  # what the server sets
    return s3_models.S3Backend("us-east-1", "123456789012")


@pytest.mark.parametrize("versioned", [False, True], ids=["plain", "versioned"])
def test_a_listing_from_the_sorted_names_answers_as_motos_scan_of_every_key(backend: Any, versioned: bool) -> None:
    name = f"listing-{uuid.uuid4().hex[:12]}"
    bucket = backend.create_bucket(name, "us-east-1")
    assert isinstance(bucket.keys, moto_server.IndexedKeyStore)
    if versioned:
        backend.put_bucket_versioning(name, "Enabled")
    for key in reversed(NAMES):
        backend.put_object(name, key, b"x")
    backend.put_object(name, "a/b", b"again")  # a new version of a key listed once
    for key in ("ab", "b/x/2", "tests/3/ckpt/003"):
        backend.delete_object(name, key)  # versioned: a delete marker stays
    try:
        assert answers(backend, bucket, moto_server.list_objects) == \
            answers(backend, bucket, moto_server._moto_list_objects)  # noqa: SLF001 - moto's own, the reference
        assert bucket.keys._names == sorted(dict.keys(bucket.keys))  # noqa: SLF001
    finally:
        dict.clear(bucket.keys)  # moto's pop cannot dispose of a delete marker
        backend.delete_bucket(name)
