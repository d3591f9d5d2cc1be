"""Fail a stream back from the DR region to its primary region once the primary is back.

The failover in reverse, planned rather than forced: stop the stream in DR (its last batch
committed) -> snapshot its final state there (anchored in the DR cluster) -> replicate that
snapshot to the primary store -> fail over into the primary checkpoint (new or empty), its
offsets translated for the primary cluster, which the reverse mirror (DR -> primary) feeds;
waiting up to `mirror_timeout_minutes` for the mirror to hold the snapshot's last records ->
start the stream in the primary region -> wait, deferred, for its first batch and for its lag
to fall to `max_lag` -> report RTO and RPO. The runbook is docs/runbooks/dr-failover.md.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.failover import FailoverStreamOperator, FencePrimaryStreamOperator
from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
from airflow_provider_streamstate.operators.stream import StartStreamOperator
from airflow_provider_streamstate.sensors.kafka import KafkaLagSensor
from airflow_provider_streamstate.sensors.stream import StreamProgressSensor

FINAL = "{{ ti.xcom_pull(task_ids='final_snapshot')['snapshot_id'] }}"

# With records to catch up, wait for the batch after the restored one; with none, no batch
# comes until new input arrives: any committed batch (the restored one is) will do.
FIRST_BATCH_AFTER = (
    "{{ ti.xcom_pull(task_ids='failback')['batch_id'] if ti.xcom_pull(task_ids='failback')['events_behind'] else None }}"
)

with DAG(
    dag_id="streamstate_dr_failback",
    description="Move a stream back from the DR region to its primary region, exactly",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "stream": Param({}, type="object", description="the stream as it will run in the primary region: "
                        "StreamSpec dict with a new or empty checkpoint, the primary store, the primary Kafka "
                        "connection, the primary sinks"),
        "dr": Param({}, type="object", description="the stream as it runs in DR now: StreamSpec dict with its DR "
                    "checkpoint, DR store and DR Kafka connection (for the final snapshot's anchors)"),
        "topic_map": Param([], type="array", description="SRC=DST: primary-side names of the DR topics, over the "
                           "replication policy"),
        "replication_policy": Param("identity", enum=["default", "identity"],
                                    description="the reverse mirror's naming: identity keeps the names"),
        "source_alias": Param("dr", type="string", description="the DR cluster's alias in the reverse mirror"),
        "mirror_timeout_minutes": Param(10, type="number", minimum=0,
                                        description="how long the reverse mirror may take to bring the final "
                                        "snapshot's last records over"),
        "max_lag": Param(0, type="integer", minimum=0, description="caught up: at most this many records behind"),
        "startup_timeout_minutes": Param(10, type="number", exclusiveMinimum=0),
    },
    tags=["streamstate", "dr"],
) as dag:
    stop_in_dr = FencePrimaryStreamOperator(task_id="stop_in_dr", stream="{{ params.dr }}")
    final_snapshot = SnapshotStreamOperator(task_id="final_snapshot", stream="{{ params.dr }}",
                                            labels={"reason": "failback"})
    to_primary = ReplicateSnapshotsOperator(
        task_id="replicate_to_primary", stream="{{ params.dr }}", snapshots=FINAL,
        destination_store="{{ params.stream.store }}",
        destination_storage_conn_id="{{ params.stream.get('storage_conn_id') or params.stream.get('aws_conn_id') or '' }}",
    )
    failback = FailoverStreamOperator(
        task_id="failback", stream="{{ params.stream }}", snapshot=FINAL, topic_map="{{ params.topic_map }}",
        replication_policy="{{ params.replication_policy }}", source_alias="{{ params.source_alias }}",
        mirror_timeout="{{ params.mirror_timeout_minutes * 60 }}",
    )
    start = StartStreamOperator(task_id="start_in_primary", stream="{{ params.stream }}",
                                startup_timeout="{{ params.startup_timeout_minutes * 60 }}")
    first_batch = StreamProgressSensor(
        task_id="first_batch", stream="{{ params.stream }}",
        after_batch=FIRST_BATCH_AFTER, deferrable=True, poke_interval=2,
        timeout=1800,
    )
    caught_up = KafkaLagSensor(task_id="caught_up", stream="{{ params.stream }}", max_lag="{{ params.max_lag }}",
                               deferrable=True, poke_interval=2, timeout=3600)

    @task
    def report(stopped: dict[str, Any], restored: dict[str, Any], launched: dict[str, Any],
               lag: dict[str, Any], params: dict[str, Any] | None = None, dag_run: Any = None) -> dict[str, Any]:
        """RTO from the run's start, with its parts; RPO of a planned failback."""
        from airflow_provider_streamstate.engine.dr.report import failover_report

        out = failover_report(dag_run.start_date, (params or {})["stream"], stopped, restored, launched, lag,
                              kind="failback")
        for line in out["lines"]:
            print(line)
        return out

    stop_in_dr >> final_snapshot >> to_primary >> failback >> start >> first_batch >> caught_up
    report(stop_in_dr.output, failback.output, start.output, caught_up.output)
