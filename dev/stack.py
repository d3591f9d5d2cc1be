"""The local stack of real components: a Kafka broker (KRaft) and two S3 endpoints.

    .venv/bin/python dev/stack.py up      [--state-dir DIR] [--json] [--s3proxy] [--spark-cluster]
                                          [--yarn] [--hdfs] [--dr default|identity]
    .venv/bin/python dev/stack.py status  [--state-dir DIR] [--json]
    .venv/bin/python dev/stack.py kill    PART [--state-dir DIR]   (SIGKILL: a region dying)
    .venv/bin/python dev/stack.py stop    PART [--state-dir DIR]
    .venv/bin/python dev/stack.py restart PART [--state-dir DIR]
    .venv/bin/python dev/stack.py down    [--state-dir DIR]

Everything binds 127.0.0.1 on free ports. The broker runs from the Apache Kafka jars
that `make setup` fetched into `.jvm/kafka-broker`; each S3 region is its own moto
server process, so one region can be stopped while the other keeps serving. The
pytest fixtures, `make demo` and the benchmarks all call `up()`/`down()` from here.

Optional: `--s3proxy` (or `start_s3proxy()`, which the tests' `s3proxy` fixture calls only
when a test asks for it) also starts s3proxy, a second, independent S3 implementation
(filesystem backend, from the jars `make setup` fetched into `.jvm/s3proxy`), as the S3
"region" `s3proxy`, so the S3 store is not tuned to moto alone.

`--dr POLICY` (or `start_dr_kafka()`) adds the DR region's Kafka side: a second,
independent KRaft cluster (part `kafka-dr`) and MirrorMaker 2 in dedicated mode (part
`mm2`) mirroring every primary topic into it. Parts are killed, stopped and restarted one
by one (`primary-kafka`, `primary-s3`, `mm2`, `dr-kafka`, `dr-s3`, ...) so drills can take
the primary region down and bring it back.

`--hdfs` (or `start_hdfs()`) adds HDFS (part `hdfs`): a NameNode and one DataNode in one JVM,
WebHDFS on, permissions off, its data under the state dir; killed or stopped, `restart hdfs`
brings it back on its ports with its data (`down` deletes it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JARS = REPO / ".jvm"
DEFAULT_STATE_DIR = REPO / ".stack"
S3_REGIONS = {"primary": "us-east-1", "dr": "eu-west-1"}
BUCKET = "streamstate"
# Dummy credentials: the local S3 endpoints accept any.
S3_ACCESS_KEY = "streamstate"
S3_SECRET_KEY = "streamstate-secret"
READY_TIMEOUT_S = 90.0
S3PROXY = "s3proxy"  # the optional region served by s3proxy instead of moto
S3PROXY_PART = f"s3-{S3PROXY}"
# JVM flags for the many short Spark JVMs of tests and demos on a small machine: one GC
# thread and the quick compiler only, about half the CPU of a short session (a local
# streaming query of three batches: 17 CPU-seconds instead of 32; README, `make test`).
SHORT_LIVED_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# The same flags for the stack's services (Kafka brokers, MirrorMaker 2, YARN, HDFS, s3proxy,
# the standalone master and workers): a test's load is light, and the optimizing compiler
# and G1's threads cost more than they save. One broker, measured side by side
# (2026-11-29): 1.6 CPU-s to start instead of 3.0, 1.2% of a core idle instead of 1.5%,
# 0.6 CPU-s to take and serve 300,000 messages instead of 1.5.
SERVICE_JVM = SHORT_LIVED_JVM.split()


class StackError(RuntimeError):
    """A part of the stack did not start; the message names it and its log."""


@dataclass(frozen=True)
class Stack:
    """What `up` started, as the JSON that `up --json` prints."""

    kafka_bootstrap: str
    s3: dict[str, dict[str, str]]
    spark_jars: list[str]
    state_dir: str

    def to_json(self) -> dict[str, Any]:
        return {"kafka_bootstrap": self.kafka_bootstrap, "s3": self.s3, "spark_jars": self.spark_jars}

    def s3_env(self, region: str = "primary") -> dict[str, str]:
        """The standard AWS environment variables that point boto3 at one region's endpoint."""
        s3 = self.s3[region]
        return {
            "AWS_ENDPOINT_URL": s3["endpoint_url"],
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_DEFAULT_REGION": s3["region"],
        }

    def s3a_conf(self, region: str = "primary") -> dict[str, str]:
        """Spark confs that point S3A (`s3a://` checkpoints) at one region's endpoint:
        path-style requests, plain HTTP, the stack's credentials."""
        s3 = self.s3[region]
        return {
            "spark.hadoop.fs.s3a.endpoint": s3["endpoint_url"],
            "spark.hadoop.fs.s3a.endpoint.region": s3["region"],
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": S3_ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": S3_SECRET_KEY,
            "spark.hadoop.fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }

    def airflow_conn_env(self, region: str, conn_id: str) -> dict[str, str]:
        """An `AIRFLOW_CONN_<ID>` variable for the amazon provider's S3Hook on one region."""
        s3 = self.s3[region]
        conn = {
            "conn_type": "aws",
            "login": S3_ACCESS_KEY,
            "password": S3_SECRET_KEY,
            "extra": {"endpoint_url": s3["endpoint_url"], "region_name": s3["region"]},
        }
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}


