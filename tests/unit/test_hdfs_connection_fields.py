"""An Airflow HDFS connection (`streamstate_hdfs`, or the apache-hdfs provider's `webhdfs`)
becomes a WebHDFS client of the NameNode(s) it names: an HA pair's hosts comma-separated, the
port (9870, or 9871 with SSL when none is given), the HDFS user, HTTPS and its certificate
check from the extra; a connection naming no NameNode, or an invalid RPC port, is refused in
one line. A Spark application is given the connection's NameNodes as a nameservice of the
name only the connection resolves, and its HDFS user."""

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


def test_a_spark_application_is_given_the_connections_namenodes_as_a_nameservice_and_its_user(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_streamstate.backends.hdfs.webhdfs import reach_from_spark_conf, spark_access

    (tmp_path / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.nameservices</name><value>lake</value></property></configuration>")
    submit_env = {"HADOOP_CONF_DIR": str(tmp_path)}  # spark-submit's: its nameservice stays listed
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    client = webhdfs_client(Connection(conn_id="hdfs_prod", conn_type="streamstate_hdfs", login="etl",
                                       host="nn1.example.com,nn2.example.com", extra='{"rpc_port": 8021}'))
    confs, env = spark_access(client, "warehouse", submit_env)
    p = "spark.hadoop."
    assert env == {"HADOOP_USER_NAME": "etl"}
    assert confs == {
        p + "dfs.nameservices": "lake,warehouse",
        p + "dfs.ha.namenodes.warehouse": "nn0,nn1",
        p + "dfs.client.failover.proxy.provider.warehouse":
            "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider",
        p + "dfs.namenode.rpc-address.warehouse.nn0": "nn1.example.com:8021",
        p + "dfs.namenode.rpc-address.warehouse.nn1": "nn2.example.com:8021",
        "spark.streamstate.webhdfs.warehouse.urls":
            "http://nn1.example.com:9870/webhdfs/v1,http://nn2.example.com:9870/webhdfs/v1",
        "spark.streamstate.webhdfs.warehouse.verify": "true",
    }
    # The application's driver opens the same NameNodes from its conf, as the user Spark runs it as.
    monkeypatch.setenv("SPARK_USER", "etl")
    access = reach_from_spark_conf(confs.get, "hdfs://warehouse/streams/store")
    assert access is not None and access.connection().urls == client.urls and access.user == "etl"
    # An authority with a port is an address Spark reaches by itself: no Hadoop property,
    # the user, and for the engine in the driver the connection's WebHDFS URLs (its HTTP
    # port is not the RPC port's default pair).
    confs, env = spark_access(client, "nn1.example.com:8020")
    assert env == {"HADOOP_USER_NAME": "etl"} and not any(k.startswith(p) for k in confs)
    access = reach_from_spark_conf(confs.get, "hdfs://nn1.example.com:8020/streams/ckpt")
    assert access is not None and access.connection().urls == client.urls


def test_a_client_of_the_hadoop_configuration_gives_an_application_nothing(tmp_path) -> None:
    """No connection: the application has the same configuration, and whatever user its
    environment names (a worker's own HADOOP_USER_NAME is not forced on it)."""
    from airflow_provider_streamstate.backends.hdfs.webhdfs import WebHdfs, spark_access

    client = WebHdfs(["http://nn1.example.com:9870/webhdfs/v1"], user="airflow")
    assert client.rpc_port is None and spark_access(client, "warehouse") == ({}, {})


def test_https_and_its_certificate_check_reach_the_applications_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_streamstate.backends.hdfs.webhdfs import reach_from_spark_conf, spark_access

    for verify, sent, read in (("false", "false", False), ("/etc/ssl/ca.pem", "true", True)):
        client = webhdfs_client(Connection(conn_id="hdfs_tls", conn_type="streamstate_hdfs", host="nn1,[fe80::1]",
                                           login="etl", extra=f'{{"use_ssl": true, "verify": "{verify}"}}'))
        confs, _ = spark_access(client, "secure")
        assert confs["spark.streamstate.webhdfs.secure.verify"] == sent
        assert confs["spark.hadoop.dfs.namenode.rpc-address.secure.nn1"] == "[fe80::1]:8020"
        access = reach_from_spark_conf(confs.get, "hdfs://secure/x")
        assert access is not None and access.verify is read
        assert access.urls == ("https://nn1:9871/webhdfs/v1", "https://[fe80::1]:9871/webhdfs/v1")


def test_an_invalid_rpc_port_is_refused_in_one_line() -> None:
    for bad in ('"eighty"', "70000", "-1"):
        with pytest.raises(UsageError, match="'hdfs_bad' has an invalid rpc_port"):
            webhdfs_client(Connection(conn_id="hdfs_bad", conn_type="streamstate_hdfs", host="nn",
                                      extra=f'{{"rpc_port": {bad}}}'))


def test_a_job_on_a_connections_hdfs_checkpoint_gets_its_namenodes_and_user_where_the_caller_set_none(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the launcher and the engine's jobs add to a spark-submit command for the
    checkpoint they work on: the caller's own conf or HADOOP_USER_NAME wins; a checkpoint the
    application reaches by its own configuration (a local one) adds nothing."""
    from airflow_provider_streamstate.backends.hdfs.checkpoint import open_hdfs
    from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
    from airflow_provider_streamstate.engine.streams.command import conf_value, with_checkpoint_access

    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    client = webhdfs_client(Connection(conn_id="hdfs_prod", conn_type="streamstate_hdfs", login="etl",
                                       host="nn1,nn2", extra='{"rpc_port": 8021}'))
    fs = open_hdfs("hdfs://warehouse/streams/orders", client)
    command = ["spark-submit", "--conf", "spark.sql.shuffle.partitions=4", "app.py"]
    argv, env, given = with_checkpoint_access(command, {}, fs)
    assert given and env == {"HADOOP_USER_NAME": "etl"} and argv[-1] == "app.py"
    assert conf_value(argv, "spark.hadoop.dfs.nameservices") == "warehouse"
    assert conf_value(argv, "spark.hadoop.dfs.namenode.rpc-address.warehouse.nn1") == "nn2:8021"
    assert conf_value(argv, "spark.streamstate.webhdfs.warehouse.urls") == \
        "http://nn1:9870/webhdfs/v1,http://nn2:9870/webhdfs/v1"
    assert with_checkpoint_access(command, {"HADOOP_USER_NAME": "ops"}, fs)[1] == {"HADOOP_USER_NAME": "ops"}
    # The caller's own Hadoop properties for the service win whole: none of the generated group
    # is mixed with them (the engine's own URLs still go to its driver).
    own = ["spark-submit", "--conf", "spark.hadoop.dfs.ha.namenodes.warehouse=a,b", "app.py"]
    argv, _, _ = with_checkpoint_access(own, {}, fs)
    assert [a for a in argv if a.startswith("spark.hadoop.")] == ["spark.hadoop.dfs.ha.namenodes.warehouse=a,b"]
    assert conf_value(argv, "spark.streamstate.webhdfs.warehouse.verify") == "true"
    local = open_checkpoint_fs(str(tmp_path / "ckpt"))
    assert with_checkpoint_access(command, {"A": "1"}, local) == (command, {"A": "1"}, False)


def test_a_nameservice_spark_submits_hadoop_configuration_defines_keeps_its_namenodes(tmp_path) -> None:
    """A connection to a service the cluster's own Hadoop configuration names (an HA pair
    it lists, or a gateway the connection points at): the application reaches it as that
    configuration says; only the user and the engine's WebHDFS URLs are given."""
    from airflow_provider_streamstate.backends.hdfs.webhdfs import spark_access

    (tmp_path / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.nameservices</name><value>prodns</value></property>"
        "<property><name>dfs.namenode.rpc-address.other.nn1</name><value>nn9:8020</value></property>"
        "</configuration>")
    client = webhdfs_client(Connection(conn_id="hdfs_gw", conn_type="streamstate_hdfs", login="etl",
                                       host="httpfs.example.com", port=14000, extra='{"rpc_port": 8020}'))
    for authority in ("prodns", "other"):
        confs, env = spark_access(client, authority, {"HADOOP_CONF_DIR": str(tmp_path)})
        assert env == {"HADOOP_USER_NAME": "etl"}
        assert sorted(confs) == [f"spark.streamstate.webhdfs.{authority}.urls",
                                 f"spark.streamstate.webhdfs.{authority}.verify"]


def test_a_yarn_application_is_watched_killed_and_cleaned_up_as_the_user_that_submitted_it(tmp_path) -> None:
    """spark-submit runs as HADOOP_USER_NAME (a connection's login) where it is set: the
    ResourceManager's requests and the staging directory's removal act as that user."""
    import getpass

    from airflow_provider_streamstate.backends.hdfs.checkpoint import open_hdfs
    from airflow_provider_streamstate.engine.streams.managers.yarn import staging_base, submitting_user

    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nn1:8020</value></property></configuration>")
    env = {"HADOOP_CONF_DIR": str(tmp_path), "HADOOP_USER_NAME": "etl"}
    assert submitting_user(env) == "etl" and submitting_user({}) == getpass.getuser()
    assert staging_base(["spark-submit", "--master", "yarn", "app.py"], env) == "hdfs://nn1:8020/user/etl"
    staging = open_hdfs("hdfs://nn1:8020/user/etl/.sparkStaging/application_1_0001", client=None)
    as_etl = staging.as_user("etl")
    assert as_etl.client.user == "etl" and as_etl.location == staging.location
    assert staging.as_user(staging.client.user) is staging
