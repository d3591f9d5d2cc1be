"""The DR drill, run by Airflow itself: the primary region dies, `streamstate_dr_failover`
resumes the stream in DR, new input reaches it there, and its state counts every event that
reached the DR cluster exactly once. With the identity policy the DR checkpoint is a warm
standby kept by replication, which the failover promotes (only its offsets written). Then
(default policy) the primary region comes back and `streamstate_dr_failback` moves the stream
home through a reverse mirror, again exactly.

A private region pair per test (its own primary broker and S3 endpoints, a DR broker and
MirrorMaker 2), so killing the primary never touches the shared stack. The producers are
transactional: commit markers take offsets no mirror copies, so offsets differ per cluster."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.dr.standby import update_standby
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    messages,
)
from dev import stack as stack_mod
from tests.dr_regions import end_offsets, mirrored_records, produce_transactionally, wait_mirrored
from tests.streams import (
    account_state,
    consumed_records,
    example_stream_spec,
    run_to_end,
    use_state_store,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.dr_regions]


def wait_mirrored_back(bootstrap: str, topic: str, records: int, timeout: float = 120) -> None:
    """The reverse mirror holds `records` records of `topic` in the primary cluster."""
    wait_for(lambda: mirrored_records(bootstrap, topic, 3) >= records, timeout=timeout,
             what=f"the reverse mirror to copy {records} records of {topic}")


def wait_read_all(checkpoint: str, bootstrap: str, topic: str, what: str) -> None:
    """The stream on `checkpoint` has read `topic` to its end; on timeout, say how far it got
    and what state its driver is in."""
    from airflow_provider_streamstate.engine.streams import launcher

    end = sum(end_offsets(bootstrap, topic, 3).values())
    try:
        wait_for(lambda: consumed_records(checkpoint) == end, timeout=300, what=what)
    except AssertionError as exc:
        st = launcher.status(checkpoint)
        raise AssertionError(f"{exc}: read {consumed_records(checkpoint)} of {end} offsets; stream {st.state} "
                             f"({st.last_error}); log {st.log}") from None


@pytest.mark.parametrize("private_regions", ["default", "identity"], indirect=True)
def test_the_dr_failover_dag_resumes_the_stream_in_dr_after_the_primary_region_dies(
    private_regions, spark, tmp_path, run_dag, monkeypatch
) -> None:
    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    primary, dr = private_regions
    for key, value in {**primary.airflow_conn_env("dr", "s3_dr_region"),
                       **primary.airflow_conn_env("primary", "s3_primary_region")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    for name, bootstrap in (("KAFKA_DR", dr.bootstrap), ("KAFKA_PRIMARY", primary.kafka_bootstrap)):
        monkeypatch.setenv(f"AIRFLOW_CONN_{name}", json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}))
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    dr_topic = dr.dr_topic(topic)
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=73, accounts=10, events=300, duplicate_rate=0.05)
    second = first.next_round(150)
    third = second.next_round(150)
    fourth = third.next_round(150)

    # The primary region: the stream ran, its snapshot (with anchors) was replicated to the DR store.
    produce_transactionally(primary.kafka_bootstrap, topic, first)
    primary_ckpt = str(tmp_path / "primary" / "orders")
    run_to_end(spark, primary.kafka_bootstrap, topic, primary_ckpt)
    primary_store = LocalStore(tmp_path / "primary" / "store", fsync=False)
    snap = create_snapshot(primary_ckpt, primary_store, "orders", kafka_bootstrap=primary.kafka_bootstrap)
    dr_store_url = f"s3://streamstate/dr-{uuid.uuid4().hex[:8]}"
    dr_store = StreamstateStoreHook(dr_store_url, storage_conn_id="s3_dr_region").store
    replicate(primary_store, dr_store, "orders")
    # With the identity policy, the DR checkpoint is a warm standby the replication keeps:
    # the failover promotes it, writing only its offset files.
    standby = dr.policy == "identity"
    if standby:
        update_standby(dr_store, "orders", str(tmp_path / "dr" / "orders"))
    # More input after the last snapshot: mirrored, then the primary region dies.
    produce_transactionally(primary.kafka_bootstrap, topic, second)
    wait_mirrored(dr, topic, sum(1 for spec in (first, second) for _ in messages(spec)))
    stack_mod.kill_part(primary.state_dir, "primary-kafka")
    stack_mod.kill_part(primary.state_dir, "primary-s3")

    in_dr = SimpleNamespace(kafka_bootstrap=dr.bootstrap, spark_jars=primary.spark_jars)
    dr_spec = example_stream_spec(in_dr, dr_topic, tmp_path / "dr").derive(
        store=dr_store_url, storage_conn_id="s3_dr_region", kafka_conn_id="kafka_dr")
    primary_spec = dr_spec.derive(checkpoint=primary_ckpt, store=f"file://{tmp_path / 'primary' / 'store'}",
                                  storage_conn_id=None, kafka_conn_id=None)
    try:
        result = run_dag("streamstate_dr_failover", {
            "stream": dr_spec.to_dict(), "primary": primary_spec.to_dict(), "replication_policy": dr.policy,
            "source_alias": dr.source_alias, "max_lag": 0, "standby": standby,
        })
        assert result.state == "success", result.log[-4000:]
        restored, report = result.tasks["failover"].xcom, result.tasks["report"].xcom
        assert restored["snapshot_id"] == snap.manifest.snapshot_id
        if standby:
            assert restored["standby"]["used"] is True and restored["seconds_restore"] == 0.0
            assert restored["rewritten"] and all(r.startswith(("offsets/", "sources/")) for r in restored["rewritten"])
            assert report["standby"]["used"] is True
        else:
            assert restored["standby"] is None
        assert restored["events_behind"] == sum(1 for _ in messages(second))
        assert result.tasks["fence_primary"].xcom["outcome"] == "not-running"
        assert report["resumed_after_batch"] == snap.manifest.batch_id
        assert 0 < report["rto_first_batch_s"] <= report["rto_caught_up_s"]
        print("\n".join(report["lines"]))

        # The DR cluster is the source now: new input goes there, and the stream reads it once.
        produce_transactionally(dr.bootstrap, dr_topic, third)
        wait_read_all(dr_spec.checkpoint, dr.bootstrap, dr_topic, "the DR stream to read all")
        if dr.policy != "default":
            launcher.stop(dr_spec.checkpoint, timeout_s=60)
            assert account_state(spark, dr_spec.checkpoint) == expected_aggregates([first, second, third])
            return

        # Failback, the DR stream still running. The primary region is back: its broker with
        # its data, its S3 endpoint empty. The forward mirror gives way to a reverse one
        # (identity naming: the DR topic `primary.<topic>` keeps its name in the primary
        # cluster, a topic new there).
        stack_mod.stop_part(primary.state_dir, stack_mod.MM2_PART)
        stack_mod.restart_part(primary.state_dir, "primary-kafka")
        stack_mod.restart_part(primary.state_dir, "primary-s3")
        stack_mod.start_mm2(primary.state_dir, dr.bootstrap, primary.kafka_bootstrap, "identity",
                            source_alias="dr", target_alias="primary")
        in_primary = SimpleNamespace(kafka_bootstrap=primary.kafka_bootstrap, spark_jars=primary.spark_jars)
        home_spec = example_stream_spec(in_primary, dr_topic, tmp_path / "home").derive(
            store=f"s3://streamstate/home-{uuid.uuid4().hex[:8]}", storage_conn_id="s3_primary_region",
            kafka_conn_id="kafka_primary")
        result = run_dag("streamstate_dr_failback", {
            "stream": home_spec.to_dict(), "dr": dr_spec.to_dict(), "replication_policy": "identity",
            "max_lag": 0, "mirror_timeout_minutes": 3,
        })
        assert result.state == "success", result.log[-4000:]
        final, back, report = (result.tasks[t].xcom for t in ("final_snapshot", "failback", "report"))
        assert result.tasks["stop_in_dr"].xcom["outcome"] == "stopped"  # gracefully, by the DAG
        assert launcher.status(dr_spec.checkpoint).state == "stopped"
        assert account_state(spark, dr_spec.checkpoint) == expected_aggregates([first, second, third])
        assert back["snapshot_id"] == final["snapshot_id"] and final["anchored_partitions"] == 3
        assert back["events_behind"] == 0 and report["rpo_events"] == 0
        print("\n".join(report["lines"]))

        # Home again: new input in the primary cluster is read once, on top of all the rest.
        wait_mirrored_back(primary.kafka_bootstrap, dr_topic, sum(1 for s in (first, second, third)
                                                                  for _ in messages(s)))
        stack_mod.stop_part(primary.state_dir, stack_mod.MM2_PART)  # producers write to the primary now
        produce_transactionally(primary.kafka_bootstrap, dr_topic, fourth)
        wait_read_all(home_spec.checkpoint, primary.kafka_bootstrap, dr_topic, "the stream back home to read all")
        launcher.stop(home_spec.checkpoint, timeout_s=60)
    finally:  # never leave a driver behind, whatever failed
        for checkpoint in (dr_spec.checkpoint, str(tmp_path / "home" / "orders")):
            launcher.stop(checkpoint, timeout_s=60)
    assert account_state(spark, home_spec.checkpoint) == expected_aggregates([first, second, third, fourth])
