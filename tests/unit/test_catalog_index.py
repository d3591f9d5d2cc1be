"""The catalog index is a cache of write-once manifests and validation records, never the
truth: listings through it equal listings from the manifests, a warm listing reads no
manifest, and a lost, stale, merged or damaged index can cost reads but never hide a
snapshot, bring back a deleted one, or make retention delete on its word."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog import index as index_mod
from airflow_provider_streamstate.engine.catalog.index import SnapshotSummary, list_summaries
from airflow_provider_streamstate.engine.catalog.retention import (
    RetentionPolicy,
    apply_retention,
    delete_snapshots,
)
from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError
from tests.unit.store_history import at, put_snapshot, put_validation

INDEX = "streams/orders/index/"


class CountingStore(LocalStore):
    """A local store that counts the manifests and records it is asked for."""

    manifests_read = 0
    records_read = 0

    def get_manifest(self, stream: str, snapshot_id: str) -> bytes:
        self.manifests_read += 1
        return super().get_manifest(stream, snapshot_id)

    def get_record(self, key: str) -> bytes | None:
        self.records_read += 1
        return super().get_record(key)


def _history(store: LocalStore, n: int = 12) -> list[str]:
    start = at("2026-11-20T00:00")
    return [put_snapshot(store, "orders", b, start + timedelta(minutes=15 * b), labels={"n": str(b)}).snapshot_id
            for b in range(n)]


def _truth(store: LocalStore) -> list[SnapshotSummary]:
    return [SnapshotSummary.of(m) for m in list_snapshots(store, "orders").manifests]


def test_a_warm_listing_reads_no_manifest_and_equals_the_manifests(tmp_path) -> None:
    store = CountingStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    put_validation(store, "orders", ids[3], "shape", True)
    put_validation(store, "orders", ids[5], "shape", False)
    cold = list_summaries(store, "orders")
    assert cold.manifests_read == len(ids) and cold.snapshots == _truth(store)
    store.manifests_read = store.records_read = 0
    warm = list_summaries(store, "orders")
    assert (warm.manifests_read, store.manifests_read) == (0, 0)
    assert warm.snapshots == cold.snapshots
    assert warm.validations == {ids[3]: {"shape": True}, ids[5]: {"shape": False}}
    assert store.records_read == len(store.list_records(INDEX)) + 0  # segments only: no validation record read

    newer = put_snapshot(store, "orders", 40, at("2026-11-21T00:00")).snapshot_id
    put_validation(store, "orders", ids[7], "shape", True)  # listings decide: found though indexed before
    after = list_summaries(store, "orders")
    assert after.manifests_read == 1 and after.snapshots[-1].snapshot_id == newer
    assert after.validations[ids[7]] == {"shape": True}
    assert after.snapshots == _truth(store)


def test_a_lost_index_is_rebuilt_from_the_manifests(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    _history(store)
    first = list_summaries(store, "orders")
    for key in store.list_records(INDEX):
        store.delete_record(key)
    again = list_summaries(store, "orders")
    assert again.manifests_read == len(first.snapshots) and again.snapshots == first.snapshots


def test_a_stale_index_never_brings_back_a_deleted_snapshot(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store)
    list_summaries(store, "orders")  # every snapshot indexed
    delete_snapshots(store, "orders", [ids[2], ids[4]])
    listed = [s.snapshot_id for s in list_summaries(store, "orders").snapshots]
    assert listed == [i for i in ids if i not in (ids[2], ids[4])]


def test_a_damaged_segment_is_skipped_and_its_snapshots_read_from_their_manifests(tmp_path, caplog) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    _history(store)
    list_summaries(store, "orders")
    (segment,) = store.list_records(INDEX)
    store.replace_record(segment, b'{"format": "streamstate.catalog-index/v1", "stream": "orders", "snapshots": [{')
    again = list_summaries(store, "orders")
    assert again.snapshots == _truth(store) and again.manifests_read == len(again.snapshots)
    assert "ignoring unreadable catalog index segment" in caplog.text


def test_segments_are_merged_into_one_past_the_limit(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(index_mod, "MAX_SEGMENTS", 3)
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store, 2)
    counts = []
    for b in range(2, 8):  # each listing finds one new snapshot: a segment each, until merged
        ids.append(put_snapshot(store, "orders", b, at("2026-11-20T06:00") + timedelta(minutes=b)).snapshot_id)
        list_summaries(store, "orders")
        counts.append(len(store.list_records(INDEX)))
    assert max(counts) == 3 and 1 in counts
    final = list_summaries(store, "orders")
    assert final.manifests_read == 0 and [s.snapshot_id for s in final.snapshots] == sorted(ids)


def test_listing_with_update_index_off_writes_nothing(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    _history(store)
    list_summaries(store, "orders", update_index=False)
    apply_retention(store, "orders", RetentionPolicy(keep_last=1), now=at("2026-11-22T00:00").timestamp(), dry_run=True)
    assert store.list_records(INDEX) == []


def _forge(store: LocalStore, change) -> None:  # noqa: ANN001 - edits the one segment's JSON in place
    (segment,) = store.list_records(INDEX)
    body = json.loads(store.get_record(segment) or b"")
    change(body)
    store.replace_record(segment, json.dumps(body).encode())


def test_a_segment_whose_times_are_not_their_ids_is_ignored_so_retention_decides_on_the_manifests(
    tmp_path, caplog
) -> None:
    """Retention keeps by time; the time of a summary must be its id's, so a segment cannot
    reorder the history (one that tries is skipped and the manifests are read)."""
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = _history(store, 4)
    list_summaries(store, "orders")

    def older(body: dict) -> None:
        body["snapshots"][1]["created_at"] = "2020-01-01T00:00:00Z"
    _forge(store, older)
    policy = RetentionPolicy(keep_last=1, max_age_s=3 * 86400.0)  # by the manifests: every snapshot is kept
    result = apply_retention(store, "orders", policy, now=at("2026-11-22T00:00").timestamp())
    assert result.deleted == () and store.list_snapshot_ids("orders") == ids
    assert "is not the id's time" in caplog.text


@pytest.mark.parametrize("forgery", ["outcome", "label"])
def test_retention_refuses_to_delete_on_an_index_that_disagrees_with_the_records(tmp_path, forgery) -> None:
    """A segment that hides the newest known-good result, or a pin label: the snapshot it
    would doom is re-read before deleting, and nothing is deleted."""
    store = LocalStore(tmp_path / "store", fsync=False)
    good = _history(store, 4)[1]
    put_validation(store, "orders", good, "shape", True)
    pinned = put_snapshot(store, "orders", 1, at("2026-11-19T01:00"), labels={"pin": "true"}).snapshot_id
    ids = store.list_snapshot_ids("orders")
    list_summaries(store, "orders")

    def forge(body: dict) -> None:
        if forgery == "outcome":
            body["validations"][good]["shape"] = False
        else:
            next(s for s in body["snapshots"] if s["snapshot_id"] == pinned)["labels"] = {}
    _forge(store, forge)
    doomed = good if forgery == "outcome" else pinned
    with pytest.raises(UnsafeManifestError, match=f"disagrees with the manifest of {doomed}"):
        apply_retention(store, "orders", RetentionPolicy(keep_last=1), now=at("2026-11-22T00:00").timestamp())
    assert store.list_snapshot_ids("orders") == ids
    for key in store.list_records(INDEX):  # what the hint says to do
        store.delete_record(key)
    kept = apply_retention(store, "orders", RetentionPolicy(keep_last=1), now=at("2026-11-22T00:00").timestamp()).kept
    assert doomed in {v.snapshot_id for v in kept}


def test_retention_on_a_warm_index_deletes_what_it_would_decide_from_the_manifests(tmp_path) -> None:
    """The summaries read back from a segment equal those of the manifests, so the check
    before deleting passes and the decisions are the ones the manifests give."""
    now = at("2026-11-22T00:00").timestamp()
    policy = RetentionPolicy(keep_last=3)
    cold_store = LocalStore(tmp_path / "cold", fsync=False)
    ids = _history(cold_store)
    put_validation(cold_store, "orders", ids[1], "shape", True)
    from_manifests = apply_retention(cold_store, "orders", policy, now=now, dry_run=True)  # no index: manifests
    warm_store = LocalStore(tmp_path / "warm", fsync=False)
    assert _history(warm_store) == ids
    put_validation(warm_store, "orders", ids[1], "shape", True)
    list_summaries(warm_store, "orders")
    applied = apply_retention(warm_store, "orders", policy, now=now)
    assert [v.snapshot_id for v in applied.deleted] == [v.snapshot_id for v in from_manifests.deleted]
    assert len(applied.deleted) == len(ids) - 4  # the 3 newest and the newest known-good stay
    assert warm_store.list_snapshot_ids("orders") == [v.snapshot_id for v in applied.kept]
