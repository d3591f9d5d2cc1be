"""Streams whose checkpoints are in HDFS (the stack's NameNode and DataNode, written by
Spark's own HDFS client): snapshots taken while they run restore to exactly Spark's state
at their batch, into an HDFS store as into a local one; a copy restored onto another HDFS
location resumes with batch N+1 and ends in the state of the whole history; the records
beside an HDFS checkpoint (heartbeat, launch) tell every host the stream runs, and a
restore or clone refuses it; a failover writes its translated offsets into an HDFS target
that the stream then resumes from. The engine reaches HDFS through WebHDFS, found through
HADOOP_CONF_DIR as a Hadoop client finds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.core.errors import StreamRunningError, UsageError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    produce,
)
from tests.integration.test_failover_translation import mirror, produce_into
from tests.streams import (
    account_state,
    heartbeat_query,
    oracle_state,
    run_to_end,
    snapshots_while_producing,
    use_state_store,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.hdfs, pytest.mark.usefixtures("spark_default_checkpoint_manager")]


@pytest.fixture
def hadoop_env(hdfs, monkeypatch):  # noqa: ANN001, ANN201
    """This process is a Hadoop client of the stack's HDFS (HADOOP_CONF_DIR), as a worker is."""
    for key, value in hdfs.env().items():
        monkeypatch.setenv(key, value)
    return hdfs.env()


def test_a_stream_checkpointing_to_hdfs_snapshots_restores_exactly_and_a_restored_hdfs_copy_resumes(
    stack, spark, topic, tmp_path, make_store, hdfs, hadoop_env
) -> None:
    use_state_store(spark, "hdfs")
    store, _, _ = make_store("hdfs")
    checkpoint = hdfs.url(f"/streams/{uuid.uuid4().hex[:10]}/ckpt")
    first = GeneratorSpec(seed=21, accounts=25, events=240, duplicate_rate=0.05)
    specs = [first, first.next_round()]
    produce(stack.kafka_bootstrap, topic, specs[0])
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="processing:1 second", max_offsets_per_trigger=80)
    query = start_query(spark, args)
    try:  # a failure must not leave the query running in the shared session
        producer = threading.Thread(target=lambda: produce(stack.kafka_bootstrap, topic, specs[1], rate=60))
        snapshots = snapshots_while_producing(
            query, producer, lambda: create_snapshot(checkpoint, store, "accounts", parallelism=4), at_least=3)
        query.processAllAvailable()
        assert query.exception() is None
        final = account_state(spark, checkpoint)
    finally:
        query.stop()
    assert final == expected_aggregates(specs)

    batches = [s.manifest.batch_id for s in snapshots]
    assert len(set(batches)) >= 2, batches
    assert snapshots[0].manifest.checkpoint == checkpoint
    assert sum(s.blobs_uploaded for s in snapshots[1:]) < sum(len(s.manifest.blobs) for s in snapshots[1:])
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        target = tmp_path / f"restore-{i}"
        restore_snapshot(store, "accounts", m.snapshot_id, target)
        restored = account_state(spark, str(target), m.batch_id)
        assert restored == account_state(spark, checkpoint, m.batch_id)
        assert restored == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
        assert not (target / "offsets" / str(m.batch_id + 1)).exists()

    # The earliest snapshot restored onto another HDFS location: Spark resumes there with
    # batch N+1 over the same input and ends in the state of the whole history.
    m = snapshots[0].manifest
    copy = hdfs.url(f"/streams/{uuid.uuid4().hex[:10]}/copy")
    result = restore_snapshot(store, "accounts", m.snapshot_id, copy)
    assert result.target == copy
    fs = open_checkpoint_fs(copy)
    assert fs.stat(f"offsets/{m.batch_id}") is not None and fs.stat(f"offsets/{m.batch_id + 1}") is None
    last = run_to_end(spark, stack.kafka_bootstrap, topic, copy, max_offsets=80, heartbeat_s=None)
    assert last > m.batch_id
    assert account_state(spark, copy) == expected_aggregates(specs)
    with pytest.raises(UsageError, match="is not empty"):
        restore_snapshot(store, "accounts", m.snapshot_id, copy)  # never over a checkpoint without force
    again = restore_snapshot(store, "accounts", snapshots[-1].manifest.snapshot_id, copy, force=True)
    assert again.manifest.batch_id == snapshots[-1].manifest.batch_id
    assert account_state(spark, copy, again.manifest.batch_id) == account_state(spark, checkpoint,
                                                                                 again.manifest.batch_id)
    parent = copy.rsplit("/", 1)[0]
    leftovers = [n for n in open_checkpoint_fs(parent).listdir("") if ".streamstate-" in n]
    assert leftovers == []  # the swap left neither staging nor the old checkpoint


