"""Spark session settings shared by the example stream, tests, demo and benchmarks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from airflow_provider_streamstate.engine.checkpoint import HDFS_PROVIDER, PROVIDER_CONF, ROCKSDB_PROVIDER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

# The three state store setups the engine supports. They are pinned into a checkpoint
# at batch 0, so they must be set before a query first starts.
STATE_STORES: dict[str, dict[str, str]] = {
    "hdfs": {PROVIDER_CONF: HDFS_PROVIDER},
    "rocksdb": {PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "false"},
    "rocksdb-changelog": {PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "true"},
}


def state_store_confs(name: str) -> dict[str, str]:
    try:
        return dict(STATE_STORES[name])
    except KeyError:
        raise ValueError(f"unknown state store {name!r}; choose one of {', '.join(STATE_STORES)}") from None


def spark_session(
    app_name: str,
    jars: Sequence[str] = (),
    *,
    master: str | None = "local[2]",
    state_store: str = "rocksdb-changelog",
    shuffle_partitions: int = 4,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka connector jars on its classpath (no download).

    `master=None` leaves the master to spark-submit; a local master also binds the
    driver to loopback and turns the UI off (tests, demo, benchmarks).
    """
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            for key, value in {
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "2g",
            }.items():
                builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in {**state_store_confs(state_store), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_state(spark: SparkSession, checkpoint: str, **options: object) -> DataFrame:
    """Spark's state data source on `checkpoint` (options: batchId, operatorId, storeName...).

    PySpark 4.1 cannot load a RocksDB store offline in a session that never touched
    streaming (`Cannot find endpoint StateStoreCoordinator`); reading `streams.active`
    first creates the coordinator.
    """
    _ = spark.streams.active
    reader = spark.read.format("statestore")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, str(value))
    return reader.load(checkpoint)


def attach_heartbeat(
    spark: SparkSession, checkpoint: str, *, interval_s: float = 5.0, query_name: str | None = None
) -> object:
    """Make the stream on `checkpoint` say it is alive (`engine.liveness`): a
    StreamingQueryListener writes the heartbeat when the query starts, on every progress
    event (Spark emits one on idle too) and once more when it stops or fails, and a timer
    thread keeps beating during a long batch. Follows the first query started after it is
    attached, or the one named `query_name`. Returns the listener (remove it with
    `spark.streams.removeListener`)."""
    import os
    import socket
    import threading

    from pyspark.sql.streaming import StreamingQueryListener

    from airflow_provider_streamstate.engine.liveness import Heartbeat, now_iso, write_heartbeat

    class HeartbeatListener(StreamingQueryListener):
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.query_id: str | None = None
            self.beat: Heartbeat | None = None
            self.stopped = threading.Event()
            threading.Thread(target=self._timer, name="streamstate-heartbeat", daemon=True).start()

        def _write(self, **changes: object) -> None:
            with self.lock:
                assert self.beat is not None
                fields = {**self.beat.__dict__, **changes, "updated_at": now_iso()}
                self.beat = Heartbeat(**fields)  # type: ignore[arg-type]
                try:
                    write_heartbeat(checkpoint, self.beat)
                except OSError:
                    pass  # a full or vanished disk must not kill the stream; the beat goes stale

        def _timer(self) -> None:
            while not self.stopped.wait(interval_s):
                if self.beat is not None and self.beat.state in ("starting", "running"):
                    self._write()

        def _ours(self, qid: str, name: str | None = None) -> bool:
            if self.query_id is None and (query_name is None or name == query_name):
                self.query_id = qid
            return qid == self.query_id

        def onQueryStarted(self, event: object) -> None:
            qid, name = str(event.id), event.name  # type: ignore[attr-defined]
            if not self._ours(qid, name):
                return
            with self.lock:
                self.beat = Heartbeat(
                    query_id=qid, run_id=str(event.runId), query_name=name or "",  # type: ignore[attr-defined]
                    host=socket.gethostname(), pid=os.getpid(), state="starting", batch_id=None,
                    input_rows=None, updated_at=now_iso(), interval_s=interval_s,
                )
            self._write()

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            if self.beat is not None and self._ours(str(p.id)):
                self._write(state="running", batch_id=p.batchId, input_rows=p.numInputRows)

        def onQueryIdle(self, event: object) -> None:
            if self.beat is not None and self._ours(str(event.id)):  # type: ignore[attr-defined]
                self._write(state="running")

        def onQueryTerminated(self, event: object) -> None:
            if self.beat is None or not self._ours(str(event.id)):  # type: ignore[attr-defined]
                return
            exc = event.exception  # type: ignore[attr-defined]
            first = exc.strip().splitlines()[0] if exc else None
            self._write(state="failed" if exc else "stopped", exception=first)
            self.stopped.set()

    listener = HeartbeatListener()
    spark.streams.addListener(listener)
    return listener


def attach_batch_log(spark: SparkSession, out: TextIO | None = None) -> object:
    """Print one line per committed batch: id, input rows, duration, state rows."""
    import sys

    from pyspark.sql.streaming import StreamingQueryListener

    stream = out or sys.stdout

    class BatchLog(StreamingQueryListener):
        def onQueryStarted(self, event: object) -> None:
            print(f"query {event.name or event.id} started", file=stream, flush=True)  # type: ignore[attr-defined]

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            state_rows = sum(op.numRowsTotal for op in p.stateOperators)
            duration = p.durationMs.get("triggerExecution", 0)
            print(f"batch {p.batchId}: {p.numInputRows} input rows, {duration} ms, {state_rows} state rows",
                  file=stream, flush=True)

        def onQueryIdle(self, event: object) -> None:
            pass

        def onQueryTerminated(self, event: object) -> None:
            pass

    listener = BatchLog()
    spark.streams.addListener(listener)
    return listener
