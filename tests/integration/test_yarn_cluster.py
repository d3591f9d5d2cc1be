"""Streams where production streams run: the example stream submitted in cluster deploy mode
to a real YARN cluster (the stack's ResourceManager and NodeManager, Hadoop 3.4.2), its
checkpoint in S3, controlled from Airflow workers that are other hosts (own PID, UTS and
mount namespaces: tests/hosts.py).

The worker that started it ends with its task; the driver runs on in its YARN container and
keeps committing. Another worker sees it through the ResourceManager and the records beside
the checkpoint, and stops it gracefully (the application ends SUCCEEDED). A driver whose
application is killed reads as dead with YARN's diagnostics, and a supervision round
restarts it through YARN from its checkpoint, or, when its state objects are damaged,
restores the newest verified snapshot onto the S3 checkpoint and starts it on YARN again;
a failover onto an S3 checkpoint in the DR region runs on YARN too. The state ends exact.
The cluster's Python has pyspark and boto3 but not this package (an old copy that fails on
import): each submit ships the package's code to the driver's container."""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.engine.streams.managers.yarn import ResourceManager
from airflow_provider_streamstate.engine.streams.supervisor import (
    SupervisionPolicy,
    checkpoint_unusable,
    supervise,
)
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from dev import stack as stack_mod
from tests.cluster_python import cluster_python
from tests.hosts import python_on_host, require_namespaces
from tests.s3 import delete_newest_state
from tests.streams import account_state, consumed_records, example_stream_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.yarn]
log = logging.getLogger(__name__)
APPS = Path(__file__).resolve().parent.parent / "apps"


def _yarn_spec(stack, topic, tmp_path, yarn, checkpoint, python=None):  # noqa: ANN001, ANN202
    """The example stream in cluster deploy mode on YARN (the `spark_yarn` connection: master
    yarn, deploy-mode cluster), checkpointing to S3; the driver in its container writes the
    records beside the checkpoint with the AWS environment the spec gives it. `python`: the
    cluster's Python (default this one)."""
    spec = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "2"], spark_default_manager=True)
    conf = {k: v for k, v in spec.conf.items() if k not in ("spark.driver.host", "spark.driver.bindAddress")}
    return spec.derive(
        spark_conn_id="spark_yarn", checkpoint=checkpoint,
        env={**yarn.env(), **stack.s3_env("primary")},
        conf={**conf, **yarn.pyspark_conf(tmp_path / "staging", python=python), **stack.s3a_conf("primary")},
    )


