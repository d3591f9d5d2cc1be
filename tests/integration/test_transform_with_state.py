"""transformWithStateInPandas streams (value, list and map state, TTL, processing-time and
event-time timers): snapshots of a running stream restore exactly to Spark's own state at
their batch, at another location, and still read and resume there after the original
checkpoint is gone (operator metadata v2 names its schema files by absolute path); the
resumed copy writes exactly the sessions the original wrote after the snapshot and ends in
the same state."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UsageError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
from airflow_provider_streamstate.engine.state.diff import diff_snapshots
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.state.scratch import new_job_id
from airflow_provider_streamstate.engine.state.spark import read_state
from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot
from airflow_provider_streamstate.jobs.example_sessions import SessionArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.streams import consume_until, snapshots_while_producing, use_state_store

pytestmark = pytest.mark.integration

VARIABLES = ("profile", "session", "bands")


def _rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def _without_ttl(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A TTL is processing time plus the TTL: a resumed copy sets its own."""
    out = []
    for r in rows:
        r = dict(r)
        for col in ("list_element", "user_map_value", "value"):
            v = r.get(col)
            if isinstance(v, dict) and set(v) == {"value", "ttlExpirationMs"}:
                r[col] = v["value"]
        r.pop("partition_id", None)
        out.append(r)
    return sorted(out, key=lambda d: json.dumps(d, sort_keys=True, default=str))


def spark_state(spark: Any, checkpoint: str, batch_id: int | None, *, ttl: bool = True) -> dict[str, Any]:
    """Every state variable and the timers, as Spark's own state reader gives them; without
    `ttl`, what does not depend on processing time (no TTLs, no timers)."""
    out: dict[str, Any] = {}
    for var in VARIABLES:
        rows = _rows(read_state(spark, checkpoint, batchId=batch_id, stateVarName=var))
        out[var] = sorted(rows, key=lambda d: json.dumps(d, sort_keys=True, default=str)) if ttl else _without_ttl(rows)
    out["timers"] = sorted(_rows(read_state(spark, checkpoint, batchId=batch_id, readRegisteredTimers="true")),
                           key=lambda d: json.dumps(d, sort_keys=True, default=str))
    if not ttl:  # processing-time timers: a resumed copy registers its own
        del out["timers"]
    return out


def sessions_written(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sessions-check"})
    ends = {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.close()
    return consume_until(bootstrap, {topic: ends})


def _drain(query: Any, checkpoint: str, bootstrap: str, topic: str, timeout: float = 180) -> None:
    """Wait until the query has read the whole topic. (`processAllAvailable` never returns
    for it, nor does an available-now run end: with processing-time timers Spark runs a batch
    at every trigger.)"""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "drain-check"})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        reader = CheckpointReader(checkpoint)
        committed = reader.committed_batches()
        if committed and reader.kafka_offsets(committed[-1]).get(topic) == ends:
            return
        time.sleep(0.5)
    raise AssertionError(f"the query did not read {topic} to {ends} in {timeout} s")


