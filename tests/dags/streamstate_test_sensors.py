"""Test DAGs: one deferrable sensor each, on the stream given in the run's conf
(`{"stream": StreamSpec.to_dict(), "after_batch": N}`): wait for progress after batch N,
or for the stream to be within 10 records of its Kafka topics' ends."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor

with DAG(
    dag_id="streamstate_test_progress_sensor",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "after_batch": Param(0, type="integer")},
    tags=["streamstate-tests"],
) as progress_dag:
    StreamProgressSensor(
        task_id="progress", stream="{{ params.stream }}", after_batch="{{ params.after_batch }}",
        deferrable=True, poke_interval=1, timeout=180,
    )

with DAG(
    dag_id="streamstate_test_lag_sensor",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object")},
    tags=["streamstate-tests"],
) as lag_dag:
    KafkaLagSensor(task_id="lag", stream="{{ params.stream }}", max_lag=10, deferrable=True, poke_interval=1, timeout=180)
