"""A running stream says so beside its checkpoint: the runtime helper's heartbeat makes
`is_running` true while the query runs (and a restore over it is refused), and false
once it stops."""

from __future__ import annotations

import time

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import is_running, read_heartbeat
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.jobs.runtime import attach_heartbeat
from tests.streams import use_state_store

pytestmark = pytest.mark.integration


def _wait(predicate, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_running_stream_beats_and_its_checkpoint_cannot_be_restored_over(stack, spark, topic, tmp_path, make_store) -> None:
    use_state_store(spark, "rocksdb-changelog")
    checkpoint = str(tmp_path / "ckpt")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=31, accounts=10, events=200))
    name = f"live-{topic}"
    listener = attach_heartbeat(spark, checkpoint, interval_s=1.0, query_name=name)
    query = start_query(spark, StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic,
                                          alerts_topic=f"{topic}-alerts", trigger="processing:1 second", query_name=name))
    try:
        _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and b.state == "running" and b.batch_id is not None)
        assert is_running(checkpoint)
        beat = read_heartbeat(checkpoint)
        assert beat is not None and beat.query_id == str(query.id) and beat.query_name == name
        store, _, _ = make_store("local")
        snap = create_snapshot(checkpoint, store, "live")
        with pytest.raises(StreamRunningError, match=f"query {name} is running"):
            restore_snapshot(store, "live", snap.manifest.snapshot_id, checkpoint, force=True)
    finally:
        query.stop()
        # Spark delivers the terminated event on its listener bus after stop() returns:
        # removing the listener before it arrives would lose the final "stopped" beat.
        listener.stopped.wait(60)  # type: ignore[attr-defined]
        spark.streams.removeListener(listener)
    _wait(lambda: (b := read_heartbeat(checkpoint)) is not None and b.state == "stopped", timeout=30)
    assert not is_running(checkpoint)
    restore_snapshot(store, "live", snap.manifest.snapshot_id, checkpoint, force=True)  # now it may
