"""Each snapshot is read with its own checkpoint's state store confs, in a session of its own:
a diff of two snapshots written with different RocksDB settings (changelog checkpointing on
and off) compares the same state as identical, and the caller's session keeps its confs."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.diff import diff_snapshots
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.state.spark import CHANGELOG_CONF
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = pytest.mark.integration


def test_a_diff_reads_each_snapshot_with_its_own_pinned_confs_and_leaves_the_callers_session_alone(
    stack, spark, tmp_path
) -> None:
    topic = f"confs-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=7, accounts=12, events=150))
    store = LocalStore(tmp_path / "store")
    ids = {}
    for setup in ("rocksdb-changelog", "rocksdb"):  # the same input, two ways of writing RocksDB state
        use_state_store(spark, setup, **{"spark.sql.shuffle.partitions": "2"})
        checkpoint = str(tmp_path / setup)
        run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=40)
        ids[setup] = create_snapshot(checkpoint, store, setup).manifest.snapshot_id
        assert account_state(spark, checkpoint)  # the state is there, readable with its own settings
    spark.conf.set(CHANGELOG_CONF, "true")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    with StateReader(store, spark=spark) as reader:
        d = diff_snapshots(reader, "rocksdb-changelog", ids["rocksdb-changelog"], ids["rocksdb"],
                           StateSelector("stateStoreSave"), b_stream="rocksdb")
        assert d.identical and d.counts["unchanged"] == 12, d.to_json()
        assert spark.conf.get(CHANGELOG_CONF) == "true"  # B was read without changelog: not in this session
        # Read in the other order too: B's confs never leak into A's read.
        back = diff_snapshots(reader, "rocksdb", ids["rocksdb"], ids["rocksdb-changelog"],
                              StateSelector("stateStoreSave"), b_stream="rocksdb-changelog")
        assert back.identical and back.counts["unchanged"] == 12
    assert spark.conf.get(CHANGELOG_CONF) == "true"  # the caller's session as it was
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
