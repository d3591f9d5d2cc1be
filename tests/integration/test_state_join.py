"""One side of a stream-stream join as a table: a snapshot's left and right state equal
Spark's state data source on the original checkpoint (both stores of the side joined),
with the row's fields as `value_<field>` columns, and one named store reads alone."""

from __future__ import annotations

import time

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector, flatten_state
from airflow_provider_streamstate.engine.state.spark import read_state
from tests.streams import use_state_store

pytestmark = pytest.mark.integration


def rows(df) -> list[tuple]:  # noqa: ANN001
    return sorted(tuple(r) for r in df.collect())


def test_each_side_of_a_join_equals_sparks_state_source_on_the_original_checkpoint(spark, tmp_path) -> None:
    from pyspark.sql import functions as F

    use_state_store(spark, "hdfs", **{"spark.sql.shuffle.partitions": "2"})
    checkpoint = str(tmp_path / "ckpt")

    def side(name: str, modulo: int):  # noqa: ANN202
        rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20).load()
        return rows.select((F.col("value") % modulo).alias(f"{name}_k"), F.col("timestamp").alias(f"{name}_t")) \
            .withWatermark(f"{name}_t", "30 seconds")

    left, right = side("l", 7), side("r", 5)
    joined = left.join(right, F.expr("l_k = r_k AND r_t BETWEEN l_t - INTERVAL 20 SECONDS AND l_t + INTERVAL 20 SECONDS"))
    query = joined.writeStream.format("noop").option("checkpointLocation", checkpoint) \
        .trigger(processingTime="200 milliseconds").start()
    try:
        while not query.lastProgress or query.lastProgress["batchId"] < 2:
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()

    store = LocalStore(tmp_path / "store")
    m = create_snapshot(checkpoint, store, "join").manifest
    with StateReader(store, spark=spark, workdir=tmp_path / "work") as reader:
        for join_side, key in (("left", "key_field0"), ("right", "key_field0")):
            df = reader.state("join", "latest", StateSelector(operator="symmetricHashJoin", join_side=join_side))
            prefix = "l" if join_side == "left" else "r"
            assert df.columns == [key, f"value_{prefix}_k", f"value_{prefix}_t", "partition_id"], df.columns
            original = flatten_state(read_state(spark, checkpoint, batchId=m.batch_id, joinSide=join_side))
            assert rows(df) == rows(original) and rows(df), join_side
        one_store = reader.state("join", "latest", StateSelector(operator=0, store_name="left-keyToNumValues"))
        original = flatten_state(read_state(spark, checkpoint, batchId=m.batch_id, storeName="left-keyToNumValues"))
        assert rows(one_store) == rows(original) and rows(one_store)
        assert reader.materialised == 1
