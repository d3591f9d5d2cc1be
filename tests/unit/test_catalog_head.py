"""The catalog head: `latest` is one record read and one listing, whatever the number of
snapshots, and a head that is stale, lost, damaged, foreign or about a deleted snapshot or
an abandoned timeline costs requests, never a wrong answer."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.catalog import head as head_mod
from airflow_provider_streamstate.engine.catalog.head import head_key, read_head_view
from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.catalog.snapshots import latest_ref, resolve_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import load_timelines
from airflow_provider_streamstate.engine.core import manifest as manifest_mod
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import SnapshotStore, manifest_key
from tests.unit.conftest import moto_bucket
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow

BUCKET = "heads"


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    return moto_bucket(moto_endpoint, BUCKET)


def requests_of(c: Any) -> Counter[str]:
    seen: Counter[str] = Counter()
    c.meta.events.register("before-call.s3.*", lambda model, **_: seen.update([model.name]))
    return seen


def snapshots_at(ckpt: Path, store: SnapshotStore, batches: list[int]) -> dict[int, str]:
    ids = {}
    for b in batches:
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    return ids


def newest_by_full_listing(store: SnapshotStore) -> str | None:
    ref = latest_ref(store, "s", timelines=load_timelines(store, "s"))
    return ref.snapshot_id if ref else None


def test_latest_in_s3_is_one_record_read_and_one_listing_however_many_snapshots(tmp_path, s3) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = S3Store(s3, BUCKET, "many")
    ids = snapshots_at(ckpt, store, list(range(2, 14)))
    for b in range(10):  # validation-like records after the timelines: not read, not paged through
        store.put_record(f"streams/s/validations/{ids[2]}/suite{b}.json", b"{}")
    assert newest_by_full_listing(store) == ids[13]
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == ids[13]
    assert dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}
    assert list(m.files) == list(resolve_snapshot(store, "s", ids[13]).files)  # the carried copy is the manifest


def test_a_rollback_after_the_head_is_followed_and_its_timeline_record_read(tmp_path, s3) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = S3Store(s3, BUCKET, "rollback")
    ids = snapshots_at(ckpt, store, [3, 6, 9])
    restore_snapshot(store, "s", ids[3], ckpt, force=True, fsync=False)  # timeline 2, branched at batch 3
    assert newest_by_full_listing(store) == ids[3]
    seen = requests_of(s3)
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[3]
    # The head, the timeline record it did not carry; none of the ids from the head's on is
    # on timeline 2's history: every id listed, the branch snapshot read.
    assert seen["GetObject"] == 3 and seen["ListObjectsV2"] == 2
    grow(ckpt, 5)
    t2 = create_snapshot(str(ckpt), store, "s").manifest
    assert t2.timeline == 2 and t2.snapshot_id < ids[9]  # below the old head's id in the listing
    seen.clear()
    assert resolve_snapshot(store, "s", "latest").snapshot_id == t2.snapshot_id
    assert dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}  # the new head carries timeline 2's record


def test_a_stale_head_costs_a_read_and_one_whose_snapshot_was_deleted_a_full_listing(tmp_path, s3) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = S3Store(s3, BUCKET, "stale")
    ids = snapshots_at(ckpt, store, [2, 3])
    old_head = store.get_record(head_key("s"))
    assert old_head is not None
    ids |= snapshots_at(ckpt, store, [4])
    store.replace_record(head_key("s"), old_head)  # a concurrent writer's older head landed last
    view = read_head_view(store, "s")
    assert view is not None and [r.snapshot_id for r in view.refs] == [ids[3], ids[4]]
    assert view.manifest is not None and view.manifest.snapshot_id == ids[3]
    seen = requests_of(s3)
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[4]
    assert dict(seen) == {"GetObject": 2, "ListObjectsV2": 1}  # the head, its listing, the newer manifest
    delete_snapshots(store, "s", [ids[3]])  # the head's own snapshot, deleted: the newer one still wins
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[4]
    delete_snapshots(store, "s", [ids[4]])  # nothing from the head's id on: every id is listed
    seen.clear()
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[2] == newest_by_full_listing(store)
    assert seen["ListObjectsV2"] >= 2


@pytest.mark.parametrize("damage", ["not json", "another stream", "invalid timeline", "invalid manifest",
                                    "altered manifest", "no head"])
def test_a_damaged_altered_or_foreign_head_is_not_used_and_latest_is_still_right(tmp_path, s3, caplog, damage) -> None:
    """A head is checked against the listing: a copy whose MD5 is not the stored object's
    ETag is not used, however valid it looks."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = S3Store(s3, BUCKET, f"damaged-head-{damage.replace(' ', '-')}")
    ids = snapshots_at(ckpt, store, [2, 3])
    d = json.loads(store.get_record(head_key("s")) or b"")
    bodies = {
        "not json": b"{",
        "another stream": json.dumps({**d, "stream": "t"}).encode(),
        "invalid timeline": json.dumps({**d, "timelines": {"2": "{}"}}).encode(),
        "invalid manifest": json.dumps({**d, "manifest": d["manifest"].replace(ids[3], ids[2])}).encode(),
        "altered manifest": json.dumps({**d, "manifest": d["manifest"].replace('"query_id":"', '"query_id":"x')}).encode(),
    }
    if damage in bodies:
        store.replace_record(head_key("s"), bodies[damage])
    else:
        store.delete_record(head_key("s"))
    with caplog.at_level(logging.WARNING, logger="streamstate.catalog"):
        m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == ids[3] and m.query_id == resolve_snapshot(store, "s", ids[3]).query_id
    assert ("catalog head" in caplog.text) == (damage in ("not json", "another stream"))


