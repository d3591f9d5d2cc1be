"""Helpers for tests that run the example stream: state as dicts, and an oracle that
recomputes the expected state from Kafka itself, up to given offsets."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_provider_streamstate.engine.checkpoint.liveness import DEFAULT_INTERVAL_S
from airflow_provider_streamstate.engine.state.spark import read_state

# Spark writes each checkpoint file (offsets, commits, every state store's delta or changelog)
# through a temporary file renamed into place. On a local disk its default manager goes
# through Hadoop's FileContext, whose rename starts a `readlink` process for each path it
# looks at (eight per state file, with the checksums) and a `chmod` for each file created:
# 31,000 processes in three minutes of a 12-partition RocksDB stream (profiled with Java
# Flight Recorder, docs/testing.md). The FileSystem-based manager, the one Spark uses where
# FileContext is missing, writes the same files by the same temporary-file-and-rename, with
# the `chmod`s alone. The tests' shared session, the example stream's spark-submit drivers and
# the rescale tests' streams use it (the class moved package in Spark 4.1); the Spark-line
# drivers, the test applications, the supervisor's recoveries and the stop at a batch
# boundary keep Spark's default, so the FileContext path still runs on checkpoints the engine
# restored, edited and rescaled.
CHECKPOINT_FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"


def local_checkpoint_conf(pyspark_version: str) -> dict[str, str]:
    """The session conf for a test stream on a local checkpoint on `pyspark_version`'s Spark."""
    major, minor = (int(x) for x in pyspark_version.split(".")[:2])
    package = "checkpointing." if (major, minor) >= (4, 1) else ""
    return {CHECKPOINT_FILE_MANAGER_CONF:
            f"org.apache.spark.sql.execution.streaming.{package}FileSystemBasedCheckpointFileManager"}


def account_state(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, dict[str, int]]:
    """Operator 0 (per-account count/sum/max) of the `accounts` query at `batch_id`."""
    rows = read_state(spark, checkpoint, operatorId=0, batchId=batch_id).collect()
    return {r.key.account: r.value.asDict() for r in rows}


def dedup_keys(spark: Any, checkpoint: str, batch_id: int | None = None) -> set[str]:
    """Operator 1 (deduplication) of the `accounts` query: the transaction ids it remembers."""
    rows = read_state(spark, checkpoint, operatorId=1, batchId=batch_id).collect()
    return {r.key.txn_id for r in rows}