def spark_jars() -> list[str]:
    """The Kafka connector jars for Spark, and the S3A connector (hadoop-aws with the AWS SDK
    modules it uses) for s3a:// checkpoints, fetched ahead of time (no download at run time)."""
    jars = sorted(str(p) for p in (JARS / "spark-kafka").glob("*.jar"))
    if not jars:
        raise StackError(f"no Spark Kafka connector jars in {JARS / 'spark-kafka'}; run `make setup`")
    return jars + sorted(str(p) for p in (JARS / "spark-s3a").glob("*.jar"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _spawn(name: str, cmd: list[str], state_dir: Path, env: dict[str, str] | None = None) -> int:
    with open(state_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # survives the caller; `down` stops it by pid file
        )
    (state_dir / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _wait(name: str, state_dir: Path, ready: Any, timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    pid = int((state_dir / f"{name}.pid").read_text())
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise StackError(f"{name} exited while starting; see {state_dir / (name + '.log')}")
        try:
            if ready():
                return
        except Exception as exc:  # not ready yet
            last = exc
        time.sleep(0.3)
    raise StackError(
        f"{name} not ready after {timeout:.0f}s ({last}); see {state_dir / (name + '.log')}"
    )


def _check_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("java not found on PATH; install Java 17 or 21")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        major = 0
    if major < 17:
        raise StackError(f"Java 17+ is required, found: {out.splitlines()[0] if out else 'unknown'}")
    return java


def kraft_cluster_id() -> str:
    """A random KRaft cluster id (22 URL-safe base64 characters) that does not start with
    '-', which the storage tool's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _kafka_properties(state_dir: Path, port: int, controller_port: int, name: str = "kafka") -> Path:
    data = state_dir / f"{name}-data"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "log.retention.hours": "-1",
        # The controller's no-op records keep an idle broker busy (every 500 ms by default):
        # one idle broker took 1.2% of a core with 5 s instead of 1.9%, and a run holds several.
        "metadata.max.idle.interval.ms": "5000",
    }
    path = state_dir / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (state_dir / "kafka-log4j2.yaml").write_text(
        "Configuration:\n"
        "  Appenders:\n"
        "    Console:\n"
        "      name: STDOUT\n"
        "      PatternLayout:\n"
        "        Pattern: '[%d] %p %m (%c)%n'\n"
        "  Loggers:\n"
        "    Root:\n"
        "      level: WARN\n"
        "      AppenderRef:\n"
        "        - ref: STDOUT\n"
        "    Logger:\n"
        "      - name: kafka.server.KafkaRaftServer\n"
        "        level: INFO\n"
    )
    return path


def _start_kafka(state_dir: Path, name: str = "kafka", port: int | None = None) -> str:
    """Start one single-node KRaft cluster as part `name` (its own port, storage and log);
    with `port`, start it again on the listeners and data it had."""
    java = _check_java()
    jars = JARS / "kafka-broker"
    if not any(jars.glob("kafka_*.jar")):
        raise StackError(f"no Kafka broker jars in {jars}; run `make setup`")
    props_file = state_dir / f"{name}.properties"
    if port is not None and props_file.exists():  # a restart: same listeners, same data
        props = props_file
    else:
        port, controller_port = free_port(), free_port()
        props = _kafka_properties(state_dir, port, controller_port, name)
    classpath = f"{jars}/*"
    jvm = [
        java,
        "-Xms256m",
        "-Xmx768m",
        *SERVICE_JVM,
        f"-Dlog4j2.configurationFile={state_dir / 'kafka-log4j2.yaml'}",
        "-cp",
        classpath,
    ]
    if not (state_dir / f"{name}-data" / "meta.properties").exists():
        cluster_id = kraft_cluster_id()
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
            capture_output=True,
            text=True,
        )
        (state_dir / f"{name}-format.log").write_text(fmt.stdout + fmt.stderr)
        if fmt.returncode != 0:
            raise StackError(f"formatting Kafka storage failed; see {state_dir / (name + '-format.log')}")
    _spawn(name, [*jvm, "kafka.Kafka", str(props)], state_dir)
    bootstrap = f"127.0.0.1:{port}"

    def ready() -> bool:
        from confluent_kafka.admin import AdminClient

        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
        md = admin.list_topics(timeout=2)
        return bool(md.brokers)

    _wait(name, state_dir, ready)
    return bootstrap


def _start_s3(state_dir: Path, name: str, region: str, port: int | None = None) -> dict[str, str]:
    port = port or free_port()
    _spawn(
        f"s3-{name}",
        [sys.executable, str(Path(__file__).with_name("moto_server.py")), "-H", "127.0.0.1", "-p", str(port)],
        state_dir,
        env={"MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    endpoint = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2) as r:
            return r.status == 200

    _wait(f"s3-{name}", state_dir, ready)
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
    )
    cfg = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    s3.create_bucket(Bucket=BUCKET, **cfg)
    return {"endpoint_url": endpoint, "region": region, "bucket": BUCKET}


def _s3proxy_files(state_dir: Path, port: int) -> Path:
    """s3proxy's properties (filesystem backend under the state dir, the stack's dummy
    credentials, SigV2 or V4 as boto3 sends) and a quiet logback configuration."""
    data = state_dir / "s3proxy-data"
    data.mkdir(parents=True, exist_ok=True)
    props = {
        "s3proxy.endpoint": f"http://127.0.0.1:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": S3_ACCESS_KEY,
        "s3proxy.credential": S3_SECRET_KEY,
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(data),
    }
    conf = state_dir / "s3proxy.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (state_dir / "s3proxy-logback.xml").write_text(
        "<configuration>\n"
        '  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">\n'
        "    <encoder><pattern>%d %-5level %logger{30} - %msg%n</pattern></encoder>\n"
        "  </appender>\n"
        '  <root level="WARN"><appender-ref ref="OUT"/></root>\n'
        "</configuration>\n"
    )
    return conf


def start_s3proxy(state_dir: Path | str) -> dict[str, str]:
    """Start s3proxy (filesystem backend) on a free port with the stack's bucket; returns the
    region's `{"endpoint_url", "region", "bucket"}`. Stop it with `stop_part(dir, S3PROXY_PART)`."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    java = _check_java()
    jars = JARS / "s3proxy"
    if not any(jars.glob("s3proxy-*.jar")):
        raise StackError(f"no s3proxy jars in {jars}; run `make setup`")
    port = free_port()
    conf = _s3proxy_files(state_dir, port)
    _spawn(
        S3PROXY_PART,
        [java, "-Xms64m", "-Xmx384m", *SERVICE_JVM, f"-Dlogback.configurationFile={state_dir / 's3proxy-logback.xml'}",
         "-cp", f"{jars}/*", "org.gaul.s3proxy.Main", "--properties", str(conf)],
        state_dir,
    )
    endpoint = f"http://127.0.0.1:{port}"
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY, config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    _wait(S3PROXY_PART, state_dir, lambda: s3.list_buckets() is not None)
    s3.create_bucket(Bucket=BUCKET)
    return {"endpoint_url": endpoint, "region": "us-east-1", "bucket": BUCKET}


SPARK_MASTER_PART = "spark-master"
SPARK_WORKER_PARTS = ("spark-worker-1", "spark-worker-2")


def start_spark_cluster(state_dir: Path | str, *, worker_cores: int = 1, worker_memory: str = "1g") -> str:
    """A Spark standalone cluster on loopback — a master and two workers run from the pyspark
    installation's own classes (`org.apache.spark.deploy.master.Master`, `worker.Worker`) and
    jars — ready when the master lists both workers ALIVE; returns its `spark://` URL. Stop it
    with `stop_spark_cluster(dir)`. PySpark drivers run in client mode (on the caller's host)."""
    import pyspark

    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    home = Path(pyspark.__file__).resolve().parent
    java = _check_java()
    base = [java, "-Xms64m", "-Xmx256m", *SERVICE_JVM, "-cp", f"{home}/conf:{home}/jars/*"]
    # SPARK_SCALA_VERSION: without it the executor launcher looks for a source build's directories.
    env = {"SPARK_HOME": str(home), "SPARK_SCALA_VERSION": "2.13", "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOCAL_HOSTNAME": "127.0.0.1"}
    port, ui = free_port(), free_port()
    _spawn(SPARK_MASTER_PART, [*base, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], state_dir, env)
    url = f"spark://127.0.0.1:{port}"

    def master_json() -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
            return dict(json.loads(r.read()))

    _wait(SPARK_MASTER_PART, state_dir, lambda: master_json()["status"] == "ALIVE")
    for name in SPARK_WORKER_PARTS:
        work = state_dir / name
        work.mkdir(exist_ok=True)
        _spawn(name, [*base, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                      "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(worker_cores),
                      "--memory", worker_memory, "--work-dir", str(work), url], state_dir, env)
    _wait(SPARK_WORKER_PARTS[-1], state_dir,
          lambda: sum(w["state"] == "ALIVE" for w in master_json()["workers"]) >= len(SPARK_WORKER_PARTS))
    (state_dir / "spark-cluster.json").write_text(json.dumps({"master": url, "ui": f"http://127.0.0.1:{ui}"}))
    return url


def stop_spark_cluster(state_dir: Path | str) -> None:
    """Stop the workers, then the master (safe when they are not running)."""
    for name in (*SPARK_WORKER_PARTS, SPARK_MASTER_PART):
        stop_part(state_dir, name)


YARN_PART = "yarn"


@dataclass(frozen=True)
class YarnCluster:
    """The stack's YARN cluster (`start_yarn_cluster`): where spark-submit finds it
    (`conf_dir` for HADOOP_CONF_DIR/YARN_CONF_DIR) and its ResourceManager's REST API."""

    conf_dir: str
    rm_web: str  # http://127.0.0.1:<port>: the ResourceManager's web app and REST API
    rm_address: str
    nm_web: str
    work_dir: str  # the NodeManager's dirs: container logs below <work_dir>/*-logDir-nm-*

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def unhealthy_nodes(self) -> list[str]:
        """The NodeManagers that launch nothing, each with YARN's reason (a full disk, say):
        on them an application waits ACCEPTED for good."""
        with urllib.request.urlopen(urllib.request.Request(
                f"{self.rm_web}/ws/v1/cluster/nodes?states=UNHEALTHY,LOST,DECOMMISSIONED,SHUTDOWN",
                headers={"Accept": "application/json"}), timeout=5) as r:
            nodes = (json.loads(r.read()).get("nodes") or {}).get("node") or []
        return [f"{n['id']} {n['state']}: {n.get('healthReport', '').strip()}" for n in nodes]

    def env(self) -> dict[str, str]:
        """What spark-submit needs to submit to it."""
        return {"HADOOP_CONF_DIR": self.conf_dir, "YARN_CONF_DIR": self.conf_dir}

    def pyspark_conf(self, staging: Path | str, *, executors: int = 1, executor_memory: str = "512m",
                     driver_memory: str = "512m", spark_home: Path | None = None,
                     python: str | None = None) -> dict[str, str]:
        """The Spark confs a PySpark application needs here: the driver (the application
        master picks its address itself) and the executors on loopback, `python` (default
        this one), Spark's own jars from `spark_home` (default this Python's pyspark: no
        460 MB upload per submit), `staging` as the staging directory, and the containers'
        JVMs on that Spark's class data sharing archive (dev/spark_cds.py)."""
        from dev import spark_cds  # it imports this module

        if spark_home is None:
            import pyspark

            spark_home = Path(pyspark.__file__).resolve().parent
        jars = spark_home / "jars"
        python = python or sys.executable
        return {
            **{f"spark.{side}.SPARK_LOCAL_{what}": "127.0.0.1" for side in ("yarn.appMasterEnv", "executorEnv")
               for what in ("IP", "HOSTNAME")},
            "spark.pyspark.python": python, "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python,
            "spark.executorEnv.PYSPARK_PYTHON": python, "spark.driver.memory": driver_memory,
            "spark.yarn.am.memory": "512m", "spark.executor.memory": executor_memory,
            "spark.executor.instances": str(executors), "spark.executor.cores": "1",
            "spark.yarn.jars": f"local:{jars}/*", "spark.yarn.stagingDir": f"file://{Path(staging).resolve()}",
            **spark_cds.yarn_container_confs(spark_home),
        }


def start_yarn_cluster(state_dir: Path | str, *, memory_mb: int = 8192, vcores: int = 4) -> YarnCluster:
    """A YARN cluster on loopback: Hadoop's ResourceManager and one NodeManager in one JVM
    (MiniYARNCluster, from the jars `make setup` fetched into `.jvm/yarn-cluster`), ready when
    its REST API answers. Stop it with `stop_yarn_cluster(dir)`. Sized for this machine: the
    NodeManager offers `memory_mb` and `vcores` (YARN does not enforce them here)."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    jars = JARS / "yarn-cluster"
    if not (jars / "streamstate-yarn-cluster.jar").exists():
        raise StackError(f"no YARN jars in {jars}; run `make setup`")
    conf_dir = state_dir / "yarn-conf"
    (conf_dir / "yarn-cluster.json").unlink(missing_ok=True)
    opens = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.util", "java.net", "sun.nio.ch")]
    web_port = free_port()
    _spawn(YARN_PART, [_check_java(), "-Xms64m", "-Xmx512m", *SERVICE_JVM, *opens,
                       f"-Dtest.build.data={state_dir / 'yarn-work'}", "-cp", f"{jars}/*",
                       "io.streamstate.dev.YarnCluster", str(conf_dir), str(web_port), str(memory_mb), str(vcores)],
           state_dir)

    def ready() -> bool:
        if not (conf_dir / "yarn-cluster.json").exists():
            return False
        with urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{web_port}/ws/v1/cluster/metrics", headers={"Accept": "application/json"}),
                timeout=2) as r:
            metrics = json.loads(r.read())["clusterMetrics"]
        return bool(metrics["activeNodes"] + metrics["unhealthyNodes"] > 0)  # the NodeManager has registered

    _wait(YARN_PART, state_dir, ready, timeout=max(READY_TIMEOUT_S, 120))
    info = json.loads((conf_dir / "yarn-cluster.json").read_text())
    cluster = YarnCluster(str(conf_dir), info["rm_web"], info["rm_address"], info["nm_web"], info["work_dir"])
    unhealthy = cluster.unhealthy_nodes()
    if unhealthy:
        stop_yarn_cluster(state_dir)
        raise StackError(f"YARN's NodeManager would launch no container: {'; '.join(unhealthy)}")
    return cluster


def stop_yarn_cluster(state_dir: Path | str) -> None:
    """Kill its containers (their processes have sessions of their own), then stop the
    cluster: SIGTERM, and SIGKILL after 3 s. A graceful stop waited ~25 s on containers
    this test cluster never needs to keep."""
    state_dir = Path(state_dir).resolve()
    _kill_containers(state_dir)
    stop_part(state_dir, YARN_PART, timeout=3.0)
    _kill_containers(state_dir)  # any the NodeManager launched meanwhile


HDFS_PART = "hdfs"


@dataclass(frozen=True)
class HdfsCluster:
    """The stack's HDFS (`start_hdfs`): one NameNode and one DataNode on loopback, WebHDFS on,
    permissions off (`dfs.permissions.enabled=false`: any user name may read and write
    anything, no Kerberos). `conf_dir` holds the client side of its configuration
    (`core-site.xml` with `fs.defaultFS`, `hdfs-site.xml`) and `hdfs-cluster.json`."""

    uri: str  # hdfs://127.0.0.1:<rpc port>: the NameNode, for full hdfs:// paths
    webhdfs_url: str  # http://127.0.0.1:<http port>: the NameNode's web app; WebHDFS below /webhdfs/v1
    conf_dir: str
    datanode_http: str  # http://127.0.0.1:<port>: where WebHDFS redirects reads and writes
    base_dir: str  # the NameNode's and the DataNode's storage

    @property
    def rpc_port(self) -> int:
        return int(self.uri.rsplit(":", 1)[1])

    @property
    def http_port(self) -> int:
        return int(self.webhdfs_url.rsplit(":", 1)[1])

    def url(self, path: str) -> str:
        """A full `hdfs://127.0.0.1:<port>/...` URL for an absolute HDFS path."""
        return f"{self.uri}/{path.lstrip('/')}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def env(self) -> dict[str, str]:
        """`HADOOP_CONF_DIR` at its client configuration. Hadoop clients then resolve paths
        without a scheme (`/x`, `x`) on this HDFS (`fs.defaultFS`); full `hdfs://` URLs need
        no configuration at all."""
        return {"HADOOP_CONF_DIR": self.conf_dir}


def _hdfs_ports(state_dir: Path) -> dict[str, int]:
    """The HDFS part's ports: chosen once, then kept (in `hdfs.json`) for as long as its data is,
    so a restart comes back where clients and checkpoints expect it."""
    ports_file = state_dir / "hdfs.json"
    if ports_file.exists() and (state_dir / "hdfs-data").exists():
        return dict(json.loads(ports_file.read_text()))
    ports = {name: free_port() for name in ("rpc", "http", "datanode", "datanode_http", "datanode_ipc")}
    ports_file.write_text(json.dumps(ports))
    return ports


def _load_hdfs(state_dir: Path) -> HdfsCluster | None:
    pid_file = state_dir / f"{HDFS_PART}.pid"
    info_file = state_dir / "hdfs-conf" / "hdfs-cluster.json"
    if not (pid_file.exists() and pid_alive(int(pid_file.read_text())) and info_file.exists()):
        return None
    info = json.loads(info_file.read_text())
    return HdfsCluster(info["uri"], info["webhdfs_url"], str(info_file.parent), info["datanode"]["http"],
                       info["base_dir"])


def start_hdfs(state_dir: Path | str) -> HdfsCluster:
    """HDFS on loopback: Hadoop's NameNode and one DataNode in one JVM (MiniDFSCluster, from the
    jars `make setup` fetched into `.jvm/hdfs-cluster`), its storage in `<state_dir>/hdfs-data`,
    ready when the DataNode is live, safe mode is off and WebHDFS answers. Returns the running
    one if it runs. Started again after a stop or a kill (or `restart_part(dir, "hdfs")`), it
    comes back on the same ports with its data: the NameNode is formatted only the first
    time. Stop it with `stop_hdfs(dir)`; `down(dir)` also deletes its data."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    running = _load_hdfs(state_dir)
    if running:
        return running
    jars = JARS / "hdfs-cluster"
    if not (jars / "streamstate-hdfs-cluster.jar").exists():
        raise StackError(f"no HDFS jars in {jars}; run `make setup`")
    stop_part(state_dir, HDFS_PART)  # a pid file of one that was half started
    ports = _hdfs_ports(state_dir)
    conf_dir = state_dir / "hdfs-conf"
    (conf_dir / "hdfs-cluster.json").unlink(missing_ok=True)
    opens = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.util", "java.net", "sun.nio.ch")]
    # C1 only: on this 2-core machine, under load, it was ready in ~7 s instead of ~16 s, and
    # ~190 MB RSS instead of ~220 MB; a test cluster never needs C2's peak throughput.
    _spawn(HDFS_PART, [_check_java(), "-Xms64m", "-Xmx384m", *SERVICE_JVM, *opens,
                       "-cp", f"{jars}/*",
                       "io.streamstate.dev.HdfsCluster", str(conf_dir), str(state_dir / "hdfs-data"),
                       *(str(ports[k]) for k in ("rpc", "http", "datanode", "datanode_http", "datanode_ipc"))],
           state_dir)

    def ready() -> bool:
        if not (conf_dir / "hdfs-cluster.json").exists():
            return False
        # The first WebHDFS request initialises its web app (seconds on a busy machine).
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['http']}/webhdfs/v1/?op=GETFILESTATUS",
                                    timeout=20) as r:
            return bool(json.loads(r.read())["FileStatus"]["type"] == "DIRECTORY")

    _wait(HDFS_PART, state_dir, ready)
    hdfs = _load_hdfs(state_dir)
    if hdfs is None:
        raise StackError(f"{HDFS_PART} stopped while starting; see {state_dir / (HDFS_PART + '.log')}")
    return hdfs


