"""A stream's Kafka cluster, through the apache-kafka provider's `kafka` connection (client
config as JSON in its extra: bootstrap servers, security, MSK IAM): what lag sensors and
offset checks ask the brokers."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.kafka.offsets import PartitionOffsets, broker_offsets


class StreamKafkaHook(KafkaBaseHook):
    """Reads broker offsets next to a checkpoint's or a snapshot's.

    :param kafka_config_id: the Airflow `kafka` connection of the stream's cluster.
    """

    hook_name = "streamstate Kafka offsets"

    def client_config(self) -> dict[str, Any]:
        """The connection's confluent-kafka configuration, callbacks and MSK IAM resolved."""
        try:
            config: dict[str, Any] = dict(self._build_config())
        except ValueError:  # the provider's own check; ours names the connection and the fix
            config = {}
        if not config.get("bootstrap.servers"):
            raise UsageError(
                f"Kafka connection {self.kafka_config_id!r} has no bootstrap.servers",
                hint='set its extra to a client config such as {"bootstrap.servers": "broker:9092"}',
            )
        return config

    def broker_offsets(self, offsets: dict[str, dict[str, int]], *, timeout_s: float = 10.0) -> list[PartitionOffsets]:
        """Per partition of `offsets`, the brokers' earliest and latest next to it."""
        config = self.client_config()
        return broker_offsets(str(config.pop("bootstrap.servers")), offsets, config=config, timeout_s=timeout_s)
