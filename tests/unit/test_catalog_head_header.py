"""The catalog head binds what it carries. Of a manifest too large to carry whole, the head
carries its header line, used only where the listing shows the split header stored beside it
with that line's MD5 as its ETag (S3): a header altered in the head, taken from another
snapshot, store or stream, or a split header altered by hand, is not used, and the stored
manifest wins; where the store gives no ETags the manifest is read. `latest` stays one record
read and one listing on S3 at 1,000+ snapshots with a manifest over 256 KiB."""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.catalog import head as head_mod
from airflow_provider_streamstate.engine.catalog.head import head_key, split_header_key, write_head
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import load_timelines
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest, new_snapshot_id
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import SnapshotStore, manifest_key
from tests.unit.conftest import moto_bucket
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow

BUCKET = "head-headers"


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    return moto_bucket(moto_endpoint, BUCKET)


def requests_of(c: Any) -> Counter[str]:
    seen: Counter[str] = Counter()
    c.meta.events.register("before-call.s3.*", lambda model, **_: seen.update([model.name]))
    return seen


def large_snapshots(tmp_path: Path, store: SnapshotStore, batches: list[int], monkeypatch: Any) -> dict[int, str]:
    """Snapshots of stream `s` whose manifests are over MAX_EMBEDDED (made 4 KiB here): the
    head carries their header line only."""
    monkeypatch.setattr(head_mod, "MAX_EMBEDDED", 4096)
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1, partitions=8)
    ids = {}
    for b in batches:
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
        assert len(store.get_manifest("s", ids[b])) > 4096
    return ids


def carried_header(store: SnapshotStore) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the head, the header line it carries, parsed)."""
    d = json.loads(store.get_record(head_key("s")) or b"")
    assert "\n" not in d["manifest"]
    return d, json.loads(d["manifest"])


def as_text(header: dict[str, Any]) -> str:
    return json.dumps(header, separators=(",", ":"))


def test_a_large_manifests_header_is_carried_and_used_in_one_record_read_and_one_listing(
    tmp_path, s3, monkeypatch
) -> None:
    store = S3Store(s3, BUCKET, "used")
    ids = large_snapshots(tmp_path, store, [2], monkeypatch)
    d, _ = carried_header(store)
    assert store.get_record(split_header_key("s")) == d["manifest"].encode()
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == ids[2] and dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}


@pytest.mark.parametrize("how", ["altered", "another snapshot's", "another store's", "another stream's"])
def test_a_header_in_the_head_that_is_not_the_stored_one_is_not_used(tmp_path, s3, monkeypatch, how) -> None:
    """The head keeps the manifest's MD5 (so the manifest's ETag check passes): only the split
    header tells that the header line it carries is not the stored manifest's."""
    store = S3Store(s3, BUCKET, f"wrong-{how.replace(' ', '-').replace(chr(39), '')}")
    ids = large_snapshots(tmp_path, store, [2, 6], monkeypatch)  # the second a delta of 40 files
    newest = ids[6]
    d, header = carried_header(store)
    if how == "altered":
        forged = {**header, "query_id": "forged"}
    else:  # another manifest's header, made to name this snapshot (so it passes as valid)
        if how == "another snapshot's":
            source = store.get_manifest("s", ids[2])
        else:
            other = S3Store(s3, BUCKET, f"other-{how[8:13]}")
            stream = "s" if how == "another store's" else "t"
            ckpt = make_checkpoint(tmp_path / "other", batches=1, partitions=8)
            grow(ckpt, 7)
            source = other.get_manifest(stream, create_snapshot(str(ckpt), other, stream).manifest.snapshot_id)
        names = ("snapshot_id", "stream", "batch_id", "created_at", "timeline")
        forged = {**json.loads(source.split(b"\n", 1)[0]), **{k: header[k] for k in names}}
    store.replace_record(head_key("s"), json.dumps({**d, "manifest": as_text(forged)}).encode())
    stored = Manifest.from_json(store.get_manifest("s", newest))
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert (m.snapshot_id, m.batch_id, m.query_id, m.kafka_offsets) == (newest, 6, stored.query_id, stored.kafka_offsets)
    assert dict(seen) == {"GetObject": 2, "ListObjectsV2": 1}  # the head, its listing, the stored manifest


