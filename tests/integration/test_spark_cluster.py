"""The start-stream path on a Spark standalone cluster (a master and two workers from the
pyspark installation, on loopback): the driver runs on the launcher's host (client mode;
PySpark has no cluster deploy mode on standalone), the executors on the workers, and the
stream's snapshots restore to exactly the state its recorded offsets imply."""

from __future__ import annotations

import json
import logging
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from airflow_provider_streamstate.engine import launcher
from airflow_provider_streamstate.engine.restore import restore_snapshot
from airflow_provider_streamstate.engine.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from dev import stack as stack_mod
from tests.streams import account_state, consumed_records, example_stream_spec, oracle_state, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(master URL, state dir): started only when a test asks for it, stopped after."""
    state_dir = tmp_path_factory.mktemp("spark-cluster")
    try:
        yield stack_mod.start_spark_cluster(state_dir), str(state_dir)
    finally:
        stack_mod.stop_spark_cluster(state_dir)


def master_ui(state_dir: str) -> dict:
    """The master's JSON status (workers, running applications and the cores they use)."""
    ui = json.loads((stack_mod.Path(state_dir) / "spark-cluster.json").read_text())["ui"]
    with urllib.request.urlopen(f"{ui}/json/", timeout=5) as r:
        return json.loads(r.read())


def test_the_example_stream_runs_on_a_standalone_cluster_and_its_snapshot_restores_exactly(
    stack, spark, topic, tmp_path, spark_cluster, monkeypatch
) -> None:
    from airflow_provider_streamstate.operators.stream import start_stream

    master, state_dir = spark_cluster
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    spec = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "2"])
    spec = spec.derive(master=master, env={"PYSPARK_PYTHON": sys.executable},
                       conf={**spec.conf, "spark.executor.memory": "512m", "spark.cores.max": "2"})
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=5, accounts=10, events=200))
    try:
        start_stream(spec, startup_timeout_s=300, log=log)
        wait_for(lambda: consumed_records(spec.checkpoint) == 200, timeout=240, what="200 records on the cluster")
        ui = master_ui(state_dir)
        apps = ui["activeapps"]  # the driver runs here; the cluster runs its executors
        assert len(apps) == 1 and apps[0]["cores"] >= 1, apps
        assert sum(w["state"] == "ALIVE" for w in ui["workers"]) == 2
        assert sum(w["coresused"] for w in ui["workers"]) >= 1  # executors run on the workers
        snap = create_snapshot(spec.checkpoint, open_store(spec.store), spec.name).manifest
    finally:
        launcher.stop(spec.checkpoint, timeout_s=60)
    target = tmp_path / "restored"
    restore_snapshot(open_store(spec.store), spec.name, snap.snapshot_id, target)
    assert account_state(spark, str(target), snap.batch_id) == oracle_state(stack.kafka_bootstrap, snap.kafka_offsets)
