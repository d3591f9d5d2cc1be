"""Replication between two local stores: a snapshot arrives byte-identical and only when
complete, only missing blobs are copied, corrupt or missing source blobs stop it naming the
files, a cancelled run publishes nothing and a re-run finishes it, and the destination's
blobs follow the blob protocol (rule 4: unvouched blobs are refreshed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots, resolve_snapshot
from airflow_provider_streamstate.engine.core.cancel import CancelToken
from airflow_provider_streamstate.engine.core.errors import (
    Cancelled,
    CorruptionError,
    NotFoundError,
    UsageError,
)
from airflow_provider_streamstate.engine.lifecycle.replicate import (
    check_replica,
    replica_origin,
    replicate,
    select_snapshots,
    snapshot_origins,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key, record_key
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write
from tests.unit.test_timelines import grow


@pytest.fixture
def stores(tmp_path: Path):  # noqa: ANN201
    """A checkpoint snapshotted at batches 2 and 4 into `src`; an empty `dst`."""
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    src = LocalStore(tmp_path / "src", fsync=False)
    dst = LocalStore(tmp_path / "dst", fsync=False)
    ids = []
    for b in (2, 4):
        grow(ckpt, b)
        ids.append(create_snapshot(str(ckpt), src, "s").manifest.snapshot_id)
    return ckpt, src, dst, ids


def blob_files(store: LocalStore) -> set[str]:
    return {p.name for p in (store.root / "blobs").rglob("*") if p.is_file()}


def test_a_snapshot_arrives_byte_identical_with_its_blobs_and_provenance(stores) -> None:
    _, src, dst, ids = stores
    result = replicate(src, dst, "s", snapshots=["latest"])
    # The newest is a delta of the first: what it builds on arrives first, as a snapshot of its own.
    assert resolve_snapshot(src, "s", ids[1]).chain_ids == [ids[0]]
    assert [s.snapshot_id for s in result.snapshots] == ids
    for sid in ids:
        assert dst.get_manifest("s", sid) == src.get_manifest("s", sid)
    m0, m = resolve_snapshot(src, "s", ids[0]), resolve_snapshot(src, "s", ids[1])
    assert blob_files(dst) == set(m.blobs) | set(m0.blobs)
    base, one = result.snapshots
    assert (base.blobs_copied, base.bytes_copied) == (len(m0.blobs), sum(m0.blobs.values()))
    new = set(m.blobs) - set(m0.blobs)
    assert (one.blobs_copied, one.bytes_copied) == (len(new), sum(m.blobs[d] for d in new))
    assert (one.blobs_skipped, one.already_present) == (len(m.blobs) - len(new), False)
    assert one.lag_seconds is not None and 0 <= one.lag_seconds < 60
    origin = replica_origin(dst, "s", ids[1])
    assert (origin["source"], origin["bytes_copied"]) == (src.url, one.bytes_copied)
    assert snapshot_origins(dst, "s") == {ids[0]: src.url, ids[1]: src.url}
    assert snapshot_origins(src, "s") == {}
    assert check_replica(dst, "s", "latest", source=src).outcome == "ready"


def test_replicating_again_copies_nothing_and_all_finds_nothing_missing(stores) -> None:
    _, src, dst, ids = stores
    first = replicate(src, dst, "s", all_missing=True)
    assert [s.snapshot_id for s in first.snapshots] == ids
    # The second snapshot shares most blobs with the first: only its new ones were copied.
    shared = set(resolve_snapshot(src, "s", ids[0]).blobs) & set(resolve_snapshot(src, "s", ids[1]).blobs)
    assert shared and first.snapshots[1].blobs_skipped == len(shared)
    assert replicate(src, dst, "s", all_missing=True).snapshots == ()
    again = replicate(src, dst, "s", snapshots=ids)
    assert [s.already_present for s in again.snapshots] == [True, True]
    assert (again.bytes_copied, again.blobs_copied) == (0, 0)
    assert again.snapshots[1].lag_seconds == first.snapshots[1].lag_seconds  # from the provenance record


def test_incremental_replication_copies_only_what_the_new_batch_wrote(stores) -> None:
    ckpt, src, dst, ids = stores
    replicate(src, dst, "s", all_missing=True)
    grow(ckpt, 5)
    new = create_snapshot(str(ckpt), src, "s")
    result = replicate(src, dst, "s", since=ids[1])
    assert [(s.snapshot_id, s.already_present) for s in result.snapshots] == [(ids[1], True), (new.manifest.snapshot_id, False)]
    assert result.bytes_copied == new.bytes_uploaded  # exactly the bytes the new snapshot added


def test_a_corrupt_source_blob_stops_the_copy_naming_it_and_nothing_is_published(stores) -> None:
    _, src, dst, ids = stores
    m = resolve_snapshot(src, "s", ids[0])
    victim = next(f for f in m.files if f.path.endswith("1.delta"))
    path = src.root / blob_key(victim.sha256)
    path.write_bytes(b"rotten " + path.read_bytes())
    with pytest.raises(CorruptionError) as err:
        replicate(src, dst, "s", snapshots=[ids[0]], parallelism=2)
    message = err.value.one_line()
    assert victim.sha256 in message and victim.path in message and "nothing was published" in message
    assert dst.list_snapshot_ids("s") == []
    assert victim.sha256 not in blob_files(dst)
    assert dst.get_record(record_key("s", "replicas", ids[0])) is None


def test_a_missing_source_blob_is_named_too(stores) -> None:
    _, src, dst, ids = stores
    m = resolve_snapshot(src, "s", ids[0])
    victim = m.files[0]
    (src.root / blob_key(victim.sha256)).unlink()
    with pytest.raises(CorruptionError, match=f"blob {victim.sha256} is missing from the source .*{victim.path}"):
        replicate(src, dst, "s", snapshots=[ids[0]])
    assert dst.list_snapshot_ids("s") == []


def test_a_cancelled_replication_publishes_nothing_and_a_rerun_copies_only_what_is_missing(tmp_path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=3)
    for i, d in enumerate(store_dirs(ckpt)):
        for v in (1, 2, 3):
            write(d / f"{v}.delta", os.urandom(200_000 + i))
    src = LocalStore(tmp_path / "src", fsync=False)
    dst = LocalStore(tmp_path / "dst", fsync=False)
    sid = create_snapshot(str(ckpt), src, "s").manifest.snapshot_id
    token = CancelToken()
    copied: list[str] = []
    real = dst.put_blob_stream

    def put_then_cancel(digest, body, size, **kw):  # noqa: ANN001, ANN003, ANN202 - a kill after the third blob
        written = real(digest, body, size, **kw)
        copied.append(digest)
        if len(copied) == 3:
            token.cancel("killed")
        return written

    dst.put_blob_stream = put_then_cancel  # type: ignore[method-assign]
    with pytest.raises(Cancelled):
        replicate(src, dst, "s", parallelism=1, cancel=token)
    assert dst.list_snapshot_ids("s") == []
    orphans = blob_files(dst)
    assert len(orphans) == 3
    # The orphans are nobody's: the re-run refreshes them (rule 4) instead of copying them again.
    for d in orphans:
        os.utime(dst.root / blob_key(d), (1_000_000, 1_000_000))
    dst.put_blob_stream = real  # type: ignore[method-assign]
    m = resolve_snapshot(src, "s", sid)
    rerun = replicate(src, dst, "s")
    one = rerun.snapshots[0]
    assert one.blobs_refreshed == 3 and one.blobs_skipped == 3
    assert one.bytes_copied == sum(s for d, s in m.blobs.items() if d not in orphans)
    assert all((dst.root / blob_key(d)).stat().st_mtime > 1_000_000 for d in orphans)
    assert dst.get_manifest("s", sid) == src.get_manifest("s", sid)


def test_blobs_a_destination_manifest_vouches_for_are_checked_not_refreshed(stores) -> None:
    _, src, dst, ids = stores
    replicate(src, dst, "s", snapshots=[ids[0]])
    for d in blob_files(dst):
        os.utime(dst.root / blob_key(d), (1_000_000, 1_000_000))
    lost = resolve_snapshot(src, "s", ids[0]).files[0].sha256
    (dst.root / blob_key(lost)).unlink()  # a damaged replica: re-replicating repairs it
    assert check_replica(dst, "s", ids[0]).outcome == "failed"
    again = replicate(src, dst, "s", snapshots=[ids[0]])
    assert (again.snapshots[0].blobs_copied, again.snapshots[0].blobs_refreshed) == (1, 0)
    assert check_replica(dst, "s", ids[0]).outcome == "ready"
    unchanged = blob_files(dst) - {lost}
    assert all((dst.root / blob_key(d)).stat().st_mtime == 1_000_000 for d in unchanged)


def test_timeline_records_come_before_the_manifest_and_validations_after(tmp_path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    src = LocalStore(tmp_path / "src", fsync=False)
    dst = LocalStore(tmp_path / "dst", fsync=False)
    ids = {}
    for b in (3, 6):
        grow(ckpt, b)
        ids[b] = create_snapshot(str(ckpt), src, "s").manifest.snapshot_id
    restore_snapshot(src, "s", ids[3], ckpt, force=True, fsync=False)  # a rollback: timeline 2
    grow(ckpt, 5)
    t2 = create_snapshot(str(ckpt), src, "s").manifest
    assert t2.timeline == 2
    suite = record_key("s", f"validations/{t2.snapshot_id}", "orders_suite")
    src.put_record(suite, json.dumps({"success": True}).encode())
    order: list[str] = []
    for name in ("put_record", "put_manifest"):
        real = getattr(dst, name)

        def spy(*a, _real=real, _name=name):  # noqa: ANN002, ANN202
            order.append(a[0] if _name == "put_record" else f"manifest {a[1]}")
            return _real(*a)

        setattr(dst, name, spy)
    replicate(src, dst, "s", snapshots=["latest"])
    assert t2.chain_ids == [ids[3]]  # a delta of the snapshot the rollback restored: it arrives first
    assert [k for k in order if "/journal/" not in k] == [
        f"manifest {ids[3]}", f"streams/s/replicas/{ids[3]}.json",
        "streams/s/timelines/000000002.json", f"manifest {t2.snapshot_id}",
        f"streams/s/replicas/{t2.snapshot_id}.json", suite,
    ]
    listing = list_snapshots(dst, "s")
    assert listing.timelines.current == 2 and listing.on_current_timeline(listing.manifests[0])
    # The destination's `latest` is the source's, and the abandoned snapshot is not mistaken for it.
    replicate(src, dst, "s", all_missing=True)
    assert resolve_snapshot(dst, "s", "latest").snapshot_id == t2.snapshot_id
    # A validation record written at the source later is copied by the next replication of the snapshot.
    later = record_key("s", f"validations/{t2.snapshot_id}", "late_suite")
    src.put_record(later, b'{"success": false}')
    assert replicate(src, dst, "s", snapshots=[t2.snapshot_id]).snapshots[0].records_copied == 1
    assert dst.get_record(later) == b'{"success": false}'


def test_another_history_under_the_same_id_is_refused(stores) -> None:
    _, src, dst, ids = stores
    dst.put_manifest("s", ids[0], b"{}")
    with pytest.raises(CorruptionError, match="another manifest"):
        replicate(src, dst, "s", snapshots=[ids[0]])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"snapshots": ["latest"], "all_missing": True}, UsageError),
        ({"snapshots": ["nope"]}, UsageError),
        ({"snapshots": ["000000000099-20261121T000000000000Z"]}, NotFoundError),
        ({"since": "000000000099-20261121T000000000000Z"}, NotFoundError),
    ],
)
def test_bad_selections_are_refused(stores, kwargs, error) -> None:
    _, src, dst, _ = stores
    with pytest.raises(error):
        select_snapshots(src, dst, "s", **kwargs)


def test_selection_defaults_to_latest_and_orders_oldest_first(stores) -> None:
    _, src, dst, ids = stores
    assert select_snapshots(src, dst, "s") == [ids[1]]
    assert select_snapshots(src, dst, "s", snapshots=[ids[1], ids[0], ids[1]]) == ids
    assert select_snapshots(src, dst, "s", since=ids[0]) == ids
    with pytest.raises(NotFoundError, match="no snapshots"):
        select_snapshots(src, dst, "other")
    with pytest.raises(UsageError, match="same store"):
        replicate(src, LocalStore(src.root), "s")


def test_the_replica_check_waits_for_the_manifest(stores) -> None:
    _, src, dst, ids = stores
    assert check_replica(dst, "s", "latest", source=src).outcome == "waiting"
    assert check_replica(dst, "s", "latest").outcome == "waiting"
    replicate(src, dst, "s", snapshots=[ids[0]])
    waiting = check_replica(dst, "s", "latest", source=src)
    assert (waiting.outcome, waiting.snapshot_id) == ("waiting", ids[1])
    ready = check_replica(dst, "s", ids[0])
    assert (ready.outcome, ready.blobs_missing) == ("ready", 0) and ready.lag_seconds is not None


def test_latest_good_names_the_newest_snapshot_that_passed_the_suite_and_its_record_travels_with_it(stores) -> None:
    from airflow_provider_streamstate.engine.catalog.validation_records import (
        ExpectationOutcome,
        ValidationRecord,
        put_validation,
    )

    _, src, dst, ids = stores
    outcome = ExpectationOutcome("expect_column_values_to_not_be_null", {"column": "key_account"}, True, None)
    put_validation(src, ValidationRecord("s", ids[0], 2, "sane", "ef" * 32, True, "2026-11-22T09:00:00Z", "1.24.1",
                                         1.0, {"operator": 0, "store_name": None, "join_side": None}, [outcome]))
    result = replicate(src, dst, "s", snapshots=["latest-good:sane"])
    assert [s.snapshot_id for s in result.snapshots] == [ids[0]]  # not the newest: it was never validated
    assert resolve_snapshot(dst, "s", "latest-good:sane").snapshot_id == ids[0]


def test_a_replication_slower_than_the_writers_bound_publishes_nothing(stores, monkeypatch) -> None:
    """Rule 1 with the bound D read when replication runs (the value GC checks its grace
    against), not when the module was imported."""
    import time as time_mod

    from airflow_provider_streamstate.engine.catalog import gc as gc_mod
    from airflow_provider_streamstate.engine.core.errors import TransientError

    _, src, dst, ids = stores
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 0.2)
    slow_put = dst.put_blob_stream

    def put(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time_mod.sleep(0.1)
        return slow_put(*args, **kwargs)

    monkeypatch.setattr(dst, "put_blob_stream", put)
    with pytest.raises(TransientError, match=r"took over 0.2 s"):
        replicate(src, dst, "s", snapshots=[ids[0]], parallelism=1)
    with pytest.raises(NotFoundError):
        dst.get_manifest("s", ids[0])


def test_a_blob_deleted_right_after_the_replication_refreshed_it_is_copied_again_before_publishing(stores) -> None:
    """A GC read the blob's age before the refresh and deleted it after (S3's HEAD, then
    DELETE): the replication's check of refreshed blobs right before publishing catches it."""
    _, src, _, ids = stores

    class GcStrikesAfterRefresh(LocalStore):
        def refresh_blob(self, digest: str) -> bool:
            ok = super().refresh_blob(digest)
            (self.root / blob_key(digest)).unlink(missing_ok=True)
            return ok

    dst = GcStrikesAfterRefresh(src.root.parent / "struck", fsync=False)
    m = resolve_snapshot(src, "s", ids[1])
    orphans = sorted(m.blobs)[:3]  # present, but vouched for by no manifest: refreshed (rule 4)
    for d in orphans:
        with src.open_blob(d) as body:
            dst.put_blob_stream(d, body, m.blobs[d])
    done = replicate(src, dst, "s", snapshots=[ids[1]]).snapshots  # the delta's base first
    assert sum(one.blobs_refreshed for one in done) == 3
    assert blob_files(dst) >= set(m.blobs)
    assert check_replica(dst, "s", ids[1]).outcome == "ready"


def test_all_leaves_the_snapshots_the_destinations_retention_deleted_alone(stores) -> None:
    _, src, dst, ids = stores
    replicate(src, dst, "s", all_missing=True)
    delete_snapshots(dst, "s", [ids[0]])  # as retention does: a tombstone stays for the grace period
    assert dst.list_tombstones("s") == [ids[0]]
    assert select_snapshots(src, dst, "s", all_missing=True) == []
    assert replicate(src, dst, "s", all_missing=True).snapshots == ()
    assert dst.list_snapshot_ids("s") == [ids[1]]
    # Named, it is copied back: someone asked for it.
    assert [s.snapshot_id for s in replicate(src, dst, "s", snapshots=[ids[0]]).snapshots] == [ids[0]]
