"""S3 store errors through the real stack and the CLI: every AWS configuration mistake is one
line naming the setting to fix (never "unexpected ..."); `--storage-conn-id` takes the client
from an Airflow connection; a connection cut mid-body is a retryable error; verify tells a
missing blob from a corrupt one."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.catalog.verify import WHAT_TO_DO, verify_snapshots
from airflow_provider_streamstate.engine.core.digest import sha256_stream
from airflow_provider_streamstate.engine.core.errors import MissingBlobError, TransientError
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.s3 import s3_client
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")
NOWHERE = "http://127.0.0.1:9"  # nothing listens: a request that slips through fails locally


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STREAMSTATE, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def clean_env(tmp_path) -> dict[str, str]:
    """The environment without any AWS_* or AIRFLOW_CONN_* setting, a private HOME and AIRFLOW_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW_CONN_"))}
    (tmp_path / "home").mkdir()
    (tmp_path / "airflow").mkdir()
    env.update(HOME=str(tmp_path / "home"), AIRFLOW_HOME=str(tmp_path / "airflow"), AWS_EC2_METADATA_DISABLED="true")
    return env


def _files(tmp_path: Path) -> dict[str, str]:
    bad_ini = tmp_path / "bad.ini"
    bad_ini.write_text("[default\nregion = us-east-1\n")
    roles = tmp_path / "roles.ini"
    roles.write_text("[profile a]\nrole_arn = arn:aws:iam::123456789012:role/x\nsource_profile = b\n")
    process = tmp_path / "process.ini"
    process.write_text("[profile p]\ncredential_process = /bin/false\n")
    return {"bad": str(bad_ini), "roles": str(roles), "process": str(process)}


KEYS = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}
CONFIG_CASES = [
    # (id, environment, text the one line must contain)
    ("endpoint-without-scheme", {**KEYS, "AWS_ENDPOINT_URL": "127.0.0.1:47525"}, "AWS_ENDPOINT_URL to a full URL"),
    ("s3-endpoint-without-scheme", {**KEYS, "AWS_ENDPOINT_URL_S3": "127.0.0.1:47525"}, "AWS_ENDPOINT_URL_S3"),
    ("unknown-profile", {**KEYS, "AWS_ENDPOINT_URL": NOWHERE, "AWS_PROFILE": "nosuch"}, "AWS_PROFILE"),
    ("invalid-region", {**KEYS, "AWS_ENDPOINT_URL": NOWHERE, "AWS_DEFAULT_REGION": "us east 1"}, "AWS_DEFAULT_REGION"),
    ("key-id-without-secret", {"AWS_ENDPOINT_URL": NOWHERE, "AWS_ACCESS_KEY_ID": "k"}, "AWS_SECRET_ACCESS_KEY"),
    ("unparsable-config-file", {**KEYS, "AWS_ENDPOINT_URL": NOWHERE, "AWS_CONFIG_FILE": "{bad}"}, "AWS_CONFIG_FILE"),
    ("unparsable-credentials-file", {**KEYS, "AWS_ENDPOINT_URL": NOWHERE, "AWS_SHARED_CREDENTIALS_FILE": "{bad}"},
     "AWS_SHARED_CREDENTIALS_FILE"),
    ("missing-source-profile", {"AWS_ENDPOINT_URL": NOWHERE, "AWS_CONFIG_FILE": "{roles}", "AWS_PROFILE": "a"},
     "AWS_PROFILE"),
    ("failing-credential-process", {"AWS_ENDPOINT_URL": NOWHERE, "AWS_CONFIG_FILE": "{process}", "AWS_PROFILE": "p"},
     "credential_process"),
]


