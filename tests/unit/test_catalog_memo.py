"""A process that lists a stream again and again (the Streams pages' API server) parses each
catalog index segment once and works a listing out once while the keys it comes from stay
the same: a listing with a `CatalogMemo` reads no segment it has parsed, gives what a
listing without it gives, and follows the listings, so a snapshot deleted or published
since, a new validation record, timeline or base, is seen as by any reader."""

from __future__ import annotations

from datetime import timedelta

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog import index as index_mod
from airflow_provider_streamstate.engine.catalog.index import CatalogMemo, list_summaries
from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.catalog.timeline import new_timeline
from airflow_provider_streamstate.engine.core.manifest import SnapshotRef
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
    memo = CatalogMemo(1000)
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
    memo = CatalogMemo(1000)
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
    memo = CatalogMemo(1000)
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
    memo = CatalogMemo(1000)
    list_summaries(east, "orders", update_index=False, memo=memo)
    (key,) = east.list_records(INDEX)
    assert memo.get(east, key) is not None and memo.get(west, key) is None


def test_the_memo_keeps_at_most_its_summaries_dropping_the_least_recently_used(tmp_path) -> None:
    a, b = LocalStore(tmp_path / "a", fsync=False), LocalStore(tmp_path / "b", fsync=False)
    for store in (a, b):
        _history(store, 5)
        list_summaries(store, "orders")
    memo = CatalogMemo(8)
    list_summaries(a, "orders", update_index=False, memo=memo)
    list_summaries(b, "orders", update_index=False, memo=memo)  # 10 summaries in all: a's go
    (key_a,), (key_b,) = a.list_records(INDEX), b.list_records(INDEX)
    assert memo.get(a, key_a) is None and memo.get(b, key_b) is not None


def test_the_same_keys_give_the_same_listing_and_any_new_record_a_new_one(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    list_summaries(store, "orders")
    memo = CatalogMemo(1000)
    first = list_summaries(store, "orders", update_index=False, memo=memo)
    assert list_summaries(store, "orders", update_index=False, memo=memo) is first
    put_validation(store, "orders", ids[2], "shape", True)
    validated = list_summaries(store, "orders", update_index=False, memo=memo)
    assert validated is not first and validated.validations == {ids[2]: {"shape": True}}
    new_timeline(store, "orders", branch_from=SnapshotRef.parse(ids[5]), reason="rollback")
    branched = list_summaries(store, "orders", update_index=False, memo=memo)
    assert branched is not validated and branched.timelines.current == 2
    assert [s.snapshot_id for s in branched.current_line] == ids[:6]
    assert list_summaries(store, "orders", update_index=False, memo=memo) is branched


def test_new_validation_records_alone_keep_the_snapshots_and_current_line_and_equal_a_listing_worked_out_whole(
        tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    put_validation(store, "orders", ids[4], "shape", False)
    list_summaries(store, "orders")  # the index holds the outcome of ids[4]
    memo = CatalogMemo(1000)
    first = list_summaries(store, "orders", update_index=False, memo=memo)
    line = first.current_line
    put_validation(store, "orders", ids[2], "shape", True)
    put_validation(store, "orders", ids[4], "other", True)
    again = list_summaries(store, "orders", update_index=False, memo=memo)
    whole = list_summaries(store, "orders", update_index=False)
    assert again.snapshots is first.snapshots and again.current_line is line and again.timelines is first.timelines
    assert again.validations == whole.validations == {ids[2]: {"shape": True}, ids[4]: {"other": True, "shape": False}}
    assert [list(v) for v in again.validations.values()] == [list(v) for v in whole.validations.values()]
    assert again.current_line == whole.current_line and again.full_listing == whole.full_listing
    assert list_summaries(store, "orders", update_index=False, memo=memo) is again


def test_a_listing_that_had_to_read_a_manifest_is_worked_out_again(tmp_path) -> None:
    """A hinted snapshot the segments do not cover is read each time (until the index, or the
    caller, keeps it): whether it is there depends on when it is asked."""
    store = LocalStore(tmp_path / "store", fsync=False)
    _history(store)
    list_summaries(store, "orders")
    newer = put_snapshot(store, "orders", 40, at("2026-11-21T00:00")).snapshot_id
    memo = CatalogMemo(1000)
    first = list_summaries(store, "orders", update_index=False, memo=memo)
    again = list_summaries(store, "orders", update_index=False, memo=memo)
    assert again is not first and (first.manifests_read, again.manifests_read) == (1, 1)
    assert again.snapshots[-1].snapshot_id == newer


def test_a_reader_that_updates_the_index_works_the_listing_out_each_time(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    _history(store)
    memo = CatalogMemo(1000)
    list_summaries(store, "orders", memo=memo)
    assert list_summaries(store, "orders", memo=memo) is not list_summaries(store, "orders", memo=memo)


def test_a_validation_record_the_index_lacks_is_read_once(tmp_path) -> None:
    class ValidationCountingStore(LocalStore):
        validations_read = 0

        def get_record(self, key: str) -> bytes | None:
            if "/validations/" in key:
                self.validations_read += 1
            return super().get_record(key)

    store = ValidationCountingStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    list_summaries(store, "orders")
    memo = CatalogMemo(1000)
    put_validation(store, "orders", ids[1], "shape", False)
    store.validations_read = 0
    assert list_summaries(store, "orders", update_index=False, memo=memo).validations == {ids[1]: {"shape": False}}
    put_validation(store, "orders", ids[2], "shape", True)  # a new listing: the first record is not read again
    again = list_summaries(store, "orders", update_index=False, memo=memo)
    assert again.validations == {ids[1]: {"shape": False}, ids[2]: {"shape": True}}
    assert store.validations_read == 2
