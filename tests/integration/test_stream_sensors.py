"""The sensors against real streams and a real broker: the progress trigger fires once a
running query commits a batch after the one asked for, and fails at once when the query
stops or dies with an exception (naming it); the lag sensor measures, per partition, the
broker's end offset minus the offsets of the stream's newest committed batch, so it waits
while the stream is behind and fires once it catches up; a vanished topic fails the task,
an unreachable cluster fails the try. Each sensor also runs deferred in a real DAG run."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.jobs.runtime import attach_heartbeat
from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.kafka import KafkaLagTrigger
from airflow_provider_streamstate.triggers.stream import StreamProgressTrigger
from dev.stack import free_port
from tests.streams import run_to_end, use_state_store
from tests.unit.fake_checkpoint import make_checkpoint, write

pytestmark = pytest.mark.integration

KAFKA_CONN = "kafka_sensors"


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def newest(checkpoint: str) -> int:
    return CheckpointReader(checkpoint).committed_batches()[-1]


def events_of(trigger: Any, timeout: float = 120.0, during: Callable[[], None] | None = None) -> list[Any]:
    """Run the trigger to its end; `during()` runs in a thread once it has polled ~2 s
    without firing (it must still be waiting then)."""
    async def main() -> list[Any]:
        task = asyncio.ensure_future(asyncio.wait_for(_collect(trigger), timeout))
        if during is not None:
            await asyncio.sleep(2)
            assert not task.done(), "the trigger fired before the stream moved"
            await asyncio.to_thread(during)
        return await task

    return asyncio.run(main())


async def _collect(trigger: Any) -> list[Any]:
    return [ev async for ev in trigger.run()]


@pytest.fixture
def kafka_conn(stack, monkeypatch) -> str:  # noqa: ANN001
    monkeypatch.setenv(f"AIRFLOW_CONN_{KAFKA_CONN.upper()}", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    return KAFKA_CONN


def spec_of(checkpoint: str, tmp_path: Path, name: str) -> StreamSpec:
    return StreamSpec(name=name, checkpoint=checkpoint, store=f"file://{tmp_path / 'store'}", kafka_conn_id=KAFKA_CONN)


@contextmanager
def running(spark, stack, topic: str, checkpoint: str, name: str) -> Iterator[Any]:  # noqa: ANN001
    """The example query on `topic`, beating every second, until the block ends."""
    listener = attach_heartbeat(spark, checkpoint, interval_s=1.0, query_name=name)
    query = start_query(spark, StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic,
                                          alerts_topic=f"{topic}-alerts", trigger="processing:1 second", query_name=name))
    try:
        _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and b.state == "running" and b.batch_id is not None)
        yield query
    finally:
        query.stop()
        try:  # the listener bus delivers the termination later: removed first, it would be lost
            _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and b.state not in ("starting", "running"))
        finally:
            spark.streams.removeListener(listener)


def quiesce(query: Any, checkpoint: str, quiet_s: float = 3.0) -> int:
    """Wait until the query has processed everything and committed nothing new for
    `quiet_s` (a no-data batch may follow a data batch); the newest committed batch."""
    query.processAllAvailable()
    last, since = newest(checkpoint), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        if (n := newest(checkpoint)) != last:
            last, since = n, time.monotonic()
    return last


def test_the_progress_trigger_fires_after_a_new_batch_and_fails_once_the_query_stops(stack, spark, topic, tmp_path) -> None:
    use_state_store(spark, "hdfs")
    checkpoint = str(tmp_path / "ckpt")
    spec = spec_of(checkpoint, tmp_path, f"progress-{topic}")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=41, accounts=10, events=60))
    with running(spark, stack, topic, checkpoint, spec.name) as query:
        n = quiesce(query, checkpoint)
        trigger = StreamProgressTrigger(stream=spec.to_dict(), after_batch=n, poke_interval=0.5)
        more = GeneratorSpec(seed=41, accounts=10, events=60).next_round(30)
        [event] = events_of(trigger, during=lambda: produce(stack.kafka_bootstrap, topic, more))
        assert event.payload["status"] == "success", event.payload
        assert event.payload["result"]["batch_id"] > n
        assert event.payload["result"]["state"] == "running"
        assert event.payload["result"]["heartbeat_age_s"] < 10
    assert (b := read_heartbeat(checkpoint)) is not None and b.state == "stopped"
    [stopped] = events_of(StreamProgressTrigger(stream=spec.to_dict(), after_batch=newest(checkpoint), poke_interval=60))
    assert stopped.payload["status"] == "failed"
    assert f"stopped at batch {newest(checkpoint)}" in stopped.payload["message"]


def test_a_query_that_dies_with_an_exception_fails_the_progress_trigger_naming_it(spark, tmp_path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    name = f"poisoned-{uuid.uuid4().hex[:6]}"

    def poison(_df: Any, batch_id: int) -> None:
        if batch_id >= 1:
            raise ValueError("poison batch for the sensor test")

    listener = attach_heartbeat(spark, checkpoint, interval_s=1.0, query_name=name)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.foreachBatch(poison)
             .option("checkpointLocation", checkpoint).queryName(name).trigger(processingTime="500 milliseconds").start())
    try:
        _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and b.state == "failed")
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    beat = read_heartbeat(checkpoint)
    assert beat is not None and beat.exception
    [event] = events_of(StreamProgressTrigger(stream=spec_of(checkpoint, tmp_path, name).to_dict(), after_batch=0,
                                              poke_interval=60))
    assert event.payload["status"] == "failed"
    assert f"query {name}" in event.payload["message"]
    assert f"failed at batch {beat.batch_id}: {beat.exception}" in event.payload["message"]
    assert event.payload["result"]["state"] == "failed"


def test_the_lag_sensor_waits_while_the_stream_is_behind_and_fires_once_it_catches_up(stack, spark, topic, tmp_path, kafka_conn) -> None:
    use_state_store(spark, "hdfs")
    checkpoint = str(tmp_path / "ckpt")
    spec = spec_of(checkpoint, tmp_path, f"lag-{topic}")
    first = GeneratorSpec(seed=43, accounts=12, events=90)
    produce(stack.kafka_bootstrap, topic, first)
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    produce(stack.kafka_bootstrap, topic, first.next_round(300))

    sensor = KafkaLagSensor(task_id="lag", stream=spec, max_lag=10, poke_interval=0.5, timeout=120)
    behind = sensor.check()
    assert behind.outcome == "waiting"
    assert sum(p.committed for p in behind.partitions) == 90  # offsets/N of the newest committed batch
    assert sum(p.end for p in behind.partitions) == 390
    assert behind.total_lag == 300
    assert max(p.lag for p in behind.partitions) > 10
    assert not sensor.poke({}).is_done

    query = start_query(spark, StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic,
                                          alerts_topic=f"{topic}-alerts", trigger="processing:1 second"))
    try:
        [event] = events_of(KafkaLagTrigger(stream=spec.to_dict(), max_lag=10, kafka_conn_id=kafka_conn, poke_interval=0.5))
    finally:
        query.stop()
    assert event.payload["status"] == "success", event.payload
    result = event.payload["result"]
    assert result["max_lag"] == 10
    assert {p["partition"] for p in result["partitions"]} == {0, 1, 2}
    assert all(p["topic"] == topic and p["lag"] == p["end"] - p["committed"] <= 10 for p in result["partitions"])
    assert sum(p["end"] for p in result["partitions"]) == 390


def test_a_vanished_topic_fails_the_lag_sensor_and_an_unreachable_cluster_is_retried(stack, tmp_path, kafka_conn, monkeypatch) -> None:
    root = make_checkpoint(tmp_path / "ckpt", batches=1)
    gone = f"gone-{uuid.uuid4().hex[:8]}"
    write(root / "offsets/0", (root / "offsets/0").read_text().replace('"tx"', f'"{gone}"'))
    spec = spec_of(str(root), tmp_path, "vanished")
    with pytest.raises(AirflowFailException, match=f"topic {gone} that the stream on .* reads does not exist"):
        KafkaLagSensor(task_id="lag", stream=spec, max_lag=0).poke({})

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DOWN", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{free_port()}"}}))
    with pytest.raises(AirflowException, match="cannot reach Kafka") as info:
        KafkaLagSensor(task_id="lag", stream=spec, max_lag=0, kafka_conn_id="kafka_down").poke({})
    assert not isinstance(info.value, AirflowFailException)


# --- in real DAG runs (dag.test runs the deferred trigger inline) ---------------------------


@contextmanager
def after_first_trigger_check(monkeypatch, trigger_cls: type, action: Callable[[], None]) -> Iterator[threading.Event]:  # noqa: ANN001
    """Run `action` in a thread once the trigger has made its first check: the sensor has
    deferred, so what follows is the trigger's doing. Yields the event that says it did."""
    checked, finished = threading.Event(), threading.Event()
    original = trigger_cls.check
    errors: list[BaseException] = []

    def probed(self: Any) -> Any:
        result = original(self)
        checked.set()
        return result

    def act() -> None:
        while not checked.wait(0.2):
            if finished.is_set():
                return  # the run ended without deferring: nothing to do
        try:
            action()
        except BaseException as exc:  # surfaced after the run
            errors.append(exc)

    monkeypatch.setattr(trigger_cls, "check", probed)
    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    try:
        yield checked
    finally:
        finished.set()
        thread.join(300)
    assert not errors, errors


