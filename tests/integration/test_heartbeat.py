"""A real query's heartbeat, written by the runtime helper's listener beside the checkpoint:
while the query runs, `is_running` is true and `assert_not_running` refuses by name; the
record keeps beating when no data arrives and then names the last *committed* batch;
a stopped or failed query says so; and Spark resumes a checkpoint with the record beside
it (the snapshot planner leaves it out)."""

from __future__ import annotations

import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from airflow_provider_streamstate.engine.checkpoint.liveness import (
    HEARTBEAT_FILE,
    assert_not_running,
    is_running,
    read_heartbeat,
)
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import account_state, heartbeat_query, run_to_end, use_state_store, wait_for

pytestmark = pytest.mark.integration


def committed(checkpoint: str) -> list[int]:
    return CheckpointReader(checkpoint).committed_batches()


def consumed(checkpoint: str, topic: str) -> int:
    """Messages of `topic` the newest committed batch has consumed (0 before the first)."""
    if not (Path(checkpoint) / "offsets").is_dir() or not committed(checkpoint):
        return 0
    return sum(CheckpointReader(checkpoint).plan().kafka_offsets.get(topic, {}).values())


def is_idle(query, checkpoint: str, quiet_s: float = 3.0) -> bool:  # noqa: ANN001
    """The query has committed nothing new for `quiet_s`, and Spark reports no data
    available and no trigger running."""
    before = committed(checkpoint)[-1]
    time.sleep(quiet_s)
    status = query.status
    return not (status["isDataAvailable"] or status["isTriggerActive"]) and committed(checkpoint)[-1] == before


def when(beat) -> datetime:  # noqa: ANN001
    return datetime.fromisoformat(beat.updated_at.replace("Z", "+00:00"))


def test_a_running_query_is_refused_by_name_until_it_stops(stack, spark, topic, tmp_path) -> None:
    use_state_store(spark, "rocksdb-changelog")
    checkpoint = str(tmp_path / "ckpt")
    spec = GeneratorSpec(seed=41, accounts=10, events=300)
    produce(stack.kafka_bootstrap, topic, spec)
    with heartbeat_query(spark, stack.kafka_bootstrap, topic, checkpoint, interval_s=1.0) as (query, _):
        name = query.name
        wait_for(lambda: consumed(checkpoint, topic) == 300, what="the query to consume the topic")
        assert account_state(spark, checkpoint) == expected_aggregates([spec])
        beat = wait_for(lambda: (b := read_heartbeat(checkpoint)) and b.state == "running" and b.batch_id is not None
                        and b, what="a running beat")
        assert (beat.query_id, beat.run_id, beat.query_name) == (str(query.id), str(query.runId), name)
        assert (beat.host, beat.interval_s) == (socket.gethostname(), 1.0)
        assert is_running(checkpoint)
        with pytest.raises(StreamRunningError) as err:
            assert_not_running(checkpoint, "restore over it")
        text = err.value.one_line()
        assert text.startswith(f"cannot restore over it: query {name} is running on {checkpoint}")
        assert f"host {beat.host}, pid {beat.pid}" in text and "stop the stream first" in text

        # Idle: no new data, no new batch, yet the beat goes on (listener idle events and the
        # timer), still naming the last committed batch, never the next one Spark reports.
        # The data batch may be followed by one no-data batch (the watermark advanced), so
        # idle starts once no batch has been committed for a few triggers.
        wait_for(lambda: is_idle(query, checkpoint), what="the query to go idle")
        last = committed(checkpoint)[-1]
        first_idle = read_heartbeat(checkpoint)
        assert first_idle is not None
        later = wait_for(lambda: (b := read_heartbeat(checkpoint)) and when(b) > when(first_idle) and b,
                         timeout=10, what="a beat without new data")
        assert committed(checkpoint)[-1] == last
        assert (later.state, later.batch_id) == ("running", last)
    stopped = read_heartbeat(checkpoint)
    assert stopped is not None and (stopped.state, stopped.exception) == ("stopped", None)
    assert not is_running(checkpoint)
    assert_not_running(checkpoint, "restore over it")


