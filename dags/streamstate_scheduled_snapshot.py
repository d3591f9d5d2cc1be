"""Scheduled snapshots: every 15 minutes, a consistent snapshot of each configured stream.

Streams come from the run's `streams` param (a list of StreamSpec dicts, for a manual
run) or, on schedule, from the Airflow Variable `streamstate_streams` (the same list as
JSON). One mapped task per stream, so one slow or failing stream does not hold up the
others. Validation, replication to the DR store and retention follow `snapshot` here as
they land.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_streamstate.configured import configured_streams as configured
from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator

with DAG(
    dag_id="streamstate_scheduled_snapshot",
    description="Snapshot each configured stream on a schedule",
    schedule=timedelta(minutes=15),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "streams": Param(
            [], type="array", description="StreamSpec dicts; empty: the Variable streamstate_streams",
        ),
    },
    tags=["streamstate"],
) as dag:

    @task
    def configured_streams(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The streams to snapshot, each checked before any snapshot starts."""
        return configured(params)

    streams = configured_streams()
    snapshots = SnapshotStreamOperator.partial(
        task_id="snapshot", labels={"trigger": "scheduled"}, retries=2, retry_delay=timedelta(seconds=30),
    ).expand(stream=streams)

    @task(trigger_rule="all_done")
    def record(streams: list[dict[str, Any]], results: list[dict[str, Any]] | None) -> dict[str, Any]:
        """One line per stream in the log and a summary in XCom; fails the run when a
        stream's snapshot failed (its `snapshot` task says why), so the run is not green."""
        from airflow.sdk.exceptions import AirflowFailException

        rows = [r for r in (results or []) if r]
        for r in rows:
            print(f"{r['stream']}: {'reused' if r['reused'] else 'new'} {r['snapshot_id']} batch {r['batch_id']}, "
                  f"{r['bytes_uploaded']} bytes uploaded in {r['seconds']}s")
        missing = sorted({s["name"] for s in streams} - {r["stream"] for r in rows})
        if missing:
            raise AirflowFailException(f"no snapshot of {len(missing)} of {len(streams)} streams: {', '.join(missing)} "
                                       "(each failed snapshot task says why)")
        return {"snapshots": len(rows), "new": sum(1 for r in rows if not r["reused"]),
                "bytes_uploaded": sum(r["bytes_uploaded"] for r in rows)}

    record(streams, snapshots.output)
