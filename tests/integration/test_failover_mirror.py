"""Failover onto a real MirrorMaker 2 mirror is exact: the stream resumes in the DR cluster
with the batch after the snapshot's, and its final state counts every mirrored event once.

A private region pair per test (its own primary broker, a DR broker and MM2), so the
shared stack is never touched. The primary's producer is transactional: its commit markers
take offsets the mirror does not copy, so DR offsets differ from primary offsets and a copied
offset would skip or re-read records."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_provider_streamstate.engine.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.local import LocalStore
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    messages,
)
from dev import stack as stack_mod
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = pytest.mark.integration


def produce_transactionally(bootstrap: str, topic: str, spec: GeneratorSpec, per_txn: int = 25) -> int:
    """`spec`'s messages in committed transactions of `per_txn` records each."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5})
    producer.init_transactions(30)
    batch: list = []
    sent = 0
    for txn in [*messages(spec), None]:
        if txn is not None:
            batch.append(txn)
        if batch and (txn is None or len(batch) >= per_txn):
            producer.begin_transaction()
            for t in batch:
                producer.produce(topic, key=t.account.encode(), value=t.to_json())
            producer.commit_transaction(30)
            sent += len(batch)
            batch = []
    return sent


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 0})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def mirrored_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records the mirror holds for `topic` (MM2 writes no transaction markers)."""
    try:
        return sum(end_offsets(bootstrap, topic, partitions).values())
    except Exception:  # noqa: BLE001 - the mirror has not created the topic yet
        return 0


def wait_mirrored(dr: stack_mod.DrKafka, topic: str, records: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while mirrored_records(dr.bootstrap, dr.dr_topic(topic), 3) < records:
        assert time.monotonic() < deadline, f"MM2 mirrored fewer than {records} records of {topic} in {timeout}s"
        time.sleep(0.5)


@pytest.fixture
def regions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[stack_mod.Stack, stack_mod.DrKafka]]:
    """A private primary (Kafka, S3) and a DR cluster fed by MM2 with the given policy."""
    state_dir = tmp_path_factory.mktemp("regions")
    try:
        primary = stack_mod.up(state_dir)
        dr = stack_mod.start_dr_kafka(state_dir, primary.kafka_bootstrap, policy=request.param)
        yield primary, dr
    finally:
        stack_mod.down(state_dir)


def failover_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("regions", ["default", "identity"], indirect=True)
def test_a_failed_over_stream_resumes_with_the_next_batch_and_counts_every_mirrored_event_once(
    regions, spark, tmp_path
) -> None:
    primary, dr = regions
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=71, accounts=12, events=300, duplicate_rate=0.05)
    second = first.next_round(200)
    sent = produce_transactionally(primary.kafka_bootstrap, topic, first)
    primary_ends = end_offsets(primary.kafka_bootstrap, topic, 3)
    assert sum(primary_ends.values()) > sent  # the commit markers take offsets

    checkpoint = str(tmp_path / "ckpt")
    batch = run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint, max_offsets=120)
    store = LocalStore(tmp_path / "dr-store", fsync=False)
    snap = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap)
    assert snap.manifest.batch_id == batch and not snap.anchor_problems

    # The primary goes on after the last snapshot; the mirror has it all before the failover.
    sent += produce_transactionally(primary.kafka_bootstrap, topic, second)
    wait_mirrored(dr, topic, sent)

    target = tmp_path / "dr-ckpt"
    policy = ["--replication-policy", dr.policy] + (["--source-alias", dr.source_alias] if dr.policy == "default" else [])
    out = failover_cli("--store", str(tmp_path / "dr-store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", dr.bootstrap, *policy, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == snap.manifest.snapshot_id and result["batch_id"] == batch
    assert result["skipped_snapshots"] == []
    assert {p["dr_topic"] for p in result["translated"]} == {dr.dr_topic(topic)}
    assert result["events_behind"] == sum(1 for _ in messages(second))  # all the primary wrote after the cut
    # Translated, not copied: the DR offsets are not the primary's wherever a marker preceded.
    assert any(p["dr_offset"] != p["primary_offset"] for p in result["translated"])

    last = run_to_end(spark, dr.bootstrap, dr.dr_topic(topic), str(target), max_offsets=120)
    assert last > batch
    resumed = sorted(int(p.name) for p in (target / "commits").iterdir() if p.name.isdigit() and int(p.name) > batch)
    assert resumed == list(range(batch + 1, last + 1))  # batch N+1 first, no gap
    offsets = json.loads((target / "offsets" / str(batch + 1)).read_text().splitlines()[-1])
    assert set(offsets) == {dr.dr_topic(topic)}
    assert account_state(spark, str(target)) == expected_aggregates([first, second])


@pytest.mark.parametrize("regions", ["default"], indirect=True)
def test_a_snapshot_the_mirror_has_not_caught_up_with_is_skipped_for_an_older_one(regions, spark, tmp_path) -> None:
    primary, dr = regions
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=72, accounts=8, events=150)
    second = first.next_round(150)
    produce_transactionally(primary.kafka_bootstrap, topic, first)
    checkpoint = str(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    batch_a = run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint)
    a = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap).manifest
    wait_mirrored(dr, topic, sum(1 for _ in messages(first)))

    stack_mod.stop_part(dr.state_dir, stack_mod.MM2_PART)  # the mirror falls behind
    produce_transactionally(primary.kafka_bootstrap, topic, second)
    run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint)
    b = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap).manifest
    assert b.batch_id > batch_a

    target = tmp_path / "dr-ckpt"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", dr.bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == a.snapshot_id
    [skipped] = result["skipped_snapshots"]
    assert skipped["snapshot_id"] == b.snapshot_id and "has not reached" in skipped["reason"]
    # Resuming from the older snapshot reads exactly what the mirror holds after it.
    assert account_state(spark, str(target), a.batch_id) == account_state(spark, checkpoint, a.batch_id)

    # Naming the newer one explicitly is refused in one line, and nothing is written.
    other = tmp_path / "dr-ckpt-2"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", b.snapshot_id, "--target",
                       str(other), "--kafka-bootstrap", dr.bootstrap)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "has not reached" in out.stderr and not Path(other).exists()


def sigkill(state_dir: str, part: str) -> None:
    """The region dies: the part's whole process group, at once, no shutdown."""
    import os
    import signal

    pid_file = Path(state_dir) / f"{part}.pid"
    os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    pid_file.unlink()


