"""The stack's S3 server (dev/moto_server.py) decides the writes of a key one at a time, as S3
does: of writers creating one key at once (`If-None-Match: *`, by PutObject or by completing a
multipart upload), or replacing one version of it (`If-Match`), exactly one succeeds, and no
plain write lands between a conditional write's check and its write. moto's
own check and write have a gap between them; here it is widened (a slow write) so that a race
that a loaded machine hits once in a while is hit every round."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.s3 import models as s3_models
from moto.s3 import responses as s3_responses
from werkzeug.serving import make_server

from dev import moto_server

WRITERS = 4
ROUNDS = 5


def slowed(write: Callable[..., Any]) -> Callable[..., Any]:
    """moto's write, begun 50 ms after its caller checked the key: the gap between the two."""
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return write(*args, **kwargs)
    return slow


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], tuple[Any, str]]]:
    """serve(atomic) -> (an S3 client of a fresh in-process server, a new bucket); moto's code
    is restored after."""
    for owner, name in ((s3_responses.S3Response, "_key_response_put"), (s3_responses.S3Response, "_key_response_post"),
                        (s3_responses.S3Response, "_key_response_delete"), (s3_models, "_VersionedKeyStore"),
                        (s3_models.S3Backend, "list_objects")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # put back whatever app() changes
    for name in ("put_object", "complete_multipart_upload"):
        monkeypatch.setattr(s3_models.S3Backend, name, slowed(getattr(s3_models.S3Backend, name)))
    servers = []

    def start(atomic: bool) -> Any:
        if atomic:
            app = moto_server.app()
        else:
            moto_server.index_bucket_keys()
            app = moto_server.CachedDispatcher(moto_server.create_backend_app)
        server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=moto_server.MotoRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{server.server_port}", region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing",
                              config=Config(retries={"max_attempts": 1}, max_pool_connections=WRITERS * 2))
        bucket = f"cond-{uuid.uuid4().hex[:12]}"  # moto's backends are the process's: buckets are shared
        client.create_bucket(Bucket=bucket)
        return client, bucket

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def race(writes: list[Callable[[], None]]) -> int:
    """Run the writes at one instant; how many were accepted."""
    barrier = threading.Barrier(len(writes))
    accepted: list[bool] = []

    def one(write: Callable[[], None]) -> None:
        barrier.wait()
        try:
            write()
            accepted.append(True)
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412), exc.response
            accepted.append(False)

    threads = [threading.Thread(target=one, args=(w,)) for w in writes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == len(writes)
    return sum(accepted)


def creates(client: Any, bucket: str, key: str) -> list[Callable[[], None]]:
    return [lambda n=n: client.put_object(Bucket=bucket, Key=key, Body=f"writer {n}".encode(), IfNoneMatch="*")
            for n in range(WRITERS)]


def test_of_writers_creating_one_key_at_once_exactly_one_succeeds(serve: Callable[[bool], tuple[Any, str]]) -> None:
    client, bucket = serve(True)
    assert [race(creates(client, bucket, f"launches/{r:08d}.json")) for r in range(ROUNDS)] == [1] * ROUNDS


def test_motos_own_check_and_write_let_several_writers_create_one_key(serve: Callable[[bool], tuple[Any, str]]) -> None:
    """The race the server closes is there without it: the test above can see a second winner."""
    client, bucket = serve(False)
    assert max(race(creates(client, bucket, f"launches/{r:08d}.json")) for r in range(ROUNDS)) > 1


def test_of_writers_replacing_one_version_of_a_key_exactly_one_succeeds(serve: Callable[[bool], tuple[Any, str]]) -> None:
    client, bucket = serve(True)
    for r in range(ROUNDS):
        etag = client.put_object(Bucket=bucket, Key="lease.json", Body=f"round {r}".encode())["ETag"]
        writes = [lambda n=n, r=r, etag=etag: client.put_object(
            Bucket=bucket, Key="lease.json", Body=f"{r} by {n}".encode(), IfMatch=etag) for n in range(WRITERS)]
        assert race(writes) == 1


def test_a_plain_write_never_lands_between_a_conditional_writes_check_and_its_write(
        serve: Callable[[bool], tuple[Any, str]]) -> None:
    """A replacement of version E racing a plain write: S3 does one then the other, so the
    plain write's body is the object's in the end (first: the replacement finds another
    version and is refused; second: it overwrites the replacement)."""
    client, bucket = serve(True)
    for r in range(ROUNDS):
        etag = client.put_object(Bucket=bucket, Key="record.json", Body=b"before")["ETag"]
        writes = [lambda r=r, etag=etag: client.put_object(Bucket=bucket, Key="record.json", Body=f"if {r}".encode(),
                                                          IfMatch=etag),
                  lambda r=r: client.put_object(Bucket=bucket, Key="record.json", Body=f"plain {r}".encode())]
        race(writes)
        assert client.get_object(Bucket=bucket, Key="record.json")["Body"].read() == f"plain {r}".encode()


def test_of_multipart_uploads_completing_one_key_at_once_exactly_one_succeeds(serve: Callable[[bool], tuple[Any, str]]) -> None:
    client, bucket = serve(True)
    for r in range(ROUNDS):
        key = f"blobs/{r:04d}"
        uploads = []
        for n in range(WRITERS):
            upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1,
                                      Body=f"writer {n}".encode())["ETag"]
            uploads.append((upload_id, etag))
        writes = [lambda u=u, e=e, key=key: client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=u, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]},
            IfNoneMatch="*") for u, e in uploads]
        assert race(writes) == 1
