"""One garbage collector deletes from a store at a time: a second one is refused while the
first holds the store's lease, a lease left by a collector that died is taken over once it
expires, and a collector that cannot renew its lease in time stops deleting before anyone
could take over (the hole two concurrent sweepers left: one deletes a blob, a writer stores
it again, the other's DELETE, decided on the old blob's age, removes the new one)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.gc_lease import (
    LEASE_KEY,
    GcLease,
    GcLeaseHeldError,
    GcLeaseLostError,
)
from airflow_provider_streamstate.engine.core.errors import TransientError
from airflow_provider_streamstate.engine.stores.base import RecordChanged, blob_key
from tests.unit.store_history import put_blob

DAY = 86400.0


def _old_orphans(store: LocalStore, n: int) -> list[str]:
    digests = [put_blob(store, f"orphan {i}".encode()) for i in range(n)]
    t = time.time() - 2 * DAY
    for d in digests:
        os.utime(store.root / blob_key(d), (t, t))
    return digests


def _present(store: LocalStore, digests: list[str]) -> list[str]:
    return [d for d in digests if store.has_blob(d)]


def test_a_second_collection_is_refused_while_the_first_is_deleting_and_deletes_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    orphans = _old_orphans(store, 3)
    inside, go_on = threading.Event(), threading.Event()
    real_delete = store.delete_blob

    def slow_delete(digest: str, **kwargs: object) -> bool:
        inside.set()
        go_on.wait(10)
        return real_delete(digest, **kwargs)  # type: ignore[arg-type]

    store.delete_blob = slow_delete  # type: ignore[method-assign]
    first: dict[str, object] = {}
    t = threading.Thread(target=lambda: first.update(r=collect_garbage(store, parallelism=1)))
    t.start()
    try:
        assert inside.wait(10)
        other = LocalStore(store.root, fsync=False)  # another process's view of the store
        with pytest.raises(GcLeaseHeldError) as exc:
            collect_garbage(other)
        assert "another garbage collection is running on" in exc.value.one_line()
        assert exc.value.retryable
        assert len(_present(store, orphans)) == 3  # the refused one deleted nothing
    finally:
        go_on.set()
        t.join(10)
    assert _present(store, orphans) == []
    # Released when the first finished: the next collection runs.
    assert collect_garbage(LocalStore(store.root, fsync=False)).blobs_deleted == 0
    assert json.loads(store.get_record(LEASE_KEY) or b"{}")["released"] is True


def test_a_dry_run_needs_no_lease(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    orphans = _old_orphans(store, 2)
    with GcLease(store):
        assert collect_garbage(store, dry_run=True).blobs_deleted == 2
    assert len(_present(store, orphans)) == 2


def test_the_lease_of_a_collector_that_died_is_taken_over_once_it_expired(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    dead = GcLease(store, ttl_seconds=4)
    dead.acquire()  # never renewed nor released: its process died
    with pytest.raises(GcLeaseHeldError):
        GcLease(store).acquire()
    time.sleep(4.2)
    orphans = _old_orphans(store, 2)
    assert collect_garbage(store).blobs_deleted == 2
    assert _present(store, orphans) == []


def test_a_collector_that_cannot_renew_stops_deleting_before_its_lease_expires(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    lease = GcLease(store, ttl_seconds=4)
    with lease:
        lease.assert_held()

        def unreachable(key: str, data: bytes, *, expect: str | None) -> str:
            raise TransientError("store unreachable")

        store.swap_record = unreachable  # type: ignore[method-assign]
        time.sleep(4 * 0.8 + 0.1)  # past ttl - safety since the last renewal
        with pytest.raises(GcLeaseLostError) as exc:
            lease.assert_held()
        assert "could not be renewed in time" in exc.value.one_line()
    # Still before expires_at: nobody else may have taken it over yet.
    record = json.loads(store.get_record(LEASE_KEY) or b"{}")
    assert record["owner"] == lease.owner


def test_a_taken_over_lease_is_lost_to_its_old_holder_who_never_releases_the_new_one(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    old = GcLease(store, ttl_seconds=4)
    old.acquire()
    time.sleep(4.2)  # old stalled past its expiry
    new = GcLease(store)
    new.acquire()
    old.renew()
    with pytest.raises(GcLeaseLostError, match="took the lease over"):
        old.assert_held()
    old.release()
    record = json.loads(store.get_record(LEASE_KEY) or b"{}")
    assert (record["owner"], record["released"]) == (new.owner, False)
    new.release()


def test_a_swap_expecting_another_version_changes_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    v1 = store.swap_record("gc/x.json", b"1", expect=None)
    with pytest.raises(RecordChanged):
        store.swap_record("gc/x.json", b"2", expect=None)
    with pytest.raises(RecordChanged):
        store.swap_record("gc/x.json", b"2", expect="0" * 64)
    assert store.read_versioned("gc/x.json") == (b"1", v1)
    v2 = store.swap_record("gc/x.json", b"2", expect=v1)
    assert store.read_versioned("gc/x.json") == (b"2", v2)


def test_an_unreadable_lease_is_refused_with_what_to_do(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    store.swap_record(LEASE_KEY, b"not json", expect=None)
    with pytest.raises(GcLeaseHeldError) as exc:
        collect_garbage(store)
    assert f"delete {LEASE_KEY}" in exc.value.one_line()


def test_a_cancelled_collection_leaves_its_lease_to_expire_while_deletes_may_be_in_flight(tmp_path: Path) -> None:
    """run_parallel abandons workers still deleting when it is cancelled: releasing the lease
    at once would let another collection start beside them."""
    from airflow_provider_streamstate.engine.core.cancel import CancelToken
    from airflow_provider_streamstate.engine.core.errors import Cancelled

    store = LocalStore(tmp_path / "store", fsync=False)
    _old_orphans(store, 2)
    real_delete = store.delete_blob

    def stuck_delete(digest: str, **kwargs: object) -> bool:
        time.sleep(4)  # a DELETE that hangs past the cancellation's grace
        return real_delete(digest, **kwargs)  # type: ignore[arg-type]

    store.delete_blob = stuck_delete  # type: ignore[method-assign]
    token = CancelToken()
    threading.Timer(0.5, token.cancel).start()
    with pytest.raises(Cancelled):
        collect_garbage(store, parallelism=2, cancel=token)
    record = json.loads(store.get_record(LEASE_KEY) or b"{}")
    assert record["released"] is False  # not free at once: it expires after the safety margin
    with pytest.raises(GcLeaseHeldError):
        collect_garbage(LocalStore(store.root, fsync=False))


def test_a_renewal_that_landed_but_whose_answer_was_lost_still_holds_the_lease(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    lease = GcLease(store, ttl_seconds=60)
    lease.acquire()
    real_swap = store.swap_record

    def landed_then_failed(key: str, data: bytes, *, expect: str | None) -> str:
        real_swap(key, data, expect=expect)  # the write lands...
        raise RecordChanged("412 on the retried request")  # ...and the retry finds it

    store.swap_record = landed_then_failed  # type: ignore[method-assign]
    lease.renew()
    lease.assert_held()
    store.swap_record = real_swap  # type: ignore[method-assign]
    lease.release()
    assert json.loads(store.get_record(LEASE_KEY) or b"{}")["released"] is True
