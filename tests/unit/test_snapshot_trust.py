"""A snapshot trusts only what the protocol vouches for: blobs its parent references are
relied on without a request each (GC cannot delete them), and those the store lost outside
the protocol are stored again once garbage collection's census names them; hashes are reused
only from a parent of the same checkpoint and query, and a snapshot of a batch already held
is not taken twice. Stateless queries (no state/) snapshot and restore like any other."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.blob_census import CENSUS_FORMAT, CENSUS_KEY, read_census
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


def _checkpoint(root: Path, batches: int = 3) -> Path:
    make_checkpoint(root, batches=batches)
    for d in store_dirs(root):
        for v in range(1, batches + 1):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    return root


class CountingStore(LocalStore):
    """A local store that counts the blobs it is asked about."""

    asked = 0

    def has_blob(self, digest: str) -> bool:
        self.asked += 1
        return super().has_blob(digest)


def _next_batch(ckpt: Path, batch: int) -> None:
    """Commit one more batch, so the next snapshot is not a no-op."""
    write(ckpt / f"commits/{batch}", "v1\n{}")
    write(ckpt / f"offsets/{batch}", (ckpt / f"offsets/{batch - 1}").read_text())
    for d in store_dirs(ckpt):
        write(d / f"{batch + 1}.delta", f"delta {batch + 1}")


def test_a_snapshot_asks_the_store_about_none_of_the_blobs_its_parent_references(tmp_path) -> None:
    """Writer rule 3: GC cannot delete a live parent's blobs, so the cost of a snapshot of
    unchanged state is its manifest, not one request per blob it inherits."""
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s")
    assert collect_garbage(store).blobs_missing == 0  # a census that names no lost blob
    store.asked = 0
    unchanged = create_snapshot(str(ckpt), store, "s", always=True)
    assert (store.asked, unchanged.blobs_checked, unchanged.blobs_uploaded) == (0, 0, 0)
    assert unchanged.manifest.blobs == first.manifest.blobs
    _next_batch(ckpt, 3)
    store.asked = 0
    after_batch = create_snapshot(str(ckpt), store, "s")
    new_blobs = after_batch.manifest.blobs.keys() - first.manifest.blobs.keys()
    assert after_batch.blobs_checked == 0 and after_batch.blobs_uploaded == len(new_blobs)


def test_a_blob_lost_outside_the_protocol_is_found_by_gc_and_stored_again_by_the_next_snapshot(tmp_path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    collect_garbage(store)  # a census: nothing lost
    lost = next(f for f in first.files if f.path.endswith("1.delta"))
    (store.root / blob_key(lost.sha256)).unlink()  # deleted by hand, after the census

    # Until a collection has listed the store again, nothing says the blob is gone: the
    # next snapshot inherits the reference, and verify names both snapshots.
    _next_batch(ckpt, 3)
    blind = create_snapshot(str(ckpt), store, "s")
    assert (blind.blobs_checked, blind.blobs_missing) == (0, 0)
    assert not verify_snapshots(store, "s", blind.manifest.snapshot_id).ok

    collected = collect_garbage(store)
    assert (collected.blobs_missing, collected.missing_examples) == (1, (lost.sha256,))
    census = read_census(store)
    assert census is not None and census.missing == {lost.sha256} and census.complete

    _next_batch(ckpt, 4)
    store.asked = 0
    healed = create_snapshot(str(ckpt), store, "s")
    assert (healed.blobs_checked, healed.blobs_missing) == (1, 1)
    assert store.asked <= 1 + healed.blobs_uploaded  # the check, and at most one per blob stored
    assert lost.sha256 in healed.manifest.blobs
    assert verify_snapshots(store, "s").ok  # the older snapshots share the blob stored again


def test_check_blobs_asks_about_every_parent_blob_and_stores_a_lost_one_again(tmp_path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    collect_garbage(store)  # a census that would let the snapshot trust the parent
    lost = next(f for f in first.files if f.path.endswith("1.delta"))
    (store.root / blob_key(lost.sha256)).unlink()
    _next_batch(ckpt, 3)
    checked = create_snapshot(str(ckpt), store, "s", check_blobs=True)
    shared = checked.manifest.blobs.keys() & first.blobs.keys()
    assert (checked.blobs_checked, checked.blobs_missing) == (len(shared), 1)
    assert verify_snapshots(store, "s", checked.manifest.snapshot_id).ok


def test_without_a_census_a_snapshot_asks_about_every_parent_blob_and_stores_a_lost_one_again(tmp_path) -> None:
    """No collection has listed the store: nothing vouches that its blobs are all there."""
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    lost = next(f for f in first.files if f.path.endswith("1.delta"))
    (store.root / blob_key(lost.sha256)).unlink()
    again = create_snapshot(str(ckpt), store, "s", always=True)
    assert (again.blobs_checked, again.blobs_missing) == (len(first.blobs), 1)
    assert verify_snapshots(store, "s").ok


def test_a_census_older_than_a_week_makes_the_snapshot_check_every_parent_blob(tmp_path) -> None:
    """Collections that stopped running vouch for nothing lost since."""
    from datetime import UTC, datetime, timedelta

    from airflow_provider_streamstate.engine.catalog.blob_census import census_of, write_census

    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    write_census(store, census_of([], manifests=1, taken_at=datetime.now(UTC) - timedelta(days=8)))
    stale = create_snapshot(str(ckpt), store, "s", always=True)
    assert stale.blobs_checked == len(first.blobs)
    write_census(store, census_of([], manifests=1, taken_at=datetime.now(UTC) - timedelta(days=6)))
    assert create_snapshot(str(ckpt), store, "s", always=True).blobs_checked == 0


@pytest.mark.parametrize("census", [
    b"not json",
    json.dumps({"format": "something/else", "missing": []}).encode(),
    # found more lost blobs than it could name
    json.dumps({"format": CENSUS_FORMAT, "taken_at": "2026-01-01T00:00:00Z", "manifests": 1, "missing": [],
                "missing_total": 20000}).encode(),
], ids=["not-json", "other-format", "incomplete"])
def test_a_census_that_cannot_name_every_lost_blob_makes_the_snapshot_check_them_all(tmp_path, census) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = CountingStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    store.replace_record(CENSUS_KEY, census)
    again = create_snapshot(str(ckpt), store, "s", always=True)
    assert again.blobs_checked == len(first.blobs) and again.blobs_missing == 0


def test_hashes_are_reused_only_from_a_parent_of_the_same_checkpoint(tmp_path) -> None:
    a = _checkpoint(tmp_path / "a")
    store = LocalStore(tmp_path / "store", fsync=False)
    create_snapshot(str(a), store, "s")
    # A copy elsewhere whose file has the same path, size and mtime but other bytes.
    b = tmp_path / "b"
    shutil.copytree(a, b)  # copies mtimes too
    victim = store_dirs(b)[0] / "3.delta"
    st = victim.stat()
    victim.write_bytes(b"X" * st.st_size)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))

    taken = create_snapshot(str(b), store, "s", always=True)
    entry = next(f for f in taken.manifest.files if (b / f.path) == victim)
    import hashlib

    assert entry.sha256 == hashlib.sha256(b"X" * st.st_size).hexdigest()
    assert taken.files_hashed == len(taken.manifest.files)


def test_a_second_snapshot_of_the_same_batch_returns_the_first(tmp_path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s", labels={"reason": "cron"})
    again = create_snapshot(str(ckpt), store, "s", labels={"reason": "cron"})
    assert again.reused and again.manifest.snapshot_id == first.manifest.snapshot_id
    assert len(list_snapshots(store, "s").manifests) == 1
    # Asked for: a new entry (other labels, or --always).
    labelled = create_snapshot(str(ckpt), store, "s", labels={"reason": "pre-deploy"})
    forced = create_snapshot(str(ckpt), store, "s", always=True, labels={"reason": "pre-deploy"})
    assert not labelled.reused and not forced.reused
    assert len(list_snapshots(store, "s").manifests) == 3
    assert forced.bytes_uploaded == 0  # the content was stored once


def test_a_stateless_query_is_snapshotted_and_restored(tmp_path) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=4, operators=0)
    shutil.rmtree(ckpt / "state", ignore_errors=True)
    plan = CheckpointReader(str(ckpt)).plan()
    assert (plan.state_store, plan.operators, plan.batch_id) == ("none", [], 3)
    store = LocalStore(tmp_path / "store", fsync=False)
    snap = create_snapshot(str(ckpt), store, "filter")
    assert snap.attempts == 1 and snap.manifest.state_store == "none"
    assert {f.path for f in snap.manifest.files} >= {"metadata", "offsets/3", "commits/3", "sources/0/0"}
    restored = restore_snapshot(store, "filter", "latest", tmp_path / "back", fsync=False)
    assert (Path(restored.target) / "offsets/3").read_bytes() == (ckpt / "offsets/3").read_bytes()


def test_the_manifest_records_the_streams_spark_version_only_when_told_never_the_local_pyspark(tmp_path) -> None:
    """Nothing in a checkpoint records Spark's version, and the pyspark of the host taking the
    snapshot says nothing of the stream's: the field is what the caller knows, or null."""
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    assert create_snapshot(str(ckpt), store, "s").manifest.spark_version is None
    told = create_snapshot(str(ckpt), store, "s", always=True, spark_version="3.5.1").manifest
    assert told.spark_version == "3.5.1"


def test_a_snapshot_that_outlived_the_writers_bound_before_publishing_publishes_nothing(
    tmp_path, monkeypatch
) -> None:
    """Rule 1 of the blob protocol is checked at the publish itself: time spent after the
    upload (reading Kafka anchors) counts, since GC's grace period only covers D."""
    import time

    import pytest

    from airflow_provider_streamstate.engine.catalog import gc as gc_mod
    from airflow_provider_streamstate.engine.core.errors import TransientError
    from airflow_provider_streamstate.engine.lifecycle import snapshot as snapshot_mod

    ckpt = _checkpoint(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 0.5)

    def slow_anchors(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the Kafka read, stalled
        time.sleep(0.7)
        return {}, []

    monkeypatch.setattr(snapshot_mod, "_anchors", slow_anchors)
    with pytest.raises(TransientError, match="took over"):
        create_snapshot(str(ckpt), store, "s")
    assert store.list_snapshot_ids("s") == []
