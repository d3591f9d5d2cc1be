"""Scheduled pipeline snapshots: every 15 minutes, for each configured pipeline (streams
linked by Kafka topics), one consistent cut of all its members with its channel records,
then (each step when configured) its validation as a unit, its replication to the DR store
as a unit and retention of pipeline snapshots in both stores.

Per pipeline (a mapped task group, so one slow or failing pipeline does not hold up others):

    snapshot -> validate -> replicate -> retention_dr   (validate: the pipeline's `suites`;
                                                         replicate: Param `dr_store`)
                                      -> retention      (Param `keep_last`; null: keep every
                                                         pipeline snapshot)

The validation fails its task when a member's suite fails (the snapshot is recorded as not
good: `latest-good` and `failover --good-only` pass over it); the replication and the
retention run after it whatever its outcome.

Pipelines come from the run's `pipelines` param (a list of dicts: the pipeline spec's
`name`, `members`, `links`, plus `store`, `kafka_conn_id` and optionally `storage_conn_id`,
`suites` {member: GX suite} and `spark_conn_id` for the validation) or, on schedule, from
the Airflow Variable `streamstate_pipelines` (the same list as JSON).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task, task_group

from airflow_provider_streamstate.operators.pipeline import (
    PipelineRetentionOperator,
    ReplicatePipelineOperator,
    SnapshotPipelineOperator,
    ValidatePipelineOperator,
)
from airflow_provider_streamstate.utils.renamed_arguments import DR_STORAGE_CONN
from airflow_provider_streamstate.utils.skip_unconfigured import SkipUnlessConfigured

PIPELINES_VARIABLE = "streamstate_pipelines"


class _Replicate(SkipUnlessConfigured, ReplicatePipelineOperator):
    needs = ("destination_store",)


class _Validate(ValidatePipelineOperator):
    """Skipped for a pipeline that names no suites."""

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowSkipException

        if not self.suites and not self.configured.suites:
            raise AirflowSkipException(f"pipeline {self.configured.spec.name} names no suites: add "
                                       "suites {member: GX suite} to validate its snapshots")
        return super().execute(context)


class _Retention(SkipUnlessConfigured, PipelineRetentionOperator):
    needs = ("keep_last",)


class _RetentionDr(SkipUnlessConfigured, PipelineRetentionOperator):
    needs = ("store", "keep_last")


with DAG(
    dag_id="streamstate_pipeline_snapshot",
    description="A consistent cut of each configured pipeline, replicated to DR, with retention",
    schedule=timedelta(minutes=15),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "pipelines": Param([], type="array", description=f"pipeline dicts; empty: the Variable {PIPELINES_VARIABLE}"),
        "dr_store": Param("", type="string", description="the DR snapshot store (s3://bucket/prefix); empty: none"),
        "dr_storage_conn_id": Param("", type="string", description="the DR store's Airflow connection (aws for S3)"),
        "keep_last": Param(96, type=["integer", "null"], description="pipeline snapshots kept in each store; null: all"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def configured_pipelines(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The pipelines to snapshot, each checked before any cut starts."""
        import json

        from airflow.sdk import Variable
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.operators.base import ConfiguredPipeline

        pipelines = (params or {}).get("pipelines") or json.loads(Variable.get(PIPELINES_VARIABLE, default="[]"))
        if not pipelines:
            raise AirflowSkipException(f"no pipelines configured: set the Variable {PIPELINES_VARIABLE} "
                                       "or the pipelines param")
        try:
            for p in pipelines:
                ConfiguredPipeline.of(p)
        except UsageError as exc:
            raise AirflowFailException(exc.one_line()) from exc
        return list(pipelines)

    @task_group(group_id="pipeline")
    def each_pipeline(pipeline: dict[str, Any]) -> None:
        snapshot = SnapshotPipelineOperator(task_id="snapshot", pipeline=pipeline, labels={"trigger": "scheduled"},
                                            retries=2, retry_delay=timedelta(seconds=30))
        # The cut this run took (not whatever is newest by then); a transient error retries.
        validate = _Validate(
            task_id="validate", pipeline=pipeline, retries=2, retry_delay=timedelta(seconds=30),
            snapshot="{{ ti.xcom_pull(task_ids='pipeline.snapshot', map_indexes=ti.map_index)['snapshot_id'] }}")
        # Whatever the validation said: a snapshot that failed it is kept, marked not good.
        replicate = _Replicate(task_id="replicate", pipeline=pipeline, destination_store="{{ params.dr_store }}",
                               destination_storage_conn_id=DR_STORAGE_CONN, retries=2,
                               retry_delay=timedelta(minutes=1), trigger_rule="all_done")
        retention_dr = _RetentionDr(task_id="retention_dr", pipeline=pipeline, keep_last="{{ params.keep_last }}",
                                    store="{{ params.dr_store or None }}",
                                    storage_conn_id=DR_STORAGE_CONN)
        # After the replication (done or skipped): it must not copy a snapshot retention is deleting.
        retention = _Retention(task_id="retention", pipeline=pipeline, keep_last="{{ params.keep_last }}",
                               trigger_rule="all_done")
        snapshot >> validate >> replicate >> [retention_dr, retention]

    each_pipeline.expand(pipeline=configured_pipelines())
