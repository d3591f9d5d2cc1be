"""Submitting a state job, without a cluster: a stand-in for spark-submit (a Python script
that plays the driver) against a local store shows what the submitter does with the
command, the credentials, the result and the leftovers, on every way a job can end."""

from __future__ import annotations

import json
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.clients import S3Access
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation
from airflow_provider_streamstate.engine.core.errors import Cancelled, TransientError, UsageError
from airflow_provider_streamstate.engine.state.jobs import (
    StateJobRequest,
    request_key,
    result_key,
)
from airflow_provider_streamstate.engine.state.scratch import job_started, new_job_id, scratch_root
from airflow_provider_streamstate.engine.state.submit import (
    RESULT_FORMAT,
    StateJobError,
    complete_command,
    submit_state_job,
    sweep_stale,
)
from airflow_provider_streamstate.engine.streams.submission import Submission

FAKE_DRIVER = '''#!{python}
"""Plays spark-submit and the state job's driver: behaviour from FAKE_BEHAVIOUR."""
import json, os, sys, time
sys.path.insert(0, {repo!r})
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.state.jobs import request_key, result_key
from airflow_provider_streamstate.engine.state.scratch import job_started, new_job_id, scratch_root
store_url, stream, job_id = sys.argv[-3:]
store = LocalStore(store_url.removeprefix("file://"))
secrets = os.environ.get("STREAMSTATE_SECRETS_FILE")
with open(os.environ["FAKE_SEEN"], "w") as f:
    json.dump({{"argv": sys.argv[1:], "secrets_file": secrets,
               "secrets": open(secrets).read() if secrets else None,
               "aws_key": os.environ.get("AWS_SECRET_ACCESS_KEY")}}, f)
assert store.get_record(request_key(stream, job_id)) is not None
os.makedirs(scratch_root(store, job_id) + "/0000-x", exist_ok=True)
open(scratch_root(store, job_id) + "/0000-x/state.bin", "w").write("scratch")
behaviour = os.environ["FAKE_BEHAVIOUR"]
if behaviour == "hang":
    time.sleep(600)
if behaviour == "no-result":
    sys.exit(137)
record = {{"format": "{fmt}", "job_id": job_id, "ran_on": {{"master": "fake"}}}}
if behaviour == "ok":
    record["result"] = {{"kind": "show", "total_rows": 3}}
elif behaviour == "usage":
    record["error"] = {{"message": "suite x names column y", "hint": "fix it", "usage": True, "retryable": False}}
elif behaviour == "transient":
    record["error"] = {{"message": "cannot reach S3", "hint": "retry", "usage": False, "retryable": True}}
elif behaviour == "corrupt":
    record["error"] = {{"message": "blob is corrupt", "hint": "restore another", "usage": False, "retryable": False}}
store.put_record(result_key(stream, job_id), json.dumps(record).encode())
'''

def _yarn_conf_dir(tmp_path: Path) -> Path:
    """A YARN configuration directory naming a ResourceManager (never reached here)."""
    conf_dir = tmp_path / "yarn"
    conf_dir.mkdir()
    (conf_dir / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        "<value>127.0.0.1:8088</value></property></configuration>")
    return conf_dir


def _s3_store() -> S3Store:
    """An S3 store whose client has an endpoint and credentials (never reached here)."""
    import boto3

    client = boto3.session.Session(aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="s3cr3t-value",
                                   region_name="eu-west-1").client("s3", endpoint_url="http://127.0.0.1:9")
    return S3Store(client, "state", "prod")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    script = tmp_path / "fake-spark-submit"
    script.write_text(FAKE_DRIVER.format(python=sys.executable, repo=str(Path(__file__).resolve().parents[2]),
                                         fmt=RESULT_FORMAT))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_SEEN", str(tmp_path / "seen.json"))
    monkeypatch.delenv("SPARK_HOME", raising=False)  # the stand-in is the Spark that runs, whatever this machine has
    store = LocalStore(tmp_path / "store")

    def run(behaviour: str, *, conf: tuple[str, ...] = (), **kw: object) -> dict:
        monkeypatch.setenv("FAKE_BEHAVIOUR", behaviour)
        request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
        command = [str(script), "--master", "local[1]", *conf, "state_job.py", store.url, "orders", request.job_id]
        try:
            return submit_state_job(request, store, command, poll_s=0.05, **kw)  # type: ignore[arg-type]
        finally:
            run.request = request  # type: ignore[attr-defined]

    run.store = store  # type: ignore[attr-defined]
    run.seen = lambda: json.loads((tmp_path / "seen.json").read_text())  # type: ignore[attr-defined]
    return run


