"""A stream-stream join in join state format 3 (Spark 4.1: one RocksDB store with column
families, operator metadata v2 naming its schema files by absolute path): its snapshot
restores elsewhere and is read side by side there after the original is gone."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector, flatten_state
from airflow_provider_streamstate.engine.state.spark import read_state
from tests.streams import use_state_store

pytestmark = pytest.mark.integration

JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"


@pytest.fixture
def join_format_3(spark):  # noqa: ANN001, ANN201 - the shared session: back to format 2 afterwards
    yield
    spark.conf.set(JOIN_FORMAT, "2")


def test_a_join_in_state_format_3_restores_elsewhere_and_reads_both_sides(
    spark, tmp_path: Path, make_store, join_format_3,
) -> None:
    from pyspark.sql import functions as F

    use_state_store(spark, "rocksdb-changelog", **{JOIN_FORMAT: "3", "spark.sql.shuffle.partitions": "2"})
    checkpoint = str(tmp_path / "ckpt")
    left = (spark.readStream.format("rate").option("rowsPerSecond", 40).load()
            .select(F.col("value").alias("k"), F.col("timestamp").alias("ta")).withWatermark("ta", "30 seconds"))
    right = (spark.readStream.format("rate").option("rowsPerSecond", 40).load()
             .select((F.col("value") + 3).alias("k2"), F.col("timestamp").alias("tb")).withWatermark("tb", "30 seconds"))
    joined = left.join(right, F.expr("k = k2 AND tb BETWEEN ta - interval 20 seconds AND ta + interval 20 seconds"))
    query = joined.writeStream.format("noop").option("checkpointLocation", checkpoint) \
        .trigger(processingTime="500 milliseconds").start()
    deadline = time.monotonic() + 90
    while (not query.lastProgress or query.lastProgress["batchId"] < 4) and time.monotonic() < deadline:
        time.sleep(0.5)
    query.stop()
    store, _, _ = make_store("local")
    m = create_snapshot(checkpoint, store, "joined").manifest
    (op,) = m.operators
    assert op.name == "symmetricHashJoin" and op.stores == ["default"]
    assert any(f.path.startswith("state/0/_stateSchema/") for f in m.files)
    original = {side: sorted(map(tuple, flatten_state(read_state(spark, checkpoint, batchId=m.batch_id,
                                                                  joinSide=side)).collect()))
                for side in ("left", "right")}
    assert original["left"] and original["right"]
    shutil.rmtree(checkpoint)

    target = tmp_path / "restored"
    restore_snapshot(store, "joined", m.snapshot_id, target)
    for side in ("left", "right"):
        assert sorted(map(tuple, flatten_state(read_state(spark, str(target), batchId=m.batch_id,
                                                          joinSide=side)).collect())) == original[side]
    with StateReader(store, spark=spark) as reader:
        rows = reader.state("joined", m.snapshot_id, StateSelector(join_side="left")).collect()
    assert sorted(map(tuple, rows)) == original["left"]
