"""The catalog reads only what is new: once an index base exists, `snapshot list` and
retention list no manifest id (the base and the journal since it say what exists), and
`latest` lists only the ids after the newest one the index knew. Neither a lost or stale
index nor the journal's hints can hide a snapshot or bring back a deleted one: a snapshot
published below the index's newest id (an older batch, a concurrent writer, a replica) is
found by its hint, a hint whose writer died is ignored, and a rollback's new timeline is
followed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog import index as index_mod
from airflow_provider_streamstate.engine.catalog import journal
from airflow_provider_streamstate.engine.catalog.head import head_key
from airflow_provider_streamstate.engine.catalog.index import SnapshotSummary, list_summaries
from airflow_provider_streamstate.engine.catalog.retention import (
    RetentionPolicy,
    apply_retention,
    delete_snapshots,
)
from airflow_provider_streamstate.engine.catalog.snapshots import (
    latest_snapshot,
    list_snapshots,
    resolve_snapshot,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import PUBLISHED, journal_key, manifest_key
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.store_history import at, put_snapshot
from tests.unit.test_timelines import grow


class CountingStore(LocalStore):
    """A local store that counts full listings of manifest ids and listings after an id."""

    full_listings = 0
    listings_after = 0

    def list_snapshot_ids(self, stream: str) -> list[str]:
        self.full_listings += 1
        return super().list_snapshot_ids(stream)

    def list_snapshot_ids_after(self, stream: str, after: str) -> list[str]:
        self.listings_after += 1
        return [i for i in super().list_snapshot_ids(stream) if i > after]  # not counted as a full one


class HeadlessStore(CountingStore):
    """A store where the catalog head is never written (catalog/head.py): `latest` starts from
    the index's newest id."""

    def replace_record(self, key: str, data: bytes) -> None:
        if key != head_key("s"):
            super().replace_record(key, data)


def history(store: LocalStore, n: int = 10) -> list[str]:
    start = at("2026-11-20T00:00")
    return [put_snapshot(store, "orders", b, start + timedelta(minutes=15 * b)).snapshot_id for b in range(n)]


def truth(store: LocalStore) -> list[SnapshotSummary]:
    return [SnapshotSummary.of(m) for m in list_snapshots(store, "orders").manifests]


def test_with_a_base_a_listing_lists_no_manifest_id_and_equals_the_manifests(tmp_path) -> None:
    store = CountingStore(tmp_path / "store", fsync=False)
    ids = history(store)
    cold = list_summaries(store, "orders")
    assert cold.full_listing and store.full_listings == 1
    store.full_listings = 0
    late = put_snapshot(store, "orders", 3, at("2026-11-21T00:00")).snapshot_id  # below the index's newest id
    delete_snapshots(store, "orders", [ids[4]])  # as retention does
    warm = list_summaries(store, "orders")
    assert not warm.full_listing and store.full_listings == 0
    assert late in [s.snapshot_id for s in warm.snapshots] and ids[4] not in [s.snapshot_id for s in warm.snapshots]
    assert warm.snapshots == truth(store)
    store.full_listings = 0
    again = list_summaries(store, "orders")  # what the last one learned is in a delta segment
    assert (again.manifests_read, store.full_listings) == (0, 0) and again.snapshots == warm.snapshots


