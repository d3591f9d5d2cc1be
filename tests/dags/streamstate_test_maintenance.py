"""Test DAGs: retention (dry run, then for real), GC and clone expiry on one store, the
same operators given bad input, and a clone made with a short ttl then expired; the stream
and store come in the run's conf (`{"stream": StreamSpec.to_dict(), "store": "file:///abs/dir"}`)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.clones import ExpireClonesOperator
from airflow_provider_streamstate.operators.gc import GarbageCollectOperator
from airflow_provider_streamstate.operators.retention import ApplyRetentionOperator
from airflow_provider_streamstate.operators.stream import CloneStreamOperator

with DAG(
    dag_id="streamstate_test_maintenance",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "store": Param("", type="string")},
    tags=["streamstate-tests"],
) as dag:
    dry = ApplyRetentionOperator(task_id="retention_dry_run", stream="{{ params.stream }}", keep_last=1,
                                 max_age="1h", dry_run=True)
    retention = ApplyRetentionOperator(task_id="retention", stream="{{ params.stream }}", keep_last=1, max_age="1h")
    gc_dry = GarbageCollectOperator(task_id="gc_dry_run", store="{{ params.store }}", grace="7h", dry_run=True)
    gc = GarbageCollectOperator(task_id="gc", store="{{ params.store }}", grace="7h")
    expire = ExpireClonesOperator(task_id="expire_clones", store="{{ params.store }}")
    dry >> retention >> gc_dry >> gc >> expire


with DAG(
    dag_id="streamstate_test_maintenance_bad_input",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "store": Param("", type="string")},
    default_args={"retries": 2},  # bad input must fail at once all the same
    tags=["streamstate-tests"],
) as bad_input_dag:
    ApplyRetentionOperator(task_id="bad_max_age", stream="{{ params.stream }}", keep_last=1, max_age="7 years")
    ApplyRetentionOperator(task_id="bad_keep_last", stream="{{ params.stream }}", keep_last=-3, max_age="1d")
    GarbageCollectOperator(task_id="grace_too_short", store="{{ params.store }}", grace="1h")


with DAG(
    dag_id="streamstate_test_clone_expiry",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "clone_checkpoint": Param("", type="string"),
            "clone_sinks": Param({}, type="object")},
    tags=["streamstate-tests"],
) as clone_expiry_dag:
    clone = CloneStreamOperator(
        task_id="clone", stream="{{ params.stream }}", clone_name="{{ params.stream.name }}-sandbox",
        clone_checkpoint="{{ params.clone_checkpoint }}", sinks="{{ params.clone_sinks }}",
        ttl=timedelta(milliseconds=10), start=False, delete_sinks_on_expiry=True,
    )
    not_yet = ExpireClonesOperator(task_id="dry_run", store="{{ params.stream.store }}", dry_run=True)
    expire = ExpireClonesOperator(task_id="expire_clones", store="{{ params.stream.store }}")
    clone >> not_yet >> expire