def stop_hdfs(state_dir: Path | str) -> None:
    """Stop the DataNode and the NameNode (SIGTERM: the edit log is closed); the data stays for
    the next `start_hdfs` on this state dir. Safe when it is not running."""
    stop_part(Path(state_dir).resolve(), HDFS_PART)


def _kill_containers(state_dir: Path) -> None:
    work = str(state_dir / "yarn-work")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(work):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _parts(state_dir: Path) -> list[str]:
    """The stack's parts: the broker, the moto regions, and s3proxy, the DR Kafka side, the
    Spark cluster, YARN and HDFS when they were started."""
    optional = [p for p in (S3PROXY_PART, DR_KAFKA_PART, MM2_PART, *SPARK_WORKER_PARTS, SPARK_MASTER_PART, YARN_PART,
                                  HDFS_PART)
                if (state_dir / f"{p}.pid").exists()]
    return ["kafka", *(f"s3-{r}" for r in S3_REGIONS), *optional]


# --- the DR region's Kafka side: a second cluster and MirrorMaker 2 ---------------------------

DR_KAFKA_PART = "kafka-dr"
MM2_PART = "mm2"
MM2_SOURCE_ALIAS = "primary"  # the default replication policy names mirrors `primary.<topic>`
MM2_POLICIES = {
    "default": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "identity": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
}


