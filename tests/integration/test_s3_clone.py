"""A clone onto an S3 checkpoint location (`s3a://`) through CloneStreamOperator: restored
with a new query id and labelled as a clone in S3, recorded in the store, reused by a
retry, and torn down by clone expiry (its objects deleted). Starting a stream on an S3
checkpoint is test_spark_cluster's (the launcher keeps its records beside the S3 checkpoint). That Spark resumes from such a restore
with batch N+1 is test_s3_checkpoint's stream test (the same restore_snapshot call)."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_provider_streamstate.engine.catalog.timeline import LINEAGE_FILE
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.streams.clones import CLONE_FILE, expire_clones, list_clones
from airflow_provider_streamstate.operators.stream import CloneStreamOperator
from airflow_provider_streamstate.spec import StreamSpec
from tests.s3 import s3_client
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration


def test_a_clone_onto_s3_is_restored_labelled_recorded_reused_and_expired(stack, make_store, tmp_path,
                                                                          monkeypatch) -> None:
    for k, v in stack.s3_env("primary").items():
        monkeypatch.setenv(k, v)
    ckpt = make_checkpoint(tmp_path / "prod", batches=2)
    for d in store_dirs(ckpt):
        write(d / "1.delta", "a")
        write(d / "2.delta", "b")
    store, url, _env = make_store("s3")
    snap = create_snapshot(str(ckpt), store, "orders")
    bucket = stack.s3["primary"]["bucket"]
    prefix = f"tests/clone-{uuid.uuid4().hex[:10]}"
    spec = StreamSpec(name="orders", checkpoint=str(ckpt), store=url, sinks={"alerts": "orders-alerts"})

    def clone_op(start: bool = False) -> CloneStreamOperator:
        return CloneStreamOperator(task_id=f"clone-{uuid.uuid4().hex[:6]}", stream=spec, clone_name="orders-s3",
                                   clone_checkpoint=f"s3a://{bucket}/{prefix}", sinks={"alerts": "s3-alerts"},
                                   ttl=60, start=start)

    client = s3_client(stack)
    result = clone_op().execute({})
    assert result["snapshot_id"] == snap.manifest.snapshot_id and result["handle"] is None
    label = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/{CLONE_FILE}")["Body"].read())
    assert (label["clone"], label["source_stream"]) == ("orders-s3", "orders")
    lineage = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/{LINEAGE_FILE}")["Body"].read())
    assert lineage["query_id"] == label["query_id"] and lineage["snapshot_id"] == snap.manifest.snapshot_id
    keys = {o["Key"][len(prefix) + 1:] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
    assert {e.path for e in snap.manifest.files} - {".metadata.crc"} <= keys  # new query id: its crc is stale
    assert [r.checkpoint for r in list_clones(store)] == [f"s3a://{bucket}/{prefix}"]

    again = clone_op().execute({})  # a retry reuses the restored clone
    assert again["snapshot_id"] == result["snapshot_id"]

    done = expire_clones(store, names=["orders-s3"], force=True)
    assert [(e.clone, e.checkpoint_deleted) for e in done.expired] == [("orders-s3", True)]
    assert client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount", 0) == 0
    assert list_clones(store) == []
