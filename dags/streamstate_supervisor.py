"""Stream supervision: every 5 minutes, one round per configured stream.

A running stream is checked (lag within `max_lag` records, a batch committed within
`freshness_minutes` while records wait); a stream whose driver died or whose query failed
is restarted from its checkpoint; when that restart fails because the checkpoint is
unusable, the newest verified snapshot is restored over it and the stream restarted from
there (the report says which). A stream stopped on request is left alone. An unhealthy
stream fails its mapped task with one line saying why: that failure is the alert (route
it with the DAG's `on_failure_callback` or your alerting on failed tasks).

Streams come from the run's `streams` param or the Variable `streamstate_streams`, as for
`streamstate_scheduled_snapshot`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.operators.supervise import SuperviseStreamOperator
from airflow_provider_streamstate.utils.configured_streams import configured_streams as configured

with DAG(
    dag_id="streamstate_supervisor",
    description="Keep each configured stream running: check, restart, restore a verified snapshot",
    schedule=timedelta(minutes=5),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two rounds must never restart the same stream at once
    render_template_as_native_obj=True,
    params={
        "streams": Param([], type="array", description="StreamSpec dicts; empty: the Variable streamstate_streams"),
        "max_lag": Param(None, type=["null", "integer"], minimum=0,
                         description="most records any partition may lag; null: not checked"),
        "freshness_minutes": Param(None, type=["null", "number"], exclusiveMinimum=0,
                                   description="a batch must commit this often while records wait; null: not checked"),
        "restore": Param("checkpoint-errors", enum=["checkpoint-errors", "any-failure", "never"],
                         description="when a failed restart restores the newest verified snapshot"),
        "settle_seconds": Param(180, type="number", exclusiveMinimum=0,
                                description="how long a restarted stream is watched for its first batch"),
    },
    tags=["streamstate"],
) as dag:

    @task
    def configured_streams(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The streams to supervise, each checked before any is touched."""
        return configured(params)

    streams = configured_streams()
    rounds = SuperviseStreamOperator.partial(
        task_id="supervise",
        max_lag="{{ params.max_lag }}",
        freshness="{{ params.freshness_minutes * 60 if params.freshness_minutes else None }}",
        restore="{{ params.restore }}",
        settle="{{ params.settle_seconds }}",
        max_active_tis_per_dagrun=4,
    ).expand(stream=streams)

    @task(trigger_rule="all_done")
    def record(streams: list[dict[str, Any]], results: list[dict[str, Any]] | None) -> dict[str, Any]:
        """One line per stream in the log and what was done in XCom; fails the run when a
        stream's round failed (each failed `supervise` task says why)."""
        from airflow.sdk.exceptions import AirflowFailException

        rows = [r for r in (results or []) if r]
        for r in rows:
            print(f"{r['stream']}: {r['action']} ({r['state_before']}): {r['message']}")
        unhealthy = sorted({s["name"] for s in streams} - {r["stream"] for r in rows})
        if unhealthy:
            raise AirflowFailException(f"{len(unhealthy)} of {len(streams)} streams unhealthy: {', '.join(unhealthy)} "
                                       "(each failed supervise task says why)")
        return {"streams": len(rows), "actions": {r["stream"]: r["action"] for r in rows},
                "restored": {r["stream"]: r["restored_snapshot"] for r in rows if r["restored_snapshot"]}}

    record(streams, rounds.output)