def consume_until(bootstrap: str, offsets: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Every message of each topic-partition before the given end offsets, decoded."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False})
    want = {(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items() if o > 0}
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in want])
    out: list[dict[str, Any]] = []
    done: set[tuple[str, int]] = set()
    idle = 0
    while len(done) < len(want) and idle < 30:
        msgs = consumer.consume(1000, timeout=1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error():
                continue
            key = (m.topic(), m.partition())
            if m.offset() < want[key]:
                out.append(json.loads(m.value()))
            if m.offset() >= want[key] - 1:
                done.add(key)
    consumer.close()
    assert len(done) == len(want), f"could not read up to {offsets}"
    return out


def oracle_state(bootstrap: str, offsets: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What per-account state must be after consuming exactly up to `offsets`."""
    seen: set[str] = set()
    out: dict[str, dict[str, int]] = {}
    for t in consume_until(bootstrap, offsets):
        if t["txn_id"] in seen:
            continue
        seen.add(t["txn_id"])
        agg = out.setdefault(t["account"], {"count": 0, "sum": 0, "max": 0})
        agg["count"] += 1
        agg["sum"] += t["amount_cents"]
        agg["max"] = max(agg["max"], t["amount_cents"])
    return out


def use_state_store(spark: Any, state_store: str, **extra: str) -> None:
    """Set the session confs a new query pins at batch 0 (provider, snapshot cadence...)."""
    from airflow_provider_streamstate.engine.state.spark import state_store_confs

    confs = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "3", "spark.sql.shuffle.partitions": "4"}
    for key, value in {**state_store_confs(state_store), **confs, **extra}.items():
        spark.conf.set(key, value)


def run_to_end(
    spark: Any, bootstrap: str, topic: str, checkpoint: str, *, max_offsets: int = 200,
    heartbeat_s: float | None = DEFAULT_INTERVAL_S, **kw: Any,
) -> int:
    """Run the `accounts` query with available-now until it drains `topic`; last batch id.

    Like a real stream, it keeps a heartbeat beside its checkpoint (every `heartbeat_s`
    seconds; None: no heartbeat) and returns once the record says `stopped`, so a restore
    over the checkpoint may follow at once.
    """
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
    from airflow_provider_streamstate.jobs.runtime import attach_heartbeat

    kw.setdefault("query_name", f"accounts-{uuid.uuid4().hex[:8]}")
    args = StreamArgs(bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="available-now", max_offsets_per_trigger=max_offsets, **kw)
    listener: Any = None
    if heartbeat_s is not None:
        listener = attach_heartbeat(spark, checkpoint, interval_s=heartbeat_s, query_name=args.query_name)
    try:
        query = start_query(spark, args)
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        if listener is not None:  # listener events are asynchronous: wait for the last beat
            assert listener.stopped.wait(60), "the heartbeat never said the query stopped"
    finally:
        if listener is not None:
            listener.stopped.set()  # ends its timer thread, whatever happened
            spark.streams.removeListener(listener)
    return int(query.lastProgress["batchId"])


@contextmanager
def heartbeat_query(
    spark: Any, bootstrap: str, topic: str, checkpoint: str, *, interval_s: float = 1.0,
    trigger: str = "processing:1 second", **kw: Any,
) -> Iterator[tuple[Any, Any]]:
    """The `accounts` query running on `topic` with its heartbeat (every `interval_s`):
    yields (query, listener); on exit the query is stopped and the listener removed."""
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
    from airflow_provider_streamstate.jobs.runtime import attach_heartbeat

    kw.setdefault("query_name", f"live-{uuid.uuid4().hex[:8]}")
    args = StreamArgs(bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts", trigger=trigger, **kw)
    listener: Any = attach_heartbeat(spark, checkpoint, interval_s=interval_s, query_name=args.query_name)
    query = None
    try:
        query = start_query(spark, args)
        yield query, listener
    finally:
        if query is not None:
            query.stop()
            listener.stopped.wait(60)
        listener.stopped.set()
        spark.streams.removeListener(listener)


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.2
) -> Any:
    """Poll `predicate` every `interval` seconds until it returns something truthy (returned)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(interval)


# A state store snapshot the maintenance task writes (`3.zip`, `10.snapshot`) or one of its
# checksum sidecars (`3.zip.crc`, `.3.zip.crc`, `.3.zip.crc.crc`).
_STORE_SNAPSHOT = re.compile(r"^\.?(\d+)\.(zip|snapshot)(\.crc)*$")
_STORE_FILE = re.compile(r"^\.?(\d+)\.(zip|snapshot|delta|changelog)(\.crc)*$")


CUT_SLACK_NS = 30 * 10**9


def late_maintenance_files(older: Any, newer: Any) -> list[Any]:
    """Files of `newer`'s cut that `older`'s cut (same batch) did not have, checked to be
    exactly what Spark's state store maintenance wrote in between; [] when nothing changed.

    After a query stops, the maintenance thread may still be uploading the RocksDB snapshot
    (`<v>.zip` and the SSTs it references) queued at an earlier commit, one store after the
    other; the next cut then starts from that zip instead of the changelogs before it. The
    assertions here keep that the only allowed difference: same batch, same metadata, no
    file rewritten in place, every new file a store snapshot (or its SSTs/logs) of a version
    the cut needs, and every file that left the cut a delta/changelog it supersedes.
    """
    assert newer.batch_id == older.batch_id
    before = {f.path: f for f in older.files}
    after = {f.path: f for f in newer.files}
    new = [f for p, f in sorted(after.items()) if p not in before]
    rewritten = [p for p, f in after.items() if p in before and (f.size, f.mtime_ns, f.sha256) !=
                 (before[p].size, before[p].mtime_ns, before[p].sha256)]
    assert not rewritten, f"files changed in place between two cuts of one batch: {rewritten}"
    # Every new file appeared after the first cut was planned (its manifest's creation, less
    # the time a snapshot of these small test checkpoints takes): a first cut that left out a
    # store snapshot that was already there would be a planner bug, not late maintenance.
    first_cut_ns = int(datetime.fromisoformat(older.created_at.replace("Z", "+00:00")).timestamp() * 1e9)
    early = [f.path for f in new if f.mtime_ns < first_cut_ns - CUT_SLACK_NS]
    assert not early, f"files the first cut should have held (written before it): {early}"
    snapshot_versions: dict[str, int] = {}  # store directory -> version of its new snapshot
    for f in new:
        store, _, name = f.path.rpartition("/")
        m = _STORE_SNAPSHOT.match(name)
        if f.path.startswith("state/") and m:
            assert int(m.group(1)) <= older.batch_id + 1, f"{f.path} is above the cut"
            snapshot_versions[store] = max(snapshot_versions.get(store, 0), int(m.group(1)))
    for f in new:
        store, _, name = f.path.rpartition("/")
        if store in snapshot_versions:
            continue
        parent, _, sub = store.rpartition("/")
        assert sub in ("SSTs", "logs") and parent in snapshot_versions, (
            f"{f.path} is new in the second cut and is not a state store snapshot's file")
    for p in before.keys() - after.keys():
        store, _, name = p.rpartition("/")
        parent, _, sub = store.rpartition("/")
        m = _STORE_FILE.match(name)
        replaced = (store in snapshot_versions and m is not None and int(m.group(1)) <= snapshot_versions[store]) or (
            sub in ("SSTs", "logs") and parent in snapshot_versions)
        assert replaced, f"{p} left the cut without a newer store snapshot replacing it"
    return new


def example_stream_spec(stack: Any, topic: str, root: Path, *, name: str = "orders", state_store: str = "hdfs",
                        extra_args: Sequence[str] = (), spark_default_manager: bool = False) -> Any:
    """The example stream as a StreamSpec run by spark-submit on `local[1]` (through the
    `spark_local` connection the caller defines), reading `topic`, checkpoint and store
    under `root`, through the FileSystem-based checkpoint manager (above).
    `spark_default_manager`: Spark's own default instead, for a caller that moves the
    checkpoint to S3 or HDFS, or that proves Spark's default path on a checkpoint the engine
    rewrote."""
    from importlib.metadata import version

    import airflow_provider_streamstate.jobs.example_stream as job
    from airflow_provider_streamstate.spec import StreamSpec

    return StreamSpec(
        name=name,
        application=job.__file__,
        application_args=[
            "--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}", "--source-topic", topic,
            "--alerts-topic", "{sinks[alerts]}", "--trigger", "processing:1 second",
            "--max-offsets-per-trigger", "100", "--state-store", state_store, *extra_args,
        ],
        checkpoint=str(root / name),
        store=f"file://{root / 'store'}",
        spark_conn_id="spark_local",
        jars=list(stack.spark_jars),
        conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
              **({} if spark_default_manager else local_checkpoint_conf(version("pyspark")))},
        sinks={"alerts": f"{topic}-alerts"},
        heartbeat_interval_s=1.0,
    )


def consumed_records(checkpoint: str) -> int:
    """Records of all Kafka sources the newest committed batch has read up to (0 before any)."""
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets

    found = committed_kafka_offsets(checkpoint)
    return sum(sum(parts.values()) for parts in found[1].values()) if found else 0


def snapshots_while_producing(query: Any, producer: Any, take: Callable[[], Any], *, at_least: int,
                              interval_s: float = 0.6, timeout_s: float = 180) -> list[Any]:
    """Start `producer` (a thread writing input) and take a snapshot (`take()`, returning a
    snapshot result) each time the running `query` has committed a new batch, until the
    producer is done and at least `at_least` were taken; then wait for the producer."""
    producer.start()
    taken: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while (producer.is_alive() or len(taken) < at_least) and time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and (not taken or progress["batchId"] > taken[-1].manifest.batch_id):
            taken.append(take())
        time.sleep(interval_s)
    producer.join()
    return taken


def use_local_connections(monkeypatch: Any, stack: Any, tmp_path: Any, master: str = "local[2]") -> None:
    """The Airflow connections the example stream's spec names (`spark_local` on `master`,
    `kafka_local` on the stack's broker) and a streamstate home of the test's own."""
    import json

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": master}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_LOCAL", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": stack.kafka_bootstrap}}))
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
