"""A stream-stream join keeps four named state stores per partition; snapshots carry all four."""

from __future__ import annotations

import time

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.spark import read_state
from tests.streams import use_state_store

pytestmark = pytest.mark.integration
STORES = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]


def join_state(spark, checkpoint: str, batch_id: int, side: str) -> list[tuple]:
    rows = read_state(spark, checkpoint, batchId=batch_id, joinSide=side).collect()
    return sorted((r.key.asDict().__repr__(), r.value.asDict().__repr__(), r.partition_id) for r in rows)


@pytest.mark.parametrize("state_store", ["hdfs", "rocksdb-changelog"])
def test_join_state_restores_store_by_store(spark, tmp_path, make_store, state_store) -> None:
    from pyspark.sql import functions as F

    use_state_store(spark, state_store)
    checkpoint = str(tmp_path / "ckpt")

    def side(name: str, modulo: int):  # noqa: ANN202
        rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 40).load()
        return rows.select((F.col("value") % modulo).alias(f"{name}_k"), F.col("timestamp").alias(f"{name}_t")) \
            .withWatermark(f"{name}_t", "30 seconds")

    left, right = side("l", 17), side("r", 13)
    joined = left.join(right, F.expr("l_k = r_k AND r_t BETWEEN l_t - INTERVAL 20 SECONDS AND l_t + INTERVAL 20 SECONDS"))
    query = joined.writeStream.format("noop").option("checkpointLocation", checkpoint) \
        .trigger(processingTime="200 milliseconds").start()
    try:
        while not query.lastProgress or query.lastProgress["batchId"] < 4:
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()

    store, _, _ = make_store("local")
    m = create_snapshot(checkpoint, store, "join").manifest
    assert [op.name for op in m.operators] == ["symmetricHashJoin"]
    assert sorted(m.operators[0].stores) == STORES
    target = tmp_path / "restored"
    restore_snapshot(store, "join", m.snapshot_id, target)
    for s in STORES:
        assert (target / "state/0/0" / s).is_dir()
    for join_side in ("left", "right"):
        original = join_state(spark, checkpoint, m.batch_id, join_side)
        assert original, f"{join_side} side should hold state"
        assert join_state(spark, str(target), m.batch_id, join_side) == original
