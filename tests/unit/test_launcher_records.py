"""The launcher's bookkeeping, with small stand-in drivers instead of Spark: a driver that
exits before its query runs is reported dead with its log's error line; a launch that is
still starting blocks a second one; a driver that ignores SIGTERM is killed after the
timeout; a heartbeat older than the launch belongs to an earlier run; records and labels
round-trip and a stop request is seen only by drivers started before it."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint import sidecar
from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.core.errors import StreamRunningError, StreamstateError, UsageError
from airflow_provider_streamstate.engine.streams import clones, launcher, records


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


def test_a_stop_request_is_seen_only_by_drivers_started_before_it(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    before = datetime.now(UTC) - timedelta(seconds=5)
    open_sidecar(checkpoint).write(records.STOP_FILE, (
        f'{{"format": "{records.STOP_FORMAT}", "requested_at": "{now_iso()}", "by": "task stop"}}').encode())
    assert records.stop_requested(checkpoint, since=before) == f"stop requested by task stop at {_requested(checkpoint)}"
    assert records.stop_requested(checkpoint, since=datetime.now(UTC) + timedelta(seconds=5)) is None


def _requested(checkpoint: Path) -> str:
    import json

    return json.loads((checkpoint / records.STOP_FILE).read_text())["requested_at"]


def test_records_and_clone_labels_round_trip(tmp_path: Path) -> None:
    handle = records.StreamHandle("orders", "/c", "L1", 42, "h", "/c/x.log", now_iso())
    assert records.StreamHandle.from_json({**handle.to_json(), "query_id": "q", "reconnected": True}) == handle
    with pytest.raises(UsageError, match="not a stream handle"):
        records.StreamHandle.from_json({"stream": "orders"})

    label = clones.CloneLabel.new(clone="orders-sandbox", source_stream="orders", source_checkpoint="/c",
                                    snapshot_id="s1", batch_id=7, query_id="q2", sinks={"alerts": "a2"}, ttl_s=60)
    clones.write_clone_label(tmp_path, label)
    assert clones.read_clone_label(tmp_path) == label
    assert not label.expired() and label.expired(datetime.now(UTC) + timedelta(seconds=61))


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


def _record(ckpt: Path, generation: int, launch_id: str) -> None:
    handle = records.StreamHandle("orders", str(ckpt), launch_id, 4242, "elsewhere", "", now_iso(), generation)
    open_sidecar(ckpt).create(f"{sidecar.LAUNCHES_DIR}/{generation:08d}.json",
                              records.LaunchRecord(handle, ["spark-submit"], 4242, None).to_json())


def test_the_newest_generation_is_the_launch_and_old_records_still_read(tmp_path: Path) -> None:
    from tests.unit.fake_checkpoint import write

    legacy = records.LaunchRecord(records.StreamHandle("orders", str(tmp_path), "L-0", 4242, "h", "", now_iso()),
                                   ["spark-submit"], 4242, None)
    write(tmp_path / records.LAUNCH_FILE, legacy.to_json())
    assert records.read_launch(tmp_path).handle.launch_id == "L-0"  # a release before generations
    _record(tmp_path, 1, "L-1")
    _record(tmp_path, 2, "L-2")
    assert records.launch_generations(tmp_path) == [1, 2]
    got = records.read_launch(tmp_path).handle
    assert (got.launch_id, got.generation) == ("L-2", 2)
    assert launcher.superseded_by(tmp_path, 1).handle.launch_id == "L-2"
    assert launcher.superseded_by(tmp_path, 2) is None
    assert launcher.superseded_by(tmp_path, 3) is None  # its own record is not written yet


def test_a_driver_whose_launch_was_superseded_refuses_to_start_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_streamstate.jobs import supervised

    _record(tmp_path, 1, "L-1")
    _record(tmp_path, 2, "L-2")
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('the application must not run')\n")
    monkeypatch.setenv(launcher.ENV_CHECKPOINT, str(tmp_path))
    monkeypatch.setenv(launcher.ENV_LAUNCH_ID, "L-1")
    monkeypatch.setenv(launcher.ENV_LAUNCH_GENERATION, "1")
    assert supervised.main([str(app)]) == 3
    assert records.read_driver(tmp_path) is None


def test_what_a_driver_died_of_is_recorded_beside_the_checkpoint_for_every_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its log is on the host that launched it; the driver record is where everyone looks."""
    from airflow_provider_streamstate.jobs import supervised

    _record(tmp_path, 1, "L-1")  # launched from another host
    app = tmp_path / "app.py"
    app.write_text("raise ValueError('no such topic: orders\\nsecond line')\n")
    monkeypatch.setenv(launcher.ENV_CHECKPOINT, str(tmp_path))
    monkeypatch.setenv(launcher.ENV_LAUNCH_ID, "L-1")
    monkeypatch.setenv(launcher.ENV_LAUNCH_GENERATION, "1")
    with pytest.raises(ValueError, match="no such topic"):
        supervised.main([str(app)])
    driver = records.read_driver(tmp_path, "L-1")
    assert driver is not None and driver.exit_code == 1
    assert driver.error == "builtins.ValueError: no such topic: orders"
    st = launcher.status(tmp_path)
    assert st.state == "dead" and st.last_error == "builtins.ValueError: no such topic: orders"
