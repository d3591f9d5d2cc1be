"""Streams as a Hadoop platform runs them: the example stream in cluster deploy mode on the
stack's YARN (its driver in a container), its checkpoint and its snapshot store on the
stack's HDFS, one HADOOP_CONF_DIR for both (yarn-site.xml, core-site.xml with fs.defaultFS
on HDFS, hdfs-site.xml) as on an edge node. Started by the engine's launcher, it is
snapshotted while it runs; its driver's container is killed outright (no shutdown hook
runs, as when a node is lost or the kernel's OOM killer strikes) and a supervision round
restarts it through YARN, removing the dead application's `.sparkStaging/<app>` on HDFS
(Spark's copy of every conf); a clone restored from a snapshot onto another HDFS location
runs on YARN beside it; a state job on YARN reads the HDFS store and answers as the local
reader does; stopped gracefully, both end in the state of the whole input. The YARN cluster
and HDFS are the run's (tests/integration/conftest.py), shared with the other test files."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from fsspec.implementations.webhdfs import WebHDFS

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.engine.streams.managers.yarn import ResourceManager
from airflow_provider_streamstate.engine.streams.supervisor import SupervisionPolicy, supervise
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from airflow_provider_streamstate.operators.stream import CloneStreamOperator
from airflow_provider_streamstate.streams.start import start_stream
from dev import stack as stack_mod
from tests.streams import account_state, consumed_records, example_stream_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.yarn, pytest.mark.hdfs]
log = logging.getLogger(__name__)


@pytest.fixture
def hadoop_env(yarn: stack_mod.YarnCluster, hdfs: stack_mod.HdfsCluster, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """One Hadoop client configuration for the YARN cluster and its HDFS, in this worker's
    environment and the spec's, with the Airflow connection of YARN in cluster mode."""
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    for site in [*Path(yarn.conf_dir).glob("*-site.xml"), *Path(hdfs.conf_dir).glob("*-site.xml")]:
        shutil.copy(site, conf / site.name)
    env = {"HADOOP_CONF_DIR": str(conf), "YARN_CONF_DIR": str(conf)}
    for key, value in {**env, "AIRFLOW_CONN_SPARK_YARN": json.dumps(
            {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}),
            "STREAMSTATE_HOME": str(tmp_path / "home")}.items():
        monkeypatch.setenv(key, value)
    return env


def _yarn_confs(yarn: stack_mod.YarnCluster, tmp_path: Path) -> dict[str, str]:
    """The stack's PySpark confs for YARN, staging left where Spark puts it by default: the
    user's home on the default filesystem, HDFS here."""
    confs = yarn.pyspark_conf(tmp_path / "unused")
    del confs["spark.yarn.stagingDir"]
    return confs


def _kill_driver_container(app_id: str) -> None:
    """SIGKILL the process group of `app_id`'s ApplicationMaster container (its launch script,
    the driver's JVM and its Python): nothing of the driver gets to clean up."""
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "org.apache.spark.deploy.yarn.ApplicationMaster" in cmdline and app_id in cmdline:
            os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
            return
    raise AssertionError(f"no ApplicationMaster process of {app_id} on this host")


def _rows(rows: list[dict]) -> list[str]:
    return sorted(json.dumps({k: v for k, v in r.items() if k != "partition_id"}, sort_keys=True, default=str)
                  for r in rows)


