"""The demo's own DAGs (`make demo`), next to the product DAGs of dags/: start the example
stream and wait for its first batch; clone it from its newest snapshot, then stop it.
Both take the stream as the `stream` param (a StreamSpec dict)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.stream import (
    CloneStreamOperator,
    StartStreamOperator,
    StopStreamOperator,
)
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor

PARAMS = {
    "stream": Param({}, type="object", description="the stream, a StreamSpec dict"),
    "clone_checkpoint": Param("", type="string"),
    "clone_sinks": Param({}, type="object"),
}

with DAG(
    dag_id="streamstate_demo_start",
    description="Start the demo stream and wait for its first committed batch",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params=PARAMS,
    tags=["streamstate", "demo"],
) as start_dag:
    start = StartStreamOperator(task_id="start", stream="{{ params.stream }}", startup_timeout=300)
    first_batch = StreamProgressSensor(
        task_id="first_batch", stream="{{ params.stream }}", deferrable=True, poke_interval=2,
        timeout=300,
    )
    start >> first_batch

with DAG(
    dag_id="streamstate_demo_clone_and_stop",
    description="Clone the demo stream from its newest snapshot (not started), then stop the stream",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params=PARAMS,
    tags=["streamstate", "demo"],
) as clone_dag:
    clone = CloneStreamOperator(
        task_id="clone", stream="{{ params.stream }}", clone_name="{{ params.stream.name }}-sandbox",
        clone_checkpoint="{{ params.clone_checkpoint }}", sinks="{{ params.clone_sinks }}",
        snapshot="latest", ttl=timedelta(hours=2), start=False,
    )
    stop = StopStreamOperator(task_id="stop", stream="{{ params.stream }}", timeout=120, trigger_rule="all_done")
    clone >> stop
