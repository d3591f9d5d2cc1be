"""engine/streams/launcher.py with small stand-in drivers instead of Spark: a driver that
exits before its query runs is reported dead with its log's error line; a launch that is
still starting blocks a second one; a driver that ignores SIGTERM is killed after the
timeout; a heartbeat older than the launch belongs to an earlier run; a driver's own exit
record wins over a lost last beat; a checkpoint where no records can live is refused.
Launches on a cluster: test_cluster_launch.py (YARN), test_kubernetes_driver.py."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import (
    HEARTBEAT_FILE,
    Heartbeat,
    now_iso,
    write_heartbeat,
)
from airflow_provider_streamstate.engine.core.errors import StreamRunningError, StreamstateError, UsageError
from airflow_provider_streamstate.engine.streams import launcher, records


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_driver_that_exits_before_running_is_dead_with_its_error_line(tmp_path: Path) -> None:
    handle = launcher.launch(
        py("import sys; print('ERROR SparkContext: noise'); print('ValueError: unknown trigger x'); "
           "print('INFO ShutdownHookManager: bye'); sys.exit(3)"),
        stream="orders", checkpoint=tmp_path / "ckpt",
    )
    with pytest.raises(launcher.StreamStartError, match=r"dead before it ran \(exit code 3\): ValueError: unknown trigger x"):
        launcher.wait_until_running(handle, timeout_s=30, poll_s=0.05)
    status = launcher.status(tmp_path / "ckpt")
    assert (status.state, status.exit_code, status.process_alive) == ("dead", 3, False)
    assert Path(handle.log).parent == tmp_path / "ckpt" / records.LOG_DIR


def test_a_starting_driver_blocks_a_second_launch_and_one_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    stubborn = py("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                  "time.sleep(120)")
    handle = launcher.launch(stubborn, stream="orders", checkpoint=checkpoint)
    assert launcher.status(checkpoint).state == "starting"
    assert launcher.running_handle(checkpoint) == handle
    with pytest.raises(StreamRunningError, match="a driver is starting on"):
        launcher.launch(stubborn, stream="orders", checkpoint=checkpoint)

    time.sleep(0.5)  # let it install its handler
    result = launcher.stop(handle, timeout_s=1.0)
    assert result.outcome == "killed" and 1.0 <= result.seconds < 20
    assert launcher.status(checkpoint).state == "dead"
    assert launcher.stop(handle, timeout_s=1.0).outcome == "not-running"


def test_a_heartbeat_older_than_the_launch_belongs_to_an_earlier_run(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    old = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    write_heartbeat(checkpoint, Heartbeat(query_id="q", run_id="r", query_name="orders", host="h", pid=1,
                                          state="stopped", batch_id=9, input_rows=0, updated_at=old))
    assert launcher.status(checkpoint).state == "stopped"
    handle = launcher.launch(py("import time; time.sleep(60)"), stream="orders", checkpoint=checkpoint)
    try:
        status = launcher.status(checkpoint)
        assert status.state == "starting" and status.heartbeat is None
    finally:
        launcher.stop(handle, timeout_s=5)


def test_a_checkpoint_where_no_records_can_live_is_refused_with_a_hint(monkeypatch) -> None:
    with pytest.raises(UsageError, match="cannot keep a stream's records beside gs://bucket/ckpt") as exc:
        launcher.status("gs://bucket/ckpt")
    assert "docs/deployment.md" in exc.value.one_line()
    assert launcher.local_checkpoint("file:///data/ckpt") == Path("/data/ckpt")
    # An S3 checkpoint keeps its records beside it: without credentials, that is what is said.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StreamstateError, match="no AWS credentials to (read|list) _streamstate/launch.* in s3a://bucket-x/ckpt"):
        launcher.status("s3a://bucket-x/ckpt")


@pytest.mark.parametrize(("exit_code", "state"), [(0, "stopped"), (1, "dead")])
def test_a_running_beat_whose_driver_recorded_its_exit_reads_as_that_exit(
    tmp_path: Path, exit_code: int, state: str
) -> None:
    """The listener's last beat is asynchronous and can be lost when a driver stops; the
    driver's own exit record then says how it ended."""
    checkpoint = tmp_path / "ckpt"
    handle = launcher.launch(py("import time; time.sleep(0.2)"), stream="orders", checkpoint=checkpoint)
    write_heartbeat(checkpoint, Heartbeat(query_id="q", run_id="r", query_name="orders", host="h", pid=handle.pid,
                                          state="running", batch_id=3, input_rows=5, updated_at=now_iso()))
    records.write_driver(checkpoint, records.DriverRecord(
        handle.launch_id, handle.host, handle.pid, handle.started_at,
        exit_code=exit_code, exited_at=now_iso(), stop_reason="stop requested"))
    deadline = time.monotonic() + 10
    while launcher.status(checkpoint).process_alive is not False:
        assert time.monotonic() < deadline, "the stand-in driver did not exit"
        time.sleep(0.05)
    assert launcher.status(checkpoint).state == state


def test_a_status_reads_the_heartbeat_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read is a GET beside an S3 checkpoint, and waits, stops and the supervisor ask for
    the status several times a second: the record read decides whether it is fresh too."""
    from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar

    checkpoint = tmp_path / "ckpt"
    handle = launcher.launch(py("import time; time.sleep(60)"), stream="orders", checkpoint=checkpoint)
    try:
        write_heartbeat(checkpoint, Heartbeat(query_id="q", run_id="r", query_name="orders", host="h",
                                              pid=handle.pid, state="running", batch_id=3, input_rows=1,
                                              updated_at=now_iso(), launch_id=handle.launch_id))
        reads: list[str] = []
        original = Sidecar.read

        def counted(self: Sidecar, name: str, *args: object, **kwargs: object) -> bytes | None:
            reads.append(name)
            return original(self, name, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Sidecar, "read", counted)
        assert launcher.status(checkpoint).state == "running"
        assert reads.count(HEARTBEAT_FILE) == 1, reads
    finally:
        launcher.stop(handle, timeout_s=1.0)