def test_a_stream_on_yarn_checkpointing_to_hdfs_is_snapshotted_supervised_cloned_and_queried_on_the_cluster(
    stack, spark, topic, tmp_path, yarn, hdfs, hadoop_env, capsys
) -> None:
    run = uuid.uuid4().hex[:10]
    store_url = hdfs.url(f"/stores/{run}")
    checkpoint = hdfs.url(f"/streams/{run}/orders")
    spec = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "2"], spark_default_manager=True)
    spec = spec.derive(
        spark_conn_id="spark_yarn", checkpoint=checkpoint, store=store_url, env=hadoop_env,
        conf={**{k: v for k, v in spec.conf.items() if k not in ("spark.driver.host", "spark.driver.bindAddress")},
              **_yarn_confs(yarn, tmp_path)},
    )
    store = open_store(store_url)
    webhdfs = WebHDFS("127.0.0.1", port=hdfs.http_port, user="root", skip_instance_cache=True)
    rm = ResourceManager(yarn.rm_web)
    rounds = [GeneratorSpec(seed=53, accounts=12, events=200)]
    rounds.append(rounds[0].next_round(150))
    rounds.append(rounds[1].next_round(100))
    produce(stack.kafka_bootstrap, topic, rounds[0])

    def start_on_yarn() -> object:
        return start_stream(spec, startup_timeout_s=480, log=log)[0]

    clone_checkpoint = hdfs.url(f"/streams/{run}/orders-sandbox")
    try:
        start_on_yarn()
        first = records.read_launch(checkpoint).cluster
        assert first is not None and first.app_id and rm.app(first.app_id).state == "RUNNING"
        # Spark staged the application in the submitting user's home on HDFS, and said so.
        assert first.staging == hdfs.url(f"/user/root/.sparkStaging/{first.app_id}"), first
        staged = first.staging.removeprefix(hdfs.uri)
        assert webhdfs.exists(staged)
        wait_for(lambda: consumed_records(checkpoint) == 200, timeout=300, what="200 records on YARN")

        # Snapshots while it runs and input arrives, into the HDFS store.
        producer = threading.Thread(target=lambda: produce(stack.kafka_bootstrap, topic, rounds[1], rate=30))
        producer.start()
        snaps = []
        deadline = time.monotonic() + 300
        while producer.is_alive() or len({s.batch_id for s in snaps}) < 2:
            assert time.monotonic() < deadline, [s.batch_id for s in snaps]
            snaps.append(create_snapshot(checkpoint, store, spec.name).manifest)
            time.sleep(1.0)
        producer.join()
        wait_for(lambda: consumed_records(checkpoint) == 350, timeout=300, what="350 records on YARN")

        # The driver's container is killed outright: dead, its staging left on HDFS.
        _kill_driver_container(first.app_id)
        wait_for(lambda: launcher.status(checkpoint).state in ("dead", "failed"), timeout=180,
                 what="the stream to read dead")
        assert webhdfs.exists(staged)
        # New input, so the restarted driver runs a batch, which is when supervision settles.
        produce(stack.kafka_bootstrap, topic, rounds[2])
        report = supervise(spec.name, checkpoint, start=start_on_yarn, policy=SupervisionPolicy(settle_s=300),
                           store=lambda: store)
        assert report.action == "restarted", report.to_json()
        second = records.read_launch(checkpoint).cluster
        assert second is not None and second.app_id not in (None, first.app_id)
        assert not webhdfs.exists(staged)  # the dead application's copy of every conf is gone

        # A clone from the first snapshot, onto HDFS, on YARN beside production.
        cloned = CloneStreamOperator(
            task_id="clone", stream=spec, clone_name="orders-sandbox", clone_checkpoint=clone_checkpoint,
            sinks={"alerts": f"{topic}-sandbox-alerts"}, snapshot=snaps[0].snapshot_id, ttl=3600,
            startup_timeout=480).execute({})
        assert cloned["snapshot_id"] == snaps[0].snapshot_id and cloned["handle"] is not None
        clone_app = records.read_launch(clone_checkpoint).cluster
        assert clone_app is not None and clone_app.app_id not in (first.app_id, second.app_id)
        for ckpt in (checkpoint, clone_checkpoint):
            wait_for(lambda c=ckpt: consumed_records(c) == 450, timeout=300, what=f"450 records in {ckpt}")
        assert launcher.stop(clone_checkpoint, timeout_s=180).outcome == "stopped"

        # A state job on YARN reads the newest snapshot from the HDFS store.
        last = snaps[-1].snapshot_id
        code = main(["state", "show", last, "--operator", "stateStoreSave", "--limit", "1000", "--store", store_url,
                     "--stream", spec.name, "--json", "--spark-conn-id", "spark_yarn",
                     *(a for k, v in _yarn_confs(yarn, tmp_path).items() for a in ("--conf", f"{k}={v}")),
                     "--conf", "spark.sql.shuffle.partitions=2"])
        shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 0 and shown["ran_on"]["master"] == "yarn" and shown["ran_on"]["deploy_mode"] == "cluster"
        with StateReader(store, spark=spark) as reader:
            here = [r.asDict() for r in reader.state(spec.name, last, StateSelector("stateStoreSave")).collect()]
        assert shown["total_rows"] == len(here) > 0
        assert _rows(shown["rows"]) == _rows(here)

        # Stopped gracefully: the application succeeds and Spark removes its own staging.
        stopped = launcher.stop(checkpoint, timeout_s=180)
        assert stopped.outcome == "stopped", stopped
        final = rm.app(second.app_id)
        assert (final.state, final.final_status) == ("FINISHED", "SUCCEEDED"), final
        assert not webhdfs.exists(second.staging.removeprefix(hdfs.uri))
    finally:
        launcher.stop(checkpoint, timeout_s=60)
        launcher.stop(clone_checkpoint, timeout_s=60)
    expected = expected_aggregates(rounds)
    assert account_state(spark, checkpoint) == expected
    assert account_state(spark, clone_checkpoint) == expected
