"""The Kafka side of bringing a pipeline back (restore, clone, failover): link topics read,
created and extended through one AdminClient per operation, and a channel appended so
that exactly its records, and nothing else, lie between the point the downstream resumes
at and the end of the topic.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_provider_streamstate.engine.core.errors import NotFoundError, TransientError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.pipeline import channel as channel_mod

READY_TIMEOUT_S = 30.0  # a created topic must have a leader for every partition by then


class LinkTopics:
    """The link topics of one cluster, through one AdminClient (opening one costs a
    metadata round trip and a thread; a restore reads end offsets twice per link)."""

    def __init__(self, bootstrap: str, kafka_config: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.kafka_config = kafka_config
        self.admin = admin_client(bootstrap, kafka_config)

    def ends(self, topic: str, partitions: list[str]) -> dict[str, int]:
        """The end offset of each of `partitions` of `topic`, in one ListOffsets request."""
        return list_offsets(self.admin, {topic: [int(p) for p in partitions]})[topic]

    def partitions(self, topic: str) -> set[str] | None:
        """The topic's partitions; None when it does not exist."""
        from confluent_kafka import KafkaException

        try:
            meta = self.admin.list_topics(timeout=10).topics.get(topic)
        except KafkaException as exc:
            raise TransientError(f"cannot reach Kafka at {self.bootstrap}: {exc}",
                                 hint="check the brokers, then retry") from None
        if meta is None or meta.error is not None:
            return None
        return {str(p) for p in meta.partitions}

    def existing(self, topic: str, *, why: str) -> set[str]:
        """The partitions of a topic that must exist (`why`: what needs it)."""
        parts = self.partitions(topic)
        if parts is None:
            raise NotFoundError(f"link topic {topic} does not exist at {self.bootstrap}", hint=why)
        return parts

    def ensure(self, topic: str, partitions: int, *, empty: bool) -> None:
        """`topic` exists with `partitions` partitions (the link's at the cut), created when
        missing; `empty`: an existing one must hold no record (a clone's new topic)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        have = self.partitions(topic)
        if have is not None:
            if len(have) != partitions:
                raise UsageError(f"topic {topic} at {self.bootstrap} has {len(have)} partitions, the link had "
                                 f"{partitions} at the cut",
                                 hint="name a topic with the link's partition count, or a new one streamstate creates")
            if empty and any(self.ends(topic, sorted(have, key=int)).values()):
                raise UsageError(f"clone topic {topic} exists and is not empty",
                                 hint="name a new topic for each link of the clone")
            return
        try:
            fut = self.admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])
            fut[topic].result(timeout=READY_TIMEOUT_S)
        except KafkaException as exc:
            raise TransientError(f"cannot create topic {topic} at {self.bootstrap}: {exc}",
                                 hint="check the brokers and the connection's rights to create topics") from None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:  # created, and every partition has a leader that answers
            try:
                meta = self.admin.list_topics(timeout=10).topics.get(topic)
                if meta is not None and meta.partitions and all(pm.leader >= 0 for pm in meta.partitions.values()):
                    self.ends(topic, [str(p) for p in meta.partitions])
                    return
            except (TransientError, KafkaException):
                pass
            if time.monotonic() > deadline:
                raise TransientError(f"topic {topic} was not ready {READY_TIMEOUT_S:.0f} s after its creation",
                                     hint="check the brokers, then retry")
            time.sleep(0.2)

    def append_channel(self, topic: str, partitions: list[str],
                       records: list[channel_mod.ChannelRecord]) -> dict[str, int]:
        """Append the channel's records to `topic` and return where they begin per partition
        (where the downstream resumes). Refused when the topic grew by anything else
        meanwhile: the downstream would read that writer's records too."""
        before = self.ends(topic, partitions)
        channel_mod.append_channel(records, topic, self.bootstrap, kafka_config=self.kafka_config)
        after = self.ends(topic, partitions)
        wrote = {p: sum(1 for r in records if str(r.partition) == p) for p in partitions}
        if any(after[p] - before[p] != wrote[p] for p in partitions):
            raise UsageError(f"{topic} grew by {sum(after[p] - before[p] for p in partitions)} records while "
                             f"{sum(wrote.values())} channel record(s) were appended: something else writes to it",
                             hint="stop every writer of the pipeline's link topics (and any mirror into them), "
                                  "then run it again")
        return before
