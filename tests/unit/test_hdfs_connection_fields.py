"""An Airflow HDFS connection (`streamstate_hdfs`, or the apache-hdfs provider's `webhdfs`)
becomes a WebHDFS client of the NameNode(s) it names: an HA pair's hosts comma-separated, the
port (9870, or 9871 with SSL when none is given), the HDFS user, HTTPS and its certificate
check from the extra; a connection naming no NameNode is refused in one line."""

from __future__ import annotations

import pytest
from airflow.models.connection import Connection

from airflow_provider_streamstate.backends.hdfs.hook import webhdfs_client
from airflow_provider_streamstate.engine.core.errors import UsageError


def test_an_ha_pair_with_its_user_becomes_one_client_trying_both_namenodes() -> None:
    conn = Connection(conn_id="hdfs_prod", conn_type="streamstate_hdfs", host="nn1.example.com, nn2.example.com",
                      port=50070, login="etl")
    client = webhdfs_client(conn)
    assert client.urls == ["http://nn1.example.com:50070/webhdfs/v1", "http://nn2.example.com:50070/webhdfs/v1"]
    assert (client.user, client.verify) == ("etl", True)


def test_ssl_takes_the_https_port_and_the_extras_certificate_check() -> None:
    conn = Connection(conn_id="hdfs_tls", conn_type="webhdfs", host="nn1.example.com",
                      extra='{"use_ssl": "True", "verify": "/etc/ssl/ca.pem"}')
    client = webhdfs_client(conn)
    assert client.urls == ["https://nn1.example.com:9871/webhdfs/v1"] and client.verify == "/etc/ssl/ca.pem"
    off = webhdfs_client(Connection(conn_id="x", conn_type="webhdfs", host="nn", extra='{"use_ssl": true, "verify": "false"}'))
    assert off.verify is False and off.urls == ["https://nn:9871/webhdfs/v1"]


def test_a_connection_naming_no_namenode_is_refused() -> None:
    with pytest.raises(UsageError, match="'empty' names no NameNode"):
        webhdfs_client(Connection(conn_id="empty", conn_type="streamstate_hdfs"))
