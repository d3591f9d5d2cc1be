"""Test DAG: replicate one snapshot of a stream to the DR store, then wait (deferrable) until
the source's newest snapshot is complete there. The run's conf: `{"stream":
StreamSpec.to_dict(), "snapshot": id, "dr_store": "s3://...", "dr_conn": "aws conn id"}`."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.sensors.replicate import SnapshotReplicaSensor

with DAG(
    dag_id="streamstate_test_replicate",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "stream": Param({}, type="object"),
        "snapshot": Param("latest", type="string"),
        "dr_store": Param("", type="string"),
        "dr_conn": Param("", type="string"),
    },
    tags=["streamstate-tests"],
) as dag:
    replicate = ReplicateSnapshotsOperator(
        task_id="replicate", stream="{{ params.stream }}", snapshots="{{ params.snapshot }}",
        destination_store="{{ params.dr_store }}", destination_storage_conn_id="{{ params.dr_conn }}", parallelism=4,
    )
    wait = SnapshotReplicaSensor(
        task_id="wait", stream="{{ params.stream }}", store="{{ params.dr_store }}", storage_conn_id="{{ params.dr_conn }}",
        snapshot="latest", deferrable=True, poke_interval=1, timeout=180,
    )
    replicate >> wait