@dataclass(frozen=True)
class DrKafka:
    """The DR cluster and the mirror feeding it (`start_dr_kafka`)."""

    bootstrap: str
    primary_bootstrap: str
    policy: str  # default | identity
    source_alias: str
    state_dir: str

    def dr_topic(self, topic: str) -> str:
        return topic if self.policy == "identity" else f"{self.source_alias}.{topic}"

    def to_json(self) -> dict[str, Any]:
        return {"bootstrap": self.bootstrap, "primary_bootstrap": self.primary_bootstrap, "policy": self.policy,
                "source_alias": self.source_alias}


def _mm2_files(state_dir: Path, source: str, target: str, policy: str, source_alias: str,
               target_alias: str) -> Path:
    """MirrorMaker 2's dedicated-mode properties: source -> target only, every topic (new
    ones found within a second), single-broker replication factors, the chosen policy."""
    props = {
        "clusters": f"{source_alias}, {target_alias}",
        f"{source_alias}.bootstrap.servers": source,
        f"{target_alias}.bootstrap.servers": target,
        f"{source_alias}->{target_alias}.enabled": "true",
        f"{target_alias}->{source_alias}.enabled": "false",
        f"{source_alias}->{target_alias}.topics": ".*",
        "replication.policy.class": MM2_POLICIES[policy],
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "600",
        "sync.topic.acls.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "false",
        # Mirror what Spark reads: every record, as a read_uncommitted consumer sees it.
        "consumer.isolation.level": "read_uncommitted",
        "consumer.auto.offset.reset": "earliest",
        "offset.flush.interval.ms": "1000",
    }
    path = state_dir / "mm2.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (state_dir / "mm2.json").write_text(json.dumps({
        "source": source, "target": target, "policy": policy, "source_alias": source_alias,
        "target_alias": target_alias}))
    (state_dir / "mm2-log4j2.yaml").write_text(
        "Configuration:\n  Appenders:\n    Console:\n      name: STDOUT\n      PatternLayout:\n"
        "        Pattern: '[%d] %p %m (%c)%n'\n  Loggers:\n    Root:\n      level: WARN\n"
        "      AppenderRef:\n        - ref: STDOUT\n"
    )
    return path


