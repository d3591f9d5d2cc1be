"""Test DAGs for the pipeline operators that restore and fail over, on the pipeline given in
the run's conf (`{"pipeline": {...spec, "store", "kafka_conn_id"}, ...}`).

* `streamstate_test_pipeline_restore`: RestorePipelineOperator, in place or, with
  `clone`, as new streams on new link topics.
* `streamstate_test_pipeline_failover`: FailoverPipelineOperator onto the DR checkpoints the
  pipeline names, from the DR store.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.pipeline import FailoverPipelineOperator, RestorePipelineOperator

with DAG(
    dag_id="streamstate_test_pipeline_restore",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"pipeline": Param({}, type="object"), "snapshot": Param("latest", type="string"),
            "clone": Param(None, type=["null", "object"])},
    tags=["streamstate-tests"],
) as restore_dag:
    RestorePipelineOperator(task_id="restore", pipeline="{{ params.pipeline }}", snapshot="{{ params.snapshot }}",
                            clone="{{ params.clone }}")

with DAG(
    dag_id="streamstate_test_pipeline_failover",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"pipeline": Param({}, type="object"), "source_alias": Param("primary", type="string")},
    tags=["streamstate-tests"],
) as failover_dag:
    FailoverPipelineOperator(task_id="failover", pipeline="{{ params.pipeline }}", good_only=True,
                             replication_policy="default", source_alias="{{ params.source_alias }}")
