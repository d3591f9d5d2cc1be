"""Checkpoint format v2 (RocksDB state files named `<version>_<uniqueId>`, their ids in the
commit log): snapshots of a running stream, taken while maintenance writes new unique-id
zips, restore to exactly Spark's state at their batch and resume to the same end state; a
cut holds only the committed attempt's files."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import FORMAT_VERSION_CONF, CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import account_state, dedup_keys, oracle_state, use_state_store

pytestmark = pytest.mark.integration

V2_FILE = re.compile(r"^state/\d+/\d+/(\d+)_([0-9a-f-]+)\.(zip|changelog)$")


@pytest.fixture
def format_v2(spark):  # noqa: ANN001, ANN201 - the shared session: back to format 1 afterwards
    yield
    spark.conf.set(FORMAT_VERSION_CONF, "1")


@pytest.mark.parametrize("state_store", ["rocksdb-changelog", "rocksdb"])
def test_format_v2_snapshots_of_a_running_stream_restore_exactly_and_resume(
    stack, spark, topic, tmp_path: Path, make_store, format_v2, state_store: str,
) -> None:
    use_state_store(spark, state_store, **{FORMAT_VERSION_CONF: "2"})
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    first = GeneratorSpec(seed=51, accounts=40, events=400, duplicate_rate=0.05)
    specs = [first, first.next_round(), first.next_round().next_round()]
    produce(stack.kafka_bootstrap, topic, specs[0])
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="processing:500 milliseconds", max_offsets_per_trigger=200)
    query = start_query(spark, args)
    producer = threading.Thread(target=lambda: [produce(stack.kafka_bootstrap, topic, s, rate=150) for s in specs[1:]])
    producer.start()
    snapshots = []
    deadline = time.monotonic() + 180
    while (producer.is_alive() or len(snapshots) < 4) and time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and (not snapshots or progress["batchId"] > snapshots[-1].manifest.batch_id):
            snapshots.append(create_snapshot(checkpoint, store, "accounts", parallelism=4))
        time.sleep(0.6)
    producer.join()
    query.processAllAvailable()
    assert query.exception() is None
    final = account_state(spark, checkpoint)
    query.stop()

    assert len({s.manifest.batch_id for s in snapshots}) >= 3
    ckpt = CheckpointReader(checkpoint)
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        assert m.checkpoint_format == 2 and m.state_store == state_store
        # Only the committed attempt of each version: the ids the commit log names.
        for f in m.files:
            found = V2_FILE.match(f.path)
            if found:
                version, uid = int(found.group(1)), found.group(2)
                op, part = (int(x) for x in f.path.split("/")[1:3])
                assert version <= m.batch_id + 1
                assert ckpt.commit(version - 1)["stateUniqueIds"][str(op)][part] == [uid]
        target = tmp_path / f"restore-{i}"
        restore_snapshot(store, "accounts", m.snapshot_id, target)
        restored = account_state(spark, str(target), m.batch_id)
        assert restored == account_state(spark, checkpoint, m.batch_id)
        assert restored == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
        if i in (0, len(snapshots) - 1):
            assert dedup_keys(spark, str(target), m.batch_id) == dedup_keys(spark, checkpoint, m.batch_id)

    # The state reader sets the format itself, whatever the caller's session says.
    spark.conf.set(FORMAT_VERSION_CONF, "1")
    latest = snapshots[-1].manifest
    with StateReader(store, spark=spark) as reader:
        rows = reader.state("accounts", latest.snapshot_id, StateSelector(operator=0)).collect()
    assert {r.key_account: {"count": r.value_count, "sum": r.value_sum, "max": r.value_max} for r in rows} == \
        account_state_with(spark, checkpoint, latest.batch_id)

    earliest = snapshots[0].manifest
    spark.conf.set(FORMAT_VERSION_CONF, "2")  # a restored copy runs with its checkpoint's format
    resumed = start_query(spark, replace(args, checkpoint=str(tmp_path / "restore-0"), max_offsets_per_trigger=600,
                                         alerts_topic=f"{topic}-alerts-resumed", trigger="available-now"))
    resumed.awaitTermination(300)
    assert resumed.exception() is None
    assert resumed.recentProgress[0]["batchId"] == earliest.batch_id + 1
    assert account_state(spark, str(tmp_path / "restore-0")) == final == expected_aggregates(specs)


def account_state_with(spark, checkpoint: str, batch_id: int) -> dict[str, dict[str, int]]:  # noqa: ANN001
    spark.conf.set(FORMAT_VERSION_CONF, "2")
    try:
        return account_state(spark, checkpoint, batch_id)
    finally:
        spark.conf.set(FORMAT_VERSION_CONF, "1")
