"""The checks behind the sensors decide from the checkpoint and the records beside it:
progress is a committed batch newer than the one asked for (and recent enough, with a
freshness window); a stream that cannot progress — stale heartbeat, driver gone, query
stopped or failed — is FAILED at once, naming why; lag is the broker's end offset minus
the offsets of the newest committed batch. Synthetic checkpoints, heartbeats and launch
records only."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import PartitionOffsets
from airflow_provider_streamstate.engine.streams.health import (
    FAILED,
    READY,
    WAITING,
    check_lag,
    check_progress,
)
from airflow_provider_streamstate.engine.streams.records import LAUNCH_FILE, LaunchRecord, StreamHandle
from tests.unit.fake_checkpoint import make_checkpoint, write

NOW = datetime.now(UTC)


def beat(**changes: object) -> Heartbeat:
    base = Heartbeat(query_id="q-1", run_id="r-1", query_name="orders", host="elsewhere", pid=4242,
                     state="running", batch_id=2, input_rows=10, updated_at=now_iso(), interval_s=1.0)
    return replace(base, **changes)  # type: ignore[arg-type]


def ago(seconds: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()


def launched(ckpt: Path, *, started_at: str, host: str = "elsewhere", pid: int = 4343, log: str = "") -> None:
    """A launch record as the launcher writes it."""
    handle = StreamHandle("orders", str(ckpt), "L-1", pid, host, log, started_at)
    write(ckpt / LAUNCH_FILE, LaunchRecord(handle, ["spark-submit", "orders.py"], pid, None).to_json())


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """Batches 0..2 committed; offsets {"tx": {"0": 30, "1": 60}} at batch 2."""
    return make_checkpoint(tmp_path / "ckpt", batches=3)


# --- progress ---------------------------------------------------------------------------


def test_a_batch_after_the_one_asked_for_is_progress(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat())
    done = check_progress(str(ckpt), after_batch=1)
    assert done.outcome == READY
    assert done.batch_id == 2
    assert done.state == "running"
    assert done.heartbeat_age_s is not None and done.heartbeat_age_s < 5
    assert set(done.to_json()) == {"batch_id", "state", "heartbeat_age_s", "progress_age_s"}


def test_the_batch_asked_for_itself_is_not_progress_yet(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat())
    waiting = check_progress(str(ckpt), after_batch=2)
    assert waiting.outcome == WAITING
    assert "waiting for one after 2" in waiting.message


def test_without_after_batch_any_committed_batch_is_progress(ckpt: Path, tmp_path: Path) -> None:
    assert check_progress(str(ckpt)).outcome == READY
    empty = make_checkpoint(tmp_path / "empty", batches=0)
    write_heartbeat(empty, beat(state="starting", batch_id=None))
    assert check_progress(str(empty)).outcome == WAITING


def test_a_stream_that_has_not_created_its_checkpoint_yet_is_waited_for(tmp_path: Path) -> None:
    waiting = check_progress(str(tmp_path / "not-yet"))
    assert waiting.outcome == WAITING
    assert waiting.batch_id is None
    assert "no heartbeat" in waiting.message


def test_freshness_asks_for_a_recent_commit(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat())
    old = time.time() - 600
    os.utime(ckpt / "commits/2", (old, old))
    stale = check_progress(str(ckpt), freshness_s=60)
    assert stale.outcome == WAITING
    assert stale.progress_age_s is not None and stale.progress_age_s >= 600
    assert "within 60s" in stale.message
    assert check_progress(str(ckpt), freshness_s=3600).outcome == READY
    os.utime(ckpt / "commits/2")
    assert check_progress(str(ckpt), after_batch=1, freshness_s=60).outcome == READY


def test_a_stale_heartbeat_means_the_stream_is_dead(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(updated_at=ago(120)))  # stale after 3 * 1 s + 10 s
    dead = check_progress(str(ckpt), after_batch=2)
    assert dead.outcome == FAILED
    assert "dead or hung" in dead.message
    assert "host elsewhere, pid 4242" in dead.message


def test_a_driver_gone_from_this_host_is_dead_before_its_heartbeat_goes_stale(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(host=socket.gethostname(), pid=dead_pid()))
    dead = check_progress(str(ckpt), after_batch=2)
    assert dead.outcome == FAILED
    assert "driver process is gone" in dead.message
    write_heartbeat(ckpt, beat(host=socket.gethostname(), pid=os.getpid()))
    assert check_progress(str(ckpt), after_batch=2).outcome == WAITING


def test_a_failed_query_fails_the_check_naming_its_exception(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="failed", exception="org.apache.spark.SparkException: Job aborted"))
    failed = check_progress(str(ckpt), after_batch=2)
    assert failed.outcome == FAILED
    assert "failed at batch 2: org.apache.spark.SparkException: Job aborted" in failed.message
    assert failed.state == "failed"


def test_a_failure_names_the_driver_logs_last_error_line_when_the_launcher_recorded_the_log(ckpt: Path, tmp_path: Path) -> None:
    log = write(tmp_path / "driver.log", "\n".join([
        "26/01/01 10:00:00 INFO MicroBatchExecution: Streaming query made progress",
        "26/01/01 10:00:01 ERROR MicroBatchExecution: Query orders terminated with error",
        "Traceback (most recent call last):",
        '  File "/opt/jobs/orders.py", line 3, in <module>',
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] boom",
        "26/01/01 10:00:02 INFO SparkContext: Successfully stopped SparkContext",
    ]))
    launched(ckpt, started_at=ago(300), log=str(log))
    write_heartbeat(ckpt, beat(state="failed", exception="StreamingQueryException: boom"))
    failed = check_progress(str(ckpt), after_batch=2)
    assert failed.outcome == FAILED
    assert failed.message.endswith(
        f"driver log {log}: pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] boom")


def test_a_stopped_query_makes_no_more_progress(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="stopped"))
    stopped = check_progress(str(ckpt), after_batch=2)
    assert stopped.outcome == FAILED
    assert "stopped at batch 2" in stopped.message


def test_progress_already_made_succeeds_even_if_the_stream_stopped_since(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="stopped"))
    done = check_progress(str(ckpt), after_batch=1)
    assert done.outcome == READY
    assert done.state == "stopped"


def test_a_heartbeat_older_than_the_latest_launch_belongs_to_the_previous_run(ckpt: Path) -> None:
    write_heartbeat(ckpt, beat(state="stopped", updated_at=ago(3600)))
    launched(ckpt, started_at=ago(5))
    starting = check_progress(str(ckpt), after_batch=2)
    assert starting.outcome == WAITING
    assert starting.state == "starting"
    assert "waiting for its first heartbeat" in starting.message
    launched(ckpt, started_at=ago(3600))  # on another host, past the launcher's startup grace
    never = check_progress(str(ckpt), after_batch=2)
    assert never.outcome == FAILED
    assert "has not written a heartbeat" in never.message


def test_a_driver_that_exits_before_its_first_heartbeat_fails_the_check_at_once(ckpt: Path) -> None:
    launched(ckpt, started_at=ago(2), host=socket.gethostname(), pid=dead_pid())
    gone = check_progress(str(ckpt), after_batch=2)
    assert gone.outcome == FAILED
    assert gone.state == "dead"
    assert "exited before its first heartbeat" in gone.message


def test_a_driver_launched_here_may_take_its_time_while_its_process_lives(ckpt: Path) -> None:
    launched(ckpt, started_at=ago(3600), host=socket.gethostname(), pid=os.getpid())
    starting = check_progress(str(ckpt), after_batch=2)
    assert starting.outcome == WAITING
    assert "is starting" in starting.message


@pytest.mark.parametrize("kwargs", [{"after_batch": -1}, {"after_batch": True}, {"freshness_s": 0}])
def test_nonsense_arguments_are_refused(ckpt: Path, kwargs: dict) -> None:
    with pytest.raises(UsageError):
        check_progress(str(ckpt), **kwargs)


# --- lag --------------------------------------------------------------------------------


def broker(ends: dict[tuple[str, int], int]):  # noqa: ANN201
    """A fake broker: high watermarks per (topic, partition); records what it was asked."""
    asked: list[dict] = []

    def offsets(recorded: dict[str, dict[str, int]]) -> list[PartitionOffsets]:
        asked.append(recorded)
        return [PartitionOffsets(t, int(p), o, 0, ends[(t, int(p))]) for t, ps in recorded.items() for p, o in ps.items()]

    offsets.asked = asked  # type: ignore[attr-defined]
    return offsets


def test_lag_is_the_brokers_end_minus_the_newest_committed_batchs_offsets(ckpt: Path) -> None:
    fake = broker({("tx", 0): 45, ("tx", 1): 60})
    behind = check_lag(str(ckpt), max_lag=10, broker_offsets=fake)
    assert fake.asked == [{"tx": {"0": 30, "1": 60}}]  # offsets/2, the newest committed batch
    assert behind.outcome == WAITING
    assert behind.to_json() == {
        "max_lag": 10, "batch_id": 2, "total_lag": 15,
        "partitions": [{"topic": "tx", "partition": 0, "committed": 30, "end": 45, "lag": 15},
                       {"topic": "tx", "partition": 1, "committed": 60, "end": 60, "lag": 0}],
    }
    assert "largest 15 at tx[0]" in behind.message
    assert check_lag(str(ckpt), max_lag=15, broker_offsets=fake).outcome == READY


def test_an_uncommitted_batch_does_not_count(ckpt: Path) -> None:
    write(ckpt / "offsets/3", (ckpt / "offsets/2").read_text().replace("30", "45"))  # planned, not committed
    assert check_lag(str(ckpt), max_lag=0, broker_offsets=broker({("tx", 0): 45, ("tx", 1): 60})).outcome == WAITING


def test_a_checkpoint_with_no_committed_batch_is_not_ready(tmp_path: Path) -> None:
    empty = make_checkpoint(tmp_path / "empty", batches=0)
    result = check_lag(str(empty), max_lag=0, broker_offsets=broker({}))
    assert result.outcome == WAITING
    assert "no committed batch yet" in result.message
    assert check_lag(str(tmp_path / "absent"), max_lag=0, broker_offsets=broker({})).outcome == WAITING


def test_a_checkpoint_ahead_of_the_broker_fails_the_check(ckpt: Path) -> None:
    result = check_lag(str(ckpt), max_lag=100, broker_offsets=broker({("tx", 0): 5, ("tx", 1): 60}))
    assert result.outcome == FAILED
    assert "tx[0] at 30 > end 5" in result.message
    assert "recreated or truncated" in result.message


def test_a_vanished_topic_is_named_as_the_streams_topic(ckpt: Path) -> None:
    def gone(_: dict) -> list[PartitionOffsets]:
        raise NotFoundError("topic tx of the snapshot does not exist at 127.0.0.1:9", hint="check --kafka-bootstrap")

    with pytest.raises(NotFoundError) as info:
        check_lag(str(ckpt), max_lag=0, broker_offsets=gone)
    assert info.value.message == f"topic tx that the stream on {ckpt} reads does not exist at 127.0.0.1:9"
    assert "Kafka connection" in (info.value.hint or "")
    assert not info.value.retryable


def test_a_stream_without_a_kafka_source_has_no_lag(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "rate", batches=1)
    write(root / "offsets/0", (root / "offsets/0").read_text().splitlines()[0] + "\n"
          + (root / "offsets/0").read_text().splitlines()[1] + "\n1234")
    with pytest.raises(UsageError, match="reads no Kafka source"):
        check_lag(str(root), max_lag=0, broker_offsets=broker({}))


@pytest.mark.parametrize("max_lag", [-1, True, 1.5])
def test_max_lag_must_be_a_count_of_records(ckpt: Path, max_lag: object) -> None:
    with pytest.raises(UsageError, match="max_lag"):
        check_lag(str(ckpt), max_lag=max_lag, broker_offsets=broker({}))  # type: ignore[arg-type]
