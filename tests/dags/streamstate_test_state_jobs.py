"""Test DAG: validate (record only) and bisect as Spark applications on a cluster; the
stream, suite, Spark connection and the application's confs, jars and environment come in
the run's conf (`{"stream", "suite", "spark_conn_id", "spark_conf", "spark_jars",
"spark_env"}`)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.bisect import BisectSnapshotsOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator

with DAG(
    dag_id="streamstate_test_state_jobs",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "suite": Param("", type="string"),
            "spark_conn_id": Param("", type="string"), "spark_conf": Param({}, type="object"),
            "spark_jars": Param([], type="array"), "spark_env": Param({}, type="object")},
    default_args={"retries": 0},
    tags=["streamstate-tests"],
) as dag:
    cluster = {"spark_conn_id": "{{ params.spark_conn_id }}", "spark_conf": "{{ params.spark_conf }}",
               "spark_jars": "{{ params.spark_jars }}", "spark_env": "{{ params.spark_env }}", "job_timeout": 900}
    latest = ValidateSnapshotOperator(
        task_id="validate_latest", stream="{{ params.stream }}", suite="{{ params.suite }}", snapshot="latest",
        fail_on_failure=False, **cluster,
    )
    bisect = BisectSnapshotsOperator(task_id="bisect", stream="{{ params.stream }}", suite="{{ params.suite }}",
                                     **cluster)
    latest >> bisect