def start_mm2(state_dir: Path | str, source: str, target: str, policy: str = "default", *,
              source_alias: str = MM2_SOURCE_ALIAS, target_alias: str = "dr") -> None:
    """Start MirrorMaker 2 (dedicated mode) mirroring `source` into `target` as part `mm2`
    (primary -> dr by default; reversed for a failback)."""
    state_dir = Path(state_dir).resolve()
    java = _check_java()
    jars = JARS / "mirror-maker"
    if not any(jars.glob("connect-mirror-*.jar")):
        raise StackError(f"no MirrorMaker 2 jars in {jars}; run `make setup`")
    props = _mm2_files(state_dir, source, target, policy, source_alias, target_alias)
    _spawn(
        MM2_PART,
        [java, "-Xms128m", "-Xmx512m", *SERVICE_JVM, f"-Dlog4j2.configurationFile={state_dir / 'mm2-log4j2.yaml'}",
         "-cp", f"{jars}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props), "--clusters", target_alias],
        state_dir,
    )


def _probe_mirrored(state_dir: Path, primary: str, dr: str, dr_topic: Any) -> None:
    """Wait until a record produced into the primary shows up in the DR cluster."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"streamstate-probe-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": primary, "log_level": 0})
    producer.produce(topic, b"probe")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": dr, "group.id": "probe", "log_level": 0})

    def ready() -> bool:
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(dr_topic(topic), 0), timeout=2)
        except Exception:  # noqa: BLE001 - not created yet
            return False
        return high > 0

    try:
        _wait(MM2_PART, state_dir, ready, timeout=120)
    finally:
        consumer.close()


def start_dr_kafka(state_dir: Path | str, primary_bootstrap: str, *, policy: str = "default") -> DrKafka:
    """Start the DR cluster (KRaft, own port and storage) and MirrorMaker 2 mirroring the
    primary into it with `policy` (`default`: `primary.<topic>`; `identity`: same names);
    returns once a probe record has crossed. Stop them with `stop_part(dir, "kafka-dr"|"mm2")`."""
    if policy not in MM2_POLICIES:
        raise StackError(f"unknown replication policy {policy!r}; use one of {sorted(MM2_POLICIES)}")
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        dr = _start_kafka(state_dir, DR_KAFKA_PART)
        info = DrKafka(dr, primary_bootstrap, policy, MM2_SOURCE_ALIAS, str(state_dir))
        start_mm2(state_dir, primary_bootstrap, dr, policy)
        _probe_mirrored(state_dir, primary_bootstrap, dr, info.dr_topic)
        (state_dir / "dr.json").write_text(json.dumps(info.to_json(), indent=2))
    except BaseException:
        stop_part(state_dir, MM2_PART)
        stop_part(state_dir, DR_KAFKA_PART)
        raise
    return info


def status(state_dir: Path = DEFAULT_STATE_DIR) -> dict[str, Any]:
    """Which parts are running, from the pid files, plus the stack JSON if `up` finished."""
    parts = {}
    for name in _parts(state_dir):
        pid_file = state_dir / f"{name}.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        parts[name] = {"pid": pid, "running": bool(pid and pid_alive(pid))}
    info_file = state_dir / "stack.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else None
    return {"state_dir": str(state_dir), "parts": parts, "stack": info}


def _load(state_dir: Path) -> Stack | None:
    st = status(state_dir)
    if st["stack"] and all(p["running"] for p in st["parts"].values()):
        info = st["stack"]
        return Stack(info["kafka_bootstrap"], info["s3"], info["spark_jars"], str(state_dir))
    return None


def up(state_dir: Path | str = DEFAULT_STATE_DIR, *, s3proxy: bool = False) -> Stack:
    """Start every part (or return the running stack) and wait until each answers;
    `s3proxy` adds the optional s3proxy region."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    running = _load(state_dir)
    if running and s3proxy and S3PROXY not in running.s3:
        running.s3[S3PROXY] = start_s3proxy(state_dir)
        (state_dir / "stack.json").write_text(json.dumps(running.to_json(), indent=2))
    if running:
        return running
    down(state_dir)  # a half-started stack from an earlier failure
    jars = spark_jars()
    try:
        s3 = {name: _start_s3(state_dir, name, region) for name, region in S3_REGIONS.items()}
        if s3proxy:
            s3[S3PROXY] = start_s3proxy(state_dir)
        bootstrap = _start_kafka(state_dir)
    except BaseException:
        down(state_dir)
        raise
    stack = Stack(bootstrap, s3, jars, str(state_dir))
    (state_dir / "stack.json").write_text(json.dumps(stack.to_json(), indent=2))
    return stack


def stop_part(state_dir: Path | str, name: str, timeout: float = 20.0) -> None:
    """Stop one part (e.g. `s3-dr` to simulate a lost region); safe when it is not running."""
    pid_file = Path(state_dir) / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)
        if not pid_alive(pid):
            break
    pid_file.unlink(missing_ok=True)


