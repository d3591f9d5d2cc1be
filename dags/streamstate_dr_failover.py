"""Disaster-recovery failover of one stream, triggered by hand when its primary region is lost.

fence the primary (stop it if reachable; refuse unless `force` when its state is unknown)
-> fail over (the newest snapshot in the DR store whose Kafka anchors the mirror holds,
restored into the DR checkpoint with topics and offsets translated for the DR cluster; with
`standby`, the DR checkpoint is the warm standby replication keeps: promoted in place, only
its offset files written, when it holds that snapshot and verifies, else restored over)
-> start the stream in DR (the `stream` spec: DR checkpoint, DR store, DR Kafka connection,
DR sinks) -> wait, deferred, for its first committed batch, then for its lag to fall to
`max_lag` -> report RTO (trigger to first committed DR batch, and to caught up, with the
parts) and RPO in XCom and the log. The runbook is docs/runbooks/dr-failover.md.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.failover import FailoverStreamOperator, FencePrimaryStreamOperator
from airflow_provider_streamstate.operators.stream import StartStreamOperator
from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor

# With records to catch up, wait for the batch after the restored one; with none, no batch
# comes until new input arrives: any committed batch (the restored one is) will do.
FIRST_BATCH_AFTER = (
    "{{ ti.xcom_pull(task_ids='failover')['batch_id'] if ti.xcom_pull(task_ids='failover')['events_behind'] else None }}"
)

with DAG(
    dag_id="streamstate_dr_failover",
    description="Resume a stream in the DR region from its newest translatable snapshot",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "stream": Param({}, type="object", description="the stream as it runs in DR: StreamSpec dict with the DR "
                        "checkpoint (new or empty), DR store, DR Kafka connection, DR sinks"),
        "primary": Param({}, type="object", description="the primary stream's StreamSpec dict, to fence it; "
                         "empty when unknown (then force is needed)"),
        "force": Param(False, type="boolean", description="go on when the primary's state cannot be known "
                       "(fenced by other means)"),
        "snapshot": Param("", type="string", description="a snapshot id; empty: the newest that translates"),
        "kafka_conn_id": Param("", type="string", description="the DR Kafka connection; empty: the spec's"),
        "topic_map": Param([], type="array", description="SRC=DST DR topic names, over the replication policy"),
        "replication_policy": Param("default", enum=["default", "identity"],
                                    description="MirrorMaker 2's naming: <source alias>.<topic>, or the same"),
        "source_alias": Param("primary", type="string", description="the primary cluster's alias in MirrorMaker 2"),
        "suite": Param("", type="string", description="only snapshots that passed this validation suite"),
        "standby": Param(False, type="boolean", description="the stream's DR checkpoint is a warm standby kept by "
                         "replication (the scheduled snapshot DAG's dr_standby): promote it when it holds the chosen "
                         "snapshot and verifies, else restore over it"),
        "verify_standby": Param("checksums", enum=["checksums", "full"],
                                description="checksums: each file's sha256 as written, while its version is the "
                                "same; full: every byte read"),
        "max_lag": Param(0, type="integer", minimum=0, description="caught up: at most this many records behind"),
        "startup_timeout_minutes": Param(10, type="number", exclusiveMinimum=0),
    },
    tags=["streamstate", "dr"],
) as dag:
    fence = FencePrimaryStreamOperator(task_id="fence_primary", stream="{{ params.primary }}",
                                       force="{{ params.force }}")
    failover = FailoverStreamOperator(
        task_id="failover", stream="{{ params.stream }}", snapshot="{{ params.snapshot }}",
        topic_map="{{ params.topic_map }}", replication_policy="{{ params.replication_policy }}",
        source_alias="{{ params.source_alias }}", suite="{{ params.suite }}",
        kafka_conn_id="{{ params.kafka_conn_id }}", standby="{{ params.standby }}",
        verify_standby="{{ params.verify_standby }}",
    )
    start = StartStreamOperator(task_id="start_in_dr", stream="{{ params.stream }}",
                                startup_timeout="{{ params.startup_timeout_minutes * 60 }}")
    first_batch = StreamProgressSensor(
        task_id="first_batch", stream="{{ params.stream }}",
        after_batch=FIRST_BATCH_AFTER, deferrable=True, poke_interval=2,
        timeout=1800,
    )
    caught_up = KafkaLagSensor(task_id="caught_up", stream="{{ params.stream }}", max_lag="{{ params.max_lag }}",
                               kafka_conn_id="{{ params.kafka_conn_id or params.stream.get('kafka_conn_id') }}",
                               deferrable=True, poke_interval=2, timeout=3600)

    @task
    def report(fenced: dict[str, Any], restored: dict[str, Any], launched: dict[str, Any],
               lag: dict[str, Any], params: dict[str, Any] | None = None, dag_run: Any = None) -> dict[str, Any]:
        """RTO from the run's start, with its parts, and RPO as far as it can be known."""
        from airflow_provider_streamstate.engine.dr.report import failover_report

        out = failover_report(dag_run.start_date, (params or {})["stream"], fenced, restored, launched, lag)
        for line in out["lines"]:
            print(line)
        return out

    fence >> failover >> start >> first_batch >> caught_up
    report(fence.output, failover.output, start.output, caught_up.output)