@pytest.mark.parametrize(("env", "names"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_an_aws_configuration_mistake_is_one_line_naming_what_to_fix(clean_env, tmp_path, env, names) -> None:
    files = _files(tmp_path)
    env = {k: v.format(**files) for k, v in env.items()}
    proc = cli("snapshot", "list", "--store", "s3://bucket/p", "--stream", "x", env={**clean_env, **env})
    assert proc.returncode in (1, 2), proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("streamstate: error: ")
    assert "unexpected" not in lines[0]
    assert names in lines[0]
    assert "; " in lines[0]  # what is wrong; what to do


def _small_checkpoint(root: Path) -> Path:
    make_checkpoint(root, batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d}" * 50)
    return root


def test_storage_conn_id_takes_the_client_from_an_airflow_connection(stack, clean_env, tmp_path) -> None:
    env = {**clean_env, **stack.airflow_conn_env("primary", "s3_primary")}  # no AWS_* variable at all
    url = f"s3://{stack.s3['primary']['bucket']}/tests/conn-{uuid.uuid4().hex[:10]}"
    ckpt = _small_checkpoint(tmp_path / "ckpt")
    created = cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "s",
                  "--storage-conn-id", "s3_primary", "--json", env=env)
    assert created.returncode == 0, created.stderr
    sid = json.loads(created.stdout)["snapshot_id"]  # stdout is one JSON document: Airflow logs elsewhere
    listed = cli("snapshot", "list", "--store", url, "--stream", "s", "--storage-conn-id", "s3_primary", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [r["snapshot_id"] for r in json.loads(listed.stdout)] == [sid]
    assert S3Store(s3_client(stack), *url[len("s3://"):].split("/", 1)).list_snapshot_ids("s") == [sid]

    without = cli("snapshot", "list", "--store", url, "--stream", "s", env=env)  # no connection: no credentials
    assert without.returncode == 1
    assert "--storage-conn-id" in without.stderr


@pytest.mark.parametrize(
    ("conn_env", "names"),
    [
        ({}, "Airflow connection 'nosuch' does not exist"),
        ({"AIRFLOW_CONN_NOSUCH": json.dumps(
            {"conn_type": "aws", "login": "streamstate", "password": "streamstate-secret",
             "extra": {"endpoint_url": "127.0.0.1:47525"}})}, "endpoint_url in the extra of Airflow connection 'nosuch'"),
    ],
    ids=["unknown-connection", "endpoint-without-scheme"],
)
def test_a_bad_storage_conn_id_is_one_line(clean_env, conn_env, names) -> None:
    env = {**clean_env, **conn_env, "AWS_ENDPOINT_URL": NOWHERE}
    proc = cli("snapshot", "list", "--store", "s3://bucket/p", "--stream", "x", "--storage-conn-id", "nosuch", env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert names in lines[0]
    assert "unexpected" not in lines[0]


class _CuttingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards GET/HEAD to the S3 endpoint; a blob's body is cut (or stalled) after `keep` bytes."""

    upstream: tuple[str, int]
    mode: str = "cut"  # or "stall"
    keep = (1 << 20) + 100
    release = threading.Event()

    def log_message(self, *args: object) -> None:
        pass

    def _forward(self) -> None:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        conn.request(self.command, self.path, headers=dict(self.headers))
        resp = conn.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "server", "date"):
                self.send_header(k, v)
        self.end_headers()
        conn.close()
        if self.command == "HEAD":
            return
        if "/blobs/" not in self.path or resp.status != 200:
            self.wfile.write(body)
            return
        self.wfile.write(body[: self.keep])
        self.wfile.flush()
        if self.mode == "stall":
            self.release.wait(30)
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_HEAD = _forward


@pytest.fixture
def proxy(stack) -> Iterator[tuple[str, type[_CuttingProxy]]]:
    from urllib.parse import urlparse

    up = urlparse(stack.s3["primary"]["endpoint_url"])
    handler = type("Proxy", (_CuttingProxy,), {"upstream": (up.hostname, up.port), "release": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def _proxied_store(stack, endpoint: str, prefix: str) -> S3Store:  # noqa: ANN001
    import boto3
    from botocore.config import Config

    from dev import stack as stack_mod

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name=stack.s3["primary"]["region"],
        aws_access_key_id=stack_mod.S3_ACCESS_KEY, aws_secret_access_key=stack_mod.S3_SECRET_KEY,
        config=Config(s3={"addressing_style": "path"}, read_timeout=1, retries={"max_attempts": 1}),
    )
    return S3Store(client, stack.s3["primary"]["bucket"], prefix)


@pytest.mark.parametrize("mode", ["cut", "stall"])
def test_a_connection_cut_or_stalled_mid_body_is_a_retryable_error(stack, make_store, tmp_path, proxy, mode) -> None:
    store, _, _ = make_store("s3")
    data = os.urandom(3 << 20)
    src = tmp_path / "blob"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    store.put_blob(digest, src, len(data))
    endpoint, handler = proxy
    handler.mode = mode
    through_proxy = _proxied_store(stack, endpoint, store.prefix)

    with pytest.raises(TransientError) as err:
        with through_proxy.open_blob(digest) as f:
            sha256_stream(f)
    assert err.value.retryable
    assert "connection to S3 broke while reading blob" in err.value.message
    assert "\n" not in err.value.one_line()
    with store.open_blob(digest) as f:  # the blob itself is fine: a retry would succeed
        assert sha256_stream(f) == (digest, len(data))


def test_s3_verify_reports_a_missing_and_a_corrupt_blob_apart(stack, make_store, tmp_path, clean_env) -> None:
    store, url, env = make_store("s3")
    ckpt = _small_checkpoint(tmp_path / "ckpt")
    created = cli("snapshot", "create", "--checkpoint", str(ckpt), "--store", url, "--stream", "v", "--json",
                  env={**clean_env, **env})
    assert created.returncode == 0, created.stderr
    from airflow_provider_streamstate.engine.core.manifest import Manifest

    sid = json.loads(created.stdout)["snapshot_id"]
    files = {f.path: f.sha256 for f in Manifest.from_json(store.get_manifest("v", sid)).files}
    gone, flipped = sorted(p for p in files if p.endswith(".delta"))[:2]
    store.client.delete_object(Bucket=store.bucket, Key=store._key(blob_key(files[gone])))
    store.client.put_object(Bucket=store.bucket, Key=store._key(blob_key(files[flipped])), Body=b"not the bytes")
    with pytest.raises(MissingBlobError):
        store.open_blob(files[gone])

    result = verify_snapshots(store, "v", sid)
    assert {p.path: p.kind.value for p in result.problems} == {gone: "blob missing", flipped: "blob corrupt"}
    proc = cli("verify", "--store", url, "--stream", "v", env={**clean_env, **env})
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert f"{gone} in {sid}: blob missing" in line
    assert f"{flipped} in {sid}: blob corrupt" in line
    assert line.endswith(WHAT_TO_DO)
