"""Snapshot stores: `file:///abs/path` (the embedded default) and `s3://bucket/prefix`."""

from __future__ import annotations

import os
import re
from typing import Any

from airflow_provider_streamstate.engine.errors import UsageError
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore
from airflow_provider_streamstate.engine.stores.local import LocalStore
from airflow_provider_streamstate.engine.stores.s3 import S3Store

__all__ = ["LocalStore", "ManifestExistsError", "S3Store", "SnapshotStore", "open_store", "s3_client_from_env"]


def s3_client_from_env(max_connections: int = 16) -> Any:
    """A boto3 S3 client configured by the standard AWS environment variables.

    boto3 reads AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_S3), credentials and region itself.
    """
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        config=Config(
            max_pool_connections=max_connections,
            retries={"max_attempts": 5, "mode": "standard"},
            s3={"addressing_style": "path"} if os.environ.get("AWS_ENDPOINT_URL") else None,
        ),
    )


def open_store(url: str, *, s3_client: Any = None, parallelism: int = 8) -> SnapshotStore:
    """A store from its URL: `file:///abs/path`, an absolute path, or `s3://bucket[/prefix]`."""
    if url.startswith("s3://"):
        m = re.match(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$", url)
        if not m:
            raise UsageError(f"invalid S3 store URL {url!r}", hint="write it as s3://bucket or s3://bucket/prefix")
        return S3Store(s3_client or s3_client_from_env(parallelism * 2), m.group(1), m.group(2) or "")
    if url.startswith("file://"):
        path = url[len("file://") :]
        if not path.startswith("/"):
            raise UsageError(f"invalid file store URL {url!r}", hint="use an absolute path: file:///abs/path")
        return LocalStore(path)
    if url.startswith("/"):
        return LocalStore(url)
    raise UsageError(
        f"unsupported store {url!r}", hint="use file:///abs/path, an absolute path, or s3://bucket/prefix"
    )
