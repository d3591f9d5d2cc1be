"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.fake_yarn import serve_fake_rm


@pytest.fixture
def fake_rm() -> Iterator[str]:
    """A stand-in YARN ResourceManager (tests/unit/fake_yarn.py): its base URL."""
    yield from serve_fake_rm()


def serve_moto() -> Iterator[str]:
    """A moto S3 server on loopback while the caller iterates: its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto S3 server for the unit tests that count S3 requests."""
    yield from serve_moto()


def moto_client(endpoint: str, key: str = "test") -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key="secret")


def moto_bucket(endpoint: str, bucket: str) -> Any:
    """A client of `endpoint` where `bucket` exists."""
    c = moto_client(endpoint)
    try:
        c.create_bucket(Bucket=bucket)
    except c.exceptions.BucketAlreadyOwnedByYou:
        pass
    return c
