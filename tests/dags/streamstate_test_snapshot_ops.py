"""Test DAG: snapshot a stream, verify it, restore it as a clone; the stream comes in the
run's conf (`{"stream": StreamSpec.to_dict(), "target": "/abs/dir"}`)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.snapshot import (
    RestoreSnapshotOperator,
    SnapshotStreamOperator,
    VerifySnapshotsOperator,
)

with DAG(
    dag_id="streamstate_test_snapshot_ops",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "target": Param("", type="string")},
    tags=["streamstate-tests"],
) as dag:
    snapshot = SnapshotStreamOperator(task_id="snapshot", stream="{{ params.stream }}", labels={"run": "{{ run_id }}"})
    verify = VerifySnapshotsOperator(task_id="verify", stream="{{ params.stream }}", snapshot="latest")
    restore = RestoreSnapshotOperator(
        task_id="restore", stream="{{ params.stream }}", snapshot="{{ ti.xcom_pull(task_ids='snapshot')['snapshot_id'] }}",
        target="{{ params.target }}", new_query_id=True,
    )
    snapshot >> verify >> restore


with DAG(
    dag_id="streamstate_test_bad_input",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={name: Param({}, type="object") for name in ("unknown_connection", "unreachable_store", "running_stream")},
    default_args={"retries": 2},  # bad input must fail at once all the same
    tags=["streamstate-tests"],
) as bad_input_dag:
    for name in ("unknown_connection", "unreachable_store", "running_stream"):
        RestoreSnapshotOperator(task_id=name, stream="{{ params." + name + " }}", force=True)
