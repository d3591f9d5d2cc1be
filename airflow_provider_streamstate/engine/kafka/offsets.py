"""What the Kafka brokers hold next to what a snapshot recorded: per partition the earliest
and latest offsets, so a rollback can be checked before it is made (has retention deleted
the offsets the restored query will resume from?) and lag can be measured.

confluent-kafka is imported inside the functions: the engine stays importable without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_streamstate.engine.core.errors import NotFoundError, TransientError

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition: where the snapshot resumes, and what the broker still has."""

    topic: str
    partition: int
    snapshot: int  # the offset the restored query reads next
    earliest: int  # the broker's log start offset
    latest: int  # the broker's high watermark

    @property
    def available(self) -> bool:
        """Whether the broker still has every record from the snapshot's offset on."""
        return self.earliest <= self.snapshot <= self.latest

    @property
    def behind(self) -> int:
        """Records in the broker after the snapshot's offset (the replay a restore costs)."""
        return max(0, self.latest - self.snapshot)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "snapshot": self.snapshot, "earliest": self.earliest,
            "latest": self.latest, "available": self.available, "behind": self.behind,
        }


def broker_offsets(
    bootstrap: str, offsets: dict[str, dict[str, int]], *, config: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[PartitionOffsets]:
    """Earliest and latest broker offsets of every partition in `offsets` (a manifest's
    `kafka_offsets`), side by side with the recorded ones."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "streamstate-offsets", "enable.auto.commit": False,
        "log_level": 0, "socket.timeout.ms": int(timeout_s * 1000), **(config or {}),
    })
    out = []
    try:
        try:
            topics = consumer.list_topics(timeout=timeout_s).topics
        except KafkaException as exc:
            raise TransientError(
                f"cannot reach Kafka at {bootstrap}: {exc}",
                hint="check the bootstrap servers and that the brokers are up",
            ) from None
        for topic, parts in sorted(offsets.items()):
            if topic not in topics or topics[topic].error is not None:
                raise NotFoundError(
                    f"topic {topic} of the snapshot does not exist at {bootstrap}",
                    hint="check --kafka-bootstrap points at the stream's cluster (and the topic's name there)",
                )
            for p, recorded in sorted(parts.items(), key=lambda x: int(x[0])):
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, int(p)), timeout=timeout_s)
                except KafkaException as exc:
                    raise TransientError(f"cannot read offsets of {topic}[{p}] at {bootstrap}: {exc}",
                                         hint="check that the brokers are up, then retry") from None
                out.append(PartitionOffsets(topic, int(p), recorded, low, high))
    finally:
        consumer.close()
    return out


def admin_client(bootstrap: str, config: dict[str, Any] | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(config or {})})


def list_offsets(admin: Any, partitions: dict[str, list[int]], *, latest: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, dict[str, int]]:
    """Per topic and partition, the end offset (high watermark; `latest`) or the log start
    offset, in one ListOffsets round trip (a consumer's per-partition watermark query waits
    behind its fetches when it has an assignment; this does not)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
    wanted = {TopicPartition(t, p): spec for t, ps in partitions.items() for p in ps}
    out: dict[str, dict[str, int]] = {t: {} for t in partitions}
    if not wanted:
        return out
    try:
        futures = admin.list_offsets(wanted, request_timeout=timeout_s)
        for tp, fut in futures.items():
            out[tp.topic][str(tp.partition)] = int(fut.result().offset)
    except KafkaException as exc:
        raise TransientError(f"cannot read the offsets of {', '.join(sorted(partitions))}: {exc}",
                             hint="check that the brokers are up, then retry") from None
    return out
