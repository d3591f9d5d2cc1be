"""Test DAG: bootstrap a stream's new checkpoint from a table of its state, every argument
from the run's conf (`{"stream": StreamSpec.to_dict(), "skeleton": "/abs/ckpt", "table":
"s3://.../state.jsonl", "offsets": [...] or null}`)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.edit import StateBootstrapOperator

with DAG(
    dag_id="streamstate_test_bootstrap",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "skeleton": Param("", type="string"),
            "table": Param("", type="string"), "offsets": Param(None, type=["null", "array"])},
    tags=["streamstate-tests"],
) as dag:
    StateBootstrapOperator(
        task_id="bootstrap", stream="{{ params.stream }}", skeleton="{{ params.skeleton }}",
        table="{{ params.table }}", offsets="{{ params.offsets }}", spark_check=False,
    )
