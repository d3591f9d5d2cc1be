"""The example stream consumes generated events and its state is exactly what was sent;
under spark-submit it behaves as getting-started says: started before its topics exist it
creates them, it prints one line per committed batch, and SIGTERM or Ctrl-C stops it
cleanly (exit 0, no traceback) at a committed batch it resumes from."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.engine.checkpoint.liveness import read_heartbeat
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.state.spark import read_state
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from dev import local_fs
from tests.streams import run_to_end, wait_for

pytestmark = pytest.mark.integration


def _state_by_account(spark, checkpoint: str, operator_id: int = 0) -> dict[str, dict[str, int]]:
    rows = read_state(spark, checkpoint, operatorId=operator_id).collect()
    return {r.key.account: r.value.asDict() for r in rows}


def test_stream_state_equals_the_generators_aggregates(stack, spark, topic, tmp_path) -> None:
    spec = GeneratorSpec(seed=5, accounts=40, events=900, duplicate_rate=0.1)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = str(tmp_path / "ckpt")
    args = StreamArgs(
        stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
        trigger="available-now", max_offsets_per_trigger=300, threshold_cents=1_200_000,
    )
    query = start_query(spark, args)
    query.awaitTermination(240)
    assert query.exception() is None
    batches = sorted(int(p.name) for p in (tmp_path / "ckpt" / "commits").iterdir() if p.name.isdigit())
    assert len(batches) >= 3

    expected = expected_aggregates([spec])
    assert _state_by_account(spark, checkpoint) == expected

    # Alerts reach the output topic: exactly the accounts whose total passed the threshold.
    over = {a for a, v in expected.items() if v["sum"] >= 1_200_000}
    assert over and over != set(expected), "the spec should put some, not all, accounts over the threshold"
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": "alerts", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(f"{topic}-alerts", 0, 0)])
    alerted: set[str] = set()
    for _ in range(30):
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error() is None:
                alerted.add(json.loads(msg.value())["account"])
        if alerted >= over:
            break
    consumer.close()
    assert alerted == over


def test_windowed_query_keeps_event_time_windows_and_a_watermark(stack, spark, topic, tmp_path) -> None:
    spec = GeneratorSpec(seed=9, accounts=5, events=400)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = str(tmp_path / "ckpt")
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      query="windows", trigger="available-now", max_offsets_per_trigger=150, watermark="1 minute")
    query = start_query(spark, args)
    query.awaitTermination(240)
    assert query.exception() is None
    assert query.lastProgress["eventTime"]["watermark"] > "2023-11-14T22"
    rows = read_state(spark, checkpoint).collect()
    # Windows older than the watermark were evicted: the state holds only recent ones.
    assert 0 < len(rows) < 5 * (400 // 60 + 1)


def spark_submit(
    stack, job_args: list[str], *, path_first: Path | None = None, **popen: Any  # noqa: ANN001
) -> subprocess.Popen[str]:
    """The example stream under spark-submit, as getting-started runs it (local master, the
    stack's connector jars, the venv's Python), in its own session like a terminal's job;
    `path_first`: a folder of commands found before the system's, for Hadoop's own local
    filesystem to run (not the suite's forkless one: dev/local_fs.py)."""
    import pyspark

    import airflow_provider_streamstate.jobs.example_stream as job

    submit = Path(sys.executable).parent / "spark-submit"
    path = os.environ["PATH"] if path_first is None else f"{path_first}{os.pathsep}{os.environ['PATH']}"
    env = dict(os.environ) if path_first is None else local_fs.hadoops_own(os.environ)
    return subprocess.Popen(
        [str(submit), "--master", "local[2]", "--jars", ",".join(stack.spark_jars),
         "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
         job.__file__, "--bootstrap-servers", stack.kafka_bootstrap, *job_args],
        text=True, start_new_session=True,
        # What an activated virtualenv gives spark-submit: Spark's home and this Python.
        env={**env, "SPARK_HOME": os.path.dirname(pyspark.__file__), "PATH": path,
             "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
        **popen,
    )


def slow_chmod(folder: Path) -> Path:
    """A `chmod` that takes half a second on a batch's own writes (state deltas, the commit
    log) and leaves a mark while it does. Spark's local filesystem runs chmod for every file
    it writes (without the suite's forkless one), in the driver's process group: a Ctrl-C then
    kills the write in flight."""
    real = shutil.which("chmod")
    (folder / "bin").mkdir()
    (folder / "live").mkdir()
    script = folder / "bin" / "chmod"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  */commits/*|*.delta*) touch "{folder}/live/$$"; sleep 0.5; rm -f "{folder}/live/$$" ;;\n'
        "esac\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return folder / "bin"


class Lines:
    """Every line a stream of the child writes, collected by a thread as it comes."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self.thread.start()

    def text(self) -> str:
        self.thread.join(30)
        return "".join(self.lines)


BATCH_LINE = re.compile(r"^batch (\d+): (\d+) input rows, (\d+) ms, (\d+) state rows$")


def batch_lines(out: Lines) -> list[tuple[int, int, int, int]]:
    return [tuple(int(g) for g in m.groups()) for ln in list(out.lines) if (m := BATCH_LINE.match(ln.strip()))]


def last_committed(checkpoint: Path) -> int:
    return CheckpointReader(str(checkpoint)).committed_batches()[-1]


def clean_exit(proc: subprocess.Popen[str], out: Lines, err: Lines, timeout: float = 180) -> str:
    """What the driver printed (spark-submit passes the Python side's stdout and stderr to
    its stdout), once it exited 0 without a Python traceback or a Py4J error anywhere."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"the stream did not stop within {timeout:.0f}s: {out.text()[-3000:]}") from None
    printed, logged = out.text(), err.text()
    assert proc.returncode == 0, (printed + logged)[-3000:]
    for text in (printed, logged):
        assert "Traceback" not in text and "Py4J" not in text and "py4j" not in text, text[-3000:]
    return printed


def test_example_stream_runs_under_spark_submit(stack, spark, topic, tmp_path) -> None:
    spec = GeneratorSpec(seed=12, accounts=15, events=300)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = tmp_path / "ckpt"
    proc = spark_submit(stack, ["--checkpoint", str(checkpoint), "--source-topic", topic,
                                "--alerts-topic", f"{topic}-alerts", "--trigger", "available-now",
                                "--max-offsets-per-trigger", "100", "--state-store", "hdfs"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    clean_exit(proc, out, err, timeout=600)
    assert len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]) >= 3
    assert '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"' in (checkpoint / "offsets" / "0").read_text()
    assert _state_by_account(spark, str(checkpoint)) == expected_aggregates([spec])
    assert sum(rows for _, rows, _, _ in batch_lines(out)) == 300  # one line per committed batch


def test_started_before_its_topics_exist_it_creates_them_logs_batches_and_stops_on_sigterm(
    stack, spark, tmp_path
) -> None:
    """The documented order: the stream first (no topic yet), then the generator; a
    SIGTERM to spark-submit stops it cleanly, and its state is what --expected says."""
    from confluent_kafka.admin import AdminClient

    from airflow_provider_streamstate.jobs import generator

    topic = f"fresh-{uuid.uuid4().hex[:8]}"
    checkpoint = tmp_path / "ckpt"
    proc = spark_submit(stack, ["--checkpoint", str(checkpoint), "--source-topic", topic,
                                "--alerts-topic", f"{topic}-alerts", "--trigger", "processing:1 second",
                                "--partitions", "2"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        wait_for(lambda: (b := read_heartbeat(checkpoint)) and b.state == "running", timeout=180,
                 what="the stream to start")
        topics = AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=30).topics
        assert len(topics[topic].partitions) == len(topics[f"{topic}-alerts"].partitions) == 2
        time.sleep(12)  # without its topic, the query died here with UnknownTopicOrPartitionException
        assert proc.poll() is None, out.text()[-3000:]

        expected_path = tmp_path / "expected.json"
        assert generator.main(["--bootstrap-servers", stack.kafka_bootstrap, "--topic", topic, "--events", "400",
                               "--accounts", "20", "--expected", str(expected_path)]) == 0
        wait_for(lambda: sum(rows for _, rows, _, _ in batch_lines(out)) == 400, timeout=180,
                 what="batch lines adding up to the 400 transactions")
        proc.send_signal(signal.SIGTERM)  # to spark-submit: Spark's JVM
        printed = clean_exit(proc, out, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "stopped on SIGTERM" in printed
    lines = batch_lines(out)
    assert [b for b, *_ in lines] == sorted(b for b, *_ in lines) and lines[-1][3] > 0
    beat = read_heartbeat(checkpoint)
    assert beat is not None and (beat.state, beat.batch_id) == ("stopped", last_committed(checkpoint))
    expected = json.loads(expected_path.read_text())
    assert expected == expected_aggregates([GeneratorSpec(seed=7, accounts=20, events=400)])
    assert _state_by_account(spark, str(checkpoint)) == expected


@pytest.mark.parametrize("mid_write", [False, True], ids=["busy", "mid-file-write"])
def test_ctrl_c_stops_a_busy_stream_after_its_batch_and_it_resumes_exactly(
    stack, spark, topic, tmp_path, mid_write: bool
) -> None:
    """Ctrl-C in a terminal signals spark-submit's whole process group (JVM, Python, and the
    `chmod` Spark runs for each file it writes) while batches run back to back; the stream
    stops cleanly and resumes where it was. Mid-write, the Ctrl-C kills a batch's file write:
    that batch was not committed, the stop is still clean, and the batch runs on restart."""
    spec = GeneratorSpec(seed=13, accounts=25, events=3000)
    produce(stack.kafka_bootstrap, topic, spec)
    checkpoint = tmp_path / "ckpt"
    proc = spark_submit(stack, ["--checkpoint", str(checkpoint), "--source-topic", topic,
                                "--alerts-topic", f"{topic}-alerts", "--trigger", "processing:100 milliseconds",
                                "--max-offsets-per-trigger", "60"],
                        path_first=slow_chmod(tmp_path) if mid_write else None,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        wait_for(lambda: len(batch_lines(out)) >= 3, timeout=240, what="three committed batches")
        if mid_write:
            wait_for(lambda: any((tmp_path / "live").iterdir()), timeout=60, interval=0.02,
                     what="a batch's file write in flight")
        os.killpg(proc.pid, signal.SIGINT)
        printed = clean_exit(proc, out, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "stopped on SIGINT" in printed
    if mid_write:  # (busy, it may have hit one by chance: Spark writes files most of the time)
        assert "the stop interrupted a batch that was not committed" in printed, printed[-3000:]
    beat = read_heartbeat(checkpoint)
    done = last_committed(checkpoint)
    assert beat is not None and (beat.state, beat.batch_id) == ("stopped", done)
    assert 2 <= done < 3000 // 60  # it stopped mid-stream
    # What it committed is whole: the query resumes after it and ends exactly right.
    assert run_to_end(spark, stack.kafka_bootstrap, topic, str(checkpoint), max_offsets=1000) > done
    assert _state_by_account(spark, str(checkpoint)) == expected_aggregates([spec])
