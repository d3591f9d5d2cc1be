"""Anchors: the identity of the last record a snapshot's batch consumed, per topic-partition.

Offsets mean nothing in another Kafka cluster: a mirror (MirrorMaker 2) does not reproduce
transaction markers, retention or a late start, so offset 285 in the primary is some other
offset in the DR cluster. What a mirror does keep is the record itself: its timestamp, key,
value and headers. So when a snapshot is taken and the primary cluster is reachable, we
record per partition the last data record below the batch's end offset (its offset,
timestamp and a sha256 of key, value and headers) and how many identical records with the
same timestamp precede it (`repeat`: a producer's retried send can write the same bytes
twice). At failover `failover.py` finds that exact record in the DR partition and resumes
right after it.

confluent-kafka is imported inside the functions: the engine stays importable without it.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time
from typing import Any

from airflow_provider_streamstate.engine.core.anchor import Anchor, TopicAnchors
from airflow_provider_streamstate.engine.core.errors import TransientError

log = logging.getLogger("streamstate.anchors")

DEFAULT_TIMEOUT_S = 10.0
# How far below a batch's end offset to look first for its last data record (transaction
# markers and aborted records take offsets); the window doubles until a record is found.
FIRST_WINDOW = 16


def record_digest(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None) -> str:
    """sha256 of a record's key, value and headers, each length-prefixed (None != b"")."""
    h = hashlib.sha256()

    def part(b: bytes | None) -> None:
        h.update(b"\x00" if b is None else b"\x01" + struct.pack(">Q", len(b)) + b)

    part(key)
    part(value)
    for name, v in headers or []:
        part(name.encode())
        part(v)
    h.update(struct.pack(">Q", len(headers or [])))
    return h.hexdigest()


def kafka_consumer(bootstrap: str, config: dict[str, Any] | None, timeout_s: float) -> Any:
    from confluent_kafka import Consumer

    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": "streamstate-anchors", "enable.auto.commit": False,
        "enable.partition.eof": True, "log_level": 0, "socket.timeout.ms": int(timeout_s * 1000),
        "auto.offset.reset": "earliest",
        # Short reads of known ranges: do not let the broker hold a fetch for more data.
        "fetch.wait.max.ms": 10,
        # As Spark's Kafka source and MirrorMaker 2 read by default: every record, markers aside.
        "isolation.level": "read_uncommitted", **(config or {}),
    })


def scan(consumer: Any, topic: str, partition: int, start: int, end: int, timeout_s: float) -> list[Any]:
    """Every data record of [start, end) (markers and compacted offsets have none).

    Reading stops at `end`, at the partition's end (EOF), or when the broker stays silent
    for `timeout_s`."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= end:
        return []
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            # Short waits: a batch call only returns early when it is full, and EOF ends a scan.
            msgs = consumer.consume(500, timeout=0.05)
            if msgs:
                deadline = time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                raise TransientError(f"no answer reading {topic}[{partition}] offsets {start}..{end}",
                                     hint="check that the brokers are up, then retry")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise TransientError(f"reading {topic}[{partition}]: {err.str()}",
                                         hint="check that the brokers are up, then retry")
                if m.offset() >= end:
                    return out
                out.append(m)
                if m.offset() == end - 1:
                    return out
    finally:
        consumer.unassign()


def message_timestamp(m: Any) -> int:
    return int(m.timestamp()[1])


def message_digest(m: Any) -> str:
    return record_digest(m.key(), m.value(), m.headers())


def offset_for_time(consumer: Any, topic: str, partition: int, ts: int, timeout_s: float) -> int:
    """The first offset whose timestamp is >= `ts` (-1: none yet)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        [tp] = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=timeout_s)
    except KafkaException as exc:
        raise TransientError(f"cannot look up {topic}[{partition}] by time: {exc}",
                             hint="check that the brokers are up, then retry") from None
    return int(tp.offset)


def _anchor(consumer: Any, topic: str, partition: int, end: int, timeout_s: float) -> Anchor | None | str:
    """The partition's anchor below `end`; None: nothing consumed; a string: why none."""
    from confluent_kafka import TopicPartition

    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
    window = FIRST_WINDOW
    last = None
    while last is None:
        start = max(low, end - window)
        records = scan(consumer, topic, partition, start, end, timeout_s)
        if records:
            last = records[-1]
        elif start <= low:
            if low == 0:
                return None  # nothing but markers (or nothing at all) before the batch's end
            return f"the records below offset {end} were deleted (log start {low})"
        window *= 4
    ts, digest = message_timestamp(last), message_digest(last)
    first = offset_for_time(consumer, topic, partition, ts, timeout_s)
    repeat = 0
    if 0 <= first < last.offset():
        repeat = sum(
            1 for m in scan(consumer, topic, partition, first, last.offset(), timeout_s)
            if message_timestamp(m) == ts and message_digest(m) == digest
        )
    return Anchor(int(last.offset()), ts, digest, repeat)


def read_anchors(
    bootstrap: str, offsets: dict[str, dict[str, int]], *, config: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[dict[str, TopicAnchors], list[str]]:
    """Anchors of every partition in `offsets` (a manifest's `kafka_offsets`, end offsets)
    from the cluster the batch read; and, per partition that could not be anchored, why."""
    from confluent_kafka import KafkaException

    consumer = kafka_consumer(bootstrap, config, timeout_s)
    out: dict[str, TopicAnchors] = {}
    problems: list[str] = []
    try:
        try:
            topics = consumer.list_topics(timeout=timeout_s).topics
        except KafkaException as exc:
            raise TransientError(f"cannot reach Kafka at {bootstrap}: {exc}",
                                 hint="check the bootstrap servers and that the brokers are up") from None
        for topic, parts in sorted(offsets.items()):
            md = topics.get(topic)
            if md is None or md.error is not None:
                problems.append(f"topic {topic} does not exist at {bootstrap}")
                continue
            anchors: dict[str, Anchor | None] = {}
            for p, end in sorted(parts.items(), key=lambda x: int(x[0])):
                found = _anchor(consumer, topic, int(p), end, timeout_s) if end > 0 else None
                if isinstance(found, str):
                    problems.append(f"{topic}[{p}]: {found}")
                else:
                    anchors[p] = found
            out[topic] = TopicAnchors(len(md.partitions), anchors)
    finally:
        consumer.close()
    return out, problems