def test_a_hint_is_a_pointer_not_the_truth(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    history(store, 4)
    list_summaries(store, "orders")
    # A writer that died between its hint and its manifest: nothing is listed for it.
    elsewhere = LocalStore(tmp_path / "elsewhere", fsync=False)
    late = put_snapshot(elsewhere, "orders", 9, at("2026-11-20T03:00")).snapshot_id
    store.put_record(journal_key("orders", PUBLISHED, late), b"{}")
    assert late not in [s.snapshot_id for s in list_summaries(store, "orders").snapshots]
    # One whose manifest lands later (its put was still in flight) is listed then.
    store._put_manifest_object("orders", late, elsewhere.get_manifest("orders", late))
    assert [s.snapshot_id for s in list_summaries(store, "orders").snapshots][-1] == late


def test_a_stale_or_lost_base_costs_a_full_listing_never_a_wrong_answer(tmp_path, monkeypatch) -> None:
    store = CountingStore(tmp_path / "store", fsync=False)
    history(store, 6)
    list_summaries(store, "orders")
    for key in store.list_records("streams/orders/index/"):
        store.delete_record(key)  # lost
    store.full_listings = 0
    assert list_summaries(store, "orders").full_listing and store.full_listings == 1
    monkeypatch.setattr(index_mod, "REBASE_SECONDS", 0.0)  # every base too old to trust
    store.full_listings = 0
    stale = list_summaries(store, "orders")
    assert stale.full_listing and store.full_listings == 1 and stale.snapshots == truth(store)


def test_a_manifest_deleted_by_hand_is_seen_at_the_next_full_listing(tmp_path, monkeypatch) -> None:
    """Outside streamstate there is no hint: the base still lists it until it is rebuilt."""
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = history(store, 5)
    list_summaries(store, "orders")
    (store.root / manifest_key("orders", ids[2])).unlink()
    monkeypatch.setattr(index_mod, "MAX_SEGMENTS", 1)  # the next listing rebuilds the base
    assert ids[2] not in [s.snapshot_id for s in list_summaries(store, "orders").snapshots]


def test_retention_on_the_journal_deletes_what_it_would_decide_from_the_manifests(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = history(store, 8)
    list_summaries(store, "orders")
    late = put_snapshot(store, "orders", 2, at("2026-11-22T00:00")).snapshot_id  # newest by time
    result = apply_retention(store, "orders", RetentionPolicy(keep_last=2), now=at("2026-11-23T00:00").timestamp())
    assert {v.snapshot_id for v in result.kept} == {late, ids[-1]}
    assert sorted(store.list_snapshot_ids("orders")) == sorted([late, ids[-1]])


def test_without_a_head_latest_lists_only_the_ids_after_the_index_newest_and_follows_a_rollback(tmp_path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    store = HeadlessStore(tmp_path / "store", fsync=False)  # as engines before the catalog head wrote
    ids = {}
    for b in (3, 6, 9):
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id
    list_summaries(store, "s")  # the index: its segment's name carries the newest id
    store.full_listings = store.listings_after = 0
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[9]
    assert (store.full_listings, store.listings_after) == (0, 1)
    # A rollback to batch 3: the new timeline's snapshots sort below the index's newest id.
    restore_snapshot(store, "s", ids[3], ckpt, force=True, fsync=False)
    grow(ckpt, 5)
    t2 = create_snapshot(str(ckpt), store, "s").manifest
    assert t2.timeline == 2 and t2.snapshot_id < ids[9]
    assert resolve_snapshot(store, "s", "latest").snapshot_id == t2.snapshot_id
    list_summaries(store, "s")
    store.full_listings = store.listings_after = 0
    assert latest_snapshot(store, "s").snapshot_id == t2.snapshot_id  # type: ignore[union-attr]
    # The index's newest, deleted: the next newest is found all the same.
    delete_snapshots(store, "s", [t2.snapshot_id])
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[3]


def test_garbage_collection_prunes_old_hints_and_an_index_older_than_them_is_rebuilt(tmp_path) -> None:
    from airflow_provider_streamstate.engine.catalog.gc import collect_garbage

    store = LocalStore(tmp_path / "store", fsync=False)
    history(store, 3)
    hints = store.list_records(journal.prefix("orders"))
    assert len(hints) == 3
    later = (datetime.now(UTC) + timedelta(seconds=journal.KEEP_SECONDS + 60)).timestamp()
    assert collect_garbage(store, now=later).hints_pruned == 3
    assert store.list_records(journal.prefix("orders")) == []
