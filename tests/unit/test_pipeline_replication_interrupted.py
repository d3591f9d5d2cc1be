"""A pipeline replication interrupted after the members, their pins and the channels were
copied, before the pipeline record: the destination lists no such pipeline snapshot, its
retention and GC run over the parts without breaking anything, and the replication run
again publishes it whole (members restorable byte for byte, channels as at the source).
Built from fake checkpoints (tests/unit/test_pipeline_records.py): no Kafka, no Spark."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.retention import (
    RetentionPolicy,
    apply_retention,
    delete_snapshots,
    pinned_ids,
    unpin_snapshot,
)
from airflow_provider_streamstate.engine.core.errors import NotFoundError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.pipeline import replicate as pipeline_replicate
from airflow_provider_streamstate.engine.pipeline.replicate import replicate_pipeline
from airflow_provider_streamstate.engine.pipeline.retention import apply_pipeline_retention
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    PipelineSnapshot,
    get_pipeline_snapshot,
    list_pipeline_snapshots,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from tests.unit.test_pipeline_records import _pipeline_snapshot

FIRST, SECOND = "20260101T000000000001Z", "20260101T000000000002Z"
DAYS = 86400.0


class Interrupted(Exception):
    """The replicating process died here."""


def _interrupt_before_the_record(monkeypatch: pytest.MonkeyPatch, before: object = None) -> None:
    """Fault injection: the run dies just before it writes a pipeline record (after the
    members, pins and channels); `before()` runs first (what else happens meanwhile)."""
    real = pipeline_replicate._put_once

    def put_once(store: SnapshotStore, key: str, data: bytes) -> None:
        if "/snapshots/" in key:
            if callable(before):
                before()
            raise Interrupted(key)
        real(store, key, data)

    monkeypatch.setattr(pipeline_replicate, "_put_once", put_once)


def _maintain(store: SnapshotStore) -> None:
    """What the DR region's schedule runs: pipeline retention, each stream's, then GC with
    every grace period long past (so anything unreferenced would go)."""
    apply_pipeline_retention(store, "orders", keep_last=1)
    for stream in ("enrich", "totals"):
        apply_retention(store, stream, RetentionPolicy(keep_last=1))
    collect_garbage(store, now=time.time() + 30 * DAYS)


def _assert_whole(store: SnapshotStore, source: SnapshotStore, snap: PipelineSnapshot, tmp_path: Path) -> None:
    """The replica reads back as the source's, its channels intact, its members pinned and
    restorable (every byte checked against its sha256)."""
    replica = get_pipeline_snapshot(store, "orders", snap.snapshot_id)
    assert replica.to_json() == snap.to_json()
    for c in replica.channels:
        assert replica.channel_records(store, c) == snap.channel_records(source, c)
    for m in replica.members.values():
        assert m.snapshot_id in pinned_ids(store, m.stream)
        restore_snapshot(store, m.stream, m.snapshot_id, tmp_path / f"restored-{snap.snapshot_id}-{m.stream}",
                         force=True, fsync=False)


def test_an_interrupted_replication_publishes_nothing_and_a_rerun_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, dr = LocalStore(tmp_path / "source"), LocalStore(tmp_path / "dr")
    snap = _pipeline_snapshot(source, tmp_path, FIRST)
    _interrupt_before_the_record(monkeypatch)
    with pytest.raises(Interrupted):
        replicate_pipeline(source, dr, "orders")
    monkeypatch.undo()
    # The parts are there, the pipeline snapshot is not.
    assert list_pipeline_snapshots(dr, "orders") == []
    assert all(dr.list_snapshot_ids(m.stream) == [m.snapshot_id] for m in snap.members.values())
    assert all(dr.get_record(c.key) is not None for c in snap.channels)
    _maintain(dr)  # refuses nothing, breaks nothing
    assert list_pipeline_snapshots(dr, "orders") == []

    result = replicate_pipeline(source, dr, "orders")
    assert result.published == [FIRST] and result.member_snapshots_published == 0  # the members were reused
    _assert_whole(dr, source, snap, tmp_path)
    _maintain(dr)
    _assert_whole(dr, source, snap, tmp_path)


def test_a_rerun_completes_an_interrupted_replication_whose_parts_the_destinations_retention_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The destination already holds an older pipeline snapshot, so its retention sweeps the
    interrupted run's channels and pins as leftovers (their id is over an hour old): the
    rerun copies them again."""
    source, dr = LocalStore(tmp_path / "source"), LocalStore(tmp_path / "dr")
    first = _pipeline_snapshot(source, tmp_path, FIRST)
    assert replicate_pipeline(source, dr, "orders").published == [FIRST]
    second = _pipeline_snapshot(source, tmp_path, SECOND)
    _interrupt_before_the_record(monkeypatch)
    with pytest.raises(Interrupted):
        replicate_pipeline(source, dr, "orders")
    monkeypatch.undo()
    _maintain(dr)
    assert list_pipeline_snapshots(dr, "orders") == [FIRST]
    assert all(dr.get_record(c.key) is None for c in second.channels)  # swept as leftovers
    assert not any(m.snapshot_id in pinned_ids(dr, m.stream) for m in second.members.values())
    _assert_whole(dr, source, first, tmp_path)

    assert replicate_pipeline(source, dr, "orders").published == [SECOND]
    _assert_whole(dr, source, second, tmp_path)


