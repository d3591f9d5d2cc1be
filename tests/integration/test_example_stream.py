"""The example stream consumes generated events and its state is exactly what was sent."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from airflow_provider_streamstate.jobs.runtime import read_state

pytestmark = pytest.mark.integration


def _state_by_account(spark, checkpoint: str, operator_id: int = 0) -> dict[str, dict[str, int]]:
    rows = read_state(spark, checkpoint, operatorId=operator_id).collect()
    return {r.key.account: r.value.asDict() for r in rows}


def test_stream_state_equals_the_generators_aggregates(stack, spark, topic, tmp_path) -> None:
    spec = GeneratorSpec(seed=5, accounts=40, events=900, duplicate_rate=0.1)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = str(tmp_path / "ckpt")
    args = StreamArgs(
        stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
        trigger="available-now", max_offsets_per_trigger=300, threshold_cents=1_200_000,
    )
    query = start_query(spark, args)
    query.awaitTermination(240)
    assert query.exception() is None
    batches = sorted(int(p.name) for p in (tmp_path / "ckpt" / "commits").iterdir() if p.name.isdigit())
    assert len(batches) >= 3

    expected = expected_aggregates([spec])
    assert _state_by_account(spark, checkpoint) == expected

    # Alerts reach the output topic: exactly the accounts whose total passed the threshold.
    over = {a for a, v in expected.items() if v["sum"] >= 1_200_000}
    assert over and over != set(expected), "the spec should put some, not all, accounts over the threshold"
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": "alerts", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(f"{topic}-alerts", 0, 0)])
    alerted: set[str] = set()
    for _ in range(30):
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error() is None:
                alerted.add(json.loads(msg.value())["account"])
        if alerted >= over:
            break
    consumer.close()
    assert alerted == over


def test_windowed_query_keeps_event_time_windows_and_a_watermark(stack, spark, topic, tmp_path) -> None:
    spec = GeneratorSpec(seed=9, accounts=5, events=400)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = str(tmp_path / "ckpt")
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      query="windows", trigger="available-now", max_offsets_per_trigger=150, watermark="1 minute")
    query = start_query(spark, args)
    query.awaitTermination(240)
    assert query.exception() is None
    assert query.lastProgress["eventTime"]["watermark"] > "2023-11-14T22"
    rows = read_state(spark, checkpoint).collect()
    # Windows older than the watermark were evicted: the state holds only recent ones.
    assert 0 < len(rows) < 5 * (400 // 60 + 1)


def test_example_stream_runs_under_spark_submit(stack, spark, topic, tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pyspark

    import airflow_provider_streamstate.jobs.example_stream as job

    spec = GeneratorSpec(seed=12, accounts=15, events=300)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = tmp_path / "ckpt"
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run(
        [str(submit), "--master", "local[1]", "--jars", ",".join(stack.spark_jars),
         "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
         job.__file__, "--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", str(checkpoint),
         "--source-topic", topic, "--alerts-topic", f"{topic}-alerts", "--trigger", "available-now",
         "--max-offsets-per-trigger", "100", "--state-store", "hdfs"],
        capture_output=True, text=True, timeout=600,
        # What an activated virtualenv gives spark-submit: Spark's home and this Python.
        env={**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__),
             "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]) >= 3
    assert '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"' in (checkpoint / "offsets" / "0").read_text()
    assert _state_by_account(spark, str(checkpoint)) == expected_aggregates([spec])
