"""Garbage collection on every backend (`store_kind`: a local directory, S3 on moto and
s3proxy, HDFS): unreferenced blobs older than the grace period go, younger ones stay; a
manifest retention deleted less than the grace period ago keeps its blobs, and they go
once it is older; incomplete multipart uploads and temp files older than the grace period
go; a refreshed blob is young again. A tiny grace period (and writers' bound D) keeps it
fast: the rules are the same at 3 s as at 24 h."""

from __future__ import annotations

import time

import pytest

from airflow_provider_streamstate.engine.catalog import gc as gc_mod
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.stores.base import blob_key, tombstone_key
from tests.unit.fake_checkpoint import write
from tests.unit.store_history import at, put_blob, put_snapshot

pytestmark = pytest.mark.integration

GRACE = 3.0


def _blobs(store) -> set[str]:
    return {b.digest for b in store.iter_blob_info()}


def _leave_temp(store, kind: str) -> None:
    """What a crashed writer leaves: a multipart upload never completed, or a temp file."""
    if kind in ("s3", "s3proxy"):
        store.client.create_multipart_upload(Bucket=store.bucket, Key=store._key(blob_key("ab" * 32)))  # noqa: SLF001
    elif kind == "hdfs":
        store.client.create(store._path("tmp/crashed.part"), b"half a blob")  # noqa: SLF001
    else:
        write(store.root / "tmp" / "crashed.part", b"half a blob")


def test_gc_deletes_old_garbage_keeps_young_and_recently_deleted_snapshots_blobs(make_store, monkeypatch, store_kind) -> None:
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    store, _, _ = make_store(store_kind)
    live = put_snapshot(store, "s", 0, at("2026-11-01T00:00"), contents=[b"live", b"shared"])
    doomed = put_snapshot(store, "s", 1, at("2026-11-01T01:00"), contents=[b"deleted by retention", b"shared"])
    old_orphan = put_blob(store, b"orphan of a crashed snapshot")
    _leave_temp(store, store_kind)
    time.sleep(GRACE + 1.5)

    assert store.delete_manifest("s", doomed.snapshot_id)  # retention, just now
    young_orphan = put_blob(store, b"a snapshot in flight")
    first = collect_garbage(store, grace_seconds=GRACE)
    assert _blobs(store) == {*live.blobs, *doomed.blobs, young_orphan}
    assert (first.blobs_deleted, first.blobs_young, first.temp_deleted) == (1, 1, 1)
    assert first.blobs_kept == 3 and first.tombstones_live == 1
    assert "referenced by a snapshot deleted less than the grace period ago" in first.kept_unreferenced
    assert old_orphan not in _blobs(store)
    assert list(store.iter_stale_temp(time.time() + 60)) == []

    time.sleep(GRACE + 1.5)  # the deletion, and the young orphan, are now older than the grace
    second = collect_garbage(store, grace_seconds=GRACE)
    assert _blobs(store) == set(live.blobs)
    assert (second.blobs_deleted, second.tombstones_deleted) == (2, 1)
    assert store.get_record(tombstone_key("s", doomed.snapshot_id)) is None
    assert verify_snapshots(store, "s").ok


def test_a_refreshed_blob_is_young_again_and_survives_a_sweep_that_listed_it_old(make_store, monkeypatch, store_kind) -> None:
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    store, _, _ = make_store(store_kind)
    d = put_blob(store, b"found present by a writer")
    control = put_blob(store, b"written with it, never refreshed")
    time.sleep(2 * GRACE)
    listed_against = time.time() - GRACE  # the blob is older than this
    assert store.blob_modified(d) < listed_against
    assert store.refresh_blob(d)
    assert store.blob_modified(d) >= listed_against
    assert not store.delete_blob(d, written_before=listed_against)
    assert store.has_blob(d)
    # The sweep's grace is just under the blobs' age before the refresh (it deletes the one
    # written with it and never refreshed), and seconds over its age since: S3 dates are whole
    # seconds, and on a loaded machine the requests above took over two seconds (a grace of 3 s
    # failed once).
    swept = collect_garbage(store, grace_seconds=2 * GRACE - 0.5)
    assert (swept.blobs_young, swept.blobs_deleted) == (1, 1)
    assert store.has_blob(d) and not store.has_blob(control)
    assert not store.refresh_blob("cd" * 32)  # absent: the writer stores it instead


