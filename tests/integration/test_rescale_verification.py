"""A rescale's verification where the repartition runs (jobs/rescale_job.py, Spark 4.3, the
line's own virtualenv): after Spark's offline repartition, the same application computes the
state digests of batch N and of the repartition batch as Spark tasks, one per operator,
store, partition and batch, the executors reading the checkpoint's files with the engine's
decoders, and records them with what differs.

A stopped RocksDB stream (a deduplication with a watermark and an aggregation of 3,000
accounts, 4 partitions, changelogs over tables) is rescaled to 8 on the stack's YARN in
cluster deploy mode with one executor and with two: both verify, with the same digests, the
same a local digest computes in one process and in worker processes. Copies of the
repartitioned state damaged for real (two partition directories swapped: every key in the
wrong place; a table replaced by another partition's: entries lost, others twice and
misplaced; a table file the repartition batch names deleted) are verified again by the job
and refused with the problem named. A checkpoint in S3 and in HDFS is
digested by worker processes that reach it as the caller does (what an executor does with
the application's S3A options or the Hadoop configuration). A checkpoint at a name only an
Airflow HDFS connection resolves is rescaled, then repaired, in place by the engine, the
repartition job and Spark's check of the edit reaching it through what the engine gave them
from the connection."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.hdfs.webhdfs import HdfsPath, WebHdfs
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.repartition import (
    RepartitionRecord,
    read_repartition_record,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup.digest import StateDigest, state_digest
from airflow_provider_streamstate.engine.state.rescale import rescale_job_application
from dev import spark_versions
from dev import stack as stack_mod
from tests.s3 import s3_client

pytestmark = [pytest.mark.integration, pytest.mark.yarn, pytest.mark.hdfs]
APP = Path(__file__).resolve().parent.parent / "apps" / "keyed_state.py"
NOT_VERIFIED = 4


@pytest.fixture(scope="module")
def spark43() -> spark_versions.SparkVersion:
    return spark_versions.get("4.3").require()


@pytest.fixture(scope="module")
def keyed(spark43: spark_versions.SparkVersion, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped RocksDB stream: 3,000 accounts in 3 batches, then 200 of them updated, a
    deduplication with a watermark before the aggregation; 4 state partitions."""
    root = tmp_path_factory.mktemp("keyed")
    out = subprocess.run([str(spark43.python), str(APP), str(root / "ckpt"), str(root), "3000", "4", "3", "--dedup",
                          "--touch", "200"], capture_output=True, text=True, timeout=900, env=spark43.env())
    assert out.returncode == 0, out.stderr[-3000:]
    return root / "ckpt"


def copy_of(checkpoint: Path, where: Path) -> str:
    shutil.copytree(checkpoint, where)
    return str(where)


def run_job(spark43: spark_versions.SparkVersion, command: list[str], env: dict[str, str],
            checkpoint: str) -> tuple[int, str, RepartitionRecord]:
    out = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env)
    record = read_repartition_record(open_checkpoint_fs(checkpoint))
    assert record is not None, out.stderr[-3000:]
    return out.returncode, out.stderr, record


def on_yarn(spark43: spark_versions.SparkVersion, yarn: stack_mod.YarnCluster, staging: Path, checkpoint: str,
            executors: int) -> tuple[int, str, RepartitionRecord]:
    """The job in cluster deploy mode on YARN: the driver and `executors` executors (1 core
    each) in containers, all on the 4.3 line's Python and jars."""
    conf = {**yarn.pyspark_conf(staging, executors=executors, executor_memory="768m", driver_memory="768m",
                                spark_home=spark43.spark_home, python=str(spark43.python)),
            "spark.ui.enabled": "false"}
    command = [str(spark43.spark_submit), "--master", "yarn", "--deploy-mode", "cluster",
               *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), rescale_job_application(),
               checkpoint, "8"]
    return run_job(spark43, command, {**spark43.env(), **yarn.env()}, checkpoint)


def locally(spark43: spark_versions.SparkVersion, checkpoint: str) -> tuple[int, str, RepartitionRecord]:
    command = spark43.submit_command(rescale_job_application(), [checkpoint, "8"], master="local[2]")
    return run_job(spark43, command, spark43.env(), checkpoint)


