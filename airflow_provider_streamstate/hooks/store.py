"""A snapshot store, and a checkpoint location, from Airflow's point of view: a URL plus the
connection that reaches it. How a connection becomes what a backend takes (an S3 client, a
WebHDFS client) is the backend's own `hook` module, found by the URL's scheme through the
`streamstate.airflow_connections` entry point group, as the engine finds the backend itself.
Connections are passed to the engine with what they open (a store, a checkpoint's
filesystem), never remembered for the rest of the process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseHook

from airflow_provider_streamstate.engine.core.config.renamed import renamed_value
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.stores import SnapshotStore, open_store, store_scheme

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS

GROUP = "streamstate.airflow_connections"
Connect = Callable[..., Any]  # connect(conn_id, *, max_connections) -> the backend's connection, or None

_lock = threading.Lock()
_connectors: dict[str, Connect | None] = {}


def connector_for(scheme: str) -> Connect | None:
    """How an Airflow connection reaches the backend of `scheme`; None when that backend
    takes no connection (a local directory)."""
    scheme = scheme.lower()
    with _lock:
        if scheme in _connectors:
            return _connectors[scheme]
    found = {ep.name.lower(): ep for ep in entry_points(group=GROUP)}.get(scheme)
    connect = None if found is None else found.load()
    with _lock:
        _connectors[scheme] = connect
    return connect


def backend_connection(scheme: str, conn_id: str | None, *, max_connections: int = 16) -> Any:
    """The connection Airflow connection `conn_id` gives the backend of `scheme`; None without
    one, for a backend that takes none, or when the connection is of another kind (the
    backend then reaches its storage as the environment says)."""
    connect = connector_for(scheme) if conn_id else None
    return None if connect is None else connect(conn_id, max_connections=max_connections)


class StreamstateStoreHook(BaseHook):
    """Opens a snapshot store (`file:///...`, `s3://bucket/prefix`, `hdfs://namenode/path`, or a
    scheme another distribution registers) for operators.

    :param store: the store's URL.
    :param storage_conn_id: the Airflow connection that reaches the store: an `aws` one for S3, a
        `streamstate_hdfs` (or `webhdfs`) one for HDFS (None: the environment's: boto3's own
        credentials, HADOOP_CONF_DIR).
    :param parallelism: concurrent transfers; the S3 connection pool is twice as large.
    :param aws_conn_id: the old name of `storage_conn_id` (deprecated).
    """

    conn_name_attr = "storage_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "streamstate snapshot store"

    def __init__(self, store: str, *, storage_conn_id: str | None = None, parallelism: int = 8,
                 aws_conn_id: str | None = None) -> None:
        storage_conn_id = renamed_value("storage_conn_id", storage_conn_id, aws_conn_id, owner="StreamstateStoreHook",
                                        category=AirflowProviderDeprecationWarning)
        super().__init__()
        self.store_url = store
        self.storage_conn_id = storage_conn_id
        self.parallelism = parallelism

    @cached_property
    def store(self) -> SnapshotStore:
        scheme = store_scheme(self.store_url)
        connection = backend_connection(scheme, self.storage_conn_id, max_connections=self.parallelism * 2)
        if self.storage_conn_id and connection is None and connector_for(scheme) is not None:
            raise UsageError(f"Airflow connection {self.storage_conn_id!r} does not reach a {scheme}:// store",
                             hint=f"give a connection of the kind a {scheme}:// store takes (docs/operators.md)")
        return open_store(self.store_url, connection=connection, parallelism=self.parallelism,
                          conn_id=self.storage_conn_id)

    def get_conn(self) -> SnapshotStore:
        return self.store

    def test_connection(self) -> tuple[bool, str]:
        """Reach the store and list its streams; never raises."""
        try:
            streams = self.store.list_streams()
        except StreamstateError as exc:
            return False, exc.one_line()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return False, f"{type(exc).__name__}: {exc}"
        return True, f"{self.store.url}: {len(streams)} stream(s)"


def checkpoint_connection(location: str, conn_id: str | None, *, max_connections: int = 16) -> Any:
    """How Airflow reaches a checkpoint location: what the stream's connection gives the
    location's backend (S3Hook's client for `s3a://`, a WebHDFS client for `hdfs://` with an
    HDFS connection); None otherwise (a local path needs none; a connection of another kind
    leaves the location to the worker's environment, as Spark reaches it)."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme

    return backend_connection(location_scheme(location), conn_id, max_connections=max_connections)


def open_checkpoint(location: str, conn_id: str | None, *, max_connections: int = 16) -> CheckpointFS:
    """A checkpoint location's filesystem, opened with its Airflow connection: what a task
    passes to the engine, which never looks a connection up itself."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs

    return open_checkpoint_fs(location, connection=checkpoint_connection(location, conn_id,
                                                                         max_connections=max_connections),
                              conn_id=conn_id)
