"""An HDFS store and checkpoint reached through an Airflow connection alone (the stack's
HDFS, MiniDFSCluster): the stream's URLs name a logical HDFS service, `hdfs://warehouse/...`,
that neither the host's Hadoop configuration (there is none) nor DNS resolves; the
`streamstate_hdfs` connection names the NameNode's WebHDFS address and the HDFS user. The
operators snapshot the checkpoint into the store and restore it to another HDFS location,
byte for byte; without the connection the same URLs reach nothing. A state job, a Spark
application (spark-submit on a local master, and in YARN's cluster deploy mode), reads a
snapshot of that store through the same name: the connection's NameNode reaches its Spark
and its driver as the Hadoop properties of a nameservice, and it acts as the connection's
HDFS user. A `webhdfs` connection (the
apache-hdfs provider's type, same fields) is read the same way, and a connection of another
kind is refused for an HDFS store."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from dev import stack as stack_mod
from tests.unit.test_checkpoint_fs import hdfs_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]

SERVICE = "warehouse"  # a logical name only the connection (`only_the_connection`, conftest.py) resolves


def hdfs_port(client) -> int:  # noqa: ANN001 - a WebHdfs
    return int(client.urls[0].split(":")[2].split("/")[0])


def upload(client, local: Path, path: str) -> None:  # noqa: ANN001 - a WebHdfs
    for p in sorted(local.rglob("*")):
        if p.is_file():
            client.create(f"{path}/{p.relative_to(local).as_posix()}", p.read_bytes())


def _tree(client, path: str) -> dict[str, bytes]:  # noqa: ANN001 - a WebHdfs
    out: dict[str, bytes] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        for e in client.list(f"{path}/{rel}".rstrip("/")) or []:
            child = f"{rel}/{e['pathSuffix']}".lstrip("/")
            if e["type"] == "DIRECTORY":
                stack.append(child)
            else:
                out[child] = client.read(f"{path}/{child}")
    return out


def test_an_hdfs_store_and_checkpoint_are_reached_through_an_airflow_connection_alone(
        only_the_connection: str, tmp_path: Path) -> None:
    from airflow_provider_streamstate.backends.hdfs.hook import StreamstateHdfsHook
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook, open_checkpoint
    from airflow_provider_streamstate.operators.snapshot import (
        RestoreSnapshotOperator,
        SnapshotStreamOperator,
    )
    from airflow_provider_streamstate.spec import StreamSpec

    conn_id = only_the_connection
    client = StreamstateHdfsHook(conn_id).get_conn()
    assert StreamstateHdfsHook(conn_id).test_connection()[0]
    base = f"/tests/{uuid.uuid4().hex[:10]}"
    local = hdfs_checkpoint(tmp_path / "ckpt")
    upload(client, local, f"{base}/ckpt")
    spec = StreamSpec(name="orders", checkpoint=f"hdfs://{SERVICE}{base}/ckpt", store=f"hdfs://{SERVICE}{base}/store",
                      storage_conn_id=conn_id)

    taken = SnapshotStreamOperator(task_id="snap", stream=spec).execute({})
    assert taken["batch_id"] == 3
    store = StreamstateStoreHook(spec.store, storage_conn_id=conn_id).store
    assert store.list_snapshot_ids("orders") == [taken["snapshot_id"]]
    assert store.client.urls == client.urls == [f"http://127.0.0.1:{hdfs_port(client)}/webhdfs/v1"]

    target = f"hdfs://{SERVICE}{base}/restored"
    restored = RestoreSnapshotOperator(task_id="restore", stream=spec, snapshot="latest", target=target).execute({})
    assert restored["snapshot_id"] == taken["snapshot_id"]
    files = _tree(client, f"{base}/restored")
    expected = {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    copied = {rel: data for rel, data in files.items() if not rel.startswith("_streamstate/")}
    assert {rel: copied[rel] for rel in copied if rel in expected} == {
        rel: data for rel, data in expected.items() if rel in copied}
    assert "metadata" in copied and any(rel.startswith("state/0/0/") for rel in copied)
    assert open_checkpoint(target, conn_id).files().keys() == files.keys()

    # The same URLs without the connection: this worker has no way to the service.
    with pytest.raises(StreamstateError):
        open_checkpoint(spec.checkpoint, None).files()


@pytest.mark.parametrize("deploy", ["local", pytest.param("yarn-cluster", marks=pytest.mark.yarn)])
def test_a_state_job_reads_a_snapshot_in_an_hdfs_store_only_the_connection_resolves_as_its_user(
        deploy: str, only_the_connection: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """On a local master, and in YARN's cluster deploy mode: the driver then runs in the
    application master's container, on a machine whose Hadoop configuration (YARN's alone,
    for spark-submit) names no HDFS service either; it gets the nameservice from the job's
    confs and acts as the connection's user, which spark-submit passes to the container."""
    from airflow_provider_streamstate.engine.state.jobs import StateJobRequest, result_key
    from airflow_provider_streamstate.engine.state.submit import (
        state_job_application,
        state_job_arguments,
        submit_state_job,
    )
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
    from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator
    from airflow_provider_streamstate.spec import StreamSpec
    from dev import spark_versions
    from tests.goldens import golden

    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    conn_id = only_the_connection
    g = golden("small_aggregation_hdfs")  # written by the main line's Spark, whose spark-submit runs the job
    store = StreamstateStoreHook(f"hdfs://{SERVICE}/tests/{uuid.uuid4().hex[:10]}/store", storage_conn_id=conn_id).store
    base = store.root.path.rsplit("/", 1)[0]
    upload(store.client, Path(g.checkpoint), f"{base}/ckpt")
    spec = StreamSpec(name="orders", checkpoint=f"hdfs://{SERVICE}{base}/ckpt", store=store.url, storage_conn_id=conn_id)
    taken = SnapshotStreamOperator(task_id="snap", stream=spec).execute({})

    job = StateJobRequest(kind="show", store=store.url, stream="orders", snapshot=taken["snapshot_id"],
                           limit=1000).with_job_id()
    line = spark_versions.get(spark_versions.MAIN_LINE)
    env = line.env()
    if deploy == "local":
        command = line.submit_command(state_job_application(), state_job_arguments(job))
    else:
        yarn: stack_mod.YarnCluster = request.getfixturevalue("yarn")
        conf = {**yarn.pyspark_conf(tmp_path / "staging"), "spark.sql.shuffle.partitions": "2"}
        command = [str(line.spark_submit), "--master", "yarn", "--deploy-mode", "cluster",
                   *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), state_job_application(),
                   *state_job_arguments(job)]
        env = {**env, **yarn.env()}  # YARN's configuration only: no core-site.xml, no HDFS service in it
    owners: dict[str, str | None] = {}  # of each record the submitter deletes once the job has answered
    delete = store.delete_record

    def delete_noting_its_owner(key: str) -> None:
        owners[key] = (store.client.status(store.root.join(key).path) or {}).get("owner")
        delete(key)
    monkeypatch.setattr(store, "delete_record", delete_noting_its_owner)
    shown = submit_state_job(job, store, command, env=env)

    expected = {(r.key, r.value, r.partition_id) for r in g.state().rows}  # what Spark's reader gave on the golden
    assert shown["columns"] == ["key__groupingexpression", "value_sum", "partition_id"]  # the job's flattened columns
    assert {((r["key__groupingexpression"],), (r["value_sum"],), r["partition_id"]) for r in shown["rows"]} == expected
    assert shown["total_rows"] == len(expected) and shown["batch_id"] == g.last_batch
    ran_on = shown["ran_on"]
    assert (ran_on["master"], ran_on["deploy_mode"]) == (("local[2]", "client") if deploy == "local" else
                                                         ("yarn", "cluster"))
    # The driver wrote its result as the connection's user, not as this worker's OS user.
    assert owners[result_key("orders", job.job_id)] == "streamstate"