def test_s3_gc_does_not_act_on_an_age_it_read_too_long_ago(make_store, monkeypatch) -> None:
    """The HEAD and the DELETE are two requests: a DELETE sent later than
    DELETE_DECISION_SECONDS after the HEAD began could land after a writer's refresh *and*
    its re-check (REFRESH_SETTLE_SECONDS later), so it is not sent."""
    from airflow_provider_streamstate.backends.s3 import store as s3_mod

    store, _, _ = make_store("s3")
    d = put_blob(store, b"old garbage, slow to check")
    time.sleep(1.5)
    assert s3_mod.REFRESH_SETTLE_SECONDS > s3_mod.DELETE_DECISION_SECONDS
    assert store.refresh_settle_seconds == s3_mod.REFRESH_SETTLE_SECONDS
    monkeypatch.setattr(s3_mod, "DELETE_DECISION_SECONDS", 0.2)
    real = store.blob_modified

    def slow_head(digest: str) -> float | None:
        time.sleep(0.5)  # a busy endpoint, a paused GC
        return real(digest)

    monkeypatch.setattr(store, "blob_modified", slow_head)
    assert not store.delete_blob(d, written_before=time.time())
    assert store.has_blob(d)
    monkeypatch.setattr(store, "blob_modified", real)
    assert store.delete_blob(d, written_before=time.time())  # asked promptly: deleted
    assert not store.has_blob(d)


def test_a_dry_run_deletes_nothing(make_store, monkeypatch, store_kind) -> None:
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    store, _, _ = make_store(store_kind)
    put_snapshot(store, "s", 0, at("2026-11-01T00:00"))
    orphan = put_blob(store, b"orphan")
    _leave_temp(store, store_kind)
    time.sleep(GRACE + 1.5)
    before = _blobs(store)
    result = collect_garbage(store, grace_seconds=GRACE, dry_run=True)
    assert (result.blobs_deleted, result.temp_deleted) == (1, 1)
    assert _blobs(store) == before and orphan in before
    assert len(list(store.iter_stale_temp(time.time()))) == 1


def test_records_swap_only_from_the_version_read(make_store, store_kind) -> None:
    """The compare-and-swap the GC lease is built on, on each backend: create only when
    absent, replace only the version read, and nothing changes when another writer won."""
    from airflow_provider_streamstate.engine.stores.base import RecordChanged

    store, _, _ = make_store(store_kind)
    assert store.read_versioned("gc/x.json") is None
    v1 = store.swap_record("gc/x.json", b'{"n": 1}', expect=None)
    with pytest.raises(RecordChanged):
        store.swap_record("gc/x.json", b'{"n": 2}', expect=None)
    v2 = store.swap_record("gc/x.json", b'{"n": 2}', expect=v1)
    with pytest.raises(RecordChanged):
        store.swap_record("gc/x.json", b'{"n": 3}', expect=v1)  # v1 is stale now
    assert store.read_versioned("gc/x.json") == (b'{"n": 2}', v2)


def test_a_second_collection_is_refused_while_the_first_holds_the_lease(make_store, monkeypatch, store_kind) -> None:
    from airflow_provider_streamstate.engine.catalog.gc_lease import GcLease, GcLeaseHeldError

    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    store, _, _ = make_store(store_kind)
    orphan = put_blob(store, b"old orphan")
    time.sleep(GRACE + 1)
    with GcLease(store, ttl_seconds=30):
        with pytest.raises(GcLeaseHeldError, match="another garbage collection is running"):
            collect_garbage(store, grace_seconds=GRACE)
        assert orphan in _blobs(store)
    # Released: the next collection deletes the orphan.
    assert collect_garbage(store, grace_seconds=GRACE).blobs_deleted == 1
    assert orphan not in _blobs(store)


def test_gc_on_a_bucket_that_does_not_exist_says_so_not_that_another_gc_runs(stack, monkeypatch) -> None:
    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.catalog.gc_lease import GcLeaseHeldError
    from airflow_provider_streamstate.engine.core.errors import StreamstateError
    from tests.s3 import s3_client

    store = S3Store(s3_client(stack), "no-such-bucket-here", "p")
    with pytest.raises(StreamstateError) as exc:
        collect_garbage(store)
    assert not isinstance(exc.value, GcLeaseHeldError)
    assert "no-such-bucket-here" in exc.value.one_line() and "does not exist" in exc.value.one_line()
