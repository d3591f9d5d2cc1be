"""A stream launched through the supervised wrapper (its application knows nothing of
streamstate) runs detached: it outlives the process that launched it, says so beside its
checkpoint (heartbeat, launch record), cannot be launched a second time on the same
checkpoint, stops gracefully when asked (the query stops, the driver exits 0 without a
traceback) and, killed, reads as dead; a driver that dies while starting is reported with
its log's error line. Real spark-submit, real broker."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import is_running, read_heartbeat
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce

pytestmark = pytest.mark.integration


PLAIN_APP = Path(__file__).resolve().parent.parent / "apps" / "plain_stream.py"


def submit_command(stack, topic: str, checkpoint: Path, *app_args: str) -> list[str]:  # noqa: ANN001
    """spark-submit on the wrapper, with an application that knows nothing of streamstate
    (the example stream's query, no heartbeat, no signal handling) and its arguments."""
    return [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
        "--jars", ",".join(stack.spark_jars), "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        launcher.supervised_application(), str(PLAIN_APP),
        "--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", str(checkpoint), "--source-topic", topic,
        "--alerts-topic", f"{topic}-alerts", "--trigger", "processing:1 second", "--max-offsets-per-trigger", "100",
        "--state-store", "hdfs", *app_args,
    ]


def submit_env() -> dict[str, str]:
    """What an activated virtualenv gives spark-submit: Spark's home and this Python."""
    import pyspark

    return {"SPARK_HOME": os.path.dirname(pyspark.__file__), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable}


def _wait(predicate, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_a_stream_launched_by_a_process_that_exits_runs_refuses_a_second_copy_and_stops_gracefully(
    stack, topic, tmp_path
) -> None:
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=41, accounts=10, events=400))
    checkpoint = tmp_path / "ckpt"
    command = submit_command(stack, topic, checkpoint)
    # The launcher is a process that exits at once, as an Airflow task does.
    script = (
        "import json, sys; from airflow_provider_streamstate.engine.streams import launcher; "
        "h = launcher.launch(json.loads(sys.argv[1]), stream='orders', checkpoint=sys.argv[2], "
        "env=json.loads(sys.argv[3]), heartbeat_interval_s=1.0); print(json.dumps(h.to_json()))"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script, json.dumps(command), str(checkpoint), json.dumps(submit_env())],
                         capture_output=True, text=True, check=True, timeout=60)
    handle = records.StreamHandle.from_json(json.loads(out.stdout))
    assert handle.stream == "orders" and handle.checkpoint == str(checkpoint)

    try:
        status = launcher.wait_until_running(handle, timeout_s=300)
        print(f"\nlaunch to first running heartbeat: {time.monotonic() - started:.1f}s")
        assert status.state == "running" and status.process_alive is True
        assert status.heartbeat is not None and status.heartbeat.state == "running"
        assert is_running(checkpoint)

        with pytest.raises(StreamRunningError, match="running on .*a second copy would corrupt it"):
            launcher.launch(command, stream="orders", checkpoint=checkpoint, env=submit_env())
        assert records.read_launch(checkpoint).handle == handle  # the refused launch wrote nothing

        _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and (b.batch_id or 0) >= 1, 120, "progress")
    finally:
        result = launcher.stop(handle, timeout_s=120)
    print(f"graceful stop: {result.seconds:.1f}s")
    assert result.outcome == "stopped", result.detail
    assert result.state == "stopped" and result.exit_code == 0
    beat = read_heartbeat(checkpoint)
    assert beat is not None and beat.state == "stopped" and beat.exception is None
    assert not is_running(checkpoint)
    assert launcher.status(checkpoint).process_alive is False
    log = Path(handle.log).read_text()
    # Two graceful paths race: the driver polls the stop request stop() writes first, and
    # gets the SIGTERM sent right after; whichever it sees first, it stops its query.
    assert re.search(r"streamstate: stopping: (signal SIGTERM|stop requested by )", log), log[-2000:]
    assert "streamstate: stopping query" in log
    assert "Traceback" not in log and "Py4J" not in log

    assert launcher.stop(handle, timeout_s=5).outcome == "not-running"  # idempotent