def test_the_progress_sensor_defers_and_succeeds_in_a_dag_run(stack, spark, topic, tmp_path, run_dag, monkeypatch) -> None:
    use_state_store(spark, "hdfs")
    checkpoint = str(tmp_path / "ckpt")
    spec = spec_of(checkpoint, tmp_path, f"dag-progress-{topic}")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=47, accounts=10, events=40))
    with running(spark, stack, topic, checkpoint, spec.name) as query:
        n = quiesce(query, checkpoint)
        more = GeneratorSpec(seed=47, accounts=10, events=40).next_round(20)
        with after_first_trigger_check(monkeypatch, StreamProgressTrigger,
                                       lambda: produce(stack.kafka_bootstrap, topic, more)) as deferred:
            result = run_dag("streamstate_test_progress_sensor", conf={"stream": spec.to_dict(), "after_batch": n})
            assert deferred.is_set(), "the sensor never deferred"
    assert result.state == "success", result.log
    xcom = result.tasks["progress"].xcom
    assert xcom["batch_id"] > n and xcom["state"] == "running"


def test_the_lag_sensor_defers_and_succeeds_in_a_dag_run(stack, spark, topic, tmp_path, run_dag, kafka_conn, monkeypatch) -> None:
    use_state_store(spark, "hdfs")
    checkpoint = str(tmp_path / "ckpt")
    spec = spec_of(checkpoint, tmp_path, f"dag-lag-{topic}")
    first = GeneratorSpec(seed=53, accounts=12, events=60)
    produce(stack.kafka_bootstrap, topic, first)
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    produce(stack.kafka_bootstrap, topic, first.next_round(200))
    with after_first_trigger_check(monkeypatch, KafkaLagTrigger,
                                   lambda: run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)) as deferred:
        result = run_dag("streamstate_test_lag_sensor", conf={"stream": spec.to_dict()})
        assert deferred.is_set(), "the sensor never deferred"
    assert result.state == "success", result.log
    xcom = result.tasks["lag"].xcom
    assert all(p["lag"] <= 10 for p in xcom["partitions"])
    assert sum(p["end"] for p in xcom["partitions"]) == 260
