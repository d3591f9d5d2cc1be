"""State jobs as Spark applications where the data is: the snapshots of a real stream that
checkpointed to S3 (s3a on the stack's moto endpoint), in an S3 store, questioned through the
CLI on a Spark standalone cluster (client mode), and through the operators of the deploy
gate in a DAG run on YARN (cluster mode). Each job reads the snapshot from a scratch copy inside the store,
answers exactly as the local path does on the same snapshots (validate pass and fail,
export, diff, bisect), leaves no scratch copy and no job record behind, and a killed
job's application is killed on the cluster too."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
from airflow_provider_streamstate.engine.state.diff import diff_snapshots
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
from dev import spark_cds
from dev import stack as stack_mod
from tests.integration.test_state_history import SUITE, produce_poison
from tests.s3 import s3_client
from tests.streams import run_to_end, use_state_store

pytestmark = [pytest.mark.integration, pytest.mark.yarn, pytest.mark.spark_standalone]

OPERATOR = StateSelector("stateStoreSave")


class S3History:
    """Every committed batch of an s3a checkpoint, snapshotted into an S3 store."""

    def __init__(self, store: S3Store, url: str, ids: list[str], first_bad: str) -> None:
        self.store, self.url, self.ids, self.first_bad = store, url, ids, first_bad

    def leftovers(self) -> list[str]:
        """Objects a state job must not leave: scratch copies and job records."""
        c, out = self.store.client, []
        for prefix in (f"{self.store.prefix}/scratch/", f"{self.store.prefix}/streams/accounts/state-jobs/"):
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=self.store.bucket, Prefix=prefix):
                out += [o["Key"] for o in page.get("Contents", [])]
        return out


@pytest.fixture(scope="module")
def s3_history(stack, spark) -> S3History:
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - the stream writes through S3A
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    bucket = stack.s3["primary"]["bucket"]
    run = f"tests/state-jobs-{uuid.uuid4().hex[:8]}"
    checkpoint = f"s3a://{bucket}/{run}/ckpt"
    topic = f"poison-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    first = GeneratorSpec(seed=82, accounts=8, events=90)
    produce(stack.kafka_bootstrap, topic, first)
    poison = produce_poison(stack.kafka_bootstrap, topic, 90)
    produce(stack.kafka_bootstrap, topic, first.next_round(90))
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=45)
    store = S3Store(s3_client(stack), bucket, f"{run}/store")
    batches = CheckpointReader(checkpoint, connection=store.client).committed_batches()
    manifests = [create_snapshot(checkpoint, store, "accounts", batch_id=b).manifest for b in batches]
    first_bad = next(m.snapshot_id for m in manifests if m.kafka_offsets[topic]["0"] > poison)
    assert first_bad not in (manifests[0].snapshot_id, manifests[-1].snapshot_id)
    return S3History(store, f"s3://{bucket}/{run}/store", [m.snapshot_id for m in manifests], first_bad)


def _local(s3_history: S3History, spark) -> StateReader:  # noqa: ANN001
    return StateReader(s3_history.store, spark=spark)


def _cli(capsys, *argv: str) -> tuple[int, dict[str, Any]]:  # noqa: ANN001
    code = main(list(argv))
    out = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(out[-1]) if out else {}


def _rows(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps({k: v for k, v in r.items() if k != "partition_id"}, sort_keys=True, default=str)
                  for r in rows)


def test_state_jobs_on_a_standalone_cluster_answer_as_the_local_path_does_and_leave_nothing_behind(
    stack, spark, s3_history, spark_standalone, capsys, monkeypatch, tmp_path
) -> None:
    """`--master spark://...` (and `--spark-conn-id`): bisect (validating good and bad
    snapshots), export to s3a, diff and a failing validation run as applications on the
    standalone cluster (client mode: the driver here, the executors on
    the workers, reading the scratch copy from S3) and give the local path's answers."""
    for key, value in stack.s3_env("primary").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(SUITE))
    h = s3_history
    spark_cluster = spark_standalone.master
    job = ["--store", h.url, "--stream", "accounts", "--json", "--master", spark_cluster,
           "--jars", ",".join(stack.spark_jars), "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.executor.memory=512m",
           "--conf", "spark.cores.max=1", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", f"spark.executor.extraJavaOptions={spark_cds.cluster_jvm_opts()}"]
    first, last = h.ids[0], h.ids[-1]

    # Bisect validates (and records) good and bad snapshots in one application.
    code, bisected = _cli(capsys, "bisect", "--suite", str(suite_file), *job)
    assert code == 0 and bisected["first_bad"] == h.first_bad
    assert bisected["ran_on"]["master"] == spark_cluster and bisected["ran_on"]["app_id"].startswith("app-")
    assert {s["good"] for s in bisected["steps"]} == {True, False}
    export = f"s3a://{h.store.bucket}/{h.store.prefix.rsplit('/', 1)[0]}/export-{uuid.uuid4().hex[:6]}"
    code, exported = _cli(capsys, "state", "export", last, "--operator", "stateStoreSave", "--format", "parquet",
                          "--output", export, *job)
    assert code == 0 and exported["output"] == export
    code, diffed = _cli(capsys, "diff", first, last, "--operator", "stateStoreSave", *job)
    assert code == 0
    # Through an Airflow Spark connection instead of --master, a job that fails in the
    # application (a column the state lacks): one line here, exit 2, nothing left behind.
    host, port = spark_cluster.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps({"conn_type": "spark", "host": host,
                                                                    "port": int(port)}))
    through_conn = [a if a != spark_cluster else "spark_standalone" for a in job]
    through_conn[through_conn.index("--master")] = "--spark-conn-id"
    wrong = tmp_path / "wrong-suite.json"
    wrong.write_text(json.dumps({"name": "wrong", "meta": SUITE["meta"], "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "no_such_column"}}]}))
    assert main(["validate", last, "--suite", str(wrong), *through_conn]) == 2
    err = capsys.readouterr().err
    assert "names column 'no_such_column', which the state of" in err and "key_account" in err
    assert h.leftovers() == []

    # The same questions on the same snapshots, answered here.
    from airflow_provider_streamstate.engine.catalog.validation_records import get_validation

    suite = load_suite({**SUITE, "name": "accounts-sane-local"})
    with _local(h, spark) as reader:
        for step in bisected["steps"]:
            stored = get_validation(h.store, "accounts", step["snapshot_id"], SUITE["name"])
            here = validate_snapshot(reader, "accounts", step["snapshot_id"], suite, record=False).record
            assert stored is not None and stored.success == here.success == step["good"]
            assert [(o.type, o.success, o.observed) for o in stored.results] == [
                (o.type, o.success, o.observed) for o in here.results]
        state = reader.state("accounts", last, OPERATOR)
        assert exported["rows"] == state.count()
        assert _rows([r.asDict() for r in spark.read.parquet(export).collect()]) == _rows(
            [r.asDict() for r in state.collect()])
        local_diff = diff_snapshots(reader, "accounts", first, last, OPERATOR).to_json()
        assert {k: v for k, v in diffed.items() if k != "ran_on"} == local_diff
        local_bisect = bisect_snapshots(reader, "accounts", suite)
    assert local_bisect.first_bad is not None and local_bisect.first_bad.snapshot_id == bisected["first_bad"]
    assert [(s["snapshot_id"], s["good"]) for s in bisected["steps"]] == [
        (s.snapshot_id, s.good) for s in local_bisect.steps]


def _yarn_job_conf(yarn: stack_mod.YarnCluster, tmp_path: Path) -> dict[str, str]:
    return {**yarn.pyspark_conf(tmp_path / "staging"), "spark.sql.shuffle.partitions": "2"}


def test_a_cancelled_state_job_kills_its_yarn_application_and_removes_its_scratch_copy(
    stack, s3_history, yarn, monkeypatch, tmp_path
) -> None:
    """Cancelling the caller (what `on_kill` does) while the application runs kills it through
    the ResourceManager, and the scratch copy it made in the store is deleted."""
    from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation
    from airflow_provider_streamstate.engine.core.errors import Cancelled
    from airflow_provider_streamstate.engine.state.jobs import StateJobRequest
    from airflow_provider_streamstate.engine.state.submit import (
        state_job_application,
        state_job_arguments,
        submit_state_job,
    )
    from airflow_provider_streamstate.engine.streams.managers.yarn import ResourceManager
    from airflow_provider_streamstate.engine.streams.submission import resolve_spark_submit

    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    h = s3_history
    request = StateJobRequest(kind="show", store=h.url, stream="accounts", snapshot=h.ids[-1],
                              selector=OPERATOR.to_json()).with_job_id()
    conf = _yarn_job_conf(yarn, tmp_path)
    command = ["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "--jars", ",".join(stack.spark_jars),
               *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), state_job_application(),
               *state_job_arguments(request)]
    command, env = resolve_spark_submit(command, yarn.env())
    token = CancelToken()
    seen: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with cancellation(token):
                submit_state_job(request, h.store, command, env=env,
                                 on_submit=lambda job: seen.update(app_id=job.app_id))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    rm = ResourceManager([yarn.rm_web])
    deadline = time.monotonic() + 300
    while not (seen.get("app_id") and rm.app(seen["app_id"]).state == "RUNNING"):
        assert time.monotonic() < deadline and worker.is_alive(), errors
        time.sleep(0.5)
    # Let it reach its scratch copy, then cancel as on_kill would.
    while not h.leftovers() and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.5)
    token.cancel("the task was killed")
    worker.join(120)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], Cancelled), errors
    assert rm.app(seen["app_id"]).state in ("KILLED", "FINISHED", "FAILED")
    # The application may still be writing when it is killed: its leftovers go with it.
    assert h.leftovers() == []


