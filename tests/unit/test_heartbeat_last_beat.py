"""The driver's last heartbeat stays its last: Spark's listener bus delivers progress and
idle events late, after `finish()` wrote `stopped` from the driver's own view of the query;
such an event must not turn the record back to `running` (the stream would look alive until
the record went stale, and a stop that succeeded would read as one that did not). And there
is a last beat even when neither Spark's event nor the driver's stop wrote one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.jobs import supervised
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


def _started(tmp_path: Path, listeners: list[Any]) -> Any:
    spark = SimpleNamespace(streams=_Streams(), version="4.1.3")
    listener: Any = attach_heartbeat(spark, str(tmp_path), interval_s=3600)  # type: ignore[arg-type]
    listener.onQueryStarted(SimpleNamespace(id="q1", runId="r1", name="orders"))
    listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(id="q1", batchId=3, numInputRows=10)))
    listeners.append(listener)
    return listener


@pytest.mark.parametrize(("exit_code", "error", "state", "why"), [
    (0, None, "stopped", None),
    (1, None, "failed", "the driver exited with status 1"),
    (1, "ValueError: bad input", "failed", "ValueError: bad input"),
])
def test_an_application_that_stops_its_query_and_spark_itself_still_leaves_a_last_beat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int, error: str | None, state: str,
        why: str | None) -> None:
    """The application stopped its query before the supervisor saw it (no query left to
    `finish`) and stopped Spark before the listener bus delivered the query's end: the
    driver's exit writes the last beat, which says how the driver ended."""
    monkeypatch.setattr(supervised, "LAST_EVENT_WAIT_S", 0.01)
    supervisor = supervised.Supervisor(str(tmp_path), launch_id="L1", interval_s=3600, query_name=None,
                                       stop_batch_wait_s=0)
    _started(tmp_path, supervisor.listeners)
    supervisor.finish(exit_code, error)
    beat = read_heartbeat(str(tmp_path))
    assert (beat.state, beat.batch_id, beat.exception) == (state, 3, why)


def test_the_last_beat_spark_or_the_stop_wrote_is_not_written_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervised, "LAST_EVENT_WAIT_S", 0.01)
    supervisor = supervised.Supervisor(str(tmp_path), launch_id="L1", interval_s=3600, query_name=None,
                                       stop_batch_wait_s=0)
    listener = _started(tmp_path, supervisor.listeners)
    listener.onQueryTerminated(SimpleNamespace(id="q1", exception="StreamingQueryException: boom"))
    supervisor.finish(0, None)  # the driver exited 0 after its query failed: Spark's event said it
    beat = read_heartbeat(str(tmp_path))
    assert (beat.state, beat.exception) == ("failed", "StreamingQueryException: boom")


def test_the_last_beat_never_overwrites_one_sparks_event_wrote_just_before(tmp_path: Path) -> None:
    """Spark's event can come as the driver's wait for it ends: its `failed` stays."""
    listener = _started(tmp_path, [])
    listener._write(state="failed", exception="StreamingQueryException: boom")  # its event, not yet marked done
    listener.close(None)
    assert read_heartbeat(str(tmp_path)).state == "failed"


def test_the_stops_own_interrupt_is_a_clean_stop_in_the_last_beat_too(tmp_path: Path) -> None:
    listener = _started(tmp_path, [])
    listener.stopping = True  # the driver stopped the query; the application then died of the interrupt
    listener.close("StreamingQueryException: ... java.lang.InterruptedException")
    beat = read_heartbeat(str(tmp_path))
    assert (beat.state, beat.exception) == ("stopped", None)


def test_the_timer_beats_only_when_no_event_beat_for_an_interval(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each beat is a write (a PUT on S3): a stream reporting batches more often than the
    interval is not also written by the timer, and a long batch with no event still beats."""
    import time

    from airflow_provider_streamstate.engine.checkpoint import liveness

    written: list[str] = []
    monkeypatch.setattr(liveness, "write_heartbeat", lambda _where, beat: written.append(beat.state))
    spark = SimpleNamespace(streams=_Streams(), version="4.1.3")
    listener: Any = attach_heartbeat(spark, str(tmp_path), interval_s=1.0)  # type: ignore[arg-type]
    listener.onQueryStarted(SimpleNamespace(id="q1", runId="r1", name="orders"))
    try:
        for batch in range(15):  # a batch every 0.1 s for 1.5 s: three of the timer's checks
            listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(id="q1", batchId=batch, numInputRows=1)))
            time.sleep(0.1)
        assert written == ["starting"] + ["running"] * 15
        time.sleep(2.5)  # a long batch: no event for 2.5 intervals
        assert 1 <= len(written) - 16 <= 2
    finally:
        listener.onQueryTerminated(SimpleNamespace(id="q1", exception=None))
