"""Garbage collection on a local store keeps invariant 3: unreferenced blobs older than the
grace period go, younger ones stay, blobs of manifests deleted less than the grace period
ago stay, stale temp files go; a blob refreshed after the listing is not deleted; a dry
run deletes nothing; and a snapshot refreshes blobs it finds present but cannot vouch for
(writer rule 4), so their grace period starts again."""

from __future__ import annotations

import os
import time

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog import gc as gc_mod
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key, manifest_key, tombstone_key
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write
from tests.unit.store_history import at, put_blob, put_snapshot

DAY = 86400.0


def _age(store: LocalStore, digest: str, seconds: float) -> None:
    """Make a blob's last write `seconds` ago."""
    t = time.time() - seconds
    os.utime(store.root / blob_key(digest), (t, t))


def _blobs(store: LocalStore) -> set[str]:
    return {b.digest for b in store.iter_blob_info()}


def test_unreferenced_blobs_older_than_the_grace_period_go_and_younger_ones_stay(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    kept = put_snapshot(store, "s", 0, at("2026-11-01T00:00"), contents=[b"live 1", b"live 2"])
    old_orphan = put_blob(store, b"old orphan")
    young_orphan = put_blob(store, b"young orphan")
    for d in [*kept.blobs, old_orphan]:
        _age(store, d, 2 * DAY)
    _age(store, young_orphan, 3600)

    result = collect_garbage(store)
    assert _blobs(store) == {*kept.blobs, young_orphan}
    assert (result.blobs_deleted, result.bytes_deleted) == (1, len(b"old orphan"))
    assert (result.blobs_kept, result.bytes_kept) == (2, 12)
    assert (result.blobs_young, result.bytes_young) == (1, len(b"young orphan"))
    assert result.kept_unreferenced["unreferenced, written less than the grace period ago"]["examples"] == [young_orphan]
    assert verify_snapshots(store, "s").ok


def test_blobs_of_a_manifest_deleted_less_than_the_grace_period_ago_stay(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    recent = put_snapshot(store, "s", 0, at("2026-11-01T00:00"), contents=[b"recently deleted"])
    old = put_snapshot(store, "s", 1, at("2026-11-01T01:00"), contents=[b"long deleted"])
    for d in [*recent.blobs, *old.blobs]:
        _age(store, d, 3 * DAY)
    assert store.delete_manifest("s", recent.snapshot_id)
    assert store.delete_manifest("s", old.snapshot_id, now=at("2026-01-01T00:00"))
    assert store.list_snapshot_ids("s") == []

    result = collect_garbage(store)
    assert _blobs(store) == set(recent.blobs)
    assert result.tombstones_live == 1 and result.tombstones_deleted == 1
    reason = result.kept_unreferenced["referenced by a snapshot deleted less than the grace period ago"]
    assert reason["blobs"] == 1 and recent.snapshot_id in reason["examples"][0]
    assert store.get_record(tombstone_key("s", old.snapshot_id)) is None
    assert store.get_record(tombstone_key("s", recent.snapshot_id)) is not None

    # Once the grace period has passed since the deletion, they go too.
    later = collect_garbage(store, now=time.time() + 2 * DAY)
    assert later.blobs_deleted == 1 and _blobs(store) == set()


def test_blobs_shared_with_another_stream_stay(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    a = put_snapshot(store, "a", 0, at("2026-11-01T00:00"), contents=[b"shared", b"only a"])
    put_snapshot(store, "b", 0, at("2026-11-01T00:00"), contents=[b"shared"])
    store.delete_manifest("a", a.snapshot_id, now=at("2026-01-01T00:00"))
    for d in a.blobs:
        _age(store, d, 2 * DAY)
    collect_garbage(store)
    assert _blobs(store) == {put_blob(store, b"shared")}


def test_a_dry_run_deletes_nothing_and_reports_what_would_go(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    put_snapshot(store, "s", 0, at("2026-11-01T00:00"))
    orphan = put_blob(store, b"orphan")
    _age(store, orphan, 2 * DAY)
    stale = store.root / "tmp" / "crashed.part"
    write(stale, b"half a blob")
    os.utime(stale, (time.time() - 2 * DAY,) * 2)
    before = sorted(p for p in store.root.rglob("*"))
    result = collect_garbage(store, dry_run=True)
    assert sorted(p for p in store.root.rglob("*")) == before
    assert (result.blobs_deleted, result.temp_deleted, result.dry_run) == (1, 1, True)


def test_stale_temp_files_go_and_fresh_ones_stay(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    stale = write(store.root / "tmp" / "crashed.part", b"x")
    fresh = write(store.root / "tmp" / "writing.part", b"y")
    os.utime(stale, (time.time() - 2 * DAY,) * 2)
    assert collect_garbage(store).temp_deleted == 1
    assert not stale.exists() and fresh.exists()


def test_a_blob_refreshed_after_the_listing_is_not_deleted(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    d = put_blob(store, b"found present by a writer")
    _age(store, d, 2 * DAY)
    cutoff = time.time() - DAY  # what GC listed it against: old
    assert store.refresh_blob(d)  # a writer relies on it now (rule 4)
    assert not store.delete_blob(d, written_before=cutoff)
    assert store.has_blob(d) and not list((store.root / "tmp").iterdir())
    assert store.delete_blob(d, written_before=time.time() + 1)
    assert not store.has_blob(d) and not store.refresh_blob(d)


def test_a_grace_period_not_longer_than_the_longest_snapshot_is_refused(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    with pytest.raises(UsageError) as exc:
        collect_garbage(store, grace_seconds=gc_mod.MAX_SNAPSHOT_SECONDS)
    assert "must exceed" in exc.value.one_line()


def test_an_unreadable_manifest_stops_gc_before_it_deletes_anything(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    m = put_snapshot(store, "s", 0, at("2026-11-01T00:00"))
    orphan = put_blob(store, b"orphan")
    _age(store, orphan, 2 * DAY)
    write(store.root / manifest_key("s", m.snapshot_id), b"{not json")
    with pytest.raises(UnsafeManifestError):
        collect_garbage(store)
    assert store.has_blob(orphan)


def test_a_snapshot_refreshes_blobs_it_finds_present_but_cannot_vouch_for(tmp_path, monkeypatch) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(ckpt):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    store = LocalStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "a").manifest
    # The manifest vanishes without a tombstone (a crashed writer's orphans look the same).
    (store.root / manifest_key("a", first.snapshot_id)).unlink()
    for d in first.blobs:
        _age(store, d, 2 * DAY)

    second = create_snapshot(str(ckpt), store, "b").manifest
    assert set(second.blobs) == set(first.blobs)
    fresh = time.time() - 60
    assert all(store.blob_modified(d) > fresh for d in second.blobs)
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    assert collect_garbage(store, grace_seconds=2).blobs_deleted == 0
    assert verify_snapshots(store, "b").ok


def test_a_blob_deleted_right_after_the_snapshot_refreshed_it_is_stored_again_before_publishing(tmp_path) -> None:
    """GC read the blob's age before the refresh and deleted it after (S3's HEAD, then
    DELETE): the snapshot's check of refreshed blobs right before publishing catches it."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(ckpt):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d}")

    class GcStrikesAfterRefresh(LocalStore):
        def refresh_blob(self, digest: str) -> bool:
            ok = super().refresh_blob(digest)
            (self.root / blob_key(digest)).unlink(missing_ok=True)
            return ok

    store = GcStrikesAfterRefresh(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "a").manifest
    (store.root / manifest_key("a", first.snapshot_id)).unlink()  # its blobs are orphans now
    second = create_snapshot(str(ckpt), store, "b").manifest
    assert verify_snapshots(store, "b", second.snapshot_id).ok
