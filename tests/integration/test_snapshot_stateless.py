"""A stateless query (a Kafka-to-Kafka filter, no state/ directory) is snapshotted like any
other, and rolling it back to a snapshot replays exactly the input after the snapshot."""

from __future__ import annotations

import json

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce

pytestmark = pytest.mark.integration


def _run_filter(spark, bootstrap: str, topic: str, checkpoint: str) -> list[dict]:
    """Big transactions from `topic` to `<topic>-big`, available-now; each batch's progress."""
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "120").load()
    )
    amount = F.get_json_object(F.col("value").cast("string"), "$.amount_cents").cast("long")
    query = (
        source.where(amount > 50_000).select("key", "value")
        .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", f"{topic}-big")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return [json.loads(p.json) for p in query.recentProgress if p.numInputRows]


def test_a_stateless_stream_snapshots_and_rolls_back_to_its_offsets(stack, spark, topic, tmp_path, make_store) -> None:
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    spec = GeneratorSpec(seed=21, accounts=10, events=300)
    produce(stack.kafka_bootstrap, topic, spec)
    _run_filter(spark, stack.kafka_bootstrap, topic, checkpoint)
    assert not (tmp_path / "ckpt" / "state").exists()

    snap = create_snapshot(checkpoint, store, "filter")
    m = snap.manifest
    assert (m.state_store, m.operators, snap.attempts) == ("none", [], 1)
    assert sum(m.kafka_offsets[topic].values()) == 300

    produce(stack.kafka_bootstrap, topic, spec.next_round(90))
    after = _run_filter(spark, stack.kafka_bootstrap, topic, checkpoint)
    assert sum(p["numInputRows"] for p in after) == 90
    abandoned = create_snapshot(checkpoint, store, "filter").manifest

    # Roll back: the query resumes with batch N+1 from the snapshot's offsets and reads
    # exactly the 90 records after them again — nothing skipped, nothing before re-read.
    restored = restore_snapshot(store, "filter", m.snapshot_id, checkpoint, force=True)
    assert restored.branched and restored.timeline == 2
    replay = _run_filter(spark, stack.kafka_bootstrap, topic, checkpoint)
    assert replay[0]["batchId"] == m.batch_id + 1
    start = replay[0]["sources"][0]["startOffset"]
    start = json.loads(start) if isinstance(start, str) else start
    assert {p: int(o) for p, o in start[topic].items()} == m.kafka_offsets[topic]
    assert sum(p["numInputRows"] for p in replay) == 90
    again = create_snapshot(checkpoint, store, "filter").manifest
    assert (again.timeline, again.parent, again.kafka_offsets) == (2, m.snapshot_id, abandoned.kafka_offsets)