PART_ALIASES = {"primary-kafka": "kafka", "primary-s3": "s3-primary", "dr-kafka": DR_KAFKA_PART, "dr-s3": "s3-dr"}


def part_name(name: str) -> str:
    """A part by its name or its region alias (`primary-kafka`, `primary-s3`, `dr-kafka`, `dr-s3`)."""
    return PART_ALIASES.get(name, name)


def kill_part(state_dir: Path | str, name: str) -> None:
    """SIGKILL one part's whole process group at once, no shutdown: a region dying."""
    pid_file = Path(state_dir) / f"{part_name(name)}.pid"
    if not pid_file.exists():
        raise StackError(f"part {name} is not running in {state_dir}")
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    pid_file.unlink(missing_ok=True)


def restart_part(state_dir: Path | str, name: str) -> None:
    """Start a stopped or killed part again where it was: a broker on its port with its
    data (the cluster is the same), MirrorMaker 2 with its configuration (it resumes from
    the offsets it stored in the DR cluster), an S3 endpoint on its port with its bucket but
    empty (moto keeps objects in memory: a region that came back without its data), HDFS on
    its ports with its namespace and blocks."""
    state_dir = Path(state_dir).resolve()
    name = part_name(name)
    pid_file = state_dir / f"{name}.pid"
    if pid_file.exists() and pid_alive(int(pid_file.read_text())):
        raise StackError(f"part {name} is running; stop or kill it first")
    info_file = state_dir / "stack.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    if name in ("kafka", DR_KAFKA_PART):
        listeners = (state_dir / f"{name}.properties").read_text() if (state_dir / f"{name}.properties").exists() else ""
        port = next((int(line.rsplit(":", 1)[1]) for line in listeners.splitlines()
                     if line.startswith("advertised.listeners=")), None)
        if port is None:
            raise StackError(f"part {name} was never started in {state_dir}")
        _start_kafka(state_dir, name, port)
    elif name == MM2_PART:
        if not (state_dir / "mm2.json").exists():
            raise StackError(f"MirrorMaker 2 was never started in {state_dir}")
        mm2 = json.loads((state_dir / "mm2.json").read_text())
        start_mm2(state_dir, mm2["source"], mm2["target"], mm2["policy"], source_alias=mm2["source_alias"],
                  target_alias=mm2["target_alias"])
    elif name == HDFS_PART:
        if not (state_dir / "hdfs.json").exists():
            raise StackError(f"HDFS was never started in {state_dir}")
        start_hdfs(state_dir)
    elif name.startswith("s3-") and name[3:] in info.get("s3", {}):
        s3 = info["s3"][name[3:]]
        _start_s3(state_dir, name[3:], s3["region"], int(s3["endpoint_url"].rsplit(":", 1)[1]))
    else:
        raise StackError(f"unknown part {name!r}; parts: {', '.join(_parts(state_dir))}")


