"""The HDFS backend: snapshot stores and checkpoints at `hdfs://namenode[:port]/path`,
reached through WebHDFS: with the client an Airflow connection gives (see `hook`), else the
NameNode that HADOOP_CONF_DIR names, as a Hadoop client finds it."""

from __future__ import annotations

from airflow_provider_streamstate.backends.hdfs.checkpoint import open_hdfs as open_hdfs_checkpoint
from airflow_provider_streamstate.backends.hdfs.store import open_hdfs as open_hdfs_store
from airflow_provider_streamstate.backends.hdfs.webhdfs import reach_from_spark_conf, reach_of
from airflow_provider_streamstate.engine.stores.backends import Backend

BACKEND = Backend(
    name="hdfs",
    store_schemes=("hdfs",),
    checkpoint_schemes=("hdfs",),
    open_store=open_hdfs_store,
    open_checkpoint=open_hdfs_checkpoint,
    reach=reach_of,
    reach_from_spark_conf=reach_from_spark_conf,
    store_example="hdfs://namenode:8020/path",
    checkpoint_example="hdfs://namenode:8020/path",
)
