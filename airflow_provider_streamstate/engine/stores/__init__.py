"""Snapshot stores: `open_store` opens the store of a URL through the backend registered for
its scheme (engine/stores/backends.py): `file:///abs/path` (the embedded default),
`s3://bucket/prefix` and `hdfs://namenode:8020/path` ship with this package
(airflow_provider_streamstate/backends/), another distribution may add more.

Adding a kind of store: a backend package with a `SnapshotStore` subclass (stores/base.py
says what each method must guarantee) and its opener, registered under the scheme in the
`streamstate.backends` entry point group (docs/backends.md); the contract suite
(tests/integration/test_stores.py) runs on it once `store_kind` lists it.

Store URLs are checked by their backend before anything is touched: an S3 prefix is a key
prefix, not a path, so `.`/`..` and empty segments are refused rather than silently meaning
another prefix; a file URL must be absolute (`file:/abs` as Hadoop and Spark print it, or
`file:///abs`), never resolved against the current directory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.stores.backends import Backend, backend_for, examples
from airflow_provider_streamstate.engine.stores.base import (
    ManifestExistsError,
    SnapshotStore,
    StoreOptions,
    file_uri_path,
)

__all__ = [
    "Backend",
    "ManifestExistsError",
    "SnapshotStore",
    "StoreOptions",
    "file_uri_path",
    "open_store",
    "store_scheme",
]


def store_scheme(url: str) -> str:
    """The scheme of a store URL, lower case: `file` for an absolute path, "" for none."""
    if url.startswith("/"):
        return "file"
    return url.partition(":")[0].lower() if ":" in url else ""


def open_store(
    url: str, *, connection: Any = None, parallelism: int = 8, conn_id: str | None = None,
    spark_conf: Callable[[str], str | None] | None = None,
) -> SnapshotStore:
    """A store from its URL: `file:///abs/path`, `file:/abs/path`, an absolute path,
    `s3://bucket[/prefix]`, `hdfs://namenode[:port]/path`, or a scheme another installed
    distribution registers.

    `connection` (how the store is reached: an S3 client, a WebHDFS client) is used as
    given: the Airflow layer passes its connection's, naming it in `conn_id` for error
    hints; else the store builds its own from the environment, or, in a Spark application's
    driver, from what `SnapshotStore.spark_access` gave the application (`spark_conf(key)`
    reads its conf).
    """
    scheme = store_scheme(url)
    backend = backend_for(scheme) if scheme else None
    if backend is None or backend.open_store is None or scheme not in backend.store_schemes:
        raise UsageError(f"unsupported store {url!r}", hint=f"use an absolute path or one of: {examples('store')}")
    opened: SnapshotStore = backend.open_store(url, StoreOptions(connection=connection, conn_id=conn_id,
                                                                 parallelism=parallelism, spark_conf=spark_conf))
    return opened