def test_a_split_header_altered_by_hand_is_not_used(tmp_path, s3, monkeypatch) -> None:
    store = S3Store(s3, BUCKET, "altered-split")
    ids = large_snapshots(tmp_path, store, [2], monkeypatch)
    _, header = carried_header(store)
    store.replace_record(split_header_key("s"), as_text({**header, "query_id": "forged"}).encode())
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == ids[2] and m.query_id == header["query_id"]
    assert seen["GetObject"] == 2  # the stored manifest read


def test_a_head_and_split_header_rewritten_together_are_refused_when_the_file_list_is_read(
    tmp_path, s3, monkeypatch
) -> None:
    """Both rewritten by hand to agree: `latest` takes the header (as it would a manifest
    rewritten by hand), and the file list, read from the stored manifest, is refused."""
    store = S3Store(s3, BUCKET, "both")
    large_snapshots(tmp_path, store, [2], monkeypatch)
    d, header = carried_header(store)
    forged = as_text({**header, "query_id": "forged"})
    store.replace_record(split_header_key("s"), forged.encode())
    store.replace_record(head_key("s"), json.dumps({**d, "manifest": forged}).encode())
    m = resolve_snapshot(store, "s", "latest")
    with pytest.raises(UnsafeManifestError, match="is not the one its catalog head names"):
        list(m.files)


def test_where_the_store_gives_no_etags_the_stored_manifest_is_read(tmp_path, monkeypatch, caplog) -> None:
    reads = Counter[str]()

    class Counting(LocalStore):
        def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
            reads[snapshot_id] += 1
            return super().get_manifest(stream, snapshot_id)

    store = Counting(tmp_path / "store", fsync=False)
    ids = large_snapshots(tmp_path, store, [2], monkeypatch)
    d, header = carried_header(store)
    assert store.get_record(split_header_key("s")) == d["manifest"].encode()
    forged = as_text({**header, "query_id": "forged"})
    store.replace_record(split_header_key("s"), forged.encode())  # even agreeing with the head
    store.replace_record(head_key("s"), json.dumps({**d, "manifest": forged}).encode())
    reads.clear()
    with caplog.at_level(logging.WARNING, logger="streamstate.catalog"):
        m = resolve_snapshot(store, "s", "latest")
    assert m.query_id == header["query_id"] and reads == {ids[2]: 1} and "catalog head" not in caplog.text
    assert list(m.files) == list(Manifest.from_json(store.get_manifest("s", ids[2])).files)


def test_latest_at_1000_snapshots_with_a_manifest_over_256_kib_is_one_record_read_and_one_listing(s3) -> None:
    """As the writer leaves it: 1,000 manifests, the newest a full one of 2,500 files (over
    MAX_EMBEDDED: the head carries its header line, the split header beside it)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    store = S3Store(s3, BUCKET, "thousand")
    start = datetime(2026, 11, 1, tzinfo=UTC)

    def manifest(b: int, files: int) -> Manifest:
        created = start + timedelta(minutes=b)
        return Manifest(
            snapshot_id=new_snapshot_id(b, created), stream="s", batch_id=b,
            created_at=created.isoformat().replace("+00:00", "Z"), query_id="q",
            kafka_offsets={"tx": {"0": 10 * b}}, sources=[], watermark_ms=None, next_watermark_ms=None,
            batch_timestamp_ms=None, state_store="hdfs", operators=[], spark_conf={},
            files=[FileEntry(f"state/0/{p}/{b}.delta", 100 + p, f"{b * 100_000 + p:064x}") for p in range(files)],
            parent=None, spark_version=None, checkpoint="/ckpt", created_by="test",
        )
    for b in range(999):  # written straight into moto's backend: no request counted, none needed
        backend.put_object(BUCKET, f"thousand/{manifest_key('s', manifest(b, 1).snapshot_id)}", manifest(b, 1).to_json())
    newest = manifest(999, 2500)
    data = newest.to_json()
    assert len(data) > head_mod.MAX_EMBEDDED
    store.put_manifest("s", newest.snapshot_id, data)
    write_head(store, "s", newest, data, load_timelines(store, "s"))
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == newest.snapshot_id and dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}
    assert len(m.files) == 2500 and seen["GetObject"] == 2  # the file list, read when first used
