"""The `streamstate_supervisor` DAG, run by Airflow, keeps a real stream (spark-submit,
real broker) exact through failures: a driver killed with SIGKILL is restarted from its
checkpoint, and a checkpoint whose state Spark can no longer load is replaced by the
newest verified snapshot; either way the stream ends with the generator's exact expected
state (no event lost or counted twice). A stream stopped on request is left alone, and
a stream that was never started is an alert, not a launch."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.engine.streams.supervisor import checkpoint_unusable
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import account_state, consumed_records, example_stream_spec, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)


@pytest.fixture
def stream(stack, topic, tmp_path, monkeypatch):  # noqa: ANN201
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_LOCAL", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    spec = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "2"],
                               spark_default_manager=True).derive(
        kafka_conn_id="kafka_local")
    yield spec
    launcher.stop(spec.checkpoint, timeout_s=30)  # never leave a driver behind


def start(spec) -> None:  # noqa: ANN001
    from airflow_provider_streamstate.streams.start import start_stream

    start_stream(spec, startup_timeout_s=300, log=log)


def kill_driver(spec) -> None:  # noqa: ANN001
    """SIGKILL the driver's whole process group (spark-submit's JVM and the Python driver),
    as a lost host or the OOM killer would: no last heartbeat, no clean stop."""
    handle = records.read_launch(spec.checkpoint).handle
    os.killpg(handle.pid, signal.SIGKILL)
    wait_for(lambda: launcher.status(spec.checkpoint).state == "dead", timeout=30, what="the stream to be dead")


def supervise(run_dag, spec, **params):  # noqa: ANN001, ANN201
    result = run_dag("streamstate_supervisor", {"streams": [spec.to_dict()], "settle_seconds": 240, **params})
    assert result.state == "success", result.log[-5000:]
    return result.tasks["supervise"].xcom


def final_state(spark, spec, total: int, requested_by: str | None = None) -> dict:  # noqa: ANN001
    wait_for(lambda: consumed_records(spec.checkpoint) == total, timeout=180, what=f"the stream to read {total} records")
    stopped = launcher.stop(spec.checkpoint, timeout_s=60, requested_by=requested_by)
    assert stopped.outcome == "stopped", stopped
    return account_state(spark, spec.checkpoint)


def test_a_killed_driver_is_restarted_and_an_unusable_checkpoint_is_replaced_by_the_newest_verified_snapshot(
    run_dag, stack, spark, topic, stream
) -> None:
    """One stream through both recoveries and what a round does between them:

    - a driver killed with SIGKILL is restarted from its checkpoint (one timing, no restore);
    - the next round finds it running, caught up, and leaves it be; a round that finds it
      lagging fails naming it;
    - its newest state files deleted and its driver killed, the round sees the restart fail on
      the unusable checkpoint and restores the newest verified snapshot (two timings, the
      second with its first batch);
    - stopped on request, it is left alone;

    and the state ends exactly the generator's, no event lost or counted twice."""
    first = GeneratorSpec(seed=61, accounts=12, events=300)
    produce(stack.kafka_bootstrap, topic, first)
    start(stream)
    wait_for(lambda: consumed_records(stream.checkpoint) == 300, timeout=180, what="the first 300 records")
    kill_driver(stream)
    second = first.next_round(200)
    produce(stack.kafka_bootstrap, topic, second)

    report = supervise(run_dag, stream)
    assert (report["state_before"], report["action"]) == ("dead", "restarted"), report
    assert report["restored_snapshot"] is None and len(report["timings"]) == 1
    timing = report["timings"][0]
    assert timing["spark_start_s"] > 0 and timing["first_batch_s"] >= timing["spark_start_s"]

    # The next round finds it running and leaves it be.
    wait_for(lambda: consumed_records(stream.checkpoint) == 500, timeout=180, what="all 500 records")
    again = supervise(run_dag, stream, max_lag=0)
    assert again["action"] == "none" and again["state_before"] == "running", again
    assert again["total_lag"] == 0
    # Twelve batches' worth (it reads 100 records a batch, one batch a second): still waiting
    # when the round, a second or two later, checks the lag.
    third = second.next_round(1200)
    produce(stack.kafka_bootstrap, topic, third)
    lagging = run_dag("streamstate_supervisor", {"streams": [stream.to_dict()], "max_lag": 0})
    assert lagging.state == "failed" and "stream orders lags:" in lagging.log, lagging.log[-3000:]
    wait_for(lambda: consumed_records(stream.checkpoint) == 1700, timeout=180, what="all 1700 records")

    # A verified snapshot, more input after it (replayed from its offsets after the restore),
    # then the driver dies and the newest version's state files go, as a bad disk or a wrong
    # cleanup would delete them.
    store = open_store(stream.store)
    snap = create_snapshot(stream.checkpoint, store, stream.name).manifest
    fourth = third.next_round(200)
    produce(stack.kafka_bootstrap, topic, fourth)
    wait_for(lambda: consumed_records(stream.checkpoint) == 1900, timeout=180, what="all 1900 records")
    kill_driver(stream)
    newest = launcher.status(stream.checkpoint)
    committed = max(int(p.name) for p in Path(stream.checkpoint, "commits").iterdir() if p.name.isdigit())
    version = committed + 1
    doomed = [p for p in Path(stream.checkpoint, "state", "0").rglob("*")
              if p.name in (f"{version}.delta", f"{version}.snapshot")]
    assert doomed, f"no state files of version {version}: {newest}"
    for p in doomed:
        p.unlink()
    fifth = fourth.next_round(150)
    produce(stack.kafka_bootstrap, topic, fifth)

    report = supervise(run_dag, stream)
    assert (report["state_before"], report["action"]) == ("dead", "restored"), report
    assert report["restored_snapshot"] == snap.snapshot_id and report["restored_batch"] == snap.batch_id
    assert checkpoint_unusable(report["failure"]), report["failure"]
    assert len(report["timings"]) == 2 and report["timings"][1]["first_batch_s"] is not None
    state = final_state(spark, stream, 2050, requested_by="an operator")

    # Stopped on request, it is left alone (this stream's last start was the round's restore).
    report = supervise(run_dag, stream)
    assert report["action"] == "left-stopped" and "stop requested by an operator" in report["message"], report
    assert launcher.status(stream.checkpoint).state == "stopped"
    assert state == expected_aggregates([first, second, third, fourth, fifth])