def test_the_destinations_retention_running_during_a_replication_leaves_the_published_snapshot_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention at the destination runs between the replication's channels and its record
    (the DR store catching up on cuts taken over an hour ago, as after a regional outage)."""
    source, dr = LocalStore(tmp_path / "source"), LocalStore(tmp_path / "dr")
    _pipeline_snapshot(source, tmp_path, FIRST)
    assert replicate_pipeline(source, dr, "orders").published == [FIRST]
    second = _pipeline_snapshot(source, tmp_path, SECOND)
    real = pipeline_replicate._put_once

    def put_once(store: SnapshotStore, key: str, data: bytes) -> None:
        if key.endswith(f"/snapshots/{SECOND}.json"):
            apply_pipeline_retention(dr, "orders", keep_last=2)  # a concurrent run of the DR schedule
        real(store, key, data)

    monkeypatch.setattr(pipeline_replicate, "_put_once", put_once)
    assert replicate_pipeline(source, dr, "orders").published == [SECOND]
    monkeypatch.undo()
    assert all(dr.get_record(c.key) is not None for c in second.channels), "a published snapshot lost its channel"
    assert all(m.snapshot_id in pinned_ids(dr, m.stream) for m in second.members.values()), "its members lost their pins"


def test_a_later_run_brings_validations_recorded_since_and_puts_back_swept_members(tmp_path: Path) -> None:
    """A pipeline snapshot validated after its replication becomes known-good in the DR store
    with the next run (what `pipeline failover --good-only` reads there); a member snapshot
    and pin lost at the destination after the publish (a run that died in its check) are
    put back by the next run."""
    from tests.unit.store_history import put_validation

    source, dr = LocalStore(tmp_path / "source"), LocalStore(tmp_path / "dr")
    snap = _pipeline_snapshot(source, tmp_path, FIRST)
    assert replicate_pipeline(source, dr, "orders").published == [FIRST]
    for m in snap.members.values():
        put_validation(source, m.stream, m.snapshot_id, "sane", True)
    assert get_pipeline_snapshot(source, "orders", "latest-good").snapshot_id == FIRST
    with pytest.raises(NotFoundError):
        get_pipeline_snapshot(dr, "orders", "latest-good")
    lost = snap.members["totals"]
    unpin_snapshot(dr, lost.stream, lost.snapshot_id)
    delete_snapshots(dr, lost.stream, [lost.snapshot_id])

    result = replicate_pipeline(source, dr, "orders")
    assert result.published == [] and result.already_present == [FIRST] and result.member_snapshots_published == 1
    assert get_pipeline_snapshot(dr, "orders", "latest-good").snapshot_id == FIRST
    _assert_whole(dr, source, snap, tmp_path)
