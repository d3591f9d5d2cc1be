"""Snapshot stores: `file:///abs/path` (the embedded default), `s3://bucket/prefix` and
`hdfs://namenode:8020/path`; `open_store` maps a URL's scheme to its store.

Adding a kind of store: a module here with a `SnapshotStore` subclass (stores/base.py says
what each method must guarantee) and an opener, and its line in `SCHEMES`; the contract
suite (tests/integration/test_stores.py) runs on it once `store_kind` lists it.

Store URLs are checked before anything is touched: an S3 prefix is a key prefix, not a
path, so `.`/`..` and empty segments are refused rather than silently meaning another
prefix; a file URL must be absolute (`file:/abs` as Hadoop and Spark print it, or
`file:///abs`), never resolved against the current directory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores.base import ManifestExistsError, SnapshotStore, StoreOptions
from airflow_provider_streamstate.engine.stores.hdfs import HdfsStore, open_hdfs
from airflow_provider_streamstate.engine.stores.local import LocalStore, file_uri_path, open_local
from airflow_provider_streamstate.engine.stores.s3 import S3Store, open_s3
from airflow_provider_streamstate.engine.stores.s3_clients import (
    BUCKET_RE,
    client_config,
    parse_s3_url,
    s3_client,
    s3_client_from_env,
)

__all__ = [
    "HdfsStore",
    "LocalStore",
    "ManifestExistsError",
    "S3Store",
    "SnapshotStore",
    "StoreOptions",
    "BUCKET_RE",
    "SCHEMES",
    "file_uri_path",
    "open_store",
    "parse_s3_url",
    "client_config",
    "s3_client",
    "s3_client_from_env",
]

# URL scheme -> opener; an absolute path is a `file` store.
SCHEMES: dict[str, Callable[[str, StoreOptions], SnapshotStore]] = {
    "file": open_local,
    "s3": open_s3,
    "hdfs": open_hdfs,
}


def open_store(
    url: str, *, s3_client: Any = None, parallelism: int = 8, aws_conn_id: str | None = None,
    spark_conf: Callable[[str], str | None] | None = None,
) -> SnapshotStore:
    """A store from its URL: `file:///abs/path`, `file:/abs/path`, an absolute path,
    `s3://bucket[/prefix]` or `hdfs://namenode[:port]/path`.

    `s3_client` (the connection of a store that takes one) is used as given: the Airflow
    layer passes its connection's, naming it in `aws_conn_id` for error hints; else the
    store builds its own from the environment, or, in a Spark application's driver, from
    what `SnapshotStore.spark_access` gave the application (`spark_conf(key)` reads its conf).
    """
    scheme = "file" if url.startswith("/") else url.partition(":")[0] if ":" in url else ""
    opener = SCHEMES.get(scheme)
    if opener is None:
        raise UsageError(
            f"unsupported store {url!r}",
            hint="use file:///abs/path, an absolute path, s3://bucket/prefix or hdfs://namenode:8020/path",
        )
    return opener(url, StoreOptions(connection=s3_client, conn_id=aws_conn_id, parallelism=parallelism,
                                    spark_conf=spark_conf))