def test_transform_with_state_snapshots_restore_exactly_elsewhere_and_resume(
    stack, spark, topic, tmp_path: Path, make_store,
) -> None:
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    first = GeneratorSpec(seed=31, accounts=25, events=300)
    specs = [first, first.next_round(), first.next_round().next_round()]
    produce(stack.kafka_bootstrap, topic, specs[0])
    args = SessionArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, sessions_topic=f"{topic}-sessions",
                       gap_ms=60_000, trigger="processing:500 milliseconds",
                       max_offsets_per_trigger=150)
    query = start_query(spark, args)
    producer = threading.Thread(target=lambda: [produce(stack.kafka_bootstrap, topic, s, rate=120) for s in specs[1:]])
    snapshots = snapshots_while_producing(query, producer, lambda: create_snapshot(checkpoint, store, "sessions",
                                                                                   parallelism=4),
                                          at_least=3, interval_s=0.5)
    _drain(query, checkpoint, stack.kafka_bootstrap, topic)
    query.stop()
    final = spark_state(spark, checkpoint, None, ttl=False)
    written = sessions_written(stack.kafka_bootstrap, args.sessions_topic)

    # The whole input is in the profile: value state, exact.
    profile = {r["key"]["account"]: r["value"] for r in final["profile"]}
    assert {a: {"count": p["txn_count"], "sum": p["total_cents"], "max": p["max_cents"]}
            for a, p in profile.items()} == expected_aggregates(specs)
    written = [s for s in written if s["kind"] == "session"]  # an idle notice would need 10 minutes
    assert sum(p["sessions"] for p in profile.values()) == len({(s["account"], s["session_no"]) for s in written})
    assert final["bands"] and final["session"]

    batches = [s.manifest.batch_id for s in snapshots]
    assert len(set(batches)) >= 3, batches
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        (op,) = m.operators
        assert op.name == "transformWithStateInPandasExec" and op.time_mode == "ProcessingTime"
        assert {v["name"]: (v["kind"], v["ttl"]) for v in op.state_variables if not v["name"].startswith("$")} == {
            "profile": ("ValueState", False), "session": ("ListState", True), "bands": ("MapState", True)}
        assert any(f.path.startswith("state/0/_stateSchema/") for f in m.files)
        target = tmp_path / f"restore-{i}"
        restore_snapshot(store, "sessions", m.snapshot_id, target)
        meta = (target / "state/0/_metadata/v2").iterdir()
        for f in meta:
            if not f.name.startswith("."):
                assert f"file:{target}/state/0/_stateSchema/" in f.read_text() and checkpoint not in f.read_text()
        # Exactly Spark's own state at batch N: every variable, TTLs and timers included.
        assert spark_state(spark, str(target), m.batch_id) == spark_state(spark, checkpoint, m.batch_id)
        assert not (target / "offsets" / str(m.batch_id + 1)).exists()

    # The original goes away: the earliest snapshot's copy must read and resume on its own.
    earliest = snapshots[0].manifest
    at_cut = spark_state(spark, checkpoint, earliest.batch_id, ttl=False)
    s3_store, _, _ = make_store("s3")
    on_s3 = create_snapshot(checkpoint, s3_store, "sessions").manifest
    on_s3_state = spark_state(spark, checkpoint, on_s3.batch_id)
    shutil.rmtree(checkpoint)

    # On S3, after the original is gone: a restore onto an s3a:// checkpoint and a state
    # job's scratch copy in an S3 store name the schema files where they are, and Spark
    # reads them through S3A.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - Spark reads s3a:// here
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    s3_target = f"s3a://{s3_store.bucket}/{s3_store.prefix}/restored"
    restore_snapshot(s3_store, "sessions", on_s3.snapshot_id, s3_target)
    meta = s3_store.client.get_object(Bucket=s3_store.bucket, Key=f"{s3_store.prefix}/restored/state/0/_metadata/v2/0")
    assert f'"{s3_target}/state/0/_stateSchema/default/' in meta["Body"].read().decode()
    assert spark_state(spark, s3_target, on_s3.batch_id) == on_s3_state
    with StateReader(s3_store, spark=spark, scratch_in_store=new_job_id("test")) as reader:
        profiles = reader.state("sessions", on_s3.snapshot_id, StateSelector(state_var="profile"))
        assert profiles.count() == len(final["profile"])
    resumed_ckpt = str(tmp_path / "restore-0")
    assert spark_state(spark, resumed_ckpt, earliest.batch_id, ttl=False) == at_cut
    closed_before = {r["key"]["account"]: r["value"]["sessions"] for r in at_cut["profile"]}
    resumed_args = SessionArgs(stack.kafka_bootstrap, resumed_ckpt, source_topic=topic,
                               sessions_topic=f"{topic}-sessions-resumed", gap_ms=60_000,
                               trigger="processing:200 milliseconds", max_offsets_per_trigger=600)
    resumed = start_query(spark, resumed_args)
    _drain(resumed, resumed_ckpt, stack.kafka_bootstrap, topic)
    first_batch = resumed.recentProgress[0]["batchId"]
    resumed.stop()
    assert first_batch == earliest.batch_id + 1
    # Same end state, and exactly the sessions the original closed after the snapshot.
    assert spark_state(spark, resumed_ckpt, None, ttl=False) == final
    after = sorted((s for s in written if s["session_no"] > closed_before.get(s["account"], 0)),
                   key=lambda s: (s["account"], s["session_no"]))
    again = sorted((s for s in sessions_written(stack.kafka_bootstrap, resumed_args.sessions_topic)
                    if s["kind"] == "session"),
                   key=lambda s: (s["account"], s["session_no"]))
    assert again == after and after

    # State queries name the variable; all of them, or the timers.
    latest = snapshots[-1].manifest
    with StateReader(store, spark=spark) as reader:
        with pytest.raises(UsageError, match="keeps several state variables"):
            reader.state("sessions", latest.snapshot_id)
        with pytest.raises(NotFoundError, match="no state variable 'nope'"):
            reader.state("sessions", latest.snapshot_id, StateSelector(state_var="nope"))
        prof = reader.state("sessions", latest.snapshot_id, StateSelector(state_var="profile"))
        assert prof.columns == ["key_account", "value_txn_count", "value_total_cents", "value_max_cents",
                                "value_sessions", "partition_id"]
        sess = reader.state("sessions", latest.snapshot_id, StateSelector(state_var="session"))
        assert sess.columns == ["key_account", "value_txn_id", "value_amount_cents", "value_ts_ms",
                                "ttl_expiration_ms", "partition_id"]
        bands = reader.state("sessions", latest.snapshot_id, StateSelector(state_var="bands"))
        assert bands.columns == ["key_account", "map_key_band", "value_txn_count", "ttl_expiration_ms",
                                 "partition_id"]
        timers = reader.state("sessions", latest.snapshot_id, StateSelector(state_var="$timers"))
        assert "expiration_timestamp_ms" in timers.columns and timers.count() > 0
        same = diff_snapshots(reader, "sessions", latest.snapshot_id, latest.snapshot_id,
                              StateSelector(state_var="$timers"))
        assert same.identical and same.counts["unchanged"] == timers.distinct().count()
        everything = reader.state("sessions", latest.snapshot_id, StateSelector(state_var="*"))
        counts = {r["state_var"]: r["count"] for r in everything.groupBy("state_var").count().collect()}
        assert counts == {"profile": prof.count(), "session": sess.count(), "bands": bands.count()}
        # A diff of a list variable counts elements; of a value variable, keys.
        d = diff_snapshots(reader, "sessions", earliest.snapshot_id, latest.snapshot_id,
                           StateSelector(state_var="session"))
        assert d.counts["added"] + d.counts["unchanged"] == sess.count()
        d = diff_snapshots(reader, "sessions", earliest.snapshot_id, latest.snapshot_id,
                           StateSelector(state_var="profile"))
        assert d.counts["added"] + d.counts["changed"] + d.counts["unchanged"] == prof.count()
        assert d.key_columns == ["key_account"]

        # Validation and bisect on one variable, named by the suite itself.
        maxes = [reader.state("sessions", s.manifest.snapshot_id, StateSelector(state_var="profile"))
                 .agg({"value_txn_count": "max"}).first()[0] for s in snapshots]
        limit = maxes[1]
        first_bad = next((s.manifest.snapshot_id for s, m in zip(snapshots, maxes, strict=True) if m > limit), None)
        suite = load_suite({"name": "profiles-small", "meta": {"streamstate": {"state_var": "profile"}},
                            "expectations": [{"type": "expect_column_values_to_be_between",
                                              "kwargs": {"column": "value_txn_count", "max_value": limit}}]})
        assert validate_snapshot(reader, "sessions", snapshots[0].manifest.snapshot_id, suite).record.success
        found = bisect_snapshots(reader, "sessions", suite)
        assert (found.first_bad.snapshot_id if found.first_bad else None) == first_bad