def same_digest(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """The same entries, partitions and placement check, wherever the checkpoint was."""
    assert a is not None and b is not None
    keys = ("batch_id", "partitions", "stores", "misplaced", "placement", "placed", "misplaced_keys", "unreadable")
    return {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_the_executors_verify_a_repartition_on_yarn_alike_with_one_executor_or_two(
    keyed, spark43, yarn, tmp_path
) -> None:
    batch = CheckpointReader(str(keyed)).resolve_batch(None)
    runs = {}
    for executors in (1, 2):
        checkpoint = copy_of(keyed, tmp_path / f"x{executors}")
        code, err, record = on_yarn(spark43, yarn, tmp_path / f"staging-{executors}", checkpoint, executors)
        assert code == 0, err[-3000:]
        v = record.verification
        assert record.ok and record.partitions == 8 and record.batch_id == batch + 1 and v is not None
        assert v.ok and v.problems == (), v.problems
        assert v.tasks == 2 * (4 + 8) and v.executors == executors  # 2 operators, 4 then 8 partitions
        runs[executors] = (checkpoint, v)
    (_, v1), (two, v2) = runs[1], runs[2]
    assert same_digest(v1.before, v2.before) and same_digest(v1.after, v2.after)
    before, after = StateDigest.from_json(v1.before or {}), StateDigest.from_json(v1.after or {})
    assert (before.batch_id, after.batch_id, before.partitions, after.partitions) == (
        batch, batch + 1, {0: 4, 1: 4}, {0: 8, 1: 8})
    assert {s.store: s.entries for s in after.stores if s.operator_id == 0} == {"default": 3000}
    assert after.placed == sum(s.entries for s in after.stores) and before.placed == 0

    # What a local digest computes without Spark, in one process and in worker processes.
    local_before = state_digest(two, batch, placement=False, workers=1)
    local_after = state_digest(two, batch + 1, workers=1)
    assert same_digest(local_before.to_json(), v2.before) and same_digest(local_after.to_json(), v2.after)
    assert state_digest(two, batch + 1, workers=2) == local_after


def _zip_tables(store_dir: Path, version: int) -> list[str]:
    with zipfile.ZipFile(io.BytesIO((store_dir / f"{version}.zip").read_bytes())) as z:
        meta = json.loads(z.read("metadata").decode().split("\n", 1)[1])
    return [str(s["dfsSstFileName"]) for s in meta["sstFiles"]]


def test_a_repartitioned_copy_damaged_for_real_is_refused_with_the_problem_named(keyed, spark43, tmp_path) -> None:
    checkpoint = copy_of(keyed, tmp_path / "good")
    code, err, record = locally(spark43, checkpoint)
    assert code == 0 and record.verification is not None and record.verification.ok, err[-3000:]
    version = (record.batch_id or 0) + 1  # the repartition batch's state version

    # Two partition directories swapped: the same entries, every key of both where Spark
    # will not look for it.
    swapped = copy_of(Path(checkpoint), tmp_path / "swapped")
    a, b = Path(swapped) / "state/0/5", Path(swapped) / "state/0/6"
    a.rename(Path(swapped) / "tmp")
    b.rename(a)
    (Path(swapped) / "tmp").rename(b)
    code, _, record = locally(spark43, swapped)
    v = record.verification
    assert code == NOT_VERIFIED and v is not None and not v.ok
    assert any("store default: key {'account': " in p and "is in partition 5, Spark looks for it in" in p
               for p in v.problems), v.problems
    assert not any("entries in" in p for p in v.problems)  # nothing lost or added
    assert v.problems[-1].endswith(f"keys of batch {version - 1} are not in the partition Spark looks for them in")

    # Partition 3's table overwritten by partition 4's (a valid table): partition 3's
    # entries lost, partition 4's twice, the copies in the wrong place.
    replaced = copy_of(Path(checkpoint), tmp_path / "replaced")
    (table,) = _zip_tables(Path(replaced) / "state/0/3", version)
    (other,) = _zip_tables(Path(replaced) / "state/0/4", version)
    shutil.copyfile(Path(replaced) / "state/0/4/SSTs" / other, Path(replaced) / "state/0/3/SSTs" / table)
    (Path(replaced) / "state/0/3/SSTs" / f".{table}.crc").unlink(missing_ok=True)
    code, _, record = locally(spark43, replaced)
    v = record.verification
    assert code == NOT_VERIFIED and v is not None
    assert v.problems[0].startswith("operator 0 store default: 3000 entries in checkpoint "), v.problems
    assert "is in partition 3, Spark looks for it in 4" in v.problems[1], v.problems

    # A table file the repartition batch names, deleted: the cut cannot be planned, and the
    # file is named.
    lost = copy_of(Path(checkpoint), tmp_path / "lost")
    (Path(lost) / "state/0/3/SSTs" / table).unlink()
    code, _, record = locally(spark43, lost)
    v = record.verification
    assert code == NOT_VERIFIED and v is not None and v.before is None
    assert v.problems == (f"the verification could not run: state/0/3/SSTs/{table} vanished while planning",)


@pytest.mark.parametrize("where", ["s3", "hdfs"])
def test_worker_processes_reach_a_remote_checkpoint_as_the_caller_does(keyed, stack, where, request,
                                                                        tmp_path) -> None:
    """What an executor does, in worker processes: the caller's connection handed over as a
    `Reach` (an S3 client's endpoint and credentials, a WebHDFS client's NameNode)."""
    store = LocalStore(tmp_path / "store")
    snap = create_snapshot(str(keyed), store, "keyed").manifest
    if where == "s3":
        connection = s3_client(stack)
        target = f"s3a://{stack.s3['primary']['bucket']}/verify/{uuid.uuid4().hex[:8]}/ckpt"
    else:
        hdfs = request.getfixturevalue("hdfs")
        target = hdfs.url(f"/verify/{uuid.uuid4().hex[:8]}/ckpt")
        connection = WebHdfs.for_authority(HdfsPath.parse(target).authority, env=hdfs.env())
    restore_snapshot(store, "keyed", snap.snapshot_id, target, connection=connection, new_query_id=True)
    here = state_digest(str(keyed), workers=1)
    there = state_digest(target, connection=connection, workers=2)
    assert same_digest(there.to_json(), here.to_json())


def test_a_checkpoint_only_an_hdfs_connection_resolves_is_rescaled_then_repaired_in_place_as_its_user(
        keyed, spark43, only_the_connection, tmp_path, monkeypatch) -> None:
    """The rescale's whole path on `hdfs://warehouse/...` (snapshot into a store there,
    work copy, Spark's repartition and its verification on the executors, swap), then a
    repair with Spark's check, with no Hadoop configuration anywhere: the repartition job
    and the check reach the work copy only through what the engine gives them from the
    `streamstate_hdfs` connection."""
    from airflow_provider_streamstate.backends.hdfs.hook import StreamstateHdfsHook
    from airflow_provider_streamstate.engine.edit.changes import EditSpec
    from airflow_provider_streamstate.engine.edit.repair import edit_stream
    from airflow_provider_streamstate.engine.edit.spark_check import edit_check_application
    from airflow_provider_streamstate.engine.lookup.api import lookup_key
    from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource
    from airflow_provider_streamstate.engine.state.rescale import rescale_stream
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook, open_checkpoint
    from tests.integration.test_hdfs_connection import SERVICE, upload

    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    client = StreamstateHdfsHook(only_the_connection).get_conn()
    base = f"/tests/{uuid.uuid4().hex[:10]}"
    upload(client, keyed, f"{base}/ckpt")
    checkpoint = f"hdfs://{SERVICE}{base}/ckpt"
    store = StreamstateStoreHook(f"hdfs://{SERVICE}{base}/store", storage_conn_id=only_the_connection).store
    batch = CheckpointReader(str(keyed)).resolve_batch(None)

    def submit(application: str):  # noqa: ANN202 - the engine's CommandFor of `application`
        return lambda arguments: (spark43.submit_command(application, list(arguments), master="local[2]"),
                                  spark43.env())

    done = rescale_stream(store, "keyed", checkpoint, partitions=8, command=submit(rescale_job_application()),
                          connection=client)
    assert done.in_place and (done.from_partitions, done.to_partitions) == (4, 8)
    assert done.repartition_batch == batch + 1 and done.rescaled_snapshot is not None
    fs = open_checkpoint(checkpoint, only_the_connection)
    after = state_digest(fs.location, batch + 1, connection=client, workers=1)
    assert after.partitions == {0: 8, 1: 8} and after.placed == sum(s.entries for s in after.stores)
    assert {s.store: s.entries for s in after.stores if s.operator_id == 0} == {"default": 3000}
    # The repartition batch was written by the job's Spark as the connection's user.
    assert (client.status(fs.path(f"commits/{batch + 1}")) or {}).get("owner") == "streamstate"

    edit = EditSpec.from_json({"operator": 0, "delete": ["acct-000000001"],
                               "set": [{"key": "acct-000000002", "value": [1, 5, 5]}]}, "two accounts put right")
    repaired = edit_stream(store, "keyed", checkpoint, edit, apply=True, command=submit(edit_check_application()),
                           connection=client, fs=fs, requested_by="test")
    assert repaired.edit_batch == batch + 2 and repaired.spark is not None and repaired.spark["keys_checked"] == 2
    source = CheckpointSource(fs.location, reader=CheckpointReader(fs))
    assert source.batch_id == batch + 2
    assert lookup_key(source, key="acct-000000002").value == {"count": 1, "sum": 5, "max": 5}
    assert not lookup_key(source, key="acct-000000001").found
