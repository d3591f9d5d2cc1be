"""Scheduled snapshots: every 15 minutes, for each configured stream, a consistent snapshot,
then (each step when configured) its validation, its replication to the DR store, and
retention in both stores.

Per stream (a mapped task group, so one slow or failing stream does not hold up others):

    snapshot -> validate            (Param `suite`: a GX suite file; a failure alerts, deletes nothing)
             -> replicate -> replica_complete -> retention_dr   (Param `dr_store`; with
                                     `dr_standby`, replicate also keeps the stream's warm
                                     standby in DR holding its newest snapshot)
             -> retention           (Param `retention`; after validation, so the newest
                                     known-good snapshot is kept; null: no retention)

Streams come from the run's `streams` param (a list of StreamSpec dicts, for a manual run)
or, on schedule, from the Airflow Variable `streamstate_streams` (the same list as JSON).
The run fails when any stream's snapshot, validation or replication failed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task, task_group

from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.operators.retention import ApplyRetentionOperator
from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator
from airflow_provider_streamstate.sensors.replicate import SnapshotReplicaSensor
from airflow_provider_streamstate.utils.configured_streams import configured_streams as configured
from airflow_provider_streamstate.utils.renamed_arguments import DR_STORAGE_CONN
from airflow_provider_streamstate.utils.skip_unconfigured import SkipUnlessConfigured


class _Validate(SkipUnlessConfigured, ValidateSnapshotOperator):
    needs = ("suite",)


class _Replicate(SkipUnlessConfigured, ReplicateSnapshotsOperator):
    needs = ("destination_store",)


class _ReplicaComplete(SkipUnlessConfigured, SnapshotReplicaSensor):
    needs = ("store",)


class _Retention(SkipUnlessConfigured, ApplyRetentionOperator):
    needs = ("keep_last",)


with DAG(
    dag_id="streamstate_scheduled_snapshot",
    description="Snapshot, validate, replicate to DR and apply retention for each configured stream",
    schedule=timedelta(minutes=15),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "streams": Param([], type="array", description="StreamSpec dicts; empty: the Variable streamstate_streams"),
        "suite": Param("", type="string", description="a GX suite JSON file to validate each snapshot with; empty: none"),
        "dr_store": Param("", type="string", description="the DR snapshot store (s3://bucket/prefix); empty: none"),
        "dr_storage_conn_id": Param("", type="string", description="the DR store's Airflow connection (aws for S3)"),
        "dr_standby": Param("", type="string", description="each stream's warm standby in DR, `{stream}` for its "
                            "name (s3a://bucket/standby/{stream}), kept holding its newest snapshot (only changed "
                            "files written); `streamstate_dr_failover` with standby promotes it; empty: none"),
        "retention": Param(
            {"keep_last": 96, "max_age": "1d", "keep_hourly": "7d", "keep_daily": "30d", "abandoned_max_age": "1d"},
            type=["object", "null"], description="the retention policy of both stores; null: keep everything",
        ),
    },
    tags=["streamstate"],
) as dag:

    @task
    def configured_streams(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The streams to snapshot, each checked before any snapshot starts."""
        return configured(params)

    @task_group(group_id="stream")
    def each_stream(stream: dict[str, Any]) -> None:
        retention = "{{ (params.retention or {}).get('%s') }}"
        policy = {
            "keep_last": retention % "keep_last", "max_age": retention % "max_age",
            "keep_hourly": retention % "keep_hourly", "keep_daily": retention % "keep_daily",
            "abandoned_max_age": retention % "abandoned_max_age",
        }
        snapshot = SnapshotStreamOperator(
            task_id="snapshot", stream=stream, labels={"trigger": "scheduled"}, retries=2,
            retry_delay=timedelta(seconds=30),
        )
        # This stream's snapshot (the group's map index is this task's).
        snapshot_id = "{{ ti.xcom_pull(task_ids='stream.snapshot', map_indexes=ti.map_index)['snapshot_id'] }}"
        validate = _Validate(task_id="validate", stream=stream, suite="{{ params.suite }}", snapshot=snapshot_id)
        replicate = _Replicate(
            task_id="replicate", stream=stream, destination_store="{{ params.dr_store }}",
            destination_storage_conn_id=DR_STORAGE_CONN, snapshots=[snapshot_id], retries=2,
            retry_delay=timedelta(minutes=1), standby="{{ params.dr_standby or None }}",
        )
        replica = _ReplicaComplete(
            task_id="replica_complete", stream=stream, store="{{ params.dr_store }}",
            storage_conn_id=DR_STORAGE_CONN, snapshot=snapshot_id, deferrable=True,
            poke_interval=10, timeout=600,
        )
        retention_dr = _Retention(
            task_id="retention_dr", stream=stream, store="{{ params.dr_store or None }}",
            storage_conn_id=DR_STORAGE_CONN, **policy,
        )
        retention_primary = _Retention(task_id="retention", stream=stream, trigger_rule="all_done", **policy)
        snapshot >> validate >> retention_primary
        snapshot >> replicate >> replica >> retention_dr  # skipped with the replica when there is no DR store
        replicate >> retention_primary

    streams = configured_streams()
    each = each_stream.expand(stream=streams)

    @task(trigger_rule="all_done")
    def record(streams: list[dict[str, Any]], params: dict[str, Any] | None = None, ti: Any = None) -> dict[str, Any]:
        """One line per stream in the log and a summary in XCom; fails the run when a stream's
        snapshot, or a configured validation or replication, did not succeed (its task says why)."""
        from airflow.sdk.exceptions import AirflowFailException

        def pulled(task_id: str) -> list[Any]:
            got = ti.xcom_pull(task_ids=f"stream.{task_id}", map_indexes=list(range(len(streams))))
            values = list(got) if isinstance(got, list | tuple) else [got]
            return values + [None] * (len(streams) - len(values))

        params = params or {}
        problems = []
        snapshots, validations, replicas = pulled("snapshot"), pulled("validate"), pulled("replicate")
        for spec, snap, checked, copied in zip(streams, snapshots, validations, replicas, strict=True):
            if not snap:
                problems.append(f"{spec['name']}: no snapshot")
                continue
            line = (f"{spec['name']}: {'reused' if snap['reused'] else 'new'} {snap['snapshot_id']} batch "
                    f"{snap['batch_id']}, {snap['bytes_uploaded']} bytes uploaded in {snap['seconds']}s")
            if params.get("suite"):
                if not checked:
                    problems.append(f"{spec['name']}: {snap['snapshot_id']} not validated")
                else:
                    line += f"; suite {checked['suite']}: {'passed' if checked['success'] else 'FAILED'}"
                    if not checked["success"]:  # a failed suite records its outcome before failing
                        problems.append(f"{spec['name']}: {snap['snapshot_id']} failed suite {checked['suite']}")
            if params.get("dr_store"):
                if not copied:
                    problems.append(f"{spec['name']}: {snap['snapshot_id']} not replicated to {params['dr_store']}")
                else:
                    line += f"; {copied.get('bytes_copied', 0)} bytes replicated to DR"
                    if copied.get("standby"):
                        line += (f"; standby holds {copied['standby']['snapshot_id']} "
                                 f"({copied['standby']['bytes_written']} bytes written)")
            print(line)
        if problems:
            raise AirflowFailException(f"{len(problems)} problem(s): {'; '.join(problems)} (each failed task says why)")
        done = [s for s in snapshots if s]
        return {"snapshots": len(done), "new": sum(1 for s in done if not s["reused"]),
                "bytes_uploaded": sum(s["bytes_uploaded"] for s in done)}

    each >> record(streams)