@pytest.mark.parametrize("regions", ["default"], indirect=True)
def test_the_dr_failover_dag_resumes_the_stream_in_dr_after_the_primary_region_dies(
    regions, spark, tmp_path, run_dag, monkeypatch
) -> None:
    from types import SimpleNamespace

    from airflow_provider_streamstate.engine import launcher
    from airflow_provider_streamstate.engine.replicate import replicate
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
    from tests.streams import consumed_records, example_stream_spec, wait_for

    primary, dr = regions
    for key, value in primary.airflow_conn_env("dr", "s3_dr_region").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DR", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": dr.bootstrap}}))
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=73, accounts=10, events=300, duplicate_rate=0.05)
    second, third = first.next_round(150), first.next_round(150).next_round(150)

    # The primary region: the stream ran, its snapshot (with anchors) was replicated to the DR store.
    produce_transactionally(primary.kafka_bootstrap, topic, first)
    primary_ckpt = str(tmp_path / "primary" / "orders")
    run_to_end(spark, primary.kafka_bootstrap, topic, primary_ckpt)
    primary_store = LocalStore(tmp_path / "primary" / "store", fsync=False)
    snap = create_snapshot(primary_ckpt, primary_store, "orders", kafka_bootstrap=primary.kafka_bootstrap)
    dr_store_url = f"s3://streamstate/dr-{uuid.uuid4().hex[:8]}"
    dr_store = StreamstateStoreHook(dr_store_url, aws_conn_id="s3_dr_region").store
    replicate(primary_store, dr_store, "orders")
    # More input after the last snapshot: mirrored, then the primary region dies.
    produce_transactionally(primary.kafka_bootstrap, topic, second)
    mirrored = sum(1 for spec in (first, second) for _ in messages(spec))
    wait_mirrored(dr, topic, mirrored)
    sigkill(str(primary.state_dir), "kafka")
    sigkill(str(primary.state_dir), "s3-primary")

    in_dr = SimpleNamespace(kafka_bootstrap=dr.bootstrap, spark_jars=primary.spark_jars)
    dr_spec = example_stream_spec(in_dr, dr.dr_topic(topic), tmp_path / "dr").derive(
        store=dr_store_url, aws_conn_id="s3_dr_region", kafka_conn_id="kafka_dr")
    primary_spec = dr_spec.derive(checkpoint=primary_ckpt, store=f"file://{tmp_path / 'primary' / 'store'}",
                                  aws_conn_id=None, kafka_conn_id=None)
    try:
        result = run_dag("streamstate_dr_failover", {
            "stream": dr_spec.to_dict(), "primary": primary_spec.to_dict(), "replication_policy": dr.policy,
            "source_alias": dr.source_alias, "max_lag": 0,
        })
        assert result.state == "success", result.log[-4000:]
        restored, report = result.tasks["failover"].xcom, result.tasks["report"].xcom
        assert restored["snapshot_id"] == snap.manifest.snapshot_id
        assert restored["events_behind"] == sum(1 for _ in messages(second))
        assert result.tasks["fence_primary"].xcom["outcome"] == "not-running"
        assert report["resumed_after_batch"] == snap.manifest.batch_id
        assert 0 < report["rto_first_batch_s"] <= report["rto_caught_up_s"]
        print("\n".join(report["lines"]))

        # The DR cluster is the source now: new input goes there, and the stream reads it once.
        produce_transactionally(dr.bootstrap, dr.dr_topic(topic), third)
        end = sum(end_offsets(dr.bootstrap, dr.dr_topic(topic), 3).values())
        wait_for(lambda: consumed_records(dr_spec.checkpoint) == end, timeout=180, what="the DR stream to read all")
    finally:
        launcher.stop(dr_spec.checkpoint, timeout_s=60)
    assert account_state(spark, dr_spec.checkpoint) == expected_aggregates([first, second, third])
