"""The start-stream path on a Spark standalone cluster (a master and two workers from the
pyspark installation, on loopback) with the checkpoint in S3 (the stack's moto endpoint,
through S3A): the driver runs on the launcher's host (client mode; PySpark has no cluster
deploy mode on standalone), the executors on the workers, the stream's records live beside
its S3 checkpoint, and its snapshots restore (locally and onto S3) exactly. The cluster is the
run's (tests/integration/conftest.py), shared with the state jobs' tests."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.liveness import now_iso
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from dev import spark_cds
from tests.streams import account_state, consumed_records, example_stream_spec, oracle_state, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark_standalone]
log = logging.getLogger(__name__)


def _cluster_spec(stack, topic, tmp_path, master, checkpoint, *, name):  # noqa: ANN001, ANN202
    """The example stream on the standalone cluster, checkpointing through S3A to `checkpoint`;
    its driver writes its records beside it with boto3 from the stack's AWS environment."""
    spec = example_stream_spec(stack, topic, tmp_path, name=name, extra_args=["--shuffle-partitions", "2"], spark_default_manager=True)
    return spec.derive(
        master=master, checkpoint=checkpoint, env={"PYSPARK_PYTHON": sys.executable, **stack.s3_env("primary")},
        conf={**spec.conf, **stack.s3a_conf("primary"), "spark.executor.memory": "512m", "spark.cores.max": "2",
              "spark.executor.extraJavaOptions": spark_cds.cluster_jvm_opts()},
    )


