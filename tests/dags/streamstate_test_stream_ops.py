"""Test DAGs for the stream operators, on the stream given in the run's conf
(`{"stream": StreamSpec.to_dict(), "clone_checkpoint": "/abs/dir", "clone_sinks": {...}}`).

* `streamstate_test_stream_lifecycle`: start the stream (the first try fails right after
  the start, as a worker lost at that moment would, and the retry must reconnect), wait
  for progress, snapshot it, clone the snapshot (not started), stop the stream (even when
  a task before failed: a test must not leave a driver behind).
* `streamstate_test_clone_into_production`: a clone with production's sinks, refused.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Context, Param

from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.operators.stream import (
    CloneStreamOperator,
    StartStreamOperator,
    StopStreamOperator,
)
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor


class StartThenLoseTheWorker(StartStreamOperator):
    """Starts the stream, then fails its first try as a worker lost after the launch would."""

    def execute(self, context: Context) -> dict[str, Any]:
        handle = super().execute(context)
        if context["ti"].try_number == 1:
            raise RuntimeError("worker lost right after the stream started")
        return handle


PARAMS = {
    "stream": Param({}, type="object"),
    "clone_checkpoint": Param("", type="string"),
    "clone_sinks": Param({}, type="object"),
}

with DAG(
    dag_id="streamstate_test_stream_lifecycle",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params=PARAMS,
    tags=["streamstate-tests"],
) as lifecycle_dag:
    start = StartThenLoseTheWorker(
        task_id="start", stream="{{ params.stream }}", startup_timeout=300, retries=1, retry_delay=timedelta(0),
    )
    progress = StreamProgressSensor(
        task_id="progress", stream="{{ params.stream }}", after_batch=0, poke_interval=1, timeout=180,
    )
    snapshot = SnapshotStreamOperator(task_id="snapshot", stream="{{ params.stream }}")
    clone = CloneStreamOperator(
        task_id="clone", stream="{{ params.stream }}", clone_name="{{ params.stream.name }}-sandbox",
        clone_checkpoint="{{ params.clone_checkpoint }}", sinks="{{ params.clone_sinks }}",
        snapshot="{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}", ttl=timedelta(hours=6), start=False,
    )
    stop = StopStreamOperator(task_id="stop", stream="{{ params.stream }}", timeout=120, trigger_rule="all_done")
    start >> progress >> snapshot >> clone >> stop

with DAG(
    dag_id="streamstate_test_clone_into_production",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params=PARAMS,
    default_args={"retries": 2},  # a clone into production must fail at once all the same
    tags=["streamstate-tests"],
) as clone_refused_dag:
    CloneStreamOperator(
        task_id="clone", stream="{{ params.stream }}", clone_name="{{ params.stream.name }}-sandbox",
        clone_checkpoint="{{ params.clone_checkpoint }}", sinks="{{ params.clone_sinks }}",
    )