def _containers_gone(yarn: stack_mod.YarnCluster, app_id: str) -> bool:
    """Whether the NodeManager runs no container of `app_id` any more."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{yarn.nm_web}/ws/v1/node/apps/{app_id}", timeout=10) as r:
            app = json.loads(r.read())["app"]
    except urllib.error.HTTPError as exc:
        return exc.code == 404  # the NodeManager has forgotten it: nothing of it runs
    return app.get("state") == "FINISHED" or not (app.get("containerids") or [])


def _on_host(host: str, script: str, *args: str, env: dict[str, str]) -> dict:
    proc = python_on_host(host, APPS / script, *args, env=env, stdout=-1, stderr=-1)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_stream_in_cluster_mode_on_yarn_outlives_its_launcher_and_is_watched_stopped_and_restarted_from_other_hosts(
    stack, spark, topic, tmp_path, yarn, monkeypatch
) -> None:
    require_namespaces()
    conn = json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    worker_env = {"AIRFLOW_CONN_SPARK_YARN": conn, **stack.s3_env("primary"), **yarn.env()}
    for key, value in worker_env.items():  # this process is a worker too (the supervision round)
        monkeypatch.setenv(key, value)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - the test reads the S3 state too
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    checkpoint = f"s3a://{stack.s3['primary']['bucket']}/yarn/{uuid.uuid4().hex[:10]}/orders"
    # The cluster's Python has pyspark and boto3 (the driver's records beside an S3 checkpoint),
    # and a copy of this package that fails on import: the driver runs the code the submit ships.
    python = str(cluster_python(tmp_path / "cluster-python", ("pyspark", "boto3", "confluent-kafka")))
    spec = _yarn_spec(stack, topic, tmp_path, yarn, checkpoint, python=python)
    rounds = [GeneratorSpec(seed=71, accounts=10, events=200)]
    rounds.append(rounds[0].next_round(150))
    rounds.append(rounds[1].next_round(100))
    produce(stack.kafka_bootstrap, topic, rounds[0])
    rm = ResourceManager(yarn.rm_web)
    try:
        # Worker A starts it and its task ends: nothing of worker A is left.
        started = _on_host("worker-a", "start_agent.py", json.dumps(spec.to_dict()), env=worker_env)
        handle = records.StreamHandle.from_json(started["handle"])
        assert started["status"]["state"] == "running" and handle.host == "worker-a"
        record = records.read_launch(checkpoint)
        assert record.cluster is not None and record.cluster.app_id, record
        app_id = record.cluster.app_id
        assert rm.app(app_id).state == "RUNNING"
        wait_for(lambda: consumed_records(checkpoint) == 200, timeout=300, what="200 records on YARN")

        # Worker B sees it running, through YARN and the records beside the checkpoint.
        seen = _on_host("worker-b", "status_agent.py", "status", checkpoint, env=worker_env)
        assert seen["host"] == "worker-b" and seen["state"] == "running", seen
        assert seen["cluster_app"]["app_id"] == app_id and seen["cluster_app"]["state"] == "RUNNING"

        # Its application is killed (a lost container, an operator's `yarn application -kill`).
        rm.kill(app_id)
        wait_for(lambda: launcher.status(checkpoint).state == "dead", timeout=120, what="the stream to read dead")
        dead = launcher.status(checkpoint)
        assert "killed" in (dead.last_error or "").lower(), dead
        produce(stack.kafka_bootstrap, topic, rounds[1])

        # A supervision round on this worker restarts it through YARN from its checkpoint.
        killed_at = time.monotonic()

        def start_on_yarn() -> object:
            from airflow_provider_streamstate.streams.start import start_stream

            return start_stream(spec, startup_timeout_s=480, log=log)[0]

        report = supervise(spec.name, checkpoint, start=start_on_yarn,
                           policy=SupervisionPolicy(settle_s=300), store=None)
        # Dead, or failed when the driver recorded the exception the kill raised in it first.
        assert report.state_before in ("dead", "failed") and report.action == "restarted", report.to_json()
        recovery_s = time.monotonic() - killed_at
        restarted = records.read_launch(checkpoint)
        assert restarted.handle.generation == 2 and restarted.cluster.app_id not in (None, app_id)
        print(f"\nYARN recovery: killed app -> restarted app's first new batch in {recovery_s:.1f}s "
              f"(timings {report.timings[0].to_json()})")
        wait_for(lambda: consumed_records(checkpoint) == 350, timeout=300, what="350 records after the restart")
        produce(stack.kafka_bootstrap, topic, rounds[2])
        wait_for(lambda: consumed_records(checkpoint) == 450, timeout=300, what="all 450 records")

        # Its state objects are damaged and its application dies: the round finds the restart
        # failing on the unusable checkpoint, restores the newest verified snapshot onto S3 and
        # starts it on YARN again.
        store = open_store(spec.store)
        snap = create_snapshot(checkpoint, store, spec.name).manifest
        rounds.append(rounds[2].next_round(120))
        produce(stack.kafka_bootstrap, topic, rounds[3])
        wait_for(lambda: consumed_records(checkpoint) == 570, timeout=300, what="570 records")
        killed = records.read_launch(checkpoint).cluster.app_id
        rm.kill(killed)
        wait_for(lambda: launcher.status(checkpoint).state == "dead", timeout=120, what="the stream to read dead")
        # The ResourceManager says KILLED before the NodeManager has stopped the driver's
        # container, which may still commit a batch: damage the state only once it is gone.
        wait_for(lambda: _containers_gone(yarn, killed), timeout=120, what="the killed driver's container to end")
        delete_newest_state(stack, checkpoint)
        # New input, so the restarted driver must run a batch, which is when Spark loads the
        # damaged state: a restart with nothing to read would run, caught up, and load nothing.
        rounds.append(rounds[3].next_round(60))
        produce(stack.kafka_bootstrap, topic, rounds[4])
        restored = supervise(spec.name, checkpoint, start=start_on_yarn,
                             policy=SupervisionPolicy(settle_s=300), store=lambda: store)
        assert (restored.action, restored.restored_snapshot) == ("restored", snap.snapshot_id), restored.to_json()
        assert checkpoint_unusable(restored.failure), restored.failure
        assert records.read_launch(checkpoint).handle.generation == 4  # restart failed (3), restored (4)
        wait_for(lambda: consumed_records(checkpoint) == 630, timeout=300, what="630 records after the restore")

        # Worker B stops it: the request beside the checkpoint, honoured after the batch.
        stopped = _on_host("worker-b", "status_agent.py", "stop", checkpoint, "180", env=worker_env)
        assert stopped["outcome"] == "stopped" and stopped["state"] == "stopped", stopped
        final = rm.app(records.read_launch(checkpoint).cluster.app_id)
        assert (final.state, final.final_status) == ("FINISHED", "SUCCEEDED"), final
    finally:
        launcher.stop(checkpoint, timeout_s=60)
    assert account_state(spark, checkpoint) == expected_aggregates(rounds)


def test_a_failover_onto_an_s3_checkpoint_in_the_dr_region_runs_on_yarn_and_ends_exact(
    stack, spark, tmp_path, yarn, monkeypatch
) -> None:
    """DR on a cluster: the primary stream's snapshot (with its Kafka anchors) fails over onto
    an `s3a://` checkpoint in the DR region for the mirrored topic, and the stream started
    there in cluster mode on YARN resumes with the next batch and ends in the exact state
    of all the input."""
    import os
    import subprocess

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot as snapshot
    from airflow_provider_streamstate.jobs.generator import ensure_topic
    from airflow_provider_streamstate.streams.start import start_stream
    from tests.integration.test_failover_translation import mirror, produce_into
    from tests.streams import run_to_end, use_state_store

    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    first = GeneratorSpec(seed=73, accounts=8, events=160)
    second = first.next_round(80)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])
    run_to_end(spark, stack.kafka_bootstrap, topic, str(tmp_path / "primary"), max_offsets=60)
    snapshot(str(tmp_path / "primary"), LocalStore(tmp_path / "store", fsync=False), "orders",
             kafka_bootstrap=stack.kafka_bootstrap)
    mirror(stack.kafka_bootstrap, topic, dr_topic, 2)
    produce_into(stack.kafka_bootstrap, dr_topic, second, partitions=[0, 1])

    checkpoint = f"s3a://{stack.s3['dr']['bucket']}/yarn-dr/{uuid.uuid4().hex[:10]}/orders"
    out = subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", "--store",
                          str(tmp_path / "store"), "--stream", "orders", "--target", checkpoint, "--kafka-bootstrap",
                          stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, **stack.s3_env("dr")})
    assert out.returncode == 0, out.stderr
    batch = json.loads(out.stdout)["batch_id"]

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    for key, value in {**stack.s3_env("dr"), **yarn.env()}.items():
        monkeypatch.setenv(key, value)
    base = _yarn_spec(stack, dr_topic, tmp_path, yarn, checkpoint)
    spec = base.derive(env={**yarn.env(), **stack.s3_env("dr")}, conf={**base.conf, **stack.s3a_conf("dr")})
    try:
        start_stream(spec, startup_timeout_s=480, log=log)
        wait_for(lambda: consumed_records(checkpoint) == 240, timeout=300, what="all 240 records in DR")
    finally:
        stopped = launcher.stop(checkpoint, timeout_s=120)
    assert stopped.outcome == "stopped", stopped
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("dr").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

    assert min(n for n in CheckpointReader(checkpoint).committed_batches() if n > batch) == batch + 1
    assert account_state(spark, checkpoint) == expected_aggregates([first, second])



def test_the_containers_of_an_application_map_the_class_data_sharing_archive_of_its_spark(
        yarn: stack_mod.YarnCluster, tmp_path: Path) -> None:
    """The suite's YARN applications start their containers (the driver's application master,
    the executors) on the archive `make setup` built for this Spark (dev/spark_cds.py), which
    saves each container about 40% of its CPU: with `-Xshare:on` a JVM that cannot map it
    refuses to start. Without the launcher's class path first (a container's own begins with
    its working directory), the same application fails: the check can fail."""
    import os
    import subprocess

    from dev import spark_cds, spark_versions

    main = spark_versions.get(spark_versions.MAIN_LINE)
    assert spark_cds.archive_path(main.spark_home).is_file(), "no class data sharing archive: run `make setup`"
    def submit(conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
        args = [str(main.spark_submit), "--master", "yarn", "--deploy-mode", "cluster"]
        for key, value in {**conf, "spark.ui.enabled": "false", "spark.yarn.maxAppAttempts": "1"}.items():
            args += ["--conf", f"{key}={value}"]
        return subprocess.run([*args, str(APPS / "count.py")], capture_output=True, text=True, timeout=600,
                              env={**os.environ, **yarn.env()})

    conf = yarn.pyspark_conf(tmp_path / "staging")
    strict = {k: v.replace(spark_cds.QUIET, "-Xshare:on") if k.endswith("extraJavaOptions") else v
              for k, v in conf.items()}
    assert all("-Xshare:on" in strict[f"spark.{side}.extraJavaOptions"] for side in ("driver", "executor"))
    ran = submit(strict)
    assert ran.returncode == 0, ran.stderr[-3000:]
    refused = submit({k: v for k, v in strict.items() if not k.endswith("extraClassPath")})
    assert refused.returncode != 0 and "shared class paths mismatch" in refused.stderr, refused.stderr[-3000:]
