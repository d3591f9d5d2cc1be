"""Wait, in the triggerer, for a stream to catch up with its Kafka topics (`KafkaLagSensor`
deferred)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_streamstate.engine.streams.health import LagCheck, check_lag
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.base import Check, poll


class KafkaLagTrigger(BaseTrigger):
    """Fires once every partition the stream reads is at most `max_lag` records behind the
    broker's end offset, or at once when that cannot happen (a vanished topic, a checkpoint
    ahead of the broker). The hook is rebuilt from `kafka_conn_id` on every check.

    :param stream: the stream, as `StreamSpec.to_dict()`.
    :param max_lag: the largest lag, in records, any partition may have.
    :param kafka_conn_id: the Airflow `kafka` connection of the stream's cluster.
    :param poke_interval: seconds between two checks.
    """

    def __init__(self, stream: dict[str, Any], max_lag: int, kafka_conn_id: str, poke_interval: float = 30.0) -> None:
        super().__init__()
        self.stream = stream
        self.max_lag = max_lag
        self.kafka_conn_id = kafka_conn_id
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"stream": self.stream, "max_lag": self.max_lag, "kafka_conn_id": self.kafka_conn_id,
             "poke_interval": self.poke_interval},
        )

    def check(self) -> LagCheck:
        from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook
        from airflow_provider_streamstate.hooks.store import open_checkpoint

        spec = StreamSpec.from_value(self.stream)
        hook = StreamKafkaHook(kafka_config_id=self.kafka_conn_id)
        return check_lag(open_checkpoint(spec.checkpoint, spec.storage_conn_id), max_lag=self.max_lag,
                         broker_offsets=hook.broker_offsets)

    def describe(self, result: Check) -> str:
        name = self.stream.get("name") if isinstance(self.stream, dict) else None
        table = result.table() if isinstance(result, LagCheck) and result.partitions else ""
        return f"stream {name}: {result.message}" + (f"\n{table}" if table else "")

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for ev in poll(self, self.check, self.poke_interval, self.describe):
            yield ev
