"""The replicate operator and the replica sensor in a real DAG run, through Airflow `aws`
connections to the stack's two S3 regions: the operator copies the snapshot it is given,
the deferred sensor waits until the source's newest snapshot is complete at DR (copied
meanwhile by another replication) and returns it with its lag."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from airflow_provider_streamstate.engine.core.errors import NotFoundError
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
from airflow_provider_streamstate.spec import StreamSpec
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow

pytestmark = pytest.mark.integration


def test_the_operator_replicates_and_the_deferred_sensor_waits_for_the_newest_snapshot_at_dr(
    stack, run_dag, tmp_path, monkeypatch
) -> None:
    for region, conn in (("primary", "s3_primary"), ("dr", "s3_dr")):
        for key, value in stack.airflow_conn_env(region, conn).items():
            monkeypatch.setenv(key, value)
    prefix = f"repl-dag-{uuid.uuid4().hex[:8]}"
    spec = StreamSpec(name="orders", checkpoint=str(tmp_path / "ckpt"), store=f"s3://streamstate/{prefix}",
                      storage_conn_id="s3_primary")
    dr_url = f"s3://streamstate/{prefix}-dr"
    source = StreamstateStoreHook(spec.store, storage_conn_id="s3_primary").store
    dr = StreamstateStoreHook(dr_url, storage_conn_id="s3_dr").store
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1)
    grow(ckpt, 2)
    first = create_snapshot(str(ckpt), source, "orders").manifest.snapshot_id
    grow(ckpt, 4)
    newest = create_snapshot(str(ckpt), source, "orders").manifest.snapshot_id

    def replicate_the_newest_later() -> None:  # another replication, while the sensor waits
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                dr.get_manifest("orders", first)
                break
            except NotFoundError:
                time.sleep(0.2)
        time.sleep(3)
        replicate(source, dr, "orders", snapshots=[newest])

    later = threading.Thread(target=replicate_the_newest_later, daemon=True)
    later.start()
    result = run_dag("streamstate_test_replicate",
                     {"stream": spec.to_dict(), "snapshot": first, "dr_store": dr_url, "dr_conn": "s3_dr"})
    later.join(60)
    assert result.state == "success", result.log[-3000:]
    copied = result.tasks["replicate"].xcom
    assert [s["snapshot_id"] for s in copied["snapshots"]] == [first] and copied["bytes_copied"] > 0
    assert copied["source"] == spec.store and copied["destination"] == dr_url
    waited = result.tasks["wait"].xcom
    assert (waited["outcome"], waited["snapshot_id"], waited["blobs_missing"]) == ("ready", newest, 0)
    assert waited["lag_seconds"] is not None and waited["lag_seconds"] > 3
    assert f"snapshot {newest} is not in {dr_url} yet" in result.log  # it did wait, deferred
