"""A process builds one boto3 S3 client per set of settings: building one costs about 0.2
CPU-s (a new session loads the service model), and a stream's heartbeat on S3 opened its
checkpoint, and so built a client, for every beat. A change in the AWS environment or its
files, another process, or other credentials get a client of their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.s3 import clients
from airflow_provider_streamstate.backends.s3.clients import S3Access, s3_client
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))


def _key(client: object) -> str:
    return client._request_signer._credentials.get_frozen_credentials().access_key  # type: ignore[attr-defined]


def test_a_checkpoint_opened_again_reuses_the_client_of_the_first_open() -> None:
    first = open_checkpoint_fs("s3a://bucket/streams/orders")
    again = open_checkpoint_fs("s3a://bucket/streams/orders")
    other = open_checkpoint_fs("s3a://other/streams/payments")
    assert again.client is first.client and other.client is first.client  # type: ignore[attr-defined]
    assert s3_client(max_connections=8) is not first.client  # type: ignore[attr-defined]


def test_a_changed_aws_environment_gets_a_client_with_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    before = s3_client()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ROTATED")
    after = s3_client()
    assert after is not before and (_key(before), _key(after)) == ("AK", "ROTATED")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:10")
    assert s3_client().meta.endpoint_url == "http://127.0.0.1:10"


def test_a_changed_aws_config_file_gets_a_new_client(tmp_path: Path) -> None:
    before = s3_client()
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\n")
    assert s3_client() is not before


def test_a_forked_child_builds_its_own_client() -> None:
    parent = s3_client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's is kept, its own client is
        try:
            inherited = bool(clients._clients or clients._sessions)
            child = s3_client()
            answer = f"{inherited} {child is parent} {child is s3_client()}"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            answer = repr(exc)
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1000).decode()
    os.waitpid(pid, 0)
    assert answer == "False False True"


def test_a_client_that_found_no_credentials_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next call looks again (an instance's metadata endpoint that timed out once)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert s3_client() is not s3_client()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "LATER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    assert _key(s3_client()) == "LATER"


def test_a_credentials_file_replaced_by_a_copy_with_its_old_time_gets_a_new_client(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = OLD\naws_secret_access_key = SK\n")
    os.utime(credentials, ns=(1_000_000_000, 1_000_000_000))
    before = s3_client()
    rotated = tmp_path / "rotated"
    rotated.write_text("[default]\naws_access_key_id = NEWER\naws_secret_access_key = SK\n")
    os.utime(rotated, ns=(1_000_000_000, 1_000_000_000))  # what `cp -p` keeps
    rotated.replace(credentials)
    assert s3_client() is not before


def test_an_access_reuses_its_client_and_other_credentials_get_theirs() -> None:
    access = S3Access("http://127.0.0.1:9", "us-east-1", "AK", "SK", None)
    assert access.s3_client() is S3Access("http://127.0.0.1:9", "us-east-1", "AK", "SK", None).s3_client()
    other = S3Access("http://127.0.0.1:9", "us-east-1", "AK2", "SK2", None).s3_client()
    assert _key(other) == "AK2" and other is not access.s3_client()


def test_the_cache_stays_bounded_and_forgets_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "_MAX_CACHED_CLIENTS", 2)
    built = []
    for n in range(3):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", f"AK{n}")
        built.append(s3_client())
    assert len(clients._clients) == 2 and s3_client() is built[2]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK0")
    assert s3_client() is not built[0]


def test_an_airflow_connection_reuses_its_client_until_the_connection_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sensors, triggers and the Streams pages open the same connection on every poll."""
    import json

    from airflow_provider_streamstate.backends.s3.hook import s3_client_from_connection

    def define(key: str) -> None:
        monkeypatch.setenv("AIRFLOW_CONN_STORE_S3", json.dumps({
            "conn_type": "aws", "login": key, "password": "SK",
            "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}}))

    define("AK1")
    first = s3_client_from_connection("store_s3")
    assert s3_client_from_connection("store_s3") is first and _key(first) == "AK1"
    define("AK2")  # the connection rotated its key
    rotated = s3_client_from_connection("store_s3")
    assert rotated is not first and _key(rotated) == "AK2"
    assert rotated.meta.endpoint_url == "http://127.0.0.1:9"


def test_clients_of_one_aws_environment_come_from_one_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new session loads the service model (about 0.2 CPU-s); a client of a kept one costs
    about 6 ms. A changed environment gets a session of its own (boto3 keeps the credentials
    it resolved)."""
    monkeypatch.setattr(clients, "_sessions", {})
    s3_client(max_connections=4)
    s3_client(max_connections=8)
    S3Access("http://127.0.0.1:9", "us-east-1", "AK3", "SK3", None).s3_client()
    assert len(clients._sessions) == 1
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ROTATED")
    assert _key(s3_client(max_connections=4)) == "ROTATED" and len(clients._sessions) == 2
