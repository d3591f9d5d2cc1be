"""A stream checkpointing to S3 (the stack's moto endpoint) whose Spark confs and
environment hold no AWS key, set up in either of two ways (docs/deployment.md):

- web identity (what EKS IRSA and other OIDC federation give a pod): a role ARN and a token
  file. Spark's S3A (`WebIdentityTokenFileCredentialsProvider`, AWS SDK v2) and boto3 (the
  driver's records beside the checkpoint; the worker's status reads and snapshot) each call
  STS AssumeRoleWithWebIdentity and sign with the temporary keys it returns. STS is moto's,
  on an endpoint of its own, reached through `AWS_ENDPOINT_URL_STS`, which both SDKs honour.
- a Hadoop credential provider: S3A's keys in a JCEKS keystore made with Hadoop's own
  `CredentialShell`, the Spark conf naming only its path; boto3, which cannot read it, takes
  the same keys from an AWS shared credentials file named by `AWS_SHARED_CREDENTIALS_FILE`.

moto's S3 checks no signature, so what proves the way taken: no key in the spec, in the
worker's environment or in the environment of any process of the driver (read from /proc),
nor in the launch record or the driver's log; moto's STS issued the driver's role a session
to each SDK (the Java SDK's are named `aws-sdk-java-*`, botocore's `botocore-session-*`) and
the worker's role one to botocore; S3A with the same confs but no keystore finds no
credentials."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.engine.streams import launcher, records
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from airflow_provider_streamstate.spec import StreamSpec
from dev import stack as stack_mod
from tests.streams import consumed_records, example_stream_spec, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

ACCOUNT = "123456789012"  # moto's default account: the roles' ARNs name it
# Names that carry a key: none may appear in the spec, an environment, a record or a log.
KEY_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "fs.s3a.access.key",
             "fs.s3a.secret.key", "fs.s3a.session.token")
# Where else boto3 and the Java SDK would find credentials on this host, all cleared for each test.
OTHER_SOURCES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")


@pytest.fixture(scope="module")
def sts() -> Iterator[str]:
    """moto's STS on an endpoint of its own (the identity side: S3 stays the stack's)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def keyless(stack: stack_mod.Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process (the Airflow worker's side) with no AWS credentials of any kind, and the
    S3 endpoint and region of the stack's primary region (for boto3 and the driver)."""
    for name in (*KEY_NAMES[:3], *OTHER_SOURCES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role here: fail at once
    monkeypatch.setenv("STREAMSTATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    s3 = stack.s3["primary"]
    endpoint = {"AWS_ENDPOINT_URL_S3": s3["endpoint_url"], "AWS_REGION": s3["region"],
                "AWS_DEFAULT_REGION": s3["region"]}
    for key, value in endpoint.items():
        monkeypatch.setenv(key, value)
    return endpoint


def s3a_endpoint_confs(stack: stack_mod.Stack) -> dict[str, str]:
    """The stack's S3A confs without its keys and credentials provider: where S3 is."""
    return {k: v for k, v in stack.s3a_conf("primary").items()
            if not k.endswith((".access.key", ".secret.key", ".aws.credentials.provider"))}


def stream_spec(stack: stack_mod.Stack, topic: str, tmp_path: Path, *, env: dict[str, str],
                conf: dict[str, str]) -> StreamSpec:
    """The example stream on `local[1]` with its checkpoint in S3, given `env` and `conf`."""
    base = example_stream_spec(stack, topic, tmp_path, extra_args=["--shuffle-partitions", "1"], spark_default_manager=True)
    checkpoint = f"s3a://{stack.s3['primary']['bucket']}/tests/{uuid.uuid4().hex[:10]}/orders"
    return base.derive(checkpoint=checkpoint, env={"PYSPARK_PYTHON": sys.executable, **env},
                       conf={**base.conf, **s3a_endpoint_confs(stack), **conf,
                             "spark.sql.streaming.noDataMicroBatches.enabled": "false"})


def process_group_environ(pgid: int) -> list[dict[str, str]]:
    """The environment of every live process in a process group (the driver: spark-submit's
    JVM and the Python driver it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            raw = (entry / "environ").read_bytes()
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
        pairs = raw.decode(errors="replace").split("\0")
        found.append(dict(pair.split("=", 1) for pair in pairs if "=" in pair))
    return found


def run_stream(stack: stack_mod.Stack, spec: StreamSpec, topic: str) -> tuple[str, list[dict[str, str]]]:
    """Run the stream through one batch of 90 records, snapshot it from here, stop it; (the
    launch record, the driver's log and the spec as one text; the environment of each of
    the driver's processes, read while it ran)."""
    from airflow_provider_streamstate.streams.start import start_stream

    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=7, accounts=10, events=90))
    try:
        handle, status, _ = start_stream(spec, startup_timeout_s=300, log=log)
        assert status.state == "running", status
        launch = records.read_launch(spec.checkpoint)
        assert launch is not None
        environ = process_group_environ(launch.pgid)
        wait_for(lambda: consumed_records(spec.checkpoint) == 90, timeout=180, what="90 records")
        snap = create_snapshot(spec.checkpoint, open_store(spec.store), spec.name).manifest
        assert snap.files, snap
    finally:
        stopped = launcher.stop(spec.checkpoint, timeout_s=60)
    assert stopped.outcome == "stopped", stopped
    driver = records.read_driver(spec.checkpoint, handle.launch_id)  # written by the driver's boto3
    assert driver is not None and driver.exit_code == 0, driver
    launch_record = records.read_record(spec.checkpoint, records.launch_path(handle.generation)) or b""
    driver_log = Path(handle.log).read_text(errors="replace")
    return "\n".join([launch_record.decode(), driver_log, json.dumps(spec.to_dict())]), environ


def assert_no_key(text: str, environ: list[dict[str, str]], secrets: list[str]) -> None:
    """No key setting in any of the driver's environments or in `text`, and none of
    `secrets` in either."""
    assert environ, "no process of the driver was found"
    for env in environ:
        assert [name for name in KEY_NAMES if name in env] == [], sorted(env)
    assert [name for name in KEY_NAMES if name in text] == []
    shown = text + json.dumps(environ)
    assert [s for s in secrets if s in shown] == []


def role_sessions(sts: str, role_arn: str) -> list[dict[str, str]]:
    """The sessions moto's STS issued for `role_arn` (its dashboard's model data)."""
    with urllib.request.urlopen(f"{sts}/moto-api/data.json", timeout=30) as r:
        data = json.load(r)
    return [s for s in data["sts"]["AssumedRole"] if s["role_arn"] == role_arn]


def clients(sessions: list[dict[str, str]]) -> set[str]:
    """Which SDKs asked for these sessions: their default names without the time
    (`aws-sdk-java-<ms>`, `botocore-session-<s>`)."""
    return {s["session_name"].rsplit("-", 1)[0] for s in sessions}


def test_a_stream_with_web_identity_reaches_its_s3_checkpoint_through_sts_with_no_key_anywhere(
    stack: stack_mod.Stack, topic: str, tmp_path: Path, sts: str, keyless: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker and the driver each have a role ARN and a token file (two roles, as two
    pods would): S3A and boto3 in the driver, and boto3 here, assume their role through
    moto's STS and run, watch, snapshot and stop the stream with no key in sight."""
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl")
    token.chmod(0o600)
    run = uuid.uuid4().hex[:8]
    worker_role = f"arn:aws:iam::{ACCOUNT}:role/streamstate-worker-{run}"
    driver_role = f"arn:aws:iam::{ACCOUNT}:role/streamstate-driver-{run}"
    web_identity = {"AWS_WEB_IDENTITY_TOKEN_FILE": str(token), "AWS_ENDPOINT_URL_STS": sts}
    for key, value in {**web_identity, "AWS_ROLE_ARN": worker_role}.items():
        monkeypatch.setenv(key, value)
    provider = "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider"
    spec = stream_spec(stack, topic, tmp_path, env={**keyless, **web_identity, "AWS_ROLE_ARN": driver_role},
                       conf={"spark.hadoop.fs.s3a.aws.credentials.provider": provider})

    text, environ = run_stream(stack, spec, topic)

    assert {env.get("AWS_ROLE_ARN") for env in environ} == {driver_role}
    driver = role_sessions(sts, driver_role)
    worker = role_sessions(sts, worker_role)
    assert clients(driver) == {"aws-sdk-java", "botocore-session"}, driver
    assert worker and clients(worker) == {"botocore-session"}, worker
    issued = [s["secret_access_key"] for s in driver + worker]
    assert_no_key(text, environ, [*issued, stack_mod.S3_SECRET_KEY])


def credential_shell(keystore: Path, alias: str, value: str) -> None:
    """`hadoop credential create <alias>`, with the Hadoop classes pyspark ships."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run([shutil.which("java") or "java", "-cp", f"{jars}/*",
                    "org.apache.hadoop.security.alias.CredentialShell",
                    "create", alias, "-value", value, "-provider", f"jceks://file{keystore}"],
                   check=True, capture_output=True, timeout=120)


def s3a_ls(stack: stack_mod.Stack, tmp_path: Path, location: str,
           conf: dict[str, str]) -> subprocess.Popen[str]:
    """`hadoop fs -ls location` with these S3A settings (pyspark's Hadoop and the stack's S3A
    connector), started in the background."""
    import pyspark

    site = tmp_path / "hadoop-conf"  # FsShell wants a core-site.xml on its classpath
    site.mkdir(exist_ok=True)
    (site / "core-site.xml").write_text('<?xml version="1.0"?>\n<configuration/>\n')
    classpath = ":".join([str(site), f"{Path(pyspark.__file__).parent / 'jars'}/*", *stack.spark_jars])
    settings = [arg for key, value in conf.items()
                for arg in ("-D", f"{key.removeprefix('spark.hadoop.')}={value}")]
    return subprocess.Popen([shutil.which("java") or "java", "-cp", classpath, "org.apache.hadoop.fs.FsShell",
                             *settings, "-ls", location],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_s3a_reads_its_keys_from_a_jceks_keystore_the_conf_only_names(
    stack: stack_mod.Stack, tmp_path: Path,
) -> None:
    """S3A reads `fs.s3a.access.key`/`fs.s3a.secret.key` from a JCEKS keystore that the Spark
    conf only names (`hadoop.security.credential.provider.path`): the listing succeeds with no
    key in any conf or environment; without the keystore the same settings find no
    credentials. The stream's side of keyless operation (no key in its confs, environment,
    records or log) is the web-identity test above."""
    s3a_keys = {"spark.hadoop.fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}  # fs.s3a.access.key, secret.key only
    keystore = tmp_path / "s3a.jceks"
    keystore_conf = {"spark.hadoop.hadoop.security.credential.provider.path": f"jceks://file{keystore}"}
    location = f"s3a://{stack.s3['primary']['bucket']}/"
    # The control first (it needs no keystore): the same S3A settings without one.
    without_keystore = s3a_ls(stack, tmp_path, location, {**s3a_endpoint_confs(stack), **s3a_keys})
    try:
        credential_shell(keystore, "fs.s3a.access.key", stack_mod.S3_ACCESS_KEY)
        credential_shell(keystore, "fs.s3a.secret.key", stack_mod.S3_SECRET_KEY)
        out, _ = without_keystore.communicate(timeout=120)
    finally:
        without_keystore.kill()  # a no-op once it has exited
        without_keystore.wait()
    assert without_keystore.returncode != 0
    assert "SimpleAWSCredentialsProvider: No AWS credentials in the Hadoop configuration" in out, out[-2000:]

    with_keystore = s3a_ls(stack, tmp_path, location, {**s3a_endpoint_confs(stack), **s3a_keys, **keystore_conf})
    listed, _ = with_keystore.communicate(timeout=120)
    assert with_keystore.returncode == 0, listed[-2000:]
    assert stack_mod.S3_SECRET_KEY not in listed
