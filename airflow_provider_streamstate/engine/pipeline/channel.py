"""A link's channel state: the records of a link topic between the downstream's read offsets
and the upstream's produced ones at the cut, kept with the pipeline snapshot so a restore does
not depend on the topic's retention. Each record keeps its partition, timestamp, key, value
and headers; a restore appends them, in order, to the partition they came from (or to the
same partition of a clone's new topic).

Stored as one JSON document (bytes base64), write-once in the store; the pipeline snapshot
records the number of records and the document's sha256, and a restore checks both before
writing a record to Kafka.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import TransientError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.pipeline.cut import ChannelRange

POLL_S = 0.05  # short waits: a batch call returns early only when full


@dataclass(frozen=True)
class ChannelRecord:
    partition: int
    offset: int  # in the original topic (informational after a restore)
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    def to_json(self) -> dict[str, Any]:
        def b64(b: bytes | None) -> str | None:
            return None if b is None else base64.b64encode(b).decode()

        return {"p": self.partition, "o": self.offset, "ts": self.timestamp_ms, "k": b64(self.key),
                "v": b64(self.value), "h": [[n, b64(v)] for n, v in self.headers]}

    @classmethod
    def from_json(cls, d: Any, where: str) -> ChannelRecord:
        def unb64(v: Any) -> bytes | None:
            if v is None:
                return None
            if not isinstance(v, str):
                raise UnsafeManifestError(f"{where}: {v!r} is not base64 text")
            return base64.b64decode(v, validate=True)

        try:
            return cls(int(d["p"]), int(d["o"]), int(d["ts"]), unb64(d["k"]), unb64(d["v"]),
                       [(str(n), unb64(v)) for n, v in d["h"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsafeManifestError(f"{where}: not a channel record ({exc})") from None


CHANNEL_FORMAT = "streamstate.channel/1"


def encode(records: list[ChannelRecord]) -> bytes:
    return json.dumps({"format": CHANNEL_FORMAT, "records": [r.to_json() for r in records]},
                      separators=(",", ":")).encode()


def decode(data: bytes, where: str) -> list[ChannelRecord]:
    try:
        d = json.loads(data)
    except ValueError as exc:
        raise UnsafeManifestError(f"{where} is not JSON: {exc}") from None
    if not isinstance(d, dict) or d.get("format") != CHANNEL_FORMAT or not isinstance(d.get("records"), list):
        raise UnsafeManifestError(f"{where} is not a channel record ({CHANNEL_FORMAT})")
    return [ChannelRecord.from_json(r, f"{where} record {i}") for i, r in enumerate(d["records"])]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_channel(channel: ChannelRange, bootstrap: str, *, kafka_config: dict[str, Any] | None = None,
                 timeout_s: float = 60.0) -> list[ChannelRecord]:
    """Every record of the range, in partition then offset order. Offsets the topic no longer
    has (retention) fail it: the channel would be incomplete."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    wanted = {int(p): (channel.start[p], channel.end[p]) for p in channel.end if channel.end[p] > channel.start[p]}
    if not wanted:
        return []
    # The connection's settings (security, client tuning) first; what reading an exact range
    # needs last, so a connection's own auto.offset.reset or isolation.level cannot change it.
    consumer = Consumer({**(kafka_config or {}), "bootstrap.servers": bootstrap,
                         "group.id": "streamstate-pipeline-channel", "enable.auto.commit": False,
                         "auto.offset.reset": "error", "log_level": 0,
                         "fetch.wait.max.ms": 10,  # a known range: do not let the broker hold a fetch
                         "isolation.level": "read_uncommitted"})
    out: dict[int, list[ChannelRecord]] = {p: [] for p in wanted}
    try:
        consumer.assign([TopicPartition(channel.topic, p, start) for p, (start, _) in wanted.items()])
        pending = set(wanted)
        admin: Any = None
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TransientError(f"reading the channel of {channel.topic} timed out "
                                     f"(partitions {sorted(pending)} incomplete)", hint="check the brokers, then retry")
            batch = consumer.consume(500, timeout=POLL_S)
            for m in batch:
                if m.error() is not None:
                    raise TransientError(f"reading the channel of {channel.topic}[{m.partition()}]: {m.error()}",
                                         hint="the topic may have deleted these records (retention); "
                                              "take the cut again sooner after the batches it names")
                p, off = int(m.partition() or 0), int(m.offset() or 0)
                if p not in pending or off >= wanted[p][1]:
                    continue
                _, ts = m.timestamp()
                raw: Any = m.headers() or []
                headers = [(str(h[0]), h[1] if h[1] is None or isinstance(h[1], bytes) else str(h[1]).encode())
                           for h in raw]
                out[p].append(ChannelRecord(p, off, ts, m.key(), m.value(), headers))  # type: ignore[arg-type]
                if off + 1 >= wanted[p][1]:
                    pending.discard(p)
                    consumer.pause([TopicPartition(channel.topic, p)])
            if batch or not pending:
                continue
            # Nothing came: a range ending in transaction markers has no record at end - 1
            # (the position passed it), or retention deleted its start.
            for tp in consumer.position([TopicPartition(channel.topic, p) for p in sorted(pending)]):
                if tp.offset >= wanted[tp.partition][1]:
                    pending.discard(tp.partition)
            admin = admin or admin_client(bootstrap, kafka_config)
            starts = list_offsets(admin, {channel.topic: sorted(pending)}, latest=False)[channel.topic]
            for p in sorted(pending):
                if starts[str(p)] > wanted[p][0]:
                    raise UsageError(f"{channel.topic}[{p}] no longer has offset {wanted[p][0]} "
                                     f"(it starts at {starts[str(p)]})",
                                     hint="the topic's retention deleted channel records: take a new cut")
    except KafkaException as exc:
        raise TransientError(f"cannot read {channel.topic} at {bootstrap}: {exc}",
                             hint="check the brokers, then retry") from None
    finally:
        consumer.close()
    return [r for p in sorted(out) for r in out[p]]


def append_channel(records: list[ChannelRecord], topic: str, bootstrap: str, *,
                   kafka_config: dict[str, Any] | None = None, timeout_s: float = 60.0) -> None:
    """Append `records` to `topic`, each to its partition, in order (an idempotent producer
    keeps a partition's order through retries). Raises unless every one was written."""
    from confluent_kafka import KafkaException, Producer

    if not records:
        return
    producer = Producer({**(kafka_config or {}), "bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "log_level": 0})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    try:
        for r in records:
            while True:
                try:
                    producer.produce(topic, value=r.value, key=r.key, partition=r.partition, timestamp=r.timestamp_ms,
                                     headers=list(r.headers) or None,  # type: ignore[arg-type]
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
        left = producer.flush(timeout_s)
    except KafkaException as exc:
        raise TransientError(f"cannot write the channel to {topic} at {bootstrap}: {exc}",
                             hint="check the brokers, then retry the restore") from None
    if left or errors:
        raise TransientError(f"{left + len(errors)} channel record(s) were not written to {topic} ({errors[:1]})",
                             hint="check the brokers, then retry the restore")