def _leftovers(store: LocalStore, request: StateJobRequest) -> list[str]:
    left = [k for k in (request_key("orders", request.job_id), result_key("orders", request.job_id))
            if store.get_record(k) is not None]
    if Path(scratch_root(store, request.job_id)).exists():
        left.append("scratch")
    return left


def test_a_job_s_result_comes_back_and_its_records_scratch_and_secrets_are_gone(fake, tmp_path) -> None:
    result = fake("ok", conf=("--conf", "spark.hadoop.fs.s3a.bucket.b.secret.key=s3cr3t-value"))
    assert result == {"kind": "show", "total_rows": 3, "ran_on": {"master": "fake"}}
    seen = fake.seen()
    assert "s3cr3t-value" not in " ".join(seen["argv"])  # off the command line...
    assert "s3cr3t-value" in seen["secrets"] and "--properties-file" in seen["argv"]  # ...in a file...
    assert not Path(seen["secrets_file"]).exists()  # ...gone once the job ended
    assert _leftovers(fake.store, fake.request) == []
    logged = (tmp_path / "home" / "state-jobs" / f"{fake.request.job_id}.log").read_text()
    assert "s3cr3t-value" not in logged


@pytest.mark.parametrize(("behaviour", "error", "words"), [
    ("usage", UsageError, "suite x names column y"),
    ("transient", TransientError, "cannot reach S3"),
    ("corrupt", StateJobError, "blob is corrupt"),
    ("no-result", TransientError, "ended without a result (exit 137)"),
])
def test_a_failed_job_is_its_own_error_line_retryable_when_a_retry_can_help(fake, behaviour, error, words) -> None:
    with pytest.raises(error) as exc:
        fake(behaviour)
    assert words in exc.value.one_line() and "\n" not in exc.value.one_line()
    assert type(exc.value) is error  # StateJobError is not retryable, TransientError is
    assert _leftovers(fake.store, fake.request) == []


def test_cancelling_the_caller_kills_the_driver_and_cleans_up_within_seconds(fake) -> None:
    token = CancelToken()
    errors: list[BaseException] = []
    procs: list = []

    def run() -> None:
        try:
            with cancellation(token):
                fake("hang", on_submit=lambda job: procs.append(job.proc))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 60
    # The driver runs: it has made its scratch copy and now hangs.
    while not (procs and fake.store.list_records("streams/orders/state-jobs")
               and Path(scratch_root(fake.store, fake_request_id(fake))).exists()):
        assert time.monotonic() < deadline and worker.is_alive(), errors
        time.sleep(0.05)
    started = time.monotonic()
    token.cancel("the task was killed")
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 5  # before Airflow's SIGKILL
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)
    assert procs[0].poll() is not None
    assert _leftovers(fake.store, fake.request) == []


def fake_request_id(fake) -> str:  # noqa: ANN001
    """The job id of the run in progress, from the request record it wrote."""
    keys = fake.store.list_records("streams/orders/state-jobs")
    return keys[0].rsplit("/", 1)[-1].removesuffix("-request.json")


