"""Clone expiry finds clones from their records in the store and tears down only what is
theirs: an expired clone's checkpoint (labelled as that clone), snapshots and record go;
a clone not expired yet stays; a record whose checkpoint is not labelled as that clone
never deletes the directory; a dry run changes nothing; topics to delete need a cluster."""

from __future__ import annotations

import time

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.clones import (
    CloneLabel,
    expire_clones,
    list_clones,
    record_clone,
    write_clone_label,
)
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.store_history import at, put_snapshot


def _clone(store: LocalStore, tmp_path, name: str, ttl_s: float, *, label: bool = True, delete_sinks: bool = False):
    ckpt = make_checkpoint(tmp_path / name, batches=1)
    lab = CloneLabel.new(clone=name, source_stream="orders", source_checkpoint="/prod", snapshot_id="s",
                         batch_id=0, query_id="q", sinks={"alerts": f"{name}-alerts", "out": "/data/x"}, ttl_s=ttl_s)
    if label:
        write_clone_label(ckpt, lab)
    rec = record_clone(store, clone=name, source_stream="orders", checkpoint=str(ckpt), snapshot_id="s",
                       expires_at=lab.expires_at, sinks=lab.sinks, delete_sinks=delete_sinks)
    return ckpt, rec


def test_an_expired_clone_is_torn_down_and_one_not_expired_stays(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    old_ckpt, _ = _clone(store, tmp_path, "sandbox-old", 1)
    new_ckpt, _ = _clone(store, tmp_path, "sandbox-new", 3600)
    put_snapshot(store, "sandbox-old", 0, at("2026-11-20T00:00"))
    assert [r.clone for r in list_clones(store)] == ["sandbox-old", "sandbox-new"]
    assert list_clones(store)[0].delete_topics == []

    result = expire_clones(store, now=time.time() + 2)
    assert [e.clone for e in result.expired] == ["sandbox-old"] and result.not_expired == 1
    done = result.expired[0]
    assert (done.stopped, done.checkpoint_deleted, done.snapshots_deleted) == ("not-running", True, 1)
    assert not old_ckpt.exists() and new_ckpt.exists()
    assert store.list_snapshot_ids("sandbox-old") == [] and len(store.list_tombstones("sandbox-old")) == 1
    assert [r.clone for r in list_clones(store)] == ["sandbox-new"]


def test_a_checkpoint_not_labelled_as_the_clone_is_never_deleted(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ckpt, _ = _clone(store, tmp_path, "impostor", 1, label=False)
    result = expire_clones(store, now=time.time() + 2)
    assert ckpt.exists() and (ckpt / "metadata").exists()
    assert not result.expired[0].checkpoint_deleted
    assert "not labelled as clone impostor" in result.expired[0].notes[0]


def test_a_dry_run_changes_nothing(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ckpt, _ = _clone(store, tmp_path, "sandbox", 1)
    result = expire_clones(store, now=time.time() + 2, dry_run=True)
    assert result.expired[0].checkpoint_deleted and ckpt.exists()
    assert [r.clone for r in list_clones(store)] == ["sandbox"]


def test_force_expires_a_named_clone_before_its_time_and_unknown_names_are_refused(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ckpt, _ = _clone(store, tmp_path, "sandbox", 3600)
    assert expire_clones(store).expired == ()
    with pytest.raises(UsageError):
        expire_clones(store, names=["nope"], force=True)
    assert [e.clone for e in expire_clones(store, names=["sandbox"], force=True).expired] == ["sandbox"]
    assert not ckpt.exists()


def test_topics_to_delete_on_expiry_need_a_cluster(tmp_path) -> None:
    store = LocalStore(tmp_path / "store", fsync=False)
    ckpt, rec = _clone(store, tmp_path, "sandbox", 1, delete_sinks=True)
    assert rec.delete_topics == ["sandbox-alerts"]  # the path sink is not a topic
    with pytest.raises(UsageError):
        expire_clones(store, now=time.time() + 2)
    assert ckpt.exists()  # nothing was torn down