def test_a_failed_query_says_failed_with_the_first_line_of_its_error(spark, tmp_path) -> None:
    from airflow_provider_streamstate.jobs.runtime import attach_heartbeat

    checkpoint = str(tmp_path / "ckpt")

    def explode(_df, batch_id: int) -> None:  # noqa: ANN001
        if batch_id >= 1:
            raise RuntimeError(f"card processor unreachable in batch {batch_id}\nsecond line")

    listener = attach_heartbeat(spark, checkpoint, interval_s=1.0, query_name="doomed")
    try:
        query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
                 .writeStream.queryName("doomed").foreachBatch(explode).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="200 milliseconds").start())
        with pytest.raises(StreamingQueryException):
            query.awaitTermination(120)
        assert listener.stopped.wait(60)  # type: ignore[attr-defined]
    finally:
        spark.streams.removeListener(listener)
    beat = read_heartbeat(checkpoint)
    assert beat is not None and beat.state == "failed" and beat.batch_id == 0
    assert beat.exception is not None and "card processor unreachable in batch 1" in beat.exception
    assert "second line" not in beat.exception
    assert not is_running(checkpoint)


def test_spark_resumes_a_checkpoint_with_the_record_beside_it(stack, spark, topic, tmp_path) -> None:
    use_state_store(spark, "rocksdb-changelog")
    checkpoint = str(tmp_path / "ckpt")
    spec = GeneratorSpec(seed=43, accounts=12, events=300)
    produce(stack.kafka_bootstrap, topic, spec)
    first = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    beat = read_heartbeat(checkpoint)
    assert beat is not None and (beat.state, beat.batch_id) == ("stopped", first)
    assert (tmp_path / "ckpt" / HEARTBEAT_FILE).is_file()

    produce(stack.kafka_bootstrap, topic, spec.next_round(200))
    second = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    assert second > first  # resumed after batch `first`, not from scratch
    assert account_state(spark, checkpoint) == expected_aggregates([spec, spec.next_round(200)])
    assert not [f.path for f in CheckpointReader(checkpoint).plan().files if f.path.startswith("_streamstate")]


def test_an_application_attaching_its_own_heartbeat_under_the_wrapper_shares_the_wrappers_listener(
    spark, tmp_path
) -> None:
    """One writer per checkpoint and session (the supervised wrapper attaches first): a
    second attach, with or without `file:`, gets the same listener; once that listener's
    query ended, a new attach gets a new one."""
    from airflow_provider_streamstate.jobs.runtime import attach_heartbeat

    checkpoint = str(tmp_path / "ckpt")
    attached: list[Any] = []

    def attach(where: str) -> Any:
        attached.append(attach_heartbeat(spark, where, interval_s=1.0, query_name="shared"))
        return attached[-1]

    try:
        first = attach(checkpoint)
        assert attach(f"file:{checkpoint}") is first
        assert attach(str(tmp_path / "other")) is not first
        first.stopped.set()
        assert attach(checkpoint) is not first
    finally:
        for listener in {id(x): x for x in attached}.values():
            listener.stopped.set()
            spark.streams.removeListener(listener)


def test_the_drivers_listeners_read_each_batch_without_an_exception_in_the_jvm(spark, tmp_path, monkeypatch) -> None:
    """The heartbeat and the batch log get each event as a view of the JVM's object
    (jobs/query_events.py): PySpark's conversion of a progress raised an exception in the
    JVM for each map it copied, each one looked up through the whole classpath to be
    converted: a third of a driver's CPU."""
    import io

    import pyspark.errors.exceptions.captured as captured
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.jobs.runtime import attach_batch_log, attach_heartbeat, stop_query

    converted: list[object] = []
    original = captured.convert_exception
    monkeypatch.setattr(captured, "convert_exception", lambda e: converted.append(e) or original(e))
    checkpoint = str(tmp_path / "ckpt")
    out = io.StringIO()
    batch_log = attach_batch_log(spark, out)
    listener = attach_heartbeat(spark, checkpoint, interval_s=1.0, query_name="viewed")
    query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 7).load()
             .groupBy(F.col("value") % 3)
             .count().writeStream.queryName("viewed").format("noop").outputMode("update")
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: out.getvalue().count("batch ") >= 4, what="four batches logged")
    finally:
        listener.stopping = True  # type: ignore[attr-defined]  # the driver's own stop, as run_until_stopped
        stop_query(query)
        listener.finish(query)  # type: ignore[attr-defined]
        spark.streams.removeListener(listener)
        spark.streams.removeListener(batch_log)
    assert converted == []
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("batch ")]
    assert lines[0].startswith("batch 0: 7 input rows, ") and lines[0].endswith(", 3 state rows"), lines
    beat = read_heartbeat(checkpoint)
    assert beat is not None and beat.state == "stopped" and beat.query_name == "viewed"
    assert beat.batch_id is not None and beat.batch_id >= 3 and beat.input_rows == 7
