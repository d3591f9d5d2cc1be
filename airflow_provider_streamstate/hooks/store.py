"""A snapshot store, and a checkpoint location, from Airflow's point of view: a URL plus the
connection that reaches it. S3 clients come from the amazon provider's S3Hook, so the
endpoint, region, role assumption and credentials are the connection's, never the code's.
Connections are passed to the engine with what they open (a store, a checkpoint's
filesystem), never remembered for the rest of the process."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.stores import SnapshotStore, client_config, open_store
from airflow_provider_streamstate.engine.stores.s3_errors import client_error

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS


def s3_client_from_connection(aws_conn_id: str, *, max_connections: int = 16) -> Any:
    """`S3Hook(aws_conn_id=...).get_conn()` with the engine's pool size and retries under the
    connection's own `config_kwargs`; an unknown connection id is an error (S3Hook would
    silently fall back to no connection)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        S3Hook.get_connection(aws_conn_id)
    except AirflowNotFoundException:
        raise UsageError(
            f"Airflow connection {aws_conn_id!r} does not exist",
            hint=f"define it (an AIRFLOW_CONN_{aws_conn_id.upper()} environment variable, or in Airflow's "
            "connections or secrets backend), or fix the connection id",
        ) from None
    try:
        wrapper = S3Hook(aws_conn_id=aws_conn_id).conn_config
        config = client_config(max_connections, path_style=bool(wrapper.get_service_endpoint_url("s3")))
        if wrapper.botocore_config is not None:
            config = config.merge(wrapper.botocore_config)
        return S3Hook(aws_conn_id=aws_conn_id, config=config).get_conn()
    except StreamstateError:
        raise
    except Exception as exc:  # noqa: BLE001 - building a client fails only on configuration
        raise client_error(exc, conn_id=aws_conn_id) from None


class StreamstateStoreHook(BaseHook):
    """Opens a snapshot store (`file:///...` or `s3://bucket/prefix`) for operators.

    :param store: the store's URL.
    :param aws_conn_id: the Airflow `aws` connection of an S3 store (None: boto3's own
        environment and instance credentials).
    :param parallelism: concurrent transfers; the S3 connection pool is twice as large.
    """

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "streamstate snapshot store"

    def __init__(self, store: str, *, aws_conn_id: str | None = None, parallelism: int = 8) -> None:
        super().__init__()
        self.store_url = store
        self.aws_conn_id = aws_conn_id
        self.parallelism = parallelism

    @cached_property
    def store(self) -> SnapshotStore:
        client = None
        if self.store_url.startswith("s3://") and self.aws_conn_id:
            client = s3_client_from_connection(self.aws_conn_id, max_connections=self.parallelism * 2)
        return open_store(self.store_url, s3_client=client, parallelism=self.parallelism, aws_conn_id=self.aws_conn_id)

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


def checkpoint_connection(location: str, aws_conn_id: str | None, *, max_connections: int = 16) -> Any:
    """How Airflow reaches a checkpoint location: the stream's `aws` connection for an S3
    checkpoint (`s3a://`: S3Hook's client); None otherwise (a local path needs none; an HDFS
    one is reached as the worker's Hadoop configuration says, as Spark reaches it)."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme

    if aws_conn_id and location_scheme(location) in ("s3", "s3a"):
        return s3_client_from_connection(aws_conn_id, max_connections=max_connections)
    return None


def open_checkpoint(location: str, aws_conn_id: str | None, *, max_connections: int = 16) -> CheckpointFS:
    """A checkpoint location's filesystem, opened with its Airflow connection: what a task
    passes to the engine, which never looks a connection up itself."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs

    return open_checkpoint_fs(location, connection=checkpoint_connection(location, aws_conn_id,
                                                                         max_connections=max_connections),
                              conn_id=aws_conn_id)
