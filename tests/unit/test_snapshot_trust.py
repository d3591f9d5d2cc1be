"""A snapshot trusts nothing it did not check: blobs its parent references are confirmed
in the store (a missing one is uploaded again), hashes are reused only from a parent of
the same checkpoint and query, and a snapshot of a batch already held is not taken twice.
Stateless queries (no state/) snapshot and restore like any other."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from airflow_provider_streamstate.engine.stores.local import LocalStore
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


def _checkpoint(root: Path, batches: int = 3) -> Path:
    make_checkpoint(root, batches=batches)
    for d in store_dirs(root):
        for v in range(1, batches + 1):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    return root


def test_a_blob_the_parent_references_but_the_store_lost_is_uploaded_again(tmp_path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    first = create_snapshot(str(ckpt), store, "s").manifest
    lost = next(f for f in first.files if f.path.endswith("1.delta"))
    (store.root / blob_key(lost.sha256)).unlink()  # deleted by hand, or a partial copy

    write(ckpt / "commits/3", "v1\n{}")  # a new batch: the next snapshot is not a no-op
    write(ckpt / "offsets/3", (ckpt / "offsets/2").read_text())
    for d in store_dirs(ckpt):
        write(d / "4.delta", "delta 4")
    second = create_snapshot(str(ckpt), store, "s")
    assert second.blobs_missing >= 1
    assert lost.sha256 in second.manifest.blobs
    assert verify_snapshots(store, "s", second.manifest.snapshot_id).ok


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