@pytest.fixture
def format_2(spark):  # noqa: ANN001, ANN201 - the shared session: back to format 1 afterwards
    from airflow_provider_streamstate.engine.checkpoint.reader import FORMAT_VERSION_CONF

    spark.conf.set(FORMAT_VERSION_CONF, "2")
    yield
    spark.conf.set(FORMAT_VERSION_CONF, "1")


def test_a_transform_with_state_stream_in_format_2_fails_over_to_another_cluster_and_resumes_there(
    stack, spark, tmp_path: Path, make_store, format_2,
) -> None:
    """transformWithState and checkpoint format 2 together: unique-id state files and
    operator metadata v2, through a failover that rewrites offsets and schema paths."""
    import uuid

    from airflow_provider_streamstate.jobs.generator import ensure_topic
    from tests.integration.test_failover_translation import failover_cli, mirror, produce_into

    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    for t in (topic, dr_topic):
        ensure_topic(stack.kafka_bootstrap, t, partitions=3)
    first = GeneratorSpec(seed=33, accounts=12, events=240)
    second = first.next_round(120)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1, 2])
    checkpoint = str(tmp_path / "ckpt")

    def run(ckpt: str, source: str) -> None:
        q = start_query(spark, SessionArgs(stack.kafka_bootstrap, ckpt, source_topic=source,
                                           sessions_topic=f"{source}-sessions", gap_ms=60_000,
                                           trigger="processing:200 milliseconds", max_offsets_per_trigger=200))
        try:
            _drain(q, ckpt, stack.kafka_bootstrap, source)
        finally:
            q.stop()

    run(checkpoint, topic)
    store, url, _ = make_store("local")
    snap = create_snapshot(checkpoint, store, "sessions", kafka_bootstrap=stack.kafka_bootstrap).manifest
    assert snap.checkpoint_format == 2 and snap.operators[0].state_variables
    mirror(stack.kafka_bootstrap, topic, dr_topic, 3)
    produce_into(stack.kafka_bootstrap, dr_topic, second, partitions=[0, 1, 2])
    shutil.rmtree(checkpoint)  # the primary region is gone

    target = tmp_path / "dr-ckpt"
    out = failover_cli("--store", url, "--stream", "sessions", "--target", str(target),
                       "--kafka-bootstrap", stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json")
    assert out.returncode == 0, out.stderr
    for f in (target / "state/0/_metadata/v2").iterdir():
        if not f.name.startswith("."):
            assert f"file:{target}/state/0/_stateSchema/" in f.read_text()
    run(str(target), dr_topic)
    rows = read_state(spark, str(target), stateVarName="profile").collect()
    assert {r.key.account: {"count": r.value.txn_count, "sum": r.value.total_cents, "max": r.value.max_cents}
            for r in rows} == expected_aggregates([first, second])


def _event_time_processor() -> Any:
    """Counts per key, and an event-time timer 3 s (event time) after the key's newest row
    that clears the count and writes it out."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class CountUntilQuiet(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", "n long, newest_ms long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n, newest = self.count.get() if self.count.exists() else (0, 0)
            for df in rows:
                n += len(df)
                newest = max(newest, int(df["ts_ms"].max()))
            for t in list(self.handle.listTimers()):
                self.handle.deleteTimer(t)
            self.handle.registerTimer(newest + 3_000)
            self.count.update((n, newest))
            return iter([])

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            n, _ = self.count.get()
            self.count.clear()
            yield pd.DataFrame({"k": [int(key[0])], "n": [n]})

    return CountUntilQuiet()


def test_event_time_timers_of_transform_with_state_restore_elsewhere_and_resume(
    spark, tmp_path: Path, make_store,
) -> None:
    import sys

    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})

    def start(ckpt: str) -> Any:
        rows = (spark.readStream.format("rate").option("rowsPerSecond", 30).load()
                .select((F.col("value") % 17).alias("k"), F.col("timestamp").alias("ts"),
                        (F.col("timestamp").cast("double") * 1000).cast("long").alias("ts_ms"))
                .withWatermark("ts", "1 second"))
        return (rows.groupBy("k").transformWithStateInPandas(_event_time_processor(), "k long, n long", "Append",
                                                             "EventTime")
                .writeStream.format("noop").option("checkpointLocation", ckpt)
                .trigger(processingTime="500 milliseconds").start())

    checkpoint = str(tmp_path / "ckpt")
    query = start(checkpoint)
    deadline = time.monotonic() + 120
    while (not query.lastProgress or query.lastProgress["batchId"] < 6) and time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        time.sleep(0.5)
    query.stop()
    store, _, _ = make_store("local")
    m = create_snapshot(checkpoint, store, "quiet").manifest
    (op,) = m.operators
    assert op.time_mode == "EventTime"
    assert {v["kind"] for v in op.state_variables} == {"ValueState", "TimerState"}
    original = {
        "count": sorted(map(str, read_state(spark, checkpoint, batchId=m.batch_id, stateVarName="count").collect())),
        "timers": sorted(map(str, read_state(spark, checkpoint, batchId=m.batch_id,
                                             readRegisteredTimers="true").collect())),
    }
    assert original["timers"]
    shutil.rmtree(checkpoint)
    target = tmp_path / "restored"
    restore_snapshot(store, "quiet", m.snapshot_id, target)
    with StateReader(store, spark=spark) as reader:
        timers = reader.state("quiet", m.snapshot_id, StateSelector(state_var="$timers"))
        assert timers.count() == len(original["timers"])
    assert sorted(map(str, read_state(spark, str(target), batchId=m.batch_id, stateVarName="count").collect())) == \
        original["count"]
    assert sorted(map(str, read_state(spark, str(target), batchId=m.batch_id,
                                      readRegisteredTimers="true").collect())) == original["timers"]
    resumed = start(str(target))  # its timers fire as the watermark moves on
    deadline = time.monotonic() + 120
    while (not resumed.lastProgress or resumed.lastProgress["batchId"] < m.batch_id + 3) and \
            time.monotonic() < deadline:
        assert resumed.exception() is None, resumed.exception()
        time.sleep(0.5)
    assert resumed.recentProgress[0]["batchId"] == m.batch_id + 1
    resumed.stop()
    assert resumed.exception() is None
