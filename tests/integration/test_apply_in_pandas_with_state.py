"""applyInPandasWithState (Spark's flatMapGroupsWithState state, formats 1 and 2; HDFS-backed
and RocksDB state): a snapshot restores to exactly Spark's state at its batch,
elsewhere, and the restored copy continued over the same input ends where the original does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.state.spark import read_state
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, transactions
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import use_state_store

pytestmark = pytest.mark.integration

FORMAT_CONF = "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"


def _totals(key: Any, frames: Any, state: Any) -> Any:
    """Per account: count, sum and max of the amounts, kept in the group state."""
    import pandas as pd

    count, total, biggest = state.get if state.exists else (0, 0, 0)
    for df in frames:
        count += len(df)
        total += int(df["amount_cents"].sum())
        biggest = max(biggest, int(df["amount_cents"].max()))
    state.update((count, total, biggest))
    yield pd.DataFrame({"account": [key[0]], "count": [count]})


def _run(spark: Any, bootstrap: str, topic: str, checkpoint: str) -> None:
    """Run the query available-now over everything in `topic`."""
    import sys

    from pyspark import cloudpickle

    # Python workers cannot import this test module: ship `_totals` by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    txns = transactions(spark, StreamArgs(bootstrap, checkpoint, source_topic=topic, max_offsets_per_trigger=400))
    query = (
        txns.select("account", "amount_cents").groupBy("account")
        .applyInPandasWithState(_totals, "account string, count long", "count long, total long, biggest long",
                                "Update", "NoTimeout")
        .writeStream.format("noop").option("checkpointLocation", checkpoint).outputMode("update")
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def _state(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, Any]:
    rows = read_state(spark, checkpoint, batchId=batch_id).collect()
    return {r.key.account: json.loads(json.dumps(r.value.asDict(recursive=True), default=str)) for r in rows}


@pytest.mark.parametrize(("state_format", "state_store"), [("1", "hdfs"), ("2", "rocksdb-changelog")])
def test_apply_in_pandas_with_state_snapshot_restores_exactly_and_resumes(
    stack, spark, topic, tmp_path: Path, make_store, state_format: str, state_store: str,
) -> None:
    use_state_store(spark, state_store, **{FORMAT_CONF: state_format, "spark.sql.shuffle.partitions": "2"})
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    first = GeneratorSpec(seed=41, accounts=20, events=600)
    produce(stack.kafka_bootstrap, topic, first)
    _run(spark, stack.kafka_bootstrap, topic, checkpoint)

    m = create_snapshot(checkpoint, store, "totals").manifest
    assert m.spark_conf[FORMAT_CONF] == state_format
    assert [op.name for op in m.operators] == ["applyInPandasWithState"]
    target = tmp_path / "restored"
    restore_snapshot(store, "totals", m.snapshot_id, target)
    assert _state(spark, str(target), m.batch_id) == _state(spark, checkpoint, m.batch_id)
    with StateReader(store, spark=spark) as reader:
        cols = reader.state("totals", m.snapshot_id, StateSelector()).columns
    # Format 2 keeps the state as a struct with its timeout beside it; format 1 flat.
    assert "key_account" in cols and any(c.startswith("value_") for c in cols)

    # Both copies read the next round; the original's checkpoint is gone before the copy runs.
    second = first.next_round()
    produce(stack.kafka_bootstrap, topic, second)
    _run(spark, stack.kafka_bootstrap, topic, checkpoint)
    final = _state(spark, checkpoint)
    shutil.rmtree(checkpoint)
    _run(spark, stack.kafka_bootstrap, topic, str(target))
    resumed = _state(spark, str(target))
    drop_timeout = {a: {k: v for k, v in s.items() if "timeout" not in k.lower()} for a, s in resumed.items()}
    assert drop_timeout == {a: {k: v for k, v in s.items() if "timeout" not in k.lower()} for a, s in final.items()}
    expected = expected_aggregates([first, second])
    got = {a: (s.get("groupState") or s) for a, s in final.items()}
    assert {a: {"count": g["count"], "sum": g["total"], "max": g["biggest"]} for a, g in got.items()} == expected
