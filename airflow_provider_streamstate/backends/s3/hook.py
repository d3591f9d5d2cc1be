"""How an Airflow connection reaches the S3 backend: a boto3 client from the amazon
provider's S3Hook, so the endpoint, region, role assumption and credentials are the
connection's, never the code's. Found through the `streamstate.airflow_connections` entry
point group (hooks/store.py)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_streamstate.backends.s3.clients import cached_client, client_config
from airflow_provider_streamstate.backends.s3.errors import client_error
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError


def s3_client_from_connection(aws_conn_id: str, *, max_connections: int = 16) -> Any:
    """`S3Hook(aws_conn_id=...).get_conn()` with the engine's pool size and retries under the
    connection's own `config_kwargs`; an unknown connection id is an error (S3Hook would
    silently fall back to no connection)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(aws_conn_id)
    except AirflowNotFoundException:
        raise UsageError(
            f"Airflow connection {aws_conn_id!r} does not exist",
            hint=f"define it (an AIRFLOW_CONN_{aws_conn_id.upper()} environment variable, or in Airflow's "
            "connections or secrets backend), or fix the connection id",
        ) from None
    def build() -> Any:
        wrapper = S3Hook(aws_conn_id=aws_conn_id).conn_config
        config = client_config(max_connections, path_style=bool(wrapper.get_service_endpoint_url("s3")))
        if wrapper.botocore_config is not None:
            config = config.merge(wrapper.botocore_config)
        return S3Hook(aws_conn_id=aws_conn_id, config=config).get_conn()

    # Sensors, triggers and the Streams pages open the same connection on every poll or
    # request: its client is kept per process while the connection's content is the same.
    content = tuple(str(v) for v in (conn.conn_type, conn.host, conn.login, conn.password, conn.schema, conn.port,
                                     conn.extra))
    try:
        return cached_client(("connection", aws_conn_id, content, max_connections), build)
    except StreamstateError:
        raise
    except Exception as exc:  # noqa: BLE001 - building a client fails only on configuration
        raise client_error(exc, conn_id=aws_conn_id) from None


def connect(conn_id: str, *, max_connections: int = 16) -> Any:
    """The S3 client of an Airflow `aws` connection: what the S3 backend takes as its connection."""
    return s3_client_from_connection(conn_id, max_connections=max_connections)
