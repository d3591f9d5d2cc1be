"""How an Airflow connection reaches the HDFS backend: a WebHDFS client of the NameNode(s)
the connection names, as the user it names, so an HDFS store or checkpoint needs no Hadoop
configuration on the worker. Found through the `streamstate.airflow_connections` entry
point group (hooks/store.py).

The connection type is ours, `streamstate_hdfs` (registered in get_provider_info.py), with
the fields of the apache-hdfs provider's `webhdfs` type, whose connections are read the same
way: host = the NameNode host, or the hosts of an HA pair comma-separated (the active one
answers); port = their WebHDFS port (9870, 9871 with SSL); login = the HDFS user (simple
authentication, as HADOOP_USER_NAME); extra `use_ssl` (HTTPS), `verify` (false, or a CA
bundle's path) and `rpc_port` (the NameNodes' RPC port, default 8020: what a Spark
application of this package is given to reach a nameservice only the connection resolves,
`webhdfs.spark_access`). That provider's hook is not used: it hands out an HdfsCLI client, whose
writes and renames hide the create-only semantics the stores rely on, and it would bring
HdfsCLI and its Kerberos and Avro extras into every installation.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_streamstate.backends.hdfs.webhdfs import (
    DEFAULT_HTTP_PORT,
    DEFAULT_HTTPS_PORT,
    DEFAULT_RPC_PORT,
    WebHdfs,
)
from airflow_provider_streamstate.engine.core.errors import UsageError

CONN_TYPES = ("streamstate_hdfs", "webhdfs")


def _flag(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _has_port(host: str) -> bool:
    """`nn1:50070` and `[fe80::1]:50070` name their port; `nn1` and `[fe80::1]` do not."""
    try:
        return urllib.parse.urlsplit(f"//{host}").port is not None
    except ValueError:
        return False


def webhdfs_client(conn: Any) -> WebHdfs:
    """The WebHDFS client of an Airflow connection of one of `CONN_TYPES`."""
    hosts = [h.strip() for h in (conn.host or "").split(",") if h.strip()]
    if not hosts:
        raise UsageError(f"Airflow connection {conn.conn_id!r} names no NameNode",
                         hint="set its host to the NameNode's host (an HA pair: both, comma-separated)")
    extra = conn.extra_dejson
    ssl = _flag(extra.get("use_ssl", False))
    port = conn.port or (DEFAULT_HTTPS_PORT if ssl else DEFAULT_HTTP_PORT)
    verify = extra.get("verify", True)
    if not isinstance(verify, bool) and str(verify).strip().lower() in ("true", "false"):
        verify = _flag(verify)
    urls = [f"{'https' if ssl else 'http'}://{h}{'' if _has_port(h) else f':{port}'}/webhdfs/v1" for h in hosts]
    try:
        rpc_port = int(extra.get("rpc_port") or DEFAULT_RPC_PORT)
    except (TypeError, ValueError):
        rpc_port = 0
    if not 0 < rpc_port < 65536:
        raise UsageError(f"Airflow connection {conn.conn_id!r} has an invalid rpc_port {extra.get('rpc_port')!r}",
                         hint="set its extra rpc_port to the NameNodes' RPC port (8020 by default)")
    return WebHdfs(urls, user=conn.login or None, verify=verify, rpc_port=rpc_port)


def connect(conn_id: str, *, max_connections: int = 16) -> WebHdfs | None:
    """The WebHDFS client of Airflow connection `conn_id`; None when it is not an HDFS
    connection (an `aws` one given for a stream's S3 store, say: then the worker's Hadoop
    configuration reaches HDFS)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = StreamstateHdfsHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise UsageError(
            f"Airflow connection {conn_id!r} does not exist",
            hint=f"define it (an AIRFLOW_CONN_{conn_id.upper()} environment variable, or in Airflow's "
            "connections or secrets backend), or fix the connection id",
        ) from None
    if conn.conn_type not in CONN_TYPES:
        return None
    return webhdfs_client(conn)


class StreamstateHdfsHook(BaseHook):
    """An HDFS cluster reached through WebHDFS: the `streamstate_hdfs` connection type.

    :param hdfs_conn_id: the Airflow connection naming the NameNode(s) and the HDFS user.
    """

    conn_name_attr = "hdfs_conn_id"
    default_conn_name = "streamstate_hdfs_default"
    conn_type = "streamstate_hdfs"
    hook_name = "streamstate HDFS (WebHDFS)"

    def __init__(self, hdfs_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.hdfs_conn_id = hdfs_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "password"],
            "relabeling": {"host": "NameNode host(s), comma-separated", "port": "WebHDFS port",
                           "login": "HDFS user"},
            "placeholders": {"host": "namenode1.example.com,namenode2.example.com", "port": "9870",
                             "login": "hdfs user (simple authentication)",
                             "extra": '{"use_ssl": false, "verify": true, "rpc_port": 8020}'},
        }

    def get_conn(self) -> WebHdfs:
        return webhdfs_client(self.get_connection(self.hdfs_conn_id))

    def test_connection(self) -> tuple[bool, str]:
        """Reach the NameNode and stat the root; never raises."""
        try:
            client = self.get_conn()
            client.status("/")
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return False, f"{type(exc).__name__}: {exc}"
        return True, f"reached {client.urls[0]} as {client.user}"
