"""Grow (or shrink) a stateful stream when its Kafka lag says so, and roll back on failure.

A Spark stream cannot use more executors than its state has partitions, fixed at its first
batch. This DAG gives it more, safely (docs/runbooks/rescale.md):

1. `confirm_lag`: the stream's lag stays above `lag_threshold` records on some partition for
   `sustained_minutes` (sampled every 15 s); it skips the run when the lag falls below
   (null `lag_threshold`: rescale unconditionally).
2. `stop`: the stream stops gracefully (its batch in flight finishes); when a busy stream
   had planned its next batch before the stop came, it runs once more for exactly that
   batch, so the checkpoint ends at a batch boundary (a rescale never drops a planned batch).
3. `rescale`: RescaleStreamOperator, in place, to `partitions`: Spark's offline repartition
   on a verified copy of a new snapshot of the stopped stream; the source snapshot is pinned.
4. `restart`: the stream starts from its rescaled checkpoint with `restart_conf` over its
   spec's confs (e.g. `spark.executor.instances`, on YARN through the launcher) and
   `restart_master` when given.
5. `caught_up`: its lag falls to `caught_up_lag` within an hour (`CATCH_UP_SECONDS`).
6. `rollback` (when anything above failed): the stream stopped, the pinned snapshot restored
   over its checkpoint when the rescale had put its state in place, and the stream started
   as it was. The run stays failed: the rescale did not happen (`rescaled`, its last task,
   is reached only when it did).

Trigger it by hand, from a lag alert (TriggerDagRunOperator after a KafkaLagSensor that
timed out), or give it a schedule: `confirm_lag` makes a run without sustained lag a no-op.
`stream` is a StreamSpec dict or the name of a stream in the Variable `streamstate_streams`.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.rescale import RescaleStreamOperator
from airflow_provider_streamstate.operators.stream import StopStreamOperator
from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor

SAMPLE_SECONDS = 15
CATCH_UP_SECONDS = 3600  # how long the grown stream may take to catch up before the rollback

with DAG(
    dag_id="streamstate_rescale",
    description="Rescale a stream's state partitions when its lag stays high; roll back on failure",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two rescales of one stream must never overlap
    render_template_as_native_obj=True,
    params={
        "stream": Param({}, type=["object", "string"], description="StreamSpec dict, or a configured stream's name"),
        "partitions": Param(1, type="integer", minimum=1, description="the number of state partitions"),
        "restart_conf": Param({}, type="object", description="Spark confs over the spec's for the restart"),
        "restart_master": Param(None, type=["null", "string"], description="the restart's master (null: the spec's)"),
        "lag_threshold": Param(None, type=["null", "integer"], minimum=0,
                               description="rescale only when some partition lags more records than this"),
        "sustained_minutes": Param(5, type="number", minimum=0, description="for this long"),
        "caught_up_lag": Param(0, type="integer", minimum=0, description="lag at which the stream has caught up"),
        "repartition_timeout_minutes": Param(None, type=["null", "number"], exclusiveMinimum=0,
                                             description="how long the repartition may run (null: no limit)"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def confirm_lag(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The stream's spec (secrets as `***`), once its lag stayed above the threshold."""
        import time

        from airflow.sdk.exceptions import AirflowSkipException

        from airflow_provider_streamstate.engine.streams.health import check_lag
        from airflow_provider_streamstate.hooks.kafka import StreamKafkaHook
        from airflow_provider_streamstate.hooks.store import open_checkpoint
        from airflow_provider_streamstate.utils.configured_streams import stream_spec
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        p = params or {}
        with engine_errors():
            spec = stream_spec(p["stream"])
        threshold = p.get("lag_threshold")
        if threshold is None:
            return spec.redacted().to_dict()
        if not spec.kafka_conn_id:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"stream {spec.name} names no kafka_conn_id: its lag cannot be measured")
        brokers = StreamKafkaHook(kafka_config_id=spec.kafka_conn_id).broker_offsets
        checkpoint = open_checkpoint(spec.checkpoint, spec.storage_conn_id)
        deadline = time.monotonic() + float(p.get("sustained_minutes") or 0) * 60
        while True:
            with engine_errors():
                lag = check_lag(checkpoint, max_lag=int(threshold), broker_offsets=brokers)
            worst = max((part.lag for part in lag.partitions), default=0)
            if lag.batch_id is None or worst <= int(threshold):
                raise AirflowSkipException(f"stream {spec.name} lags {worst} records at most, not above "
                                           f"{threshold}: no rescale")
            print(f"stream {spec.name} lags up to {worst} records (batch {lag.batch_id})")
            if time.monotonic() >= deadline:
                return spec.redacted().to_dict()
            time.sleep(SAMPLE_SECONDS)

    @task
    def restart(spec: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start the stream from its rescaled checkpoint, with the restart's confs."""
        import logging

        from airflow_provider_streamstate.streams.start import start_stream
        from airflow_provider_streamstate.utils.configured_streams import stream_spec
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        p = params or {}
        with engine_errors():
            full = stream_spec(spec)
            grown = full.derive(conf={**full.conf, **{str(k): str(v) for k, v in (p.get("restart_conf") or {}).items()}},
                                master=p.get("restart_master") or full.master)
            handle, status, _ = start_stream(grown, startup_timeout_s=900, log=logging.getLogger("streamstate"))
        return {**handle.to_json(), "query_id": status.heartbeat.query_id if status.heartbeat else None}

    @task(trigger_rule="one_failed")
    def rollback(spec: dict[str, Any], ti: Any = None) -> dict[str, Any]:
        """Put the stream back as it was: the pinned snapshot restored when the rescale put its
        state in place, and the stream started with its own spec."""
        import logging

        from airflow_provider_streamstate.streams.start import put_back
        from airflow_provider_streamstate.utils.configured_streams import stream_spec
        from airflow_provider_streamstate.utils.task_errors import engine_errors

        rescaled = ti.xcom_pull(task_ids="rescale") if ti is not None else None
        with engine_errors():
            return put_back(stream_spec(spec), (rescaled or {}).get("pinned"), start=True,
                            requested_by="streamstate_rescale rollback", log=logging.getLogger("streamstate"))

    spec = confirm_lag()
    stop = StopStreamOperator(task_id="stop", stream=spec, timeout=300, finish_planned_batch=True)
    rescale = RescaleStreamOperator(
        task_id="rescale", stream=spec, partitions="{{ params.partitions }}",
        timeout="{{ params.repartition_timeout_minutes * 60 if params.repartition_timeout_minutes else None }}",
    )
    restarted = restart(spec)
    caught_up = KafkaLagSensor(task_id="caught_up", stream="{{ ti.xcom_pull(task_ids='confirm_lag') }}",
                               max_lag="{{ params.caught_up_lag }}",
                               poke_interval=10, timeout=CATCH_UP_SECONDS)
    @task
    def rescaled(result: dict[str, Any]) -> dict[str, Any]:
        """The run's outcome: reached only once the rescaled stream caught up (a failure
        anywhere before fails it, so the run stays failed after a rollback)."""
        return {k: result[k] for k in ("stream", "from_partitions", "to_partitions", "rescaled_snapshot", "pinned")}

    stop >> rescale >> restarted >> caught_up
    [stop, rescale, restarted, caught_up] >> rollback(spec)
    caught_up >> rescaled(rescale.output)