def test_a_stream_runs_on_an_hdfs_checkpoint_only_the_connection_resolves_and_keeps_its_records_there(
        only_the_connection: str, stack: stack_mod.Stack, topic: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The example stream (Kafka in, spark-submit on local[1], the main line's Spark)
    started through the stream operators' path with its checkpoint at
    `hdfs://warehouse/...`: Spark's own HDFS client writes the checkpoint, and the
    supervised driver its heartbeat and records beside it, both as the connection's user,
    though neither the worker nor the driver has a Hadoop configuration naming the service."""
    import logging
    from dataclasses import replace

    from airflow_provider_streamstate.engine.checkpoint.liveness import HEARTBEAT_FILE, read_heartbeat
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets
    from airflow_provider_streamstate.engine.streams.records import DRIVER_FILE, read_driver
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
    from airflow_provider_streamstate.streams.start import opened_checkpoint, start_stream
    from tests.streams import example_stream_spec, use_local_connections, wait_for

    use_local_connections(monkeypatch, stack, tmp_path, master="local[1]")
    base = f"/tests/{uuid.uuid4().hex[:10]}"
    spec = replace(example_stream_spec(stack, topic, tmp_path, spark_default_manager=True),
                   checkpoint=f"hdfs://{SERVICE}{base}/ckpt", storage_conn_id=only_the_connection)
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=41, accounts=10, events=150))
    side = opened_checkpoint(spec)
    handle, status, reconnected = start_stream(spec, startup_timeout_s=600, log=logging.getLogger(__name__),
                                               checkpoint=side)
    try:
        assert status.state == "running" and not reconnected

        def read_all() -> bool:
            found = committed_kafka_offsets(side.fs)
            return found is not None and sum(sum(p.values()) for p in found[1].values()) == 150
        wait_for(read_all, timeout=300, what="the 150 records committed on hdfs://warehouse")
    finally:
        launcher.stop(handle, timeout_s=120, checkpoint=side)

    beat, driver = read_heartbeat(side), read_driver(side, handle.launch_id)
    assert beat is not None and beat.state == "stopped" and beat.launch_id == handle.launch_id
    assert driver is not None and driver.exit_code == 0
    client = side.fs.client
    owners = {rel: (client.status(side.fs.path(rel)) or {}).get("owner")
              for rel in ("commits/0", "state/0/0/1.delta", HEARTBEAT_FILE, DRIVER_FILE)}
    assert owners == dict.fromkeys(owners, "streamstate"), owners  # not this worker's OS user


def test_a_webhdfs_connection_reaches_hdfs_too_and_another_kind_is_refused_for_an_hdfs_store(
        hdfs: stack_mod.HdfsCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_WEBHDFS_PROD", json.dumps(
        {"conn_type": "webhdfs", "host": "127.0.0.1", "port": hdfs.http_port, "login": "streamstate"}))
    monkeypatch.setenv("AIRFLOW_CONN_S3_PROD", json.dumps({"conn_type": "aws", "extra": {}}))
    url = f"hdfs://{SERVICE}/tests/{uuid.uuid4().hex[:10]}/store"
    hook = StreamstateStoreHook(url, storage_conn_id="webhdfs_prod")
    ok, message = hook.test_connection()
    assert ok, message
    assert hook.store.list_streams() == [] and hook.store.client.user == "streamstate"
    with pytest.raises(UsageError, match="'s3_prod' does not reach a hdfs:// store"):
        _ = StreamstateStoreHook(url, storage_conn_id="s3_prod").store
