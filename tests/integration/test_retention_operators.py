"""The retention, GC and clone-expiry operators in real DAG runs (Airflow's dag.test): a
dry run deletes nothing, retention then deletes what the policy does not keep, GC frees
old garbage, an expired clone is torn down, each with its JSON summary in XCom; bad
input fails the task at once, without a retry; and the streamstate_store_maintenance DAG
runs GC and clone expiry on each configured store."""

from __future__ import annotations

import os
import time

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.stores.base import blob_key
from airflow_provider_streamstate.engine.streams.clones import (
    CloneLabel,
    list_clones,
    record_clone,
    write_clone_label,
)
from airflow_provider_streamstate.spec import StreamSpec
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.store_history import at, put_blob, put_snapshot

pytestmark = pytest.mark.integration


def _store_with_history(tmp_path) -> tuple[LocalStore, StreamSpec, str, list[str]]:
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = [put_snapshot(store, "orders", b, at(f"2026-11-0{b + 1}T00:00")).snapshot_id for b in range(3)]
    orphan = put_blob(store, b"orphan of a crashed snapshot")
    old = time.time() - 2 * 86400
    os.utime(store.root / blob_key(orphan), (old, old))
    ckpt = make_checkpoint(tmp_path / "sandbox", batches=1)
    label = CloneLabel.new(clone="sandbox", source_stream="orders", source_checkpoint="/prod", snapshot_id=ids[0],
                           batch_id=0, query_id="q", sinks={}, ttl_s=0.001)
    write_clone_label(ckpt, label)
    record_clone(store, clone="sandbox", source_stream="orders", checkpoint=str(ckpt), snapshot_id=ids[0],
                 expires_at=label.expires_at, sinks={})
    spec = StreamSpec(name="orders", checkpoint=str(tmp_path / "ckpt"), store=store.url)
    return store, spec, orphan, ids


def test_retention_gc_and_clone_expiry_operators_in_a_dag_run(run_dag, tmp_path) -> None:
    store, spec, orphan, ids = _store_with_history(tmp_path)
    result = run_dag("streamstate_test_maintenance", {"stream": spec.to_dict(), "store": store.url})
    assert result.state == "success", result.log[-3000:]
    dry = result.tasks["retention_dry_run"].xcom
    assert dry["dry_run"] and dry["snapshots_deleted"] == 2
    applied = result.tasks["retention"].xcom
    assert [d["snapshot_id"] for d in applied["deleted"]] == ids[:2]
    assert applied["kept"][0]["snapshot_id"] == ids[2]
    assert store.list_snapshot_ids("orders") == [ids[2]]
    gc_dry = result.tasks["gc_dry_run"].xcom
    assert gc_dry["dry_run"] and gc_dry["blobs_deleted"] == 1
    gc = result.tasks["gc"].xcom
    assert (gc["blobs_deleted"], gc["blobs_kept"], gc["tombstones_live"]) == (1, 3, 2)
    assert not store.has_blob(orphan)
    expired = result.tasks["expire_clones"].xcom
    assert expired["clones_expired"] == 1 and expired["expired"][0]["checkpoint_deleted"]
    assert not (tmp_path / "sandbox").exists() and list_clones(store) == []


def test_bad_input_fails_the_task_at_once_without_a_retry(run_dag, tmp_path) -> None:
    store, spec, _, ids = _store_with_history(tmp_path)
    result = run_dag("streamstate_test_maintenance_bad_input", {"stream": spec.to_dict(), "store": store.url})
    assert result.state == "failed"
    for task, words in (("bad_max_age", "invalid max_age '7 years'"), ("bad_keep_last", "keep_last must be"),
                        ("grace_too_short", "must exceed the longest a snapshot may take")):
        assert (result.tasks[task].state, result.tasks[task].try_number) == ("failed", 1), task
        assert words in result.log, task
    assert store.list_snapshot_ids("orders") == ids


def test_the_store_maintenance_dag_collects_garbage_and_expires_clones_in_each_store(run_dag, tmp_path) -> None:
    store, _, orphan, ids = _store_with_history(tmp_path)
    result = run_dag("streamstate_store_maintenance", {"stores": [store.url], "gc_now": True, "grace": "7h"})
    assert result.state == "success", result.log[-3000:]
    assert result.tasks["gc"].state == "success" and result.tasks["expire_clones"].state == "success"
    assert not store.has_blob(orphan) and store.list_snapshot_ids("orders") == ids
    assert list_clones(store) == []
