"""The driver's last heartbeat stays its last: Spark's listener bus delivers progress and
idle events late, after `finish()` wrote `stopped` from the driver's own view of the query;
such an event must not turn the record back to `running` (the stream would look alive until
the record went stale, and a stop that succeeded would read as one that did not)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.jobs.runtime import attach_heartbeat


class _Streams:
    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def addListener(self, listener: Any) -> None:  # noqa: N802 - Spark's name
        self.listeners.append(listener)


def test_a_progress_event_after_the_last_beat_leaves_it_stopped(tmp_path: Path) -> None:
    spark = SimpleNamespace(streams=_Streams(), version="4.1.3")
    listener: Any = attach_heartbeat(spark, str(tmp_path), interval_s=3600)  # type: ignore[arg-type]
    listener.onQueryStarted(SimpleNamespace(id="q1", runId="r1", name="orders"))
    progress = SimpleNamespace(progress=SimpleNamespace(id="q1", batchId=3, numInputRows=10))
    listener.onQueryProgress(progress)
    assert read_heartbeat(str(tmp_path)).state == "running"

    stopped_query = SimpleNamespace(isActive=False, id="q1", exception=lambda: None,
                                    lastProgress={"batchId": 3, "durationMs": {"addBatch": 5}})
    listener.finish(stopped_query)
    listener.onQueryProgress(progress)  # delivered late by the listener bus
    listener.onQueryIdle(SimpleNamespace(id="q1"))
    beat = read_heartbeat(str(tmp_path))
    assert (beat.state, beat.batch_id) == ("stopped", 3)
