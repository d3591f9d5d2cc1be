"""The snapshot operators inside real DAG runs: snapshot, verify and restore a real stream's
checkpoint through an S3 store reached by an Airflow `aws` connection, with small JSON in
XCom; bad input fails the task once, in one line, writing nothing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
from airflow_provider_streamstate.spec import StreamSpec
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def checkpoint(stack, spark, tmp_path_factory) -> str:
    """A finished `accounts` checkpoint (shared: the operators only read it or copy it)."""
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    use_state_store(spark, "rocksdb-changelog")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=41, accounts=20, events=300))
    path = str(tmp_path_factory.mktemp("ops") / "ckpt")
    run_to_end(spark, stack.kafka_bootstrap, topic, path)
    return path


@pytest.fixture
def stream(stack, checkpoint, monkeypatch) -> StreamSpec:
    for key, value in stack.airflow_conn_env("primary", "s3_primary").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_OPS", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    return StreamSpec(name="ops", checkpoint=checkpoint, store=f"s3://streamstate/ops-{uuid.uuid4().hex[:8]}",
                      storage_conn_id="s3_primary", kafka_conn_id="kafka_ops")


def test_snapshot_verify_and_restore_run_as_tasks(run_dag, stream, spark, tmp_path) -> None:
    target = tmp_path / "clone"
    result = run_dag("streamstate_test_snapshot_ops", {"stream": stream.to_dict(), "target": str(target)})
    assert result.state == "success", result.log[-3000:]
    snap, verify, restore = (result.tasks[t].xcom for t in ("snapshot", "verify", "restore"))
    assert len(json.dumps(snap)) < 2000 and snap["bytes_uploaded"] > 0 and not snap["reused"]
    # The spec names the stream's Kafka connection: the failover anchors are recorded.
    assert snap["anchored_partitions"] == 3 and snap["anchor_problems"] == []
    assert verify["ok"] and verify["snapshots"] == 1
    assert restore["snapshot_id"] == snap["snapshot_id"] and restore["clone"]
    batch = snap["batch_id"]
    assert account_state(spark, str(target), batch) == account_state(spark, stream.checkpoint, batch)


def test_bad_input_fails_the_task_once_in_one_line_and_writes_nothing(run_dag, stream, tmp_path) -> None:
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    running = stream.derive(checkpoint=str(tmp_path / "running"))
    shutil.copytree(stream.checkpoint, running.checkpoint)
    create_snapshot(running.checkpoint, StreamstateStoreHook(running.store, storage_conn_id="s3_primary").store, "ops")
    write_heartbeat(running.checkpoint, Heartbeat(
        query_id="q", run_id="r", query_name="ops-live", host=socket.gethostname(), pid=os.getpid(),
        state="running", batch_id=3, input_rows=1, updated_at=now_iso(), interval_s=30.0))
    cases = {
        "unknown_connection": (stream.derive(storage_conn_id="no_such_connection"),
                               "Airflow connection 'no_such_connection' does not exist"),
        "unreachable_store": (stream.derive(store="s3://no-such-bucket-anywhere/x"),
                              "bucket no-such-bucket-anywhere does not exist"),
        "running_stream": (running, "query ops-live is running"),
    }
    result = run_dag("streamstate_test_bad_input", {name: spec.to_dict() for name, (spec, _) in cases.items()})
    assert result.state == "failed"
    for name, (spec, words) in cases.items():
        task = result.tasks[name]
        assert (task.state, task.try_number) == ("failed", 1), (name, result.log[-3000:])  # no retry
        assert words in result.log, name
        # Nothing written: no staging directory beside the checkpoint, no lineage inside it.
        ckpt = Path(spec.checkpoint)
        assert [p.name for p in ckpt.parent.iterdir() if ".streamstate-" in p.name] == []
        assert not (ckpt / "_streamstate" / "lineage.json").exists()
