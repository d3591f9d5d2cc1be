"""The stream operators inside real DAG runs: a start returns once the query runs (its retry
reconnects to the driver the first try launched, never a second copy), the stream makes
progress, a snapshot of it is cloned with a new query id and an expiry label, and the stop
is graceful; a clone that would write into production's sinks fails the task once, in one
line, and writes nothing. Real spark-submit (through the `spark` connection), real broker."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.streams import clones, launcher, records
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.spec import StreamSpec

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(stack, topic, tmp_path, monkeypatch) -> StreamSpec:
    """The example stream as a spec; spark-submit's master comes from a `spark` connection."""
    import airflow_provider_streamstate.jobs.example_stream as job

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return StreamSpec(
        name="orders",
        application=job.__file__,
        application_args=[
            "--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}", "--source-topic", topic,
            "--alerts-topic", "{sinks[alerts]}", "--trigger", "processing:1 second",
            "--max-offsets-per-trigger", "100", "--state-store", "hdfs",
        ],
        checkpoint=str(tmp_path / "orders"),
        store=f"file://{tmp_path / 'store'}",
        spark_conn_id="spark_local",
        jars=list(stack.spark_jars),
        conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
        sinks={"alerts": f"{topic}-alerts"},
        heartbeat_interval_s=1.0,
    )


def test_a_dag_run_starts_a_stream_reconnects_on_retry_sees_progress_clones_it_and_stops_it(
    run_dag, stack, topic, stream, tmp_path
) -> None:
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=51, accounts=10, events=400))
    clone_checkpoint = tmp_path / "sandbox"
    conf = {"stream": stream.to_dict(), "clone_checkpoint": str(clone_checkpoint),
            "clone_sinks": {"alerts": f"{topic}-sandbox-alerts"}}
    try:
        result = run_dag("streamstate_test_stream_lifecycle", conf)
    finally:
        launcher.stop(stream.checkpoint, timeout_s=30)  # never leave a driver behind
    assert result.state == "success", result.log[-5000:]

    # The retry reconnected to the driver the first try launched: one launch, one log.
    start = result.tasks["start"]
    assert start.try_number == 2 and start.xcom["reconnected"] is True
    assert start.xcom["launch_id"] == records.read_launch(stream.checkpoint).handle.launch_id
    assert len(list(Path(stream.checkpoint, records.LOG_DIR).glob("*.log"))) == 1
    assert set(start.xcom) >= {"stream", "checkpoint", "pid", "host", "log", "started_at"}
    assert len(json.dumps(start.xcom)) < 1000

    assert result.tasks["progress"].xcom["batch_id"] >= 1

    clone = result.tasks["clone"].xcom
    snapshot_id = result.tasks["snapshot"].xcom["snapshot_id"]
    assert clone["snapshot_id"] == snapshot_id and clone["handle"] is None
    assert clone["clone"] == "orders-sandbox" and clone["sinks"] == {"alerts": f"{topic}-sandbox-alerts"}
    label = clones.read_clone_label(clone_checkpoint)
    assert label is not None and label.source_stream == "orders" and label.snapshot_id == snapshot_id
    assert label.expires_at == clone["expires_at"]
    hours = (datetime.fromisoformat(label.expires_at.replace("Z", "+00:00")) - datetime.now(UTC)).total_seconds() / 3600
    assert 5.5 < hours <= 6
    production_query = json.loads(Path(stream.checkpoint, "metadata").read_text())["id"]
    clone_query = json.loads((clone_checkpoint / "metadata").read_text())["id"]
    assert clone_query == label.query_id != production_query

    stop = result.tasks["stop"].xcom
    assert stop["outcome"] == "stopped" and stop["state"] == "stopped" and stop["exit_code"] == 0
    # The driver's last beat: this launch's, and stopped.
    beat = read_heartbeat(stream.checkpoint)
    assert beat is not None and beat.launch_id == start.xcom["launch_id"] and beat.state == "stopped"


def test_a_clone_into_productions_sinks_fails_once_in_one_line_and_writes_nothing(run_dag, stream, tmp_path) -> None:
    clone_checkpoint = tmp_path / f"sandbox-{uuid.uuid4().hex[:6]}"
    conf = {"stream": stream.to_dict(), "clone_checkpoint": str(clone_checkpoint), "clone_sinks": dict(stream.sinks)}
    result = run_dag("streamstate_test_clone_into_production", conf)
    assert result.state == "failed"
    task = result.tasks["clone"]
    assert (task.state, task.try_number) == ("failed", 1), result.log[-3000:]  # no retry
    words = (f"clone orders-sandbox of orders could write into production: sink alerts={stream.sinks['alerts']} "
             "is production's alerts; give the clone its own sinks")
    assert words in result.log
    assert not clone_checkpoint.exists()
    assert not Path(stream.store.removeprefix("file://")).exists()
