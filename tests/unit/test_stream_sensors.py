"""The sensors and their triggers decide as the engine's health checks do, in every mode:
a trigger serialises to plain kwargs that rebuild it exactly, polls every `poke_interval`
and ends with exactly one event; a sensor succeeds with a small JSON XCom, fails without
retry when the stream cannot progress or the input is wrong, fails with retry when a
retry can help, and in deferrable mode pokes once before it defers. Synthetic checkpoints
and heartbeats; no broker (the lag sensor against a real one is an integration test)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.kafka import KafkaLagTrigger
from airflow_provider_streamstate.triggers.stream import StreamProgressTrigger
from tests.unit.fake_checkpoint import make_checkpoint, write


def spec_for(root: Path, **changes: Any) -> StreamSpec:
    return StreamSpec(name="orders", checkpoint=str(root), store="file:///tmp/unused", **changes)


def beat(**changes: Any) -> Heartbeat:
    base = Heartbeat(query_id="q-1", run_id="r-1", query_name="orders", host="elsewhere", pid=4242,
                     state="running", batch_id=2, input_rows=10, updated_at=now_iso(), interval_s=1.0)
    return replace(base, **changes)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    root = make_checkpoint(tmp_path / "ckpt", batches=3)
    write_heartbeat(root, beat())
    return root


def run_trigger(trigger: Any, timeout: float = 10.0) -> list[Any]:
    """Every event the trigger yields before its run() returns."""
    async def collect() -> list[Any]:
        return [ev async for ev in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout))


@pytest.mark.parametrize("trigger", [
    StreamProgressTrigger(stream={"name": "orders", "checkpoint": "/c", "store": "file:///s"}),
    StreamProgressTrigger(stream=spec_for(Path("/c"), kafka_conn_id="k").to_dict(), after_batch=7,
                          freshness_s=90.0, poke_interval=2.5),
    KafkaLagTrigger(stream=spec_for(Path("/c")).to_dict(), max_lag=0, kafka_conn_id="kafka_prod"),
    KafkaLagTrigger(stream=spec_for(Path("/c")).to_dict(), max_lag=500, kafka_conn_id="k", poke_interval=1.0),
], ids=["progress-defaults", "progress-all", "lag-defaults", "lag-all"])
def test_every_trigger_round_trips_through_its_serialised_kwargs(trigger: Any) -> None:
    path, kwargs = trigger.serialize()
    assert type(trigger)(**kwargs).serialize() == trigger.serialize()
    module, _, name = path.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is type(trigger)
    assert json.loads(json.dumps(kwargs)) == kwargs  # plain JSON, nothing pickled


def test_the_progress_trigger_polls_until_a_new_batch_commits_then_fires_once(ckpt: Path) -> None:
    trigger = StreamProgressTrigger(stream=spec_for(ckpt).to_dict(), after_batch=2, poke_interval=0.05)

    async def commit_later() -> list[Any]:
        events = asyncio.ensure_future(asyncio.wait_for(_collect(trigger), 10))
        await asyncio.sleep(0.3)
        assert not events.done()  # still polling: batch 2 is not after 2
        write(ckpt / "offsets/3", (ckpt / "offsets/2").read_text())
        write(ckpt / "commits/3", (ckpt / "commits/2").read_text())
        return await events

    events = asyncio.run(commit_later())
    assert len(events) == 1
    assert events[0].payload["status"] == "success"
    assert events[0].payload["result"]["batch_id"] == 3
    assert events[0].payload["result"]["state"] == "running"


async def _collect(trigger: Any) -> list[Any]:
    return [ev async for ev in trigger.run()]


def test_the_progress_trigger_fires_failed_at_once_for_a_failed_query(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="failed", exception="SparkException: Job aborted"))
    events = run_trigger(StreamProgressTrigger(stream=spec_for(ckpt).to_dict(), after_batch=2, poke_interval=60))
    assert [e.payload["status"] for e in events] == ["failed"]
    assert "SparkException: Job aborted" in events[0].payload["message"]


def test_a_trigger_reports_engine_errors_as_failed_or_error_by_whether_a_retry_can_help(ckpt: Path) -> None:
    bad = StreamProgressTrigger(stream=spec_for(Path("s3a://bucket/ckpt")).to_dict(), poke_interval=60)
    [event] = run_trigger(bad)
    assert event.payload["status"] == "failed"
    assert "invalid checkpoint location 's3a:/bucket/ckpt'" in event.payload["message"]
    no_conn = KafkaLagTrigger(stream=spec_for(ckpt).to_dict(), max_lag=0, kafka_conn_id="no_such_kafka", poke_interval=60)
    [event] = run_trigger(no_conn)
    assert event.payload["status"] == "error"  # a connection can be added before the retry
    assert "no_such_kafka" in event.payload["message"]


def test_the_progress_sensor_returns_a_small_json_when_the_stream_has_progressed(ckpt: Path) -> None:
    sensor = StreamProgressSensor(task_id="wait", stream=spec_for(ckpt), after_batch=1, poke_interval=0.1, timeout=5)
    done = sensor.poke({})
    assert done.is_done
    assert done.xcom_value["batch_id"] == 2 and done.xcom_value["state"] == "running"
    xcom = sensor.execute({})  # poke mode: BaseSensorOperator's loop returns the poke's XCom
    assert set(xcom) == {"batch_id", "state", "heartbeat_age_s", "progress_age_s"}
    assert (xcom["batch_id"], xcom["state"]) == (2, "running")
    assert not StreamProgressSensor(task_id="w2", stream=spec_for(ckpt), after_batch=2).poke({}).is_done


def test_the_progress_sensor_fails_without_retry_naming_the_exception_of_a_failed_query(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="failed", exception="StreamingQueryException: [STREAM_FAILED] boom"))
    sensor = StreamProgressSensor(task_id="wait", stream=spec_for(ckpt).to_dict(), after_batch=2)
    with pytest.raises(AirflowFailException, match=r"stream orders: .*failed at batch 2: StreamingQueryException"):
        sensor.poke({})


def test_the_progress_sensor_in_poke_mode_fails_fast_on_a_stale_heartbeat_not_at_its_timeout(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(updated_at="2020-01-01T00:00:00Z"))
    sensor = StreamProgressSensor(task_id="wait", stream=spec_for(ckpt), after_batch=2, poke_interval=30, timeout=600)
    with pytest.raises(AirflowFailException, match="dead or hung"):
        sensor.execute({})


@pytest.mark.parametrize(("rendered", "expected"), [(3, 3), ("3", 3), (" 3 ", 3), ("None", None), ("", None), (None, None)])
def test_after_batch_accepts_what_a_template_renders(ckpt: Path, rendered: Any, expected: int | None) -> None:
    assert StreamProgressSensor(task_id="w", stream=spec_for(ckpt), after_batch=rendered).batch() == expected


@pytest.mark.parametrize("rendered", ["three", -1, "2.5", True])
def test_an_after_batch_that_is_not_a_batch_id_fails_without_retry(ckpt: Path, rendered: Any) -> None:
    sensor = StreamProgressSensor(task_id="w", stream=spec_for(ckpt), after_batch=rendered)
    with pytest.raises(AirflowFailException, match="after_batch must be a batch id"):
        sensor.poke({})


def test_the_deferrable_sensor_pokes_once_then_defers_to_its_trigger(ckpt: Path) -> None:
    sensor = StreamProgressSensor(task_id="wait", stream=spec_for(ckpt), after_batch="2", freshness=timedelta(minutes=5),
                                  deferrable=True, poke_interval=7, timeout=120)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=120)
    path, kwargs = deferred.value.trigger.serialize()
    assert path == "airflow_provider_streamstate.triggers.stream.StreamProgressTrigger"
    assert kwargs == {"stream": spec_for(ckpt).to_dict(), "after_batch": 2, "freshness_s": 300.0, "poke_interval": 7.0}

    ready = StreamProgressSensor(task_id="now", stream=spec_for(ckpt), after_batch=1, deferrable=True)
    assert ready.execute({})["batch_id"] == 2  # no deferral when the first poke succeeds


def test_the_deferrable_lag_sensor_hands_its_trigger_the_specs_kafka_connection(tmp_path: Path) -> None:
    empty = make_checkpoint(tmp_path / "empty", batches=0)
    sensor = KafkaLagSensor(task_id="lag", stream=spec_for(empty, kafka_conn_id="kafka_prod"), max_lag=10,
                            deferrable=True, poke_interval=3)
    with pytest.raises(TaskDeferred) as deferred:  # nothing committed yet: not ready, no broker asked
        sensor.execute({})
    assert deferred.value.trigger.serialize()[1] == {
        "stream": spec_for(empty, kafka_conn_id="kafka_prod").to_dict(), "max_lag": 10,
        "kafka_conn_id": "kafka_prod", "poke_interval": 3.0,
    }


def test_execute_complete_returns_the_result_or_raises_by_status(ckpt: Path) -> None:
    sensor = StreamProgressSensor(task_id="wait", stream=spec_for(ckpt), deferrable=True)
    result = {"batch_id": 4, "state": "running", "heartbeat_age_s": 1.0, "progress_age_s": 0.5}
    assert sensor.execute_complete({}, {"status": "success", "message": "ok", "result": result}) == result
    with pytest.raises(AirflowFailException, match="stream orders: stopped"):
        sensor.execute_complete({}, {"status": "failed", "message": "stopped", "result": None})
    with pytest.raises(AirflowException, match="cannot reach Kafka") as info:
        sensor.execute_complete({}, {"status": "error", "message": "cannot reach Kafka", "result": None})
    assert not isinstance(info.value, AirflowFailException)  # retried
    for odd in (None, True, {"status": "running"}):
        with pytest.raises(AirflowException, match="unexpected event"):
            sensor.execute_complete({}, odd)


def test_the_lag_sensor_needs_a_kafka_connection_from_itself_or_the_spec(ckpt: Path) -> None:
    with pytest.raises(AirflowFailException, match="names no Kafka connection"):
        KafkaLagSensor(task_id="lag", stream=spec_for(ckpt), max_lag=0).poke({})


@pytest.mark.parametrize("kwargs", [{"max_lag": -1}, {"max_lag": "10"}])
def test_the_lag_sensor_refuses_a_threshold_that_is_not_a_count_at_dag_parse(ckpt: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError, match="max_lag"):
        KafkaLagSensor(task_id="lag", stream=spec_for(ckpt), **kwargs)


def test_a_bad_literal_spec_is_a_dag_import_error_and_a_template_waits_for_rendering(ckpt: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint is required"):
        StreamProgressSensor(task_id="w", stream={"name": "orders", "checkpoint": "", "store": "file:///s"})
    with pytest.raises(ValueError, match="freshness"):
        StreamProgressSensor(task_id="w", stream=spec_for(ckpt), freshness=timedelta(0))
    templated = StreamProgressSensor(task_id="w", stream="{{ params.stream }}")
    templated.stream = json.dumps(spec_for(ckpt).to_dict())  # as rendered from XCom or params
    assert templated.poke({}).is_done
