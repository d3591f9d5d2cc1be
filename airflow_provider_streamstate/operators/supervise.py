"""One supervision round of a stream as a task: check it, restart it when its driver died,
restore its newest verified snapshot when the restart fails on an unusable checkpoint,
and fail (the alert) when it stays unhealthy. The decisions are the engine's
(`engine/streams/supervisor.py`); this operator gives it the stream's start (spark-submit through
its `spark` connection, as StartStreamOperator does), store and Kafka cluster."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.config.values import (
    optional_duration,
    parse_duration,
    parse_flag,
)
from airflow_provider_streamstate.operators.base import StreamTask


class SuperviseStreamOperator(StreamTask):
    """Check one stream and recover it when it died.

    Running: healthy unless it lags more than `max_lag` records on a partition or has not
    committed within `freshness` while records wait (the task fails: an alert, nothing is
    restarted). Stopped on request: left alone. Dead, failed, or stopped without a
    request: restarted from its checkpoint and watched for `settle`. When that restart
    fails on an unusable checkpoint (Spark cannot load its state), the newest snapshot of
    the current timeline that verifies is restored over the checkpoint and the stream
    restarted from it (`restore="any-failure"`: after any failed restart; `"never"`: not
    at all). Returns `{"stream", "action" (none|left-stopped|restarted|restored),
    "state_before", "message", "batch_id", "total_lag", "restored_snapshot",
    "restored_batch", "failure", "timings": [{"launch_s", "spark_start_s",
    "first_batch_s"}]}`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param max_lag: most records any partition may lag (None: not checked). (templated)
    :param freshness: a running stream must commit at least this often while records wait
        (a timedelta or seconds; None: not checked). (templated)
    :param restart: restart a dead or failed stream (False: only alert).
    :param restore: when to restore a snapshot after a failed restart: `checkpoint-errors`,
        `any-failure` or `never`. (templated)
    :param snapshot: the snapshot to restore: `latest` (newest verified on the current
        timeline) or an id. (templated)
    :param settle: how long a restarted stream is watched for its first batch (a
        timedelta or seconds). (templated)
    :param startup_timeout: how long a restarted query may take to run (a timedelta or seconds).
    :param kafka_conn_id: the stream's Kafka connection for the lag check; defaults to
        the spec's. (templated)
    :param parallelism: concurrent file transfers of a restore.
    """

    template_fields: Sequence[str] = ("stream", "max_lag", "freshness", "restore", "snapshot", "settle", "kafka_conn_id")

    def __init__(
        self, *, max_lag: int | None = None, freshness: timedelta | float | None = None, restart: bool = True,
        restore: str = "checkpoint-errors", snapshot: str = "latest", settle: timedelta | float = timedelta(minutes=3),
        startup_timeout: timedelta | float = timedelta(minutes=10), kafka_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_lag = max_lag
        self.freshness = freshness
        self.restart = restart
        self.restore = restore
        self.snapshot = snapshot
        self.settle = settle
        self.startup_timeout = startup_timeout
        self.kafka_conn_id = kafka_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.streams.supervisor import SupervisionPolicy, supervise

        spec = self.spec
        with self.cancellable():
            max_lag = None if self.max_lag in (None, "") else int(self.max_lag)
            policy = SupervisionPolicy(freshness_s=optional_duration(self.freshness, "freshness"), max_lag=max_lag,
                                       restart=parse_flag(self.restart, "restart"), restore=self.restore,
                                       settle_s=parse_duration(self.settle, "settle"))
            startup_s = parse_duration(self.startup_timeout, "startup_timeout")
            offsets = None
            conn_id = self.kafka_conn_id or spec.kafka_conn_id
            if conn_id:  # lag checks, and a restarted stream with nothing to read settles at once
                from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook

                offsets = StreamKafkaHook(kafka_config_id=conn_id).broker_offsets
            side = self.records(spec.checkpoint)  # the round and its restarts: one opened checkpoint
            report = supervise(
                spec.name, side, start=lambda: self.start_stream(spec, startup_s, checkpoint=side)[0],
                policy=policy, store=lambda: self.hook.store, broker_offsets=offsets, snapshot=self.snapshot,
                parallelism=self.parallelism,
            )
        self.log.info("%s", report.message)
        return report.to_json()
