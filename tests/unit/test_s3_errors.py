"""S3 failures reach callers as the engine's errors, with `retryable` right: a connection
cut while a body is read is transient; a botocore too old for the store's requests is not.
The S3 endpoint here is a fake body or a client that never sends (the real endpoint is
exercised in tests/integration/test_store_errors.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from botocore import exceptions as bx
from urllib3 import exceptions as ux

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.core.digest import sha256_stream
from airflow_provider_streamstate.engine.core.errors import MissingBlobError, StreamstateError, TransientError

DIGEST = hashlib.sha256(b"x").hexdigest()


class CutBody:
    """A response body that delivers one chunk, then fails the way a broken connection does."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.reads = 0
        self.closed = False

    def read(self, amt: int | None = None) -> bytes:
        self.reads += 1
        if self.reads == 1 and amt is not None:  # reading everything always crosses the cut
            return b"x" * amt
        raise self.exc

    def close(self) -> None:
        self.closed = True


class OneObjectClient:
    """Just enough of a boto3 client: every GET answers with the given body."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        return {"Body": self.body}


CUTS = [
    ux.ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')"),
    ux.ReadTimeoutError(None, "/blob", "Read timed out."),  # type: ignore[arg-type]
    bx.ResponseStreamingError(error="Connection broken: IncompleteRead(10 bytes read, 90 more expected)"),
    bx.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
    bx.IncompleteReadError(actual_bytes=10, expected_bytes=100),
    ConnectionResetError(104, "Connection reset by peer"),
]


@pytest.mark.parametrize("exc", CUTS, ids=lambda e: type(e).__module__.split(".")[0] + "." + type(e).__name__)
def test_a_connection_cut_while_a_blob_is_read_is_a_transient_error(exc) -> None:
    body = CutBody(exc)
    store = S3Store(OneObjectClient(body), "bucket", "p")
    with pytest.raises(TransientError) as err:
        with store.open_blob(DIGEST) as f:
            sha256_stream(f)
    assert err.value.retryable
    assert f"blob {DIGEST[:12]}" in err.value.message
    assert "s3://bucket/p" in err.value.message
    assert err.value.hint
    assert "\n" not in err.value.one_line()
    assert body.closed  # the broken connection is not handed back to the pool as if healthy


@pytest.mark.parametrize("exc", CUTS[:2], ids=["protocol", "read-timeout"])
def test_a_connection_cut_while_a_manifest_is_read_is_a_transient_error(exc) -> None:
    store = S3Store(OneObjectClient(CutBody(exc)), "bucket", "p")
    with pytest.raises(TransientError, match="manifest 0001"):
        store.get_manifest("s", "0001")


def test_a_bug_while_reading_is_not_disguised_as_a_network_failure() -> None:
    store = S3Store(OneObjectClient(CutBody(ZeroDivisionError("bug"))), "bucket", "p")
    with pytest.raises(ZeroDivisionError):
        with store.open_blob(DIGEST) as f:
            sha256_stream(f)


def test_a_missing_blob_is_a_missing_blob_error_locally(tmp_path) -> None:
    with pytest.raises(MissingBlobError, match="missing") as err:
        LocalStore(tmp_path / "store").open_blob(DIGEST)
    assert "restore another snapshot" in (err.value.hint or "")


def test_a_botocore_that_does_not_know_conditional_writes_is_told_to_upgrade(monkeypatch) -> None:
    import boto3

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.session.Session(
        aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    ).client("s3", endpoint_url="http://127.0.0.1:9")  # never reached: validation fails first
    # What an older botocore's model looks like: PutObject without IfNoneMatch.
    del client.meta.service_model.operation_model("PutObject").input_shape.members["IfNoneMatch"]
    store = S3Store(client, "bucket", "p")
    with pytest.raises(StreamstateError) as err:
        store.put_manifest("s", "0001", b"{}")
    assert not err.value.retryable
    assert not isinstance(err.value, TransientError)
    assert "IfNoneMatch" in err.value.message
    assert "upgrade boto3" in (err.value.hint or "")
    assert "\n" not in err.value.one_line()
