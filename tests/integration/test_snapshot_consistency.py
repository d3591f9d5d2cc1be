"""Snapshots of a running stream are consistent: each restores to exactly Spark's state at
its batch, agrees with the Kafka offsets it records, and resumes to the same end state, in
checkpoint format 1 and 2 (RocksDB state files named `<version>_<uniqueId>`, their ids in
the commit log; snapshots taken while maintenance writes new unique-id zips hold only the
committed attempt's files)."""

from __future__ import annotations

import re
import threading
from dataclasses import replace

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import FORMAT_VERSION_CONF, CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import (
    account_state,
    dedup_keys,
    oracle_state,
    snapshots_while_producing,
    use_state_store,
)

pytestmark = pytest.mark.integration

SETUPS = [
    ("hdfs", "local", 1),
    ("rocksdb", "s3", 1),
    ("rocksdb-changelog", "local", 1),
    ("rocksdb-changelog", "s3", 1),
    ("rocksdb-changelog", "local", 2),
    ("rocksdb", "s3", 2),
]
V2_FILE = re.compile(r"^state/(\d+)/(\d+)/(\d+)_([0-9a-f-]+)\.(zip|changelog)$")


@pytest.fixture
def checkpoint_format(spark, request):  # noqa: ANN001, ANN201 - the shared session: back to format 1 afterwards
    spark.conf.set(FORMAT_VERSION_CONF, str(request.param))
    yield request.param
    spark.conf.set(FORMAT_VERSION_CONF, "1")


@pytest.mark.parametrize(("state_store", "store_kind", "checkpoint_format"), SETUPS, indirect=["checkpoint_format"])
def test_snapshots_of_a_running_stream_restore_exactly_and_resume(
    stack, spark, topic, tmp_path, make_store, state_store, store_kind, checkpoint_format
) -> None:
    use_state_store(spark, state_store)
    store, _, _ = make_store(store_kind)
    checkpoint = str(tmp_path / "ckpt")
    first = GeneratorSpec(seed=21, accounts=60, events=500, duplicate_rate=0.05)
    specs = [first, first.next_round(), first.next_round().next_round()]
    produce(stack.kafka_bootstrap, topic, specs[0])
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="processing:500 milliseconds", max_offsets_per_trigger=240)
    query = start_query(spark, args)
    producer = threading.Thread(target=lambda: [produce(stack.kafka_bootstrap, topic, s, rate=150) for s in specs[1:]])
    snapshots = snapshots_while_producing(query, producer, lambda: create_snapshot(checkpoint, store, "accounts",
                                                                                   parallelism=4),
                                          at_least=4, interval_s=0.7)
    query.processAllAvailable()
    assert query.exception() is None
    final = account_state(spark, checkpoint)
    query.stop()

    batches = [s.manifest.batch_id for s in snapshots]
    assert len(set(batches)) >= 3, batches
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        assert m.state_store == state_store
        assert [op.name for op in m.operators] == ["stateStoreSave", "dedupeWithinWatermark"]
        assert m.checkpoint_format == checkpoint_format
        for f in m.files:  # format 2: only the ids the commit log names (the committed attempts)
            found = V2_FILE.match(f.path)
            assert (found is not None) == (checkpoint_format == 2) or not f.path.endswith((".zip", ".changelog"))
            if found:
                op, part, version, uid = int(found[1]), int(found[2]), int(found[3]), found[4]
                assert version <= m.batch_id + 1
                assert CheckpointReader(checkpoint).commit(version - 1)["stateUniqueIds"][str(op)][part] == [uid]
        target = tmp_path / f"restore-{i}"
        restore_snapshot(store, "accounts", m.snapshot_id, target)
        restored = account_state(spark, str(target), m.batch_id)
        # Exactly Spark's own state at batch N, and exactly what the recorded offsets imply.
        assert restored == account_state(spark, checkpoint, m.batch_id)
        assert restored == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
        if i in (0, len(snapshots) - 1):
            assert dedup_keys(spark, str(target), m.batch_id) == dedup_keys(spark, checkpoint, m.batch_id)
        # Nothing above the cut was copied.
        assert not (target / "offsets" / str(m.batch_id + 1)).exists()
        assert not (target / "commits" / str(m.batch_id + 1)).exists()

    if checkpoint_format == 2:  # the state reader sets format 2 itself, whatever the session says
        latest = snapshots[-1].manifest
        spark.conf.set(FORMAT_VERSION_CONF, "1")
        with StateReader(store, spark=spark) as reader:
            rows = reader.state("accounts", latest.snapshot_id, StateSelector(operator=0)).collect()
        spark.conf.set(FORMAT_VERSION_CONF, "2")  # a restored copy runs with its checkpoint's format
        assert {r.key_account: {"count": r.value_count, "sum": r.value_sum, "max": r.value_max} for r in rows} == \
            account_state(spark, checkpoint, latest.batch_id)

    # Resume the earliest snapshot over the same input: same end state as the uninterrupted run
    # (in a few larger batches: the first one, loading the restored state, is what counts).
    earliest = snapshots[0].manifest
    resumed = start_query(spark, replace(args, checkpoint=str(tmp_path / "restore-0"), max_offsets_per_trigger=600,
                                         alerts_topic=f"{topic}-alerts-resumed", trigger="available-now"))
    resumed.awaitTermination(300)
    assert resumed.exception() is None
    assert resumed.recentProgress[0]["batchId"] == earliest.batch_id + 1
    assert account_state(spark, str(tmp_path / "restore-0")) == final == expected_aggregates(specs)
