"""Snapshots stay correct while Spark's maintenance rewrites the checkpoint under them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from tests.streams import account_state, oracle_state, use_state_store

pytestmark = pytest.mark.integration


@contextmanager
def running_stream(stack, spark, topic: str, checkpoint: str, seed: int, max_offsets: int) -> Iterator:  # noqa: ANN001
    """The `accounts` query on a fast trigger while 1,500 transactions arrive at 150/s."""
    spec = GeneratorSpec(seed=seed, accounts=50, events=1500)
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="processing:200 milliseconds", max_offsets_per_trigger=max_offsets)
    producer = threading.Thread(target=produce, args=(stack.kafka_bootstrap, topic, spec), kwargs={"rate": 150})
    producer.start()
    query = start_query(spark, args)
    try:
        yield query
    finally:
        producer.join()
        query.stop()


@pytest.mark.parametrize("state_store", ["hdfs", "rocksdb-changelog"])
def test_back_to_back_snapshots_under_aggressive_cleanup_all_restore(
    stack, spark, topic, tmp_path, make_store, state_store
) -> None:
    # Keep 2 batches, snapshot state every 2 versions, maintenance every second (session conf):
    # files the snapshot planned are routinely replaced and deleted while it reads them.
    use_state_store(spark, state_store, **{
        "spark.sql.streaming.minBatchesToRetain": "2",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    })
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    snapshots = []
    with running_stream(stack, spark, topic, checkpoint, seed=31, max_offsets=60) as query:
        while not query.lastProgress:
            time.sleep(0.2)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len({s.manifest.batch_id for s in snapshots}) < 6:
            snap = create_snapshot(checkpoint, store, "race", parallelism=4)
            if not snapshots or snap.manifest.batch_id != snapshots[-1].manifest.batch_id:
                snapshots.append(snap)
            time.sleep(0.1)

    assert len({s.manifest.batch_id for s in snapshots}) >= 6
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        target = tmp_path / f"r{i}"
        restore_snapshot(store, "race", m.snapshot_id, target)
        assert account_state(spark, str(target), m.batch_id) == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)


def test_snapshots_of_the_oldest_retained_batch_restore_or_are_refused(
    stack, spark, topic, tmp_path, make_store
) -> None:
    """The oldest retained batch is the one cleanup deletes next: racing it must end in a
    snapshot that restores exactly, or a clear refusal — never in a broken snapshot."""
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.core.errors import StreamstateError

    use_state_store(spark, "hdfs", **{
        "spark.sql.streaming.minBatchesToRetain": "3",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
    })
    store, _, _ = make_store("s3")
    checkpoint = str(tmp_path / "ckpt")
    made, refused = [], []
    with running_stream(stack, spark, topic, checkpoint, seed=32, max_offsets=50) as query:
        while not query.lastProgress or query.lastProgress["batchId"] < 4:
            time.sleep(0.2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(made) + len(refused) < 15:
            oldest = CheckpointReader(checkpoint).committed_batches()[0]
            try:
                made.append(create_snapshot(checkpoint, store, "oldest", batch_id=oldest, parallelism=1))
            except StreamstateError as exc:
                refused.append(exc.one_line())
            time.sleep(0.3)

    assert made, refused
    for i, snap in enumerate(made):
        m = snap.manifest
        restore_snapshot(store, "oldest", m.snapshot_id, tmp_path / f"o{i}")
        assert account_state(spark, str(tmp_path / f"o{i}"), m.batch_id) == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
    for reason in refused:
        assert "no longer" in reason or "not a committed batch" in reason or "kept changing" in reason, reason
