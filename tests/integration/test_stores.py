"""Every store backend keeps the same contract: content-addressed blobs and blobs under unique
ids checked against the sha256 a manifest names, write-once manifests each announced by a
journal hint, listings that start after a key; on each kind of `store_kind` (a local
directory, S3 on two independent implementations, moto and s3proxy, and HDFS)."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, CorruptionError, NotFoundError
from airflow_provider_streamstate.engine.stores import ManifestExistsError, open_store
from airflow_provider_streamstate.engine.stores.base import PART_SIZE

pytestmark = pytest.mark.integration


def test_blobs_are_stored_once_and_read_back(make_store, tmp_path, store_kind) -> None:
    store, _, _ = make_store(store_kind)
    data = b"state bytes " * 1000
    src = tmp_path / "f"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert not store.has_blob(digest)
    with ThreadPoolExecutor(4) as pool:  # concurrent writers of one content: one blob
        written = list(pool.map(lambda _: store.put_blob(digest, src, len(data)), range(4)))
    assert store.has_blob(digest)
    # Each writer either stored the bytes or found them stored. The local store links and
    # HDFS renames create-only, so exactly one writes; S3 relies on If-None-Match, which
    # the test endpoints check without a lock, so concurrent puts there may each land.
    assert set(written) <= {0, len(data)} and len(data) in written
    if store_kind in ("local", "hdfs"):
        assert written.count(len(data)) == 1
    with store.open_blob(digest) as f:
        assert f.read() == data
    assert list(store.iter_blobs()) == [(digest, len(data))]
    with pytest.raises(CheckpointChanged):
        store.put_blob("f" * 64, src, len(data))  # bytes do not match the name
    assert not store.has_blob("f" * 64)
    with pytest.raises(CorruptionError, match="missing"):
        store.open_blob("e" * 64).__enter__()


@pytest.mark.parametrize("kind", ["s3", pytest.param("s3proxy", marks=pytest.mark.s3proxy)])
@pytest.mark.parametrize("size", [12_000, PART_SIZE + 1])
def test_s3_blob_stored_by_another_writer_after_the_check_is_not_written_again(make_store, tmp_path, size, kind) -> None:
    store, _, _ = make_store(kind)
    data = bytes(range(256)) * (size // 256 + 1)
    src = tmp_path / "f"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert store.put_blob(digest, src, len(data)) == len(data)
    head_calls = []

    def stale_head(d: str) -> bool:  # the other writer lands between our HEAD and our PUT
        head_calls.append(d)
        return False

    store.has_blob = stale_head  # type: ignore[method-assign]
    assert store.put_blob(digest, src, len(data)) == 0  # the conditional write refused to overwrite
    assert head_calls == [digest]
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads", [])
    assert uploads == []


@pytest.mark.parametrize("kind", ["s3", pytest.param("s3proxy", marks=pytest.mark.s3proxy)])
def test_large_s3_blobs_go_up_in_parts_and_only_when_the_hash_matches(make_store, tmp_path, kind) -> None:
    store, _, _ = make_store(kind)
    data = bytes(range(256)) * ((PART_SIZE * 2 + 12345) // 256)
    src = tmp_path / "big"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert store.put_blob(digest, src, len(data)) == len(data)
    with store.open_blob(digest) as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest
    with pytest.raises(CheckpointChanged):
        store.put_blob("0" * 64, src, len(data))
    assert not store.has_blob("0" * 64)
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads", [])
    assert uploads == []  # the refused upload was aborted, not left behind


def test_manifests_are_written_once(make_store, store_kind) -> None:
    store, _, _ = make_store(store_kind)
    sid = "000000000003-20261121T000000000000Z"
    store.put_manifest("s", sid, b'{"a": 1}')
    with pytest.raises(ManifestExistsError):
        store.put_manifest("s", sid, b'{"a": 2}')
    assert store.get_manifest("s", sid) == b'{"a": 1}'
    store.put_manifest("s", "000000000001-20261121T000000000000Z", b"{}")
    store.put_manifest("t", sid, b"{}")
    assert store.list_snapshot_ids("s") == ["000000000001-20261121T000000000000Z", sid]
    assert store.list_streams() == ["s", "t"]
    with pytest.raises(NotFoundError, match="no snapshot"):
        store.get_manifest("s", "000000000009-20261121T000000000000Z")


def test_blobs_under_unique_ids_are_stored_checked_listed_and_collected_like_the_others(
    make_store, tmp_path, store_kind
) -> None:
    """What replication does with a blob an S3 snapshot copied to a unique key: every store
    takes it under that id, refuses bytes that are not the sha256 the manifest names, and
    lists it (garbage collection sees it) beside content-addressed blobs."""
    import io

    from airflow_provider_streamstate.engine.stores.base import new_unique_blob_id

    store, _, _ = make_store(store_kind)
    data = b"unique " * 500
    digest, blob = hashlib.sha256(data).hexdigest(), new_unique_blob_id()
    with pytest.raises(CorruptionError):
        store.put_blob_stream(blob, io.BytesIO(data + b"!"), len(data) + 1, sha256=digest)
    assert not store.has_blob(blob)
    assert store.put_blob_stream(blob, io.BytesIO(data), len(data), sha256=digest) == len(data)
    assert store.put_blob_stream(blob, io.BytesIO(data), len(data), sha256=digest) == 0  # present: kept
    with store.open_blob(blob) as f:
        assert f.read() == data
    assert dict(store.iter_blobs()) == {blob: len(data)}
    modified = store.blob_modified(blob)
    assert modified is not None and store.refresh_blob(blob)
    assert store.delete_blob(blob, written_before=modified - 3600) is False  # young: kept
    assert store.delete_blob(blob, written_before=modified + 3600) is True
    assert not store.has_blob(blob)


def test_manifests_are_announced_in_the_journal_and_listed_after_a_known_id(make_store, store_kind) -> None:
    store, _, _ = make_store(store_kind)
    ids = [f"00000000000{b}-20261121T000000000000Z" for b in range(1, 5)]
    for sid in (ids[0], ids[2], ids[3], f"{ids[1]}-t2", ids[1]):
        store.put_manifest("s", sid, b"{}")
    assert store.list_snapshot_ids_after("s", ids[1]) == [f"{ids[1]}-t2", ids[2], ids[3]]
    hints = store.list_records("streams/s/journal/")
    assert len(hints) == 5 and all("-p-" in k for k in hints)
    assert store.list_records_after("streams/s/journal/", hints[2]) == hints[3:]
    assert store.delete_manifest("s", ids[0])
    assert [k for k in store.list_records("streams/s/journal/") if "-d-" in k][0].endswith(f"-d-{ids[0]}.json")


def test_a_listing_from_an_id_shows_the_ids_at_and_after_it_and_every_timeline_record(make_store, store_kind) -> None:
    store, _, _ = make_store(store_kind)
    ids = [f"00000000000{b}-20261121T000000000000Z" for b in range(1, 5)]
    for sid in (ids[0], ids[2], ids[3], f"{ids[1]}-t2", ids[1]):
        store.put_manifest("s", sid, b"{}")
    for name in ("split-header/newest", "state-jobs/j1-request", "timelines/000000002", "timelines/000000003",
                 "validations/x/suite"):
        store.put_record(f"streams/s/{name}.json", b"{}")
    listing = store.list_from("s", ids[1])
    assert listing.snapshot_ids == [ids[1], f"{ids[1]}-t2", ids[2], ids[3]]
    assert listing.timeline_keys == ["streams/s/timelines/000000002.json", "streams/s/timelines/000000003.json"]
    if listing.etags:  # S3: the catalog head's split header is listed with its MD5 (catalog/head.py)
        assert listing.etags["streams/s/split-header/newest.json"] == hashlib.md5(b"{}").hexdigest()
    assert store.list_from("s", "000000000009-20261121T000000000000Z").snapshot_ids == []


def test_s3_store_from_url_uses_the_standard_aws_environment(stack, monkeypatch) -> None:
    for key, value in stack.s3_env("dr").items():
        monkeypatch.setenv(key, value)
    store = open_store("s3://streamstate/env-check")
    store.put_manifest("s", "000000000001-20261121T000000000000Z", b"{}")
    assert store.list_snapshot_ids("s") == ["000000000001-20261121T000000000000Z"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(Exception) as err:
        open_store("s3://streamstate/env-check").list_snapshot_ids("s")
    assert "cannot reach S3" in str(err.value)
