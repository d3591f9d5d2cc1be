"""A process that lists a stream again and again (the Streams pages' API server) parses each
catalog index segment once: a listing with a `SegmentMemo` reads no segment it has parsed,
gives what a listing without it gives, and follows the listing of segments, so a snapshot
deleted or published since, or a new base, is seen as by any reader."""

from __future__ import annotations

from datetime import timedelta

from airflow_provider_streamstate.engine.catalog import index as index_mod
from airflow_provider_streamstate.engine.catalog.index import SegmentMemo, list_summaries
from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.stores.local import LocalStore
from tests.unit.store_history import at, put_snapshot, put_validation

INDEX = "streams/orders/index/"


class SegmentCountingStore(LocalStore):
    """A local store that counts the index segments it is asked for."""

    segments_read = 0

    def get_record(self, key: str) -> bytes | None:
        if key.startswith(INDEX):
            self.segments_read += 1
        return super().get_record(key)


def _history(store: LocalStore, n: int = 12) -> list[str]:
    start = at("2026-11-20T00:00")
    return [put_snapshot(store, "orders", b, start + timedelta(minutes=15 * b)).snapshot_id for b in range(n)]


def test_a_listing_with_a_memo_reads_each_segment_once_and_equals_one_without(tmp_path) -> None:
    store = SegmentCountingStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    put_validation(store, "orders", ids[4], "shape", False)
    list_summaries(store, "orders")  # the index, as retention leaves it
    memo = SegmentMemo(1000)
    store.segments_read = 0
    first = list_summaries(store, "orders", update_index=False, memo=memo)
    assert store.segments_read == len(store.list_records(INDEX)) > 0
    store.segments_read = 0
    again = list_summaries(store, "orders", update_index=False, memo=memo)
    assert store.segments_read == 0
    plain = list_summaries(store, "orders", update_index=False)
    assert again.snapshots == first.snapshots == plain.snapshots
    assert again.validations == plain.validations == {ids[4]: {"shape": False}}
    assert again.timelines == plain.timelines


def test_snapshots_deleted_or_published_since_are_seen_through_the_memo(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    list_summaries(store, "orders")
    memo = SegmentMemo(1000)
    list_summaries(store, "orders", update_index=False, memo=memo)
    delete_snapshots(store, "orders", [ids[3]])
    newer = put_snapshot(store, "orders", 40, at("2026-11-21T00:00")).snapshot_id
    seen = [s.snapshot_id for s in list_summaries(store, "orders", update_index=False, memo=memo).snapshots]
    assert ids[3] not in seen and seen[-1] == newer
    assert seen == [s.snapshot_id for s in list_summaries(store, "orders", update_index=False).snapshots]


def test_a_new_base_replacing_the_segments_is_read_and_the_old_ones_no_longer_count(tmp_path, monkeypatch) -> None:
    store = SegmentCountingStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    list_summaries(store, "orders")
    memo = SegmentMemo(1000)
    list_summaries(store, "orders", update_index=False, memo=memo)
    old_keys = store.list_records(INDEX)
    delete_snapshots(store, "orders", [ids[0]])
    monkeypatch.setattr(index_mod, "MAX_SEGMENTS", 1)  # the next writer lists every id and writes one base
    list_summaries(store, "orders")
    new_keys = store.list_records(INDEX)
    assert not set(new_keys) & set(old_keys)
    store.segments_read = 0
    listed = list_summaries(store, "orders", update_index=False, memo=memo)
    assert store.segments_read == len(new_keys)
    assert [s.snapshot_id for s in listed.snapshots] == ids[1:]


def test_one_url_on_two_endpoints_is_two_stores_to_the_memo(tmp_path) -> None:
    class Endpoint(LocalStore):
        def __init__(self, root: object, endpoint: str) -> None:
            super().__init__(root, fsync=False)  # type: ignore[arg-type]
            self.url, self._endpoint = "s3://bucket/same", endpoint

        @property
        def endpoint(self) -> str | None:
            return self._endpoint

    east, west = Endpoint(tmp_path / "east", "https://east"), Endpoint(tmp_path / "west", "https://west")
    _history(east, 3)
    list_summaries(east, "orders")
    memo = SegmentMemo(1000)
    list_summaries(east, "orders", update_index=False, memo=memo)
    (key,) = east.list_records(INDEX)
    assert memo.get(east, key) is not None and memo.get(west, key) is None


def test_the_memo_keeps_at_most_its_summaries_dropping_the_least_recently_used(tmp_path) -> None:
    a, b = LocalStore(tmp_path / "a", fsync=False), LocalStore(tmp_path / "b", fsync=False)
    for store in (a, b):
        _history(store, 5)
        list_summaries(store, "orders")
    memo = SegmentMemo(8)
    list_summaries(a, "orders", update_index=False, memo=memo)
    list_summaries(b, "orders", update_index=False, memo=memo)  # 10 summaries in all: a's go
    (key_a,), (key_b,) = a.list_records(INDEX), b.list_records(INDEX)
    assert memo.get(a, key_a) is None and memo.get(b, key_b) is not None