def test_a_stream_never_started_is_an_alert_not_a_launch(run_dag, stream, tmp_path) -> None:
    # (A stream stopped on request is left alone: the end of the recoveries' test above, on
    # the stream it already runs.)
    never = stream.derive(name="orders-new", checkpoint=str(tmp_path / "never"))
    result = run_dag("streamstate_supervisor", {"streams": [never.to_dict()]})
    assert result.state == "failed"
    task = result.tasks["supervise"]
    assert (task.state, task.try_number) == ("failed", 1)
    assert f"stream orders-new was never started on {tmp_path / 'never'}" in result.log
    assert not (tmp_path / "never" / records.LAUNCH_FILE).exists()


def test_a_stream_on_an_s3_checkpoint_is_supervised_from_its_storage_and_restored_there_with_no_secret_shown(
    run_dag, stack, spark, topic, tmp_path, monkeypatch
) -> None:
    """The same recovery on an `s3a://` checkpoint (the production case): the round reads the
    stream's records and commits from S3, restarts it, and when its state cannot be loaded
    restores the newest verified snapshot onto the S3 checkpoint (staged, then published)
    and restarts it; the state ends exact. The stream's secrets (an S3A secret key conf, an
    AWS secret in its environment) appear in no task log and no XCom of the run."""
    import uuid

    from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, open_sidecar
    from dev.stack import S3_SECRET_KEY
    from tests.s3 import delete_newest_state

    for key, value in stack.s3_env("primary").items():  # the tasks read the records with boto3
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_LOCAL", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - the test reads the S3 state too
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    bucket = stack.s3["primary"]["bucket"]
    prefix = f"tests/{uuid.uuid4().hex[:10]}/orders"
    base = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "2"],
                               spark_default_manager=True)
    spec = base.derive(checkpoint=f"s3a://{bucket}/{prefix}", kafka_conn_id="kafka_local",
                       env={"PYSPARK_PYTHON": sys.executable, **stack.s3_env("primary")},
                       conf={**base.conf, **stack.s3a_conf("primary")})
    first = GeneratorSpec(seed=64, accounts=12, events=300)
    produce(stack.kafka_bootstrap, topic, first)
    try:
        start(spec)
        wait_for(lambda: consumed_records(spec.checkpoint) == 300, timeout=240, what="the first 300 records")
        store = open_store(spec.store)
        snap = create_snapshot(spec.checkpoint, store, spec.name).manifest
        second = first.next_round(200)
        produce(stack.kafka_bootstrap, topic, second)
        wait_for(lambda: consumed_records(spec.checkpoint) == 500, timeout=240, what="all 500 records")
        kill_driver(spec)

        # The newest version's state objects vanish, as a wrong lifecycle rule would delete them.
        delete_newest_state(stack, spec.checkpoint)
        third = second.next_round(150)
        produce(stack.kafka_bootstrap, topic, third)

        result = run_dag("streamstate_supervisor", {"streams": [spec.to_dict()], "settle_seconds": 240})
        assert result.state == "success", result.log[-5000:]
        report = result.tasks["supervise"].xcom
        assert (report["state_before"], report["action"]) == ("dead", "restored"), report
        assert report["restored_snapshot"] == snap.snapshot_id and checkpoint_unusable(report["failure"])
        assert S3_SECRET_KEY not in result.log
        assert S3_SECRET_KEY not in json.dumps({k: t.xcom for k, t in result.tasks.items()}, default=str)
        assert records.read_launch(spec.checkpoint).handle.generation == 3  # the restore kept the count
        assert len(open_sidecar(spec.checkpoint).names(LAUNCHES_DIR)) == 3
        wait_for(lambda: consumed_records(spec.checkpoint) == 650, timeout=240, what="all 650 records")
    finally:
        stopped = launcher.stop(spec.checkpoint, timeout_s=60)
    assert stopped.outcome == "stopped", stopped
    assert account_state(spark, spec.checkpoint) == expected_aggregates([first, second, third])
