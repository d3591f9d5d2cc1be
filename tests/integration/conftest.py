"""Fixtures of the integration tests that need more than the shared stack."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dev import stack as stack_mod
from tests import shared_parts


def _throwaway_down(state_dir: Path) -> None:
    """A test pair's `down`: its data goes with it, so MirrorMaker 2 and the brokers are not
    given 20 s each to shut down cleanly."""
    stack_mod.down(state_dir, grace_s=3.0)


def _start_region_pair(state_dir: Path, policy: str) -> dict[str, Any]:
    primary = stack_mod.up(state_dir)
    dr = stack_mod.start_dr_kafka(state_dir, primary.kafka_bootstrap, policy=policy)
    return {"primary": primary.to_json(), "dr": dr.to_json()}


def _region_pair(info: dict[str, Any], state_dir: Path) -> tuple[stack_mod.Stack, stack_mod.DrKafka]:
    p, d = info["primary"], info["dr"]
    primary = stack_mod.Stack(p["kafka_bootstrap"], dict(p["s3"]), list(p["spark_jars"]), str(state_dir))
    return primary, stack_mod.DrKafka(d["bootstrap"], d["primary_bootstrap"], d["policy"], d["source_alias"],
                                      str(state_dir))


class RegionPairs:
    """The run's shared region pairs, one per MirrorMaker 2 policy, each started when a test
    first asks for it (tests/shared_parts.py) and let go at the end of the session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.held: dict[str, tuple[Iterator[dict[str, Any]], tuple[stack_mod.Stack, stack_mod.DrKafka]]] = {}

    def get(self, policy: str) -> tuple[stack_mod.Stack, stack_mod.DrKafka]:
        if policy not in self.held:
            name = f"regions-{policy}"
            holder = shared_parts.hold(self.root, name, lambda d: _start_region_pair(d, policy), _throwaway_down)
            self.held[policy] = (holder, _region_pair(next(holder), (self.root / "shared" / name).resolve()))
        return self.held[policy][1]

    def close(self) -> None:
        for holder, _ in self.held.values():
            next(holder, None)  # lets go: the last holder stops the pair
        self.held.clear()


@pytest.fixture(scope="session")
def region_pairs(shared_root: Path) -> Iterator[RegionPairs]:
    pairs = RegionPairs(shared_root)
    try:
        yield pairs
    finally:
        pairs.close()


@pytest.fixture
def regions(request: pytest.FixtureRequest, region_pairs: RegionPairs) -> tuple[stack_mod.Stack, stack_mod.DrKafka]:
    """A primary region (its own Kafka and S3, not the stack's) and a DR Kafka cluster fed by
    MirrorMaker 2 with the policy given as the parameter: one pair per policy for the whole
    run, shared by the tests that leave it running as they found it (every test its own
    topics). A test that kills or stops a part of it takes `private_regions`."""
    return region_pairs.get(request.param)


@pytest.fixture
def private_regions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[stack_mod.Stack, stack_mod.DrKafka]]:
    """A region pair of the test's own, for a test that kills its primary or stops its mirror."""
    state_dir = tmp_path_factory.mktemp("regions")
    try:
        primary = stack_mod.up(state_dir)
        dr = stack_mod.start_dr_kafka(state_dir, primary.kafka_bootstrap, policy=request.param)
        yield primary, dr
    finally:
        _throwaway_down(state_dir)


@pytest.fixture(scope="session")
def yarn(shared_root: Path) -> Iterator[stack_mod.YarnCluster]:
    """The stack's YARN cluster (a ResourceManager and a NodeManager in one JVM), one for the
    whole run, shared by the test processes: each test's applications are its own. Its
    NodeManager offers the stack's default once per test process (8 GiB and 4 vcores each:
    bookkeeping, YARN does not enforce them here), so that the tests' applications running at
    once (a stream, a clone and a state job each at most) are never queued behind each other."""
    processes = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))

    def start(state_dir: Path) -> dict[str, Any]:
        return stack_mod.start_yarn_cluster(state_dir, memory_mb=8192 * processes, vcores=4 * processes).to_json()

    for info in shared_parts.hold(shared_root, "yarn", start, stack_mod.stop_yarn_cluster):
        yield stack_mod.YarnCluster(**info)


@pytest.fixture(scope="session")
def hdfs(shared_root: Path) -> Iterator[stack_mod.HdfsCluster]:
    """The stack's HDFS (a NameNode and a DataNode in one JVM, WebHDFS on), started once for
    the whole run when a test asks for it (about 5 s, ~250 MB), without YARN or the rest of
    the stack; stopped, its data deleted, after the last test process is done."""
    def start(state_dir: Path) -> dict[str, Any]:
        return stack_mod.start_hdfs(state_dir).to_json()

    def stop(state_dir: Path) -> None:
        stack_mod.stop_hdfs(state_dir)
        shutil.rmtree(state_dir / "hdfs-data", ignore_errors=True)
        (state_dir / "hdfs.json").unlink(missing_ok=True)

    for info in shared_parts.hold(shared_root, "hdfs", start, stop):
        yield stack_mod.HdfsCluster(**info)


@pytest.fixture
def only_the_connection(hdfs: stack_mod.HdfsCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """No Hadoop configuration on this worker; an Airflow connection (`streamstate_hdfs`,
    its id returned) naming the stack's NameNode, its RPC port and the HDFS user
    `streamstate`: a logical name in an `hdfs://` URL (no Hadoop configuration or DNS
    entry says where it is) is reached through it alone."""
    for key in ("HADOOP_CONF_DIR", "HADOOP_HOME", "HADOOP_USER_NAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_HDFS_WAREHOUSE", json.dumps(
        {"conn_type": "streamstate_hdfs", "host": "127.0.0.1", "port": hdfs.http_port, "login": "streamstate",
         "extra": {"rpc_port": hdfs.rpc_port}}))
    return "hdfs_warehouse"


@dataclass(frozen=True)
class SparkStandalone:
    """The Spark standalone cluster (a master and two workers): its `spark://` URL and the
    master's web UI, whose `/json/` lists the workers and the applications."""

    master: str
    ui: str

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as r:
            return dict(json.loads(r.read()))


@pytest.fixture(scope="session")
def spark_standalone(shared_root: Path) -> Iterator[SparkStandalone]:
    """One Spark standalone cluster for the whole run, started when a test asks for it. Its
    workers offer two cores each, so that a stream and a state job of two test processes can
    run on it at once."""
    def start(state_dir: Path) -> dict[str, Any]:
        stack_mod.start_spark_cluster(state_dir, worker_cores=2)
        return dict(json.loads((state_dir / "spark-cluster.json").read_text()))

    for info in shared_parts.hold(shared_root, "spark-standalone", start, stack_mod.stop_spark_cluster):
        yield SparkStandalone(info["master"], info["ui"])