def test_a_stream_on_a_standalone_cluster_checkpointing_to_s3_is_launched_watched_stopped_and_restored_exactly(
    stack, spark, topic, tmp_path, spark_standalone, monkeypatch
) -> None:
    """Client mode on the cluster with the checkpoint in S3: the launcher and the driver keep
    the stream's records (launch, heartbeat, driver, stop request) beside the S3 checkpoint,
    where any worker can reach them. While it runs, a second launch and a restore over it are
    refused; a stop request written there, as another host would, stops it gracefully; its
    snapshot restores to exactly the oracle's state; a copy restored onto another S3 prefix
    runs on the cluster again, resumes with the next batch and ends in exactly the state of
    all the input."""
    from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
    from airflow_provider_streamstate.engine.core.errors import StreamRunningError
    from airflow_provider_streamstate.jobs.generator import expected_aggregates
    from airflow_provider_streamstate.streams.start import start_stream

    master = spark_standalone.master
    for key, value in stack.s3_env("primary").items():  # the launching side reads the records with boto3 too
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - this test reads the S3 state too
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    prefix = f"s3a://{stack.s3['primary']['bucket']}/tests/{uuid.uuid4().hex[:10]}"
    spec = _cluster_spec(stack, topic, tmp_path, master, f"{prefix}/orders", name="orders")
    rounds = [GeneratorSpec(seed=5, accounts=10, events=200)]
    rounds.append(rounds[0].next_round())
    produce(stack.kafka_bootstrap, topic, rounds[0])
    try:
        handle, status, _ = start_stream(spec, startup_timeout_s=300, log=log)
        assert status.state == "running" and handle.checkpoint == spec.checkpoint
        side = open_sidecar(spec.checkpoint)
        assert records.read_launch(side) is not None and side.read("_streamstate/heartbeat.json") is not None
        wait_for(lambda: consumed_records(spec.checkpoint) == 200, timeout=240, what="200 records on the cluster")
        ui = spark_standalone.status()
        # The driver runs here; the cluster runs its executors (beside other tests' state jobs:
        # this is the only example stream, `streamstate-example`, on the run's cluster).
        apps = [a for a in ui["activeapps"] if a["name"] == "streamstate-example"]
        assert len(apps) == 1 and apps[0]["cores"] >= 1, ui["activeapps"]
        assert sum(w["state"] == "ALIVE" for w in ui["workers"]) == 2
        assert sum(w["coresused"] for w in ui["workers"]) >= 1  # executors run on the workers
        with pytest.raises(StreamRunningError, match="is running on s3a://"):
            launcher.launch(["true"], stream="orders", checkpoint=spec.checkpoint)
        snap = create_snapshot(spec.checkpoint, open_store(spec.store), spec.name).manifest
        with pytest.raises(StreamRunningError, match="cannot replace its checkpoint"):
            restore_snapshot(open_store(spec.store), spec.name, snap.snapshot_id, spec.checkpoint, force=True)

        # Another host asks the stream to stop: only the record beside the checkpoint tells the driver.
        side.write(records.STOP_FILE, json.dumps({"format": records.STOP_FORMAT, "requested_at": now_iso(),
                                                   "by": "another host"}).encode())
        wait_for(lambda: launcher.status(spec.checkpoint).state == "stopped", timeout=120, what="a graceful stop")

        def exited() -> bool:  # the driver records its exit after its query's last beat
            record = records.read_driver(spec.checkpoint, handle.launch_id)
            return record is not None and record.exit_code is not None

        wait_for(exited, timeout=60, what="the driver's exit record")
        driver = records.read_driver(spec.checkpoint, handle.launch_id)
        assert driver is not None and driver.exit_code == 0 and "another host" in (driver.stop_reason or "")
    finally:
        launcher.stop(spec.checkpoint, timeout_s=60)
    target = tmp_path / "restored"
    restore_snapshot(open_store(spec.store), spec.name, snap.snapshot_id, target)
    assert account_state(spark, str(target), snap.batch_id) == oracle_state(stack.kafka_bootstrap, snap.kafka_offsets)

    # The snapshot restored onto another S3 prefix, run on the cluster: it resumes and ends exact.
    copy = _cluster_spec(stack, topic, tmp_path, master, f"{prefix}/copy", name="copy")
    restore_snapshot(open_store(spec.store), spec.name, snap.snapshot_id, copy.checkpoint, new_query_id=True)
    produce(stack.kafka_bootstrap, topic, rounds[1])
    try:
        start_stream(copy, startup_timeout_s=300, log=log)
        wait_for(lambda: consumed_records(copy.checkpoint) == 400, timeout=240, what="400 records in the copy")
    finally:
        launcher.stop(copy.checkpoint, timeout_s=60)
    first_batch = min(int(p.rsplit("/", 1)[-1]) for p in _commits_after(copy.checkpoint, snap.batch_id))
    assert first_batch == snap.batch_id + 1
    assert account_state(spark, copy.checkpoint) == expected_aggregates(rounds)


def _commits_after(checkpoint: str, batch_id: int) -> list[str]:
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

    return [f"commits/{n}" for n in CheckpointReader(checkpoint).committed_batches() if n > batch_id]


def test_the_executors_of_an_application_map_the_class_data_sharing_archive_of_its_spark(
        spark_standalone) -> None:  # noqa: ANN001
    """A standalone worker starts an application's executors with the launcher's class path,
    the archive's (dev/spark_cds.py): with `-Xshare:on` an executor that could not map it
    would not start, and the application would fail for want of executors."""
    import os
    import subprocess

    from dev import spark_versions

    main = spark_versions.get(spark_versions.MAIN_LINE)
    assert spark_cds.archive_path(main.spark_home).is_file(), "no class data sharing archive: run `make setup`"
    app = Path(__file__).resolve().parent.parent / "apps" / "count.py"
    opts = spark_cds.cluster_jvm_opts(main.spark_home).replace(spark_cds.QUIET, "-Xshare:on")
    ran = subprocess.run([str(main.spark_submit), "--master", spark_standalone.master, "--conf", "spark.ui.enabled=false",
                          "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.cores.max=1",
                          "--conf", "spark.executor.memory=512m", "--conf", f"spark.executor.extraJavaOptions={opts}",
                          str(app)], capture_output=True, text=True, timeout=600, env={**os.environ})
    assert ran.returncode == 0, ran.stderr[-3000:]