def test_a_timeline_record_altered_in_the_head_is_not_used_nor_carried_on(tmp_path, s3) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = S3Store(s3, BUCKET, "altered-timeline")
    ids = snapshots_at(ckpt, store, [3, 6, 9])
    restore_snapshot(store, "s", ids[3], ckpt, force=True, fsync=False)  # timeline 2, branched at batch 3
    grow(ckpt, 5)
    t2 = create_snapshot(str(ckpt), store, "s").manifest
    d = json.loads(store.get_record(head_key("s")) or b"")
    rec = json.loads(d["timelines"]["2"])
    forged = {**rec, "branch_snapshot": ids[9], "branch_batch": 9}  # valid, and it would bring t1's batch 9 back
    store.replace_record(head_key("s"), json.dumps({**d, "timelines": {"2": json.dumps(forged, indent=1)}}).encode())
    assert resolve_snapshot(store, "s", "latest").snapshot_id == t2.snapshot_id
    grow(ckpt, 7)
    after = create_snapshot(str(ckpt), store, "s").manifest
    assert after.parent == t2.snapshot_id
    assert json.loads(json.loads(store.get_record(head_key("s")) or b"")["timelines"]["2"])["branch_batch"] == 3


def test_of_a_manifest_too_large_to_carry_the_head_carries_the_header_and_the_file_list_is_read_when_used(
    tmp_path, s3, monkeypatch
) -> None:
    monkeypatch.setattr(head_mod, "MAX_EMBEDDED", 4096)
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1, partitions=8)
    store = S3Store(s3, BUCKET, "large")
    ids = snapshots_at(ckpt, store, [2])
    stored = store.get_manifest("s", ids[2])
    assert len(stored) > 4096
    assert json.loads(store.get_record(head_key("s")) or b"")["manifest"].encode() == stored.split(b"\n")[0]
    monkeypatch.setattr(manifest_mod, "_RESOLVED", manifest_mod.ResolvedLists(4))  # as in another process
    seen = requests_of(s3)
    m = resolve_snapshot(store, "s", "latest")
    assert m.snapshot_id == ids[2] and dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}  # the header is enough
    files = list(m.files)
    assert seen["GetObject"] == 2  # the file list, read when first used
    assert files == list(Manifest.from_json(stored).files)
    grow(ckpt, 3)
    assert create_snapshot(str(ckpt), store, "s").manifest.parent == ids[2]  # a delta of it


def test_replication_points_the_destination_head_at_its_newest_snapshot(tmp_path, s3) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    source = LocalStore(tmp_path / "primary", fsync=False)
    ids = snapshots_at(ckpt, source, [2, 3, 4])
    dr = S3Store(s3, BUCKET, "dr")
    replicate(source, dr, "s", snapshots=[ids[3]])
    replicate(source, dr, "s", snapshots=[ids[2]])  # an older one after: the head stays on the newest
    seen = requests_of(s3)
    assert resolve_snapshot(dr, "s", "latest").snapshot_id == ids[3]
    assert dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}
    replicate(source, dr, "s", snapshots=[ids[4]])
    seen.clear()
    assert resolve_snapshot(dr, "s", "latest").snapshot_id == ids[4]
    assert dict(seen) == {"GetObject": 1, "ListObjectsV2": 1}


def test_the_s3_listing_pages_on_until_it_has_passed_the_timeline_records(s3, monkeypatch) -> None:
    from airflow_provider_streamstate.backends.s3 import store as s3_mod

    monkeypatch.setattr(s3_mod, "LIST_PAGE_KEYS", 4)
    store = S3Store(s3, BUCKET, "paged")
    first = "000000000001-20261121T000000000000Z"
    store.put_manifest("s", first, b"{}")
    for i in range(5):  # more records between the manifests and the timelines than one page holds
        store.put_record(f"streams/s/state-jobs/{i:05d}-request.json", b"{}")
    store.put_record("streams/s/timelines/000000002.json", b"{}")
    store.put_record("streams/s/validations/x/suite.json", b"{}")
    seen = requests_of(s3)
    listing = store.list_from("s", first)
    assert listing.snapshot_ids == [first] and listing.timeline_keys == ["streams/s/timelines/000000002.json"]
    assert seen["ListObjectsV2"] == 2


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_manifest_damaged_after_it_was_published_is_read_and_skipped_not_hidden_by_the_head(
    tmp_path, s3, caplog, kind
) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store: SnapshotStore = LocalStore(tmp_path / "store", fsync=False) if kind == "local" else S3Store(s3, BUCKET, "damaged")
    ids = snapshots_at(ckpt, store, [2, 3])
    stored = store.get_manifest("s", ids[3])
    damaged = b"{" + b" " * (len(stored) - 1)  # the same size: only the bytes tell
    if kind == "local":
        (tmp_path / "store" / manifest_key("s", ids[3])).write_bytes(damaged)
    else:
        s3.put_object(Bucket=BUCKET, Key=f"damaged/{manifest_key('s', ids[3])}", Body=damaged)
    with caplog.at_level(logging.WARNING, logger="streamstate.catalog"):
        assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[2]
    assert f"skipped an unreadable manifest: snapshot {ids[3]}" in caplog.text
