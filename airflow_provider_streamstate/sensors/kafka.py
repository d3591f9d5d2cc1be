"""Wait for a stream to catch up with its Kafka topics."""

from __future__ import annotations

from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.health import LagCheck, check_lag
from airflow_provider_streamstate.sensors.base import StreamSensorBase
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.base import Check
from airflow_provider_streamstate.triggers.kafka import KafkaLagTrigger


class KafkaLagSensor(StreamSensorBase):
    """Succeeds when, on every partition the stream reads, the broker's end offset minus the
    offset of the stream's newest committed batch (from its checkpoint: the Kafka source
    never commits offsets to Kafka) is at most `max_lag`. Logs the lag per partition.
    Returns `{"max_lag", "batch_id", "total_lag", "partitions": [{"topic", "partition",
    "committed", "end", "lag"}]}`. A checkpoint with no committed batch yet is not ready;
    an unreachable cluster fails the try (retried); a topic that vanished fails the task.

    :param stream: the stream, a `StreamSpec` or its `to_dict()` (templated).
    :param max_lag: the largest lag, in records, any partition may have (0: fully caught up);
        an int, or a template rendering one such as a DAG Param (templated).
    :param kafka_conn_id: the Airflow `kafka` connection of the stream's cluster; defaults
        to the spec's `kafka_conn_id` (templated).
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: tuple[str, ...] = ("stream", "kafka_conn_id", "max_lag")

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any] | str, max_lag: int | str, kafka_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(stream=stream, **kwargs)
        if not (isinstance(max_lag, str) and "{{" in max_lag):  # a template is checked once rendered
            if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
                raise ValueError(f"{self.task_id}: max_lag must be a number of records >= 0, not {max_lag!r}")
        self.max_lag = max_lag
        self.kafka_conn_id = kafka_conn_id

    def lag_limit(self) -> int:
        """`max_lag` as rendered (a template renders text unless the DAG renders native objects)."""
        value = self.max_lag
        try:
            lag = int(value)
        except (TypeError, ValueError):
            lag = -1
        if isinstance(value, bool | float) or lag < 0:
            raise UsageError(f"max_lag must be a number of records >= 0, not {value!r}",
                             hint="pass an int or a template that renders one")
        return lag

    def conn_id(self) -> str:
        conn_id = self.kafka_conn_id or self.spec.kafka_conn_id
        if not conn_id:
            raise UsageError(f"stream {self.spec.name} names no Kafka connection",
                             hint="pass kafka_conn_id= or set the stream spec's kafka_conn_id")
        return conn_id

    def check(self) -> LagCheck:
        from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

        hook = StreamKafkaHook(kafka_config_id=self.conn_id())
        return check_lag(self.checkpoint(), max_lag=self.lag_limit(), broker_offsets=hook.broker_offsets)

    def describe(self, result: Check) -> str:
        table = result.table() if isinstance(result, LagCheck) and result.partitions else ""
        return super().describe(result) + (f"\n{table}" if table else "")

    def trigger(self) -> KafkaLagTrigger:
        return KafkaLagTrigger(stream=self.spec.redacted().to_dict(), max_lag=self.lag_limit(),
                               kafka_conn_id=self.conn_id(), poke_interval=self.poke_interval)
