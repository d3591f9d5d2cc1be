"""What the DR tests share: a transactional producer (its commit markers make offsets
differ between clusters) and waits on what a mirror holds. The `regions` fixture (a private
primary and DR cluster fed by MirrorMaker 2) is in tests/integration/conftest.py."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from dev import stack as stack_mod


def produce_transactionally(bootstrap: str, topic: str, spec: GeneratorSpec, per_txn: int = 25) -> int:
    """`spec`'s messages in committed transactions of `per_txn` records each, once the last
    commit's markers are in the log: a commit returns when the coordinator has decided it and
    the markers (which take offsets) follow, so an end offset read sooner falls short of them."""
    sent = produce(bootstrap, topic, spec, per_transaction=per_txn)
    deadline = time.monotonic() + 60
    while (committed := end_offsets(bootstrap, topic, None)) != end_offsets(bootstrap, topic, None, committed=False):
        assert time.monotonic() < deadline, f"the commit markers of {topic} were not written in 60s: {committed}"
        time.sleep(0.1)
    return sent


def end_offsets(bootstrap: str, topic: str, partitions: int | None, *, committed: bool = True) -> dict[int, int]:
    """Per partition (the first `partitions`, else all), the end a committed-read consumer
    sees (the last stable offset: not past a transaction still open or whose markers are not
    written yet), or with `committed=False` the high watermark."""
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 0,
                         "isolation.level": isolation})
    try:
        if partitions is None:
            partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
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
