"""Validation and replication driven by snapshots: runs whenever a snapshot of a stream was
taken (an event on the `streamstate-snapshots` asset alias, which SnapshotStreamOperator
emits in any DAG, e.g. streamstate_scheduled_snapshot), instead of a fixed chain after the
snapshot task. Each snapshot the triggering events name is handled once:

    snapshot events -> snapshots to handle -> per snapshot (a mapped task group):
        validate     (Param `suite`: a GX suite file; a failure fails the run, deletes nothing)
        replicate    (Param `dr_store`: copied to the DR store under the same id)

Only snapshots of configured streams (the run's `streams` param, else the Airflow Variable
`streamstate_streams`) in the stream's own store are handled; others are listed in the log
and passed over, so replicas and ad-hoc snapshots elsewhere start nothing. Validations and
replications emit their own events (`streamstate-validations`, `streamstate-replicas`), never
this DAG's trigger. The DAG starts paused, as every new DAG does: unpause it to use it, and
leave the validate and replicate steps of streamstate_scheduled_snapshot unset meanwhile.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task, task_group

from airflow_provider_streamstate.assets.streams import SNAPSHOTS
from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator
from airflow_provider_streamstate.utils.renamed_arguments import DR_STORAGE_CONN
from airflow_provider_streamstate.utils.skip_unconfigured import SkipUnlessConfigured


class _Validate(SkipUnlessConfigured, ValidateSnapshotOperator):
    needs = ("suite",)


class _Replicate(SkipUnlessConfigured, ReplicateSnapshotsOperator):
    needs = ("destination_store",)


with DAG(
    dag_id="streamstate_on_snapshot",
    description="Validate and replicate to DR each new snapshot of a configured stream, as its asset event arrives",
    schedule=[SNAPSHOTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # events that arrive meanwhile are handled by the next run
    render_template_as_native_obj=True,
    params={
        "streams": Param([], type="array", description="StreamSpec dicts; empty: the Variable streamstate_streams"),
        "suite": Param("", type="string", description="a GX suite JSON file to validate each snapshot with; empty: none"),
        "dr_store": Param("", type="string", description="the DR snapshot store (s3://bucket/prefix); empty: none"),
        "dr_storage_conn_id": Param("", type="string", description="the DR store's Airflow connection (aws for S3)"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def snapshots_to_handle(params: dict[str, Any] | None = None,
                            triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """The snapshots the triggering events name, each of a configured stream in its store."""
        from airflow.sdk.exceptions import AirflowSkipException

        from airflow_provider_streamstate.assets.streams import snapshots_to_handle as named
        from airflow_provider_streamstate.utils.configured_streams import configured_streams

        events = list((triggering_asset_events or {}).get(SNAPSHOTS) or [])
        if not events:
            raise AirflowSkipException("no snapshot events: this DAG runs when a snapshot is taken")
        handled, passed_over = named([dict(e.extra or {}) for e in events], configured_streams(params))
        for line in passed_over:
            print(f"passed over {line}")
        for item in handled:
            print(f"{item['stream']['name']}: snapshot {item['snapshot_id']}")
        if not handled:
            raise AirflowSkipException(f"none of the {len(events)} snapshot event(s) names a configured stream's snapshot")
        return handled

    @task_group(group_id="snapshot")
    def each_snapshot(stream: dict[str, Any], snapshot_id: str) -> None:
        _Validate(task_id="validate", stream=stream, suite="{{ params.suite }}", snapshot=snapshot_id)
        _Replicate(
            task_id="replicate", stream=stream, destination_store="{{ params.dr_store }}",
            destination_storage_conn_id=DR_STORAGE_CONN, snapshots=snapshot_id, retries=2,
            retry_delay=timedelta(minutes=1),
        )

    each_snapshot.expand_kwargs(snapshots_to_handle())