def test_a_killed_driver_reads_as_dead_and_its_stale_beat_no_longer_claims_the_checkpoint(
    stack, topic, tmp_path
) -> None:
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=42, accounts=5, events=100))
    checkpoint = tmp_path / "ckpt"
    handle = launcher.launch(submit_command(stack, topic, checkpoint), stream="orders", checkpoint=checkpoint,
                             env=submit_env(), heartbeat_interval_s=1.0)
    try:
        launcher.wait_until_running(handle, timeout_s=300)
    except BaseException:
        launcher.stop(handle, timeout_s=0)
        raise
    os.killpg(handle.pid, signal.SIGKILL)  # a crash: no last word from the driver

    _wait(lambda: launcher.status(checkpoint).state == "dead", 10, "dead")
    # A big JVM takes a moment to be torn down after its main thread is gone.
    _wait(lambda: launcher.status(checkpoint).exit_code is not None, 30, "the exit code")
    status = launcher.status(checkpoint)
    assert status.state == "dead" and status.process_alive is False and status.exit_code == -signal.SIGKILL
    beat = status.heartbeat
    assert beat is not None and beat.state == "running"  # its last word, now untrue
    _wait(lambda: not is_running(checkpoint), beat.stale_after_s() + 5, "the beat to go stale")
    assert launcher.stop(checkpoint, timeout_s=5).outcome == "not-running"


def test_a_driver_that_dies_while_starting_fails_the_wait_with_its_error_line(stack, topic, tmp_path) -> None:
    checkpoint = tmp_path / "ckpt"
    command = submit_command(stack, topic, checkpoint)
    command[command.index("--trigger") + 1] = "every-so-often"
    handle = launcher.launch(command, stream="orders", checkpoint=checkpoint, env=submit_env())
    with pytest.raises(launcher.StreamStartError, match=r"dead before it ran \(exit code 1\): ValueError: unknown trigger"):
        launcher.wait_until_running(handle, timeout_s=300)
    assert launcher.status(checkpoint).state == "dead"
    assert records.read_driver(checkpoint, handle.launch_id).exit_code == 1


PROBE_APP = Path(__file__).resolve().parent.parent / "apps" / "conf_probe.py"


def _cmdlines_of_group(pgid: int) -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ValueError, IndexError):
            continue
    return lines


def test_secret_confs_reach_spark_but_no_command_line_record_or_log_the_launcher_wrote_holds_them(tmp_path) -> None:
    secret_conf = f"conf-secret-{uuid.uuid4().hex}"
    awkward = f"a=b: c\\d {uuid.uuid4().hex}"  # what a properties file must escape
    secret_env = f"env-secret-{uuid.uuid4().hex}"
    checkpoint = tmp_path / "ckpt"
    probe = tmp_path / "probe.json"
    keys = ["spark.hadoop.fs.s3a.secret.key", "spark.streamstate.test.password", "spark.ui.enabled"]
    command = [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", f"spark.hadoop.fs.s3a.secret.key={secret_conf}",
        "--conf", f"spark.streamstate.test.password={awkward}",
        launcher.supervised_application(), str(PROBE_APP), str(probe), *keys,
    ]
    handle = launcher.launch(command, stream="probe", checkpoint=checkpoint,
                             env={**submit_env(), "AWS_SECRET_ACCESS_KEY": secret_env})
    seen: list[str] = []
    deadline = time.monotonic() + 240
    while (driver := records.read_driver(checkpoint, handle.launch_id)) is None or driver.exit_code is None:
        assert time.monotonic() < deadline, Path(handle.log).read_text()[-3000:]
        seen.extend(_cmdlines_of_group(handle.pid))
        time.sleep(0.2)
    assert driver.exit_code == 0, Path(handle.log).read_text()[-3000:]

    digests = json.loads(probe.read_text())
    assert digests == {keys[0]: hashlib.sha256(secret_conf.encode()).hexdigest(),
                       keys[1]: hashlib.sha256(awkward.encode()).hexdigest(), keys[2]: hashlib.sha256(b"false").hexdigest()}
    assert any("spark-submit" in c or "SparkSubmit" in c for c in seen)  # the sampling saw the driver
    for secret in (secret_conf, awkward, secret_env):
        assert not [c for c in seen if secret in c], "a secret on a command line"
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p != probe and secret.encode() in p.read_bytes()]
        assert written == [], f"a secret written to {written}"
    record = records.read_launch(checkpoint)
    assert "spark.hadoop.fs.s3a.secret.key=***" not in record.command  # moved out, not just masked
    assert not list(Path(handle.log).parent.glob("*.properties")), "the secrets file outlived the start"
    assert "2 secret conf(s) passed in a properties file" in Path(handle.log).read_text()
