"""Snapshot stores: `file:///abs/path` (the embedded default), `s3://bucket/prefix` and
`hdfs://namenode:8020/path`; `open_store` maps a URL's scheme to its store.

Store URLs are checked before anything is touched: an S3 prefix is a key prefix, not a
path, so `.`/`..` and empty segments are refused rather than silently meaning another
prefix; a file URL must be absolute (`file:/abs` as Hadoop and Spark print it, or
`file:///abs`), never resolved against the current directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore
from airflow_provider_streamstate.engine.stores.hdfs import HdfsStore
from airflow_provider_streamstate.engine.stores.local import LocalStore
from airflow_provider_streamstate.engine.stores.s3 import S3Store
from airflow_provider_streamstate.engine.stores.s3_clients import S3Access, client_config
from airflow_provider_streamstate.engine.stores.s3_errors import client_error

__all__ = [
    "HdfsStore",
    "LocalStore",
    "ManifestExistsError",
    "S3Store",
    "SnapshotStore",
    "file_uri_path",
    "open_store",
    "parse_s3_url",
    "client_config",
    "s3_client",
    "s3_client_from_env",
]

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_UNPRINTABLE_RE = re.compile(r"[\x00-\x1f\x7f\\]")


def _endpoint_from_env() -> bool:
    """Whether boto3 will take the S3 endpoint from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return False
    return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))


def _client_from_env(max_connections: int) -> Any:
    import boto3

    return boto3.session.Session().client("s3", config=client_config(max_connections, path_style=_endpoint_from_env()))


def s3_client(*, max_connections: int = 16) -> Any:
    """A boto3 S3 client from the AWS environment: what boto3 reads itself
    (AWS_ENDPOINT_URL[_S3], credentials, AWS_DEFAULT_REGION, AWS_PROFILE, AWS_CONFIG_FILE);
    a custom endpoint gets path-style addressing. Any configuration error is a one-line
    UsageError naming the setting to fix. (Clients from an Airflow connection come from
    `hooks.store`: the engine does not import Airflow.)"""
    try:
        return _client_from_env(max_connections)
    except StreamstateError:
        raise
    except Exception as exc:  # noqa: BLE001 - building a client fails only on configuration
        raise client_error(exc) from None


def s3_client_from_env(max_connections: int = 16) -> Any:
    """A boto3 S3 client configured by the standard AWS environment variables."""
    return s3_client(max_connections=max_connections)


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket[/prefix]`; trailing slashes are dropped, `.`, `..`
    and empty segments refused (S3 would take them literally: another prefix)."""
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not BUCKET_RE.match(bucket):
        raise UsageError(
            f"invalid S3 store URL {url!r}: {bucket!r} is not a bucket name",
            hint="write it as s3://bucket or s3://bucket/prefix (3-63 lowercase letters, digits, dots and hyphens)",
        )
    prefix = prefix.rstrip("/")
    if not prefix:
        return bucket, ""
    if _UNPRINTABLE_RE.search(prefix):
        raise UsageError(
            f"invalid S3 store URL {url!r}: the prefix has a control character or a backslash",
            hint="use printable characters and '/' between the parts of the prefix",
        )
    segments = prefix.split("/")
    dots = [s for s in segments if s in (".", "..")]
    if dots:
        raise UsageError(
            f"invalid S3 store URL {url!r}: S3 keys are not paths, so {dots[0]!r} would not be resolved",
            hint="write the prefix without '.' and '..' segments",
        )
    if "" in segments:
        clean = "/".join(s for s in segments if s)
        raise UsageError(
            f"invalid S3 store URL {url!r}: empty segment ('//') in the prefix, which S3 keeps as part of the key",
            hint=f"write it as s3://{bucket}/{clean}" if clean else f"write it as s3://{bucket}",
        )
    return bucket, prefix


def file_uri_path(url: str, what: str = "file store URL") -> str:
    """The absolute path of `file:/abs`, `file:///abs` or `file://localhost/abs` (the forms
    Hadoop and Spark print); a relative one or another host is refused, never resolved
    against the current directory."""
    rest = url[len("file:") :]
    if rest.startswith("//"):
        host, _, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise UsageError(
                f"invalid {what} {url!r}: {host!r} would be a host name, not part of the path",
                hint=f"use three slashes for an absolute path: file:///{host}/{path}",
            )
        rest = "/" + path
    if not rest.startswith("/"):
        raise UsageError(
            f"invalid {what} {url!r}: the path is relative",
            hint="use an absolute path: file:///abs/path or file:/abs/path",
        )
    return rest


def open_store(
    url: str, *, s3_client: Any = None, parallelism: int = 8, aws_conn_id: str | None = None,
    spark_conf: Callable[[str], str | None] | None = None,
) -> SnapshotStore:
    """A store from its URL: `file:///abs/path`, `file:/abs/path`, an absolute path,
    `s3://bucket[/prefix]` or `hdfs://namenode[:port]/path`.

    `s3_client` is used as given (the Airflow layer passes its connection's, naming it in
    `aws_conn_id` for error hints); else one is built from the AWS environment, or, in a
    Spark application's driver without one, from what `SnapshotStore.spark_access` gave the
    application (`spark_conf(key)` reads its conf).
    """
    if url.startswith("s3://"):
        bucket, prefix = parse_s3_url(url)
        if s3_client is None and spark_conf is not None and not os.environ.get("AWS_ACCESS_KEY_ID"):
            access = S3Access.from_spark_conf(spark_conf, bucket)
            s3_client = access.s3_client(parallelism * 2) if access is not None else None
        client = s3_client if s3_client is not None else s3_client_from_env(parallelism * 2)
        return S3Store(client, bucket, prefix, aws_conn_id=aws_conn_id)
    if url.startswith("hdfs://"):
        return HdfsStore(url)
    if aws_conn_id:
        raise UsageError(
            f"an AWS connection ({aws_conn_id!r}) applies only to s3:// stores, not {url!r}",
            hint="drop --aws-conn-id (aws_conn_id), or give an s3://bucket/prefix store",
        )
    if url.startswith("file:"):
        return LocalStore(file_uri_path(url))
    if url.startswith("/"):
        return LocalStore(url)
    raise UsageError(
        f"unsupported store {url!r}",
        hint="use file:///abs/path, an absolute path, s3://bucket/prefix or hdfs://namenode:8020/path",
    )