def test_the_deploy_gate_blocks_a_bad_candidate_run_on_yarn_with_its_clone_and_checks_in_object_storage(
    stack, spark, topic, s3_history, yarn, run_dag, monkeypatch, tmp_path
) -> None:
    """Production checkpoints to S3 and runs on YARN in cluster mode. The gate clones its
    known-good snapshot onto S3 beside it, submits the candidate (a planted bug: every
    amount counted twice) to YARN like production, validates and diffs the clone's state in
    YARN applications (their Data Docs and report in S3), blocks the deploy naming the
    expectation that failed and the keys that differ, and tears the clone down: its S3
    checkpoint and snapshots are gone, and no scratch copy or job record is left. (The
    passing gate runs in tests/integration/test_validate_deploy_gate.py.)"""
    import urllib.request

    from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot
    from tests.integration.test_validate_deploy_gate import REPO
    from tests.integration.test_validate_deploy_gate import SUITE as GATE_SUITE
    from tests.integration.test_yarn_cluster import _yarn_spec

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    for key, value in {**stack.s3_env("primary"), **yarn.env()}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    h = s3_history  # the session's S3A settings and the store's bucket
    run = f"{h.store.prefix.rsplit('/', 1)[0]}/gate-{uuid.uuid4().hex[:6]}"
    root = f"s3a://{h.store.bucket}/{run}"
    spec = _yarn_spec(stack, topic, tmp_path, yarn, f"{root}/orders").derive(store=f"s3://{h.store.bucket}/{run}/store")
    store = S3Store(h.store.client, h.store.bucket, f"{run}/store")
    use_state_store(spark, "hdfs", **{"spark.sql.shuffle.partitions": "2"})
    first = GeneratorSpec(seed=91, accounts=10, events=120)
    produce(stack.kafka_bootstrap, topic, first)
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    good = create_snapshot(spec.checkpoint, store, "orders").manifest
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(GATE_SUITE))
    with StateReader(store, spark=spark) as reader:  # production's known-good mark, set here
        assert validate_snapshot(reader, "orders", good.snapshot_id, load_suite(suite_file)).success
    # More input: production's newest snapshot has it; the candidate reads it from the clone's offsets on.
    produce(stack.kafka_bootstrap, topic, first.next_round())
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    newest = create_snapshot(spec.checkpoint, store, "orders").manifest

    args = [("available-now" if a.startswith("processing:") else a) for a in spec.application_args]
    result = run_dag("streamstate_deploy_gate", {
        "stream": spec.to_dict(), "candidate_application": str(REPO / "tests/apps/doubled_stream.py"),
        "candidate_args": args, "suite": str(suite_file), "snapshot": "latest-good:accounts-sane",
        "compare_snapshot": newest.snapshot_id, "clone_root": f"{root}/gate", "reports": f"{root}/reports",
        "run_timeout_s": 600,
        "state_jobs": {"conn_id": "spark_yarn", "conf": _yarn_job_conf(yarn, tmp_path),
                       "jars": list(stack.spark_jars), "env": yarn.env()},
    })
    assert result.state == "failed"
    assert result.failed_tasks() == ["check_diff", "validate"], result.log[-8000:]
    assert "expect_column_values_to_be_between(value_max) observed" in result.log
    assert "the candidate's state differs from production's on" in result.log
    assert result.tasks["tear_down"].state == "success" and result.tasks["gate"].state == "upstream_failed"
    plan = result.tasks["plan"].xcom
    assert plan["checkpoint"].startswith(f"{root}/gate/")
    # The S3A secret key the candidate and the jobs ran with is no XCom (the access key is
    # the bucket's name here, so it is not looked for).
    assert stack_mod.S3_SECRET_KEY not in json.dumps(plan)
    assert plan["clone"]["conf"]["spark.hadoop.fs.s3a.secret.key"] == "***"
    with urllib.request.urlopen(f"{yarn.rm_web}/ws/v1/cluster/apps", timeout=10) as r:
        apps = {a["name"]: a for a in json.loads(r.read())["apps"]["app"]}
    # The candidate ran on YARN to its end; so did the validation and the diff (their verdicts failed the gate).
    for name in (plan["name"], f"streamstate-validate-{plan['name']}", "streamstate-diff-orders"):
        assert apps[name]["finalStatus"] == "SUCCEEDED", (name, sorted(apps))
    report = json.loads(h.store.client.get_object(Bucket=h.store.bucket, Key=f"{run}/reports/diff.json")["Body"].read())
    assert report["kind"] == "diff" and report["changed"] > 0
    assert h.store.client.head_object(Bucket=h.store.bucket, Key=f"{run}/reports/docs/index.html")["ContentLength"] > 0
    bucket, key = plan["checkpoint"].removeprefix("s3a://").split("/", 1)
    assert h.store.client.list_objects_v2(Bucket=bucket, Prefix=key + "/").get("KeyCount", 0) == 0
    assert store.list_snapshot_ids(plan["name"]) == []
    assert h.store.client.list_objects_v2(Bucket=store.bucket, Prefix=f"{run}/store/scratch/").get("KeyCount", 0) == 0