def test_the_records_beside_an_hdfs_checkpoint_say_the_stream_runs_and_a_restore_over_it_is_refused(
    stack, spark, topic, tmp_path, make_store, hdfs, hadoop_env
) -> None:
    use_state_store(spark, "hdfs")
    store, _, _ = make_store("local")
    checkpoint = hdfs.url(f"/streams/{uuid.uuid4().hex[:10]}/live")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=5, accounts=10, events=120))
    with heartbeat_query(spark, stack.kafka_bootstrap, topic, checkpoint, interval_s=1.0) as (query, _):
        wait_for(lambda: committed_kafka_offsets(checkpoint), what="a committed batch")
        st = wait_for(lambda: (s := launcher.status(checkpoint)).state == "running" and s, what="the running beat")
        assert st.heartbeat is not None and st.heartbeat.query_name
        snap = create_snapshot(checkpoint, store, "accounts")
        with pytest.raises(StreamRunningError, match="is running on"):
            restore_snapshot(store, "accounts", snap.manifest.snapshot_id, checkpoint, force=True)
        assert query.isActive
    st = wait_for(lambda: (s := launcher.status(checkpoint)).state == "stopped" and s, what="the stopped beat")
    beat = open_checkpoint_fs(checkpoint).read_record("_streamstate/heartbeat.json")
    assert beat is not None and json.loads(beat)["state"] == "stopped"
    # Stopped: now a rollback may replace it, and the restored checkpoint is HDFS's again.
    restored = restore_snapshot(store, "accounts", snap.manifest.snapshot_id, checkpoint, force=True)
    assert restored.target == checkpoint
    assert account_state(spark, checkpoint, snap.manifest.batch_id) == oracle_state(
        stack.kafka_bootstrap, snap.manifest.kafka_offsets)


def test_a_failover_onto_an_hdfs_checkpoint_writes_it_there_with_dr_offsets_and_the_stream_resumes_from_it(
    stack, spark, tmp_path: Path, hdfs, hadoop_env
) -> None:
    """`--target hdfs://...` is the DR cluster's HDFS: the translated offsets are published
    there (one directory swap), and the stream resumed on it ends in the state of the whole
    history."""
    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    first = GeneratorSpec(seed=87, accounts=8, events=160)
    second = first.next_round(80)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])
    checkpoint = str(tmp_path / "ckpt")
    batch = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=60)
    from airflow_provider_streamstate.backends.local.store import LocalStore

    create_snapshot(checkpoint, LocalStore(tmp_path / "store", fsync=False), "accounts",
                    kafka_bootstrap=stack.kafka_bootstrap)
    mirror(stack.kafka_bootstrap, topic, dr_topic, 2)
    behind = produce_into(stack.kafka_bootstrap, dr_topic, second, partitions=[0, 1])

    target = hdfs.url(f"/dr/{uuid.uuid4().hex[:10]}/ckpt")
    out = subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", "--store",
                          str(tmp_path / "store"), "--stream", "accounts", "--target", target, "--kafka-bootstrap",
                          stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, **hadoop_env}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["target"] == target and result["events_behind"] == behind
    assert f"offsets/{batch}" in result["rewritten"]
    fs = open_checkpoint_fs(target)
    offsets = fs.read_bytes(f"offsets/{batch}").decode()
    assert dr_topic in offsets and f'"{topic}"' not in offsets
    last = run_to_end(spark, stack.kafka_bootstrap, dr_topic, target, max_offsets=60, heartbeat_s=None)
    assert last > batch
    assert account_state(spark, target) == expected_aggregates([first, second])