def test_leftovers_of_jobs_started_long_ago_are_swept_and_recent_ones_kept(tmp_path) -> None:
    store = LocalStore(tmp_path / "store")
    old = "show-20260101T000000Z-aaaaaaaaaaaa"
    recent = new_job_id("show")
    assert job_started(old) == 1767225600.0 and abs(job_started(recent) - time.time()) < 5
    for job in (old, recent):
        store.put_record(request_key("orders", job), b"{}")
        Path(scratch_root(store, job), "0000-x").mkdir(parents=True)
    assert sweep_stale(store, "orders") == 1 + 0 + 0  # the old request record (its scratch dir was empty)
    assert store.get_record(request_key("orders", old)) is None and not Path(scratch_root(store, old)).exists()
    assert store.get_record(request_key("orders", recent)) is not None and Path(scratch_root(store, recent)).exists()


def test_credentials_go_to_s3a_per_bucket_confs_and_never_into_a_yarn_container_environment(tmp_path) -> None:
    """The store says what a Spark application needs to reach it as its client does."""
    store = _s3_store()
    request = StateJobRequest(kind="show", store="s3://state/prod", stream="orders").with_job_id()
    conf_dir = _yarn_conf_dir(tmp_path)
    cmd, env = complete_command(["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "app.py"], request,
                                store, {"HADOOP_CONF_DIR": str(conf_dir)})
    confs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")
    assert confs["spark.hadoop.fs.s3a.bucket.state.secret.key"] == "s3cr3t-value"
    assert confs["spark.hadoop.fs.s3a.bucket.state.endpoint"] == "http://127.0.0.1:9"
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert S3Access.from_spark_conf(confs.get, "state") == S3Access.from_client(store.client)
    prepared = Submission.prepare(cmd, env=env, log_path=tmp_path / "job.log", name="job", launch_id="j1")
    submitted = dict(prepared.argv[i + 1].split("=", 1) for i, a in enumerate(prepared.argv) if a == "--conf")
    assert submitted["spark.yarn.submit.waitAppCompletion"] == "false" and "-Xmx256m" in prepared.env["SPARK_SUBMIT_OPTS"]
    assert not [k for k in submitted if k.startswith("spark.yarn.appMasterEnv.")]
    assert "spark.hadoop.fs.s3a.bucket.state.secret.key" not in submitted  # in the properties file only
    assert "s3cr3t-value" not in " ".join(prepared.shown)
    client, client_env = complete_command(["spark-submit", "--master", "spark://h:7077", "app.py"], request, store, {})
    assert client_env["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"  # a driver here: its own environment


def test_an_hdfs_connections_user_runs_spark_submit_in_cluster_mode_too(tmp_path) -> None:
    """spark-submit's own user is the one every container of the application acts as on
    HDFS (Spark passes it on as SPARK_USER): an HDFS connection's user is given to it
    whether the driver runs here or on the cluster."""
    from airflow_provider_streamstate.backends.hdfs.store import HdfsStore
    from airflow_provider_streamstate.backends.hdfs.webhdfs import WebHdfs

    store = HdfsStore("hdfs://warehouse/snapshots",
                      client=WebHdfs(["http://nn1:9870/webhdfs/v1"], user="etl", rpc_port=8020))
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    conf_dir = _yarn_conf_dir(tmp_path)
    for deploy in ("cluster", "client"):
        cmd, env = complete_command(["spark-submit", "--master", "yarn", "--deploy-mode", deploy, "app.py"],
                                    request, store, {"HADOOP_CONF_DIR": str(conf_dir), "HADOOP_USER_NAME": "airflow"})
        confs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")
        assert env["HADOOP_USER_NAME"] == "etl", deploy
        assert confs["spark.hadoop.dfs.namenode.rpc-address.warehouse.nn0"] == "nn1:8020", deploy


def test_a_callers_confs_stay_an_hdfs_service_it_defines_is_its_own_and_its_s3_endpoint_keeps_the_credentials(
    tmp_path,
) -> None:
    """The caller's command decides where it sets a conf, by the rule streams follow for their
    checkpoints (`access_confs_to_add`): one NameNode property of the caller's and the
    service is the caller's (none of the connection's NameNodes mixed in); an S3 endpoint of
    the caller's for the bucket, and the connection's credentials still reach it."""
    from airflow_provider_streamstate.backends.hdfs.store import HdfsStore
    from airflow_provider_streamstate.backends.hdfs.webhdfs import WebHdfs

    def confs_of(cmd: list[str]) -> list[tuple[str, str]]:
        return [tuple(cmd[i + 1].split("=", 1)) for i, a in enumerate(cmd) if a == "--conf"]

    hdfs = HdfsStore("hdfs://warehouse/snapshots",
                     client=WebHdfs(["http://nn1:9870/webhdfs/v1", "http://nn2:9870/webhdfs/v1"], user="etl",
                                    rpc_port=8020))
    request = StateJobRequest(kind="show", store=hdfs.url, stream="orders").with_job_id()
    own = "spark.hadoop.dfs.namenode.rpc-address.warehouse.nn0=mine:8020"
    cmd, _ = complete_command(["spark-submit", "--conf", own, "app.py"], request, hdfs, {})
    hadoop = [(k, v) for k, v in confs_of(cmd) if k.startswith("spark.hadoop.")]
    assert hadoop == [tuple(own.split("=", 1))]
    assert dict(confs_of(cmd))["spark.streamstate.webhdfs.warehouse.urls"].count("http://") == 2  # the engine's reach
    cmd, _ = complete_command(["spark-submit", "app.py"], request, hdfs, {})
    assert dict(confs_of(cmd))["spark.hadoop.dfs.namenode.rpc-address.warehouse.nn1"] == "nn2:8020"

    s3 = _s3_store()
    request = StateJobRequest(kind="show", store="s3://state/prod", stream="orders").with_job_id()
    endpoint = "spark.hadoop.fs.s3a.bucket.state.endpoint"
    cmd, _ = complete_command(["spark-submit", "--conf", f"{endpoint}=https://vpce.example", "app.py"], request, s3, {})
    confs = confs_of(cmd)
    assert [v for k, v in confs if k == endpoint] == ["https://vpce.example"]  # given once: the caller's
    assert dict(confs)["spark.hadoop.fs.s3a.bucket.state.secret.key"] == "s3cr3t-value"


def test_a_job_runs_with_its_driver_in_a_kubernetes_pod_as_a_stream_does(tmp_path) -> None:
    """State jobs run on every manager streams run on: on Kubernetes the driver pod is named
    by the submission, known before spark-submit says anything."""
    store = LocalStore(tmp_path / "store")
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    command = ["spark-submit", "--master", "k8s://https://k:443", "--deploy-mode", "cluster", "app.py"]
    cmd, env = complete_command(command, request, store, {})
    prepared = Submission.prepare(cmd, env=env, log_path=tmp_path / "job.log", name="streamstate-show-orders",
                                  launch_id=request.job_id)
    assert prepared.app is not None and prepared.app.manager == "kubernetes" and prepared.app.pod
    assert f"spark.kubernetes.driver.pod.name={prepared.app.pod}" in prepared.argv


@pytest.mark.parametrize(("command", "words"), [
    (["--master", "spark://h:7077", "--deploy-mode", "cluster"], "no cluster deploy mode for Python"),
    (["--master", "mesos://h:5050"], "unsupported Spark master"),
    (["--master", "yarn", "--deploy-mode", "cluster"], "needs the cluster's configuration"),
])
def test_a_submission_that_cannot_work_is_refused_before_anything_is_submitted(tmp_path, command, words) -> None:
    store = LocalStore(tmp_path / "store")
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    with pytest.raises(UsageError, match=words):
        complete_command(["spark-submit", *command, "app.py"], request, store,
                         {"HADOOP_CONF_DIR": "", "YARN_CONF_DIR": ""})
    assert store.list_records("streams/orders/state-jobs") == []


@pytest.mark.parametrize(("fields", "words"), [
    ({"kind": "drop"}, "unknown state job 'drop'"),
    ({"kind": "validate"}, "a validate job needs a suite"),
    ({"kind": "diff"}, "needs the snapshot to compare with"),
    ({"kind": "export", "fmt": "xml", "output": "/x"}, "unknown export format 'xml'"),
    ({"kind": "export", "fmt": "csv"}, "an export needs an output location"),
    ({"kind": "batch"}, "a batch of state jobs needs its requests"),
    ({"kind": "batch", "requests": [{"kind": "batch", "store": "file:///s", "stream": "a", "requests": [
        {"kind": "show", "store": "file:///s", "stream": "a"}]}]}, "not batches"),
    ({"kind": "batch", "requests": [{"kind": "show", "store": "s3://other", "stream": "a"}]}, "of its own store"),
    ({"kind": "show", "requests": []}, "a show job takes no requests"),
])
def test_a_request_that_cannot_run_is_refused_in_one_line(fields, words) -> None:
    with pytest.raises(UsageError, match=words):
        StateJobRequest(store="file:///s", stream="orders", **fields)


def test_a_batch_reads_back_as_written_and_its_jobs_share_its_job_id() -> None:
    """A pipeline's validation is one application: the batch's requests travel in its record."""
    batch = StateJobRequest(kind="batch", store="file:///s", stream="enrich", requests=[
        {"kind": "show", "store": "file:///s", "stream": "enrich", "snapshot": "a"},
        {"kind": "show", "store": "file:///s", "stream": "totals", "snapshot": "b", "limit": 3},
    ]).with_job_id()
    again = StateJobRequest.from_json(batch.to_json())
    assert again == batch
    assert [(r.stream, r.snapshot, r.limit, r.job_id) for r in again.batch()] == [
        ("enrich", "a", 20, batch.job_id), ("totals", "b", 3, batch.job_id)]


def test_a_local_output_of_a_job_whose_driver_runs_on_the_cluster_is_refused(tmp_path) -> None:
    """In YARN cluster mode the driver runs on some NodeManager: a local path there is lost."""
    store = LocalStore(tmp_path / "store")
    conf_dir = _yarn_conf_dir(tmp_path)
    cluster = ["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "app.py"]
    docs = StateJobRequest(kind="validate", store=store.url, stream="orders", suite={"name": "s"},
                           data_docs="/srv/docs").with_job_id()
    with pytest.raises(UsageError, match="Data Docs of a job in cluster deploy mode cannot go to the local path"):
        complete_command(cluster, docs, store, {"HADOOP_CONF_DIR": str(conf_dir)})
    export = StateJobRequest(kind="export", store=store.url, stream="orders", fmt="csv", output="file:///srv/out")
    with pytest.raises(UsageError, match="the export of a job in cluster deploy mode"):
        complete_command(cluster, export.with_job_id(), store, {"HADOOP_CONF_DIR": str(conf_dir)})
    to_s3 = StateJobRequest(kind="validate", store=store.url, stream="orders", suite={"name": "s"},
                            data_docs="s3://docs/x").with_job_id()
    assert complete_command(cluster, to_s3, store, {"HADOOP_CONF_DIR": str(conf_dir)})[0][0] == "spark-submit"


def _spark_home(tmp_path: Path, version: str, fake_submit: str) -> Path:
    """A Spark installation's layout: bin/spark-submit (the stand-in) and its spark-core jar."""
    home = tmp_path / f"spark-{version}"
    (home / "bin").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "jars" / f"spark-core_2.13-{version}.jar").write_bytes(b"")
    (home / "bin" / "spark-submit").write_text(fake_submit)
    (home / "bin" / "spark-submit").chmod(0o755)
    return home


@pytest.mark.parametrize("by", ["SPARK_HOME", "path"])
def test_a_state_job_for_a_spark_without_the_state_reader_is_refused_before_it_is_submitted(
    fake, tmp_path, monkeypatch, by
) -> None:
    """SPARK_HOME (or the spark-submit's own installation) is Spark 3.5: the job would only
    come back from the cluster with the same refusal, so nothing is submitted or written."""
    from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError

    home = _spark_home(tmp_path, "3.5.7", (tmp_path / "fake-spark-submit").read_text())
    store = fake.store
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    binary = "spark-submit" if by == "SPARK_HOME" else str(home / "bin" / "spark-submit")
    env = {"SPARK_HOME": str(home)} if by == "SPARK_HOME" else {}
    with pytest.raises(UnsupportedCheckpointError,
                       match=rf"Spark 3\.5\.7 has no state data source .*: the Spark at {home} cannot"):
        submit_state_job(request, store, [binary, "--master", "local[1]", "state_job.py", store.url, "orders",
                                          request.job_id], env=env, poll_s=0.05)
    assert not (tmp_path / "seen.json").exists()  # never started
    assert _leftovers(store, request) == []
    assert not list((tmp_path / "home").rglob(f"{request.job_id}*"))  # no log either


def test_a_state_job_for_spark_4_0_is_submitted(fake, tmp_path, monkeypatch) -> None:
    home = _spark_home(tmp_path, "4.0.4", (tmp_path / "fake-spark-submit").read_text())
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    store = fake.store
    request = StateJobRequest(kind="show", store=store.url, stream="orders").with_job_id()
    result = submit_state_job(request, store, [str(home / "bin" / "spark-submit"), "--master", "local[1]",
                                               "state_job.py", store.url, "orders", request.job_id],
                              env={"SPARK_HOME": str(home)}, poll_s=0.05)
    assert result["total_rows"] == 3


@pytest.mark.parametrize(("jar", "version"), [
    ("spark-core_2.12-3.5.1-amzn-0.jar", "3.5.1-amzn-0"),
    ("spark-core_2.13-4.0.0-SNAPSHOT.jar", "4.0.0-SNAPSHOT"),
    ("spark-core_2.12-3.3.2.3.3.7190.0-91.jar", "3.3.2.3.3.7190.0-91"),
])
def test_the_version_of_a_spark_installation_is_read_from_its_core_jar(tmp_path, jar, version) -> None:
    from airflow_provider_streamstate.engine.streams.submission import spark_version_of

    home = _spark_home(tmp_path, "0.0.0", "#!/bin/sh\n")
    (home / "jars" / "spark-core_2.13-0.0.0.jar").unlink()
    (home / "jars" / jar).write_bytes(b"")
    submit = str(home / "bin" / "spark-submit")
    assert spark_version_of([submit], {}) == (version, str(home.resolve()))
    assert spark_version_of(["spark-submit"], {"SPARK_HOME": str(home)}) == (version, str(home))
    assert spark_version_of(["spark-submit"], {"PATH": str(home / "bin")}) == (version, str(home.resolve()))


def test_where_the_installation_cannot_be_told_spark_answers(tmp_path) -> None:
    """A wrapper given as a path outside SPARK_HOME may set its own SPARK_HOME; an empty
    SPARK_HOME is unset; an installation without `jars/` says nothing."""
    from airflow_provider_streamstate.engine.streams.submission import spark_version_of

    old, new = _spark_home(tmp_path, "3.5.7", "#!/bin/sh\n"), _spark_home(tmp_path, "4.1.3", "#!/bin/sh\n")
    wrapper = str(new / "bin" / "spark-submit")
    assert spark_version_of([wrapper], {"SPARK_HOME": str(old)}) is None
    assert spark_version_of([wrapper], {"SPARK_HOME": str(new)}) == ("4.1.3", str(new.resolve()))
    assert spark_version_of([wrapper], {"SPARK_HOME": ""}) == ("4.1.3", str(new.resolve()))
    assert spark_version_of(["spark-submit"], {"SPARK_HOME": "", "PATH": "/nonexistent"}) is None
    bare = tmp_path / "pip-venv" / "bin"
    bare.mkdir(parents=True)
    (bare / "spark-submit").write_text("#!/bin/sh\n")
    assert spark_version_of([str(bare / "spark-submit")], {}) is None