def down(state_dir: Path | str = DEFAULT_STATE_DIR, *, grace_s: float = 20.0) -> None:
    """Stop only the processes this stack started (by pid file); safe to call twice. Each part
    gets `grace_s` to stop after SIGTERM, then SIGKILL: a throwaway stack (the tests') need not
    wait for MirrorMaker 2 and the brokers to shut down cleanly, since its data goes with it."""
    state_dir = Path(state_dir).resolve()
    for name in _parts(state_dir):
        if name == YARN_PART:
            stop_yarn_cluster(state_dir)
        else:
            stop_part(state_dir, name, timeout=grace_s)
    (state_dir / "stack.json").unlink(missing_ok=True)
    # Broker and HDFS data go with the stack: a new `up` starts from empty clusters.
    shutil.rmtree(state_dir / "kafka-data", ignore_errors=True)
    shutil.rmtree(state_dir / "s3proxy-data", ignore_errors=True)
    shutil.rmtree(state_dir / f"{DR_KAFKA_PART}-data", ignore_errors=True)
    shutil.rmtree(state_dir / "hdfs-data", ignore_errors=True)
    shutil.rmtree(state_dir / "hdfs-conf", ignore_errors=True)
    for name in ("dr.json", "mm2.json", "hdfs.json"):
        (state_dir / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dev/stack.py", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "stop", "kill", "restart"])
    parser.add_argument("part", nargs="?", help="stop/kill/restart: the part, e.g. primary-kafka, primary-s3, "
                        "mm2, dr-kafka, dr-s3, s3proxy, hdfs")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--s3proxy", action="store_true", help="up: also start s3proxy as the S3 region `s3proxy`")
    parser.add_argument("--spark-cluster", action="store_true",
                        help="up: also start a Spark standalone master and two workers on loopback")
    parser.add_argument("--yarn", action="store_true",
                        help="up: also start a YARN cluster (ResourceManager + NodeManager) on loopback")
    parser.add_argument("--hdfs", action="store_true",
                        help="up: also start HDFS (NameNode + DataNode, WebHDFS on) on loopback")
    parser.add_argument("--dr", choices=sorted(MM2_POLICIES), default=None, metavar="POLICY",
                        help="up: also start the DR Kafka cluster and MirrorMaker 2 mirroring into it with this "
                             "replication policy (default: `primary.<topic>`; identity: same names)")
    args = parser.parse_args(argv)
    try:
        if args.command in ("stop", "kill", "restart"):
            if not args.part:
                raise StackError(f"{args.command} needs a part, e.g. `{args.command} primary-kafka`")
            if args.command == "kill":
                kill_part(args.state_dir, args.part)
            elif args.command == "stop":
                stop_part(args.state_dir, part_name(args.part))
            else:
                restart_part(args.state_dir, args.part)
            return 0
        if args.command == "up":
            stack = up(args.state_dir, s3proxy=args.s3proxy)
            master = start_spark_cluster(args.state_dir) if args.spark_cluster else None
            yarn = None
            if args.yarn:
                stop_yarn_cluster(args.state_dir)
                yarn = start_yarn_cluster(args.state_dir)
            hdfs = start_hdfs(args.state_dir) if args.hdfs else None
            dr_file = args.state_dir.resolve() / "dr.json"
            dr = None
            if args.dr:
                running = status(args.state_dir.resolve())["parts"]
                if running.get(MM2_PART, {}).get("running") and dr_file.exists():
                    dr = json.loads(dr_file.read_text())
                    if dr["policy"] != args.dr:
                        raise StackError(f"the DR mirror runs with policy {dr['policy']}; `down` first to change it")
                else:
                    stop_part(args.state_dir, MM2_PART)
                    stop_part(args.state_dir, DR_KAFKA_PART)
                    dr = start_dr_kafka(args.state_dir, stack.kafka_bootstrap, policy=args.dr).to_json()
            if args.json:
                print(json.dumps({**stack.to_json(), **({"spark_master": master} if master else {}),
                                  **({"yarn": yarn.to_json()} if yarn else {}),
                                  **({"hdfs": hdfs.to_json()} if hdfs else {}),
                                  **({"dr": dr} if dr else {})}))
            else:
                print(f"kafka  {stack.kafka_bootstrap}")
                for name, s3 in stack.s3.items():
                    print(f"s3     {name:8} {s3['endpoint_url']}  region={s3['region']} bucket={s3['bucket']}")
                print(f"state  {stack.state_dir}")
                if master:
                    print(f"spark  {master}")
                if yarn:
                    print(f"yarn   {yarn.rm_web}  HADOOP_CONF_DIR={yarn.conf_dir}")
                if hdfs:
                    print(f"hdfs   {hdfs.uri}  webhdfs={hdfs.webhdfs_url}  HADOOP_CONF_DIR={hdfs.conf_dir}")
                if dr:
                    print(f"dr     kafka {dr['bootstrap']}  mirrored by MM2 ({dr['policy']} policy)")
        elif args.command == "down":
            down(args.state_dir)
        else:
            st = status(args.state_dir.resolve())
            if args.json:
                print(json.dumps(st))
            else:
                for name, part in st["parts"].items():
                    print(f"{name:10} {'running' if part['running'] else 'stopped'}  pid={part['pid']}")
            return 0 if all(p["running"] for p in st["parts"].values()) else 1
    except StackError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
