"""Offset translation against a real broker, the cases a mirror rarely shows on its own: a
partition the snapshot never read from resumes at the DR partition's beginning, and a DR
topic with another partition count is refused before anything is written.

The "DR cluster" here is the shared stack's broker under other topic names (a topic map
says which), and the "mirror" a faithful copier: each record with its partition, key,
value, headers and timestamp, which is what MirrorMaker 2 preserves. The real MM2 runs in
test_failover_mirror.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    messages,
)
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = pytest.mark.integration


def produce_into(bootstrap: str, topic: str, spec: GeneratorSpec, partitions: list[int]) -> int:
    """`spec`'s messages, each account pinned to one of `partitions` (others get nothing)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    for txn in messages(spec):
        part = partitions[sum(txn.account.encode()) % len(partitions)]
        producer.produce(topic, key=txn.account.encode(), value=txn.to_json(), partition=part)
        sent += 1
    assert producer.flush(30) == 0
    return sent


def mirror(bootstrap: str, source: str, dest: str, partitions: int) -> int:
    """Copy every record of `source` into `dest` as MM2 does: same partition, key, value,
    headers and timestamp."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"copy-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "log_level": 0})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    copied = 0
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(source, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(source, p, low)])
            # Up to `high`, however slow the first fetch: an empty poll on a loaded machine is
            # not the end of the partition (stopping there mirrored only part of it).
            deadline, done = time.monotonic() + 120, low
            while done < high:
                assert time.monotonic() < deadline, f"{source}[{p}]: copied up to {done} of {high} in 120 s"
                for m in consumer.consume(500, timeout=5):
                    assert m.error() is None, m.error()
                    producer.produce(dest, key=m.key(), value=m.value(), headers=m.headers(), partition=p,
                                     timestamp=m.timestamp()[1])
                    copied += 1
                    done = m.offset() + 1
                done = max(done, consumer.position([TopicPartition(source, p)])[0].offset)  # past commit markers
        assert producer.flush(30) == 0
    finally:
        consumer.close()
    return copied


def failover_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", *args],
                          capture_output=True, text=True, timeout=300)


def test_a_partition_the_snapshot_never_read_resumes_at_the_dr_beginning(stack, spark, tmp_path: Path) -> None:
    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=3)
    first = GeneratorSpec(seed=81, accounts=9, events=200)
    second = first.next_round(120)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])  # partition 2 stays empty
    checkpoint = str(tmp_path / "ckpt")
    batch = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=90)
    store = LocalStore(tmp_path / "store", fsync=False)
    snap = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=stack.kafka_bootstrap).manifest
    assert snap.kafka_anchors is not None and snap.kafka_anchors[topic]["partitions"]["2"] is None

    # In DR: the mirrored history, then new input in every partition, the empty one included.
    mirror(stack.kafka_bootstrap, topic, dr_topic, 3)
    behind = produce_into(stack.kafka_bootstrap, dr_topic, second, partitions=[0, 1, 2])
    target = tmp_path / "dr-ckpt"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    by_partition = {p["partition"]: p for p in result["translated"]}
    assert by_partition[2]["dr_offset"] == 0  # the beginning: every record there is still to read
    assert result["events_behind"] == behind

    last = run_to_end(spark, stack.kafka_bootstrap, dr_topic, str(target), max_offsets=90)
    assert last > batch
    assert account_state(spark, str(target)) == expected_aggregates([first, second])


def test_a_dr_topic_with_another_partition_count_is_refused_and_nothing_is_written(
    stack, spark, tmp_path: Path
) -> None:
    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    spec = GeneratorSpec(seed=82, accounts=6, events=60)
    produce_into(stack.kafka_bootstrap, topic, spec, partitions=[0, 1, 2])
    checkpoint = str(tmp_path / "ckpt")
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    create_snapshot(checkpoint, LocalStore(tmp_path / "store", fsync=False), "accounts",
                    kafka_bootstrap=stack.kafka_bootstrap)

    target = tmp_path / "dr-ckpt"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}")
    assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
    assert f"{topic} had 3 partitions in the primary, {dr_topic} has 2 in DR" in out.stderr
    assert "same partition count" in out.stderr  # what to do
    assert not target.exists() and not any(p.name.startswith(".dr-ckpt") for p in tmp_path.iterdir())


def test_a_failover_onto_an_s3_checkpoint_writes_it_there_with_dr_offsets_and_the_stream_resumes_from_it(
    stack, spark, tmp_path: Path
) -> None:
    """`--target s3a://...` is an S3 checkpoint in the DR region, never a local directory
    named after the URL: the translated offsets are published there, and the stream resumed
    on it through S3A ends in the state of the whole history."""
    import os

    from tests.s3 import s3_client

    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    first = GeneratorSpec(seed=83, accounts=8, events=160)
    second = first.next_round(80)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])
    checkpoint = str(tmp_path / "ckpt")
    batch = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=60)
    create_snapshot(checkpoint, LocalStore(tmp_path / "store", fsync=False), "accounts",
                    kafka_bootstrap=stack.kafka_bootstrap)
    mirror(stack.kafka_bootstrap, topic, dr_topic, 2)
    behind = produce_into(stack.kafka_bootstrap, dr_topic, second, partitions=[0, 1])

    bucket = stack.s3["dr"]["bucket"]
    prefix = f"failover/{uuid.uuid4().hex[:10]}/ckpt"
    target = f"s3a://{bucket}/{prefix}"
    env = {**os.environ, **stack.s3_env("dr")}
    out = subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", "--store",
                          str(tmp_path / "store"), "--stream", "accounts", "--target", target, "--kafka-bootstrap",
                          stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["target"] == target and result["events_behind"] == behind
    assert f"offsets/{batch}" in result["rewritten"]
    assert not (tmp_path / "s3a:").exists()  # no local directory named after the URL
    client = s3_client(stack, "dr")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]}
    assert f"{prefix}/metadata" in keys and f"{prefix}/_streamstate/restore-incomplete.json" not in keys
    offsets = client.get_object(Bucket=bucket, Key=f"{prefix}/offsets/{batch}")["Body"].read().decode()
    assert dr_topic in offsets and f'"{topic}"' not in offsets

    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("dr").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    last = run_to_end(spark, stack.kafka_bootstrap, dr_topic, target, max_offsets=60, heartbeat_s=None)
    assert last > batch
    assert account_state(spark, target) == expected_aggregates([first, second])
