"""The Spark session the engine's state jobs need (and the example stream, tests, demo and
benchmarks share), the state store setups a query can be started with, and Spark's state
data source on a checkpoint.

pyspark is imported inside the functions: the engine imports without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_streamstate.engine.checkpoint.reader import (
    HDFS_PROVIDER,
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
)
from airflow_provider_streamstate.engine.core.errors import missing_extra

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

# The three state store setups the engine supports. They are pinned into a checkpoint
# at batch 0, so they must be set before a query first starts.
STATE_STORES: dict[str, dict[str, str]] = {
    "hdfs": {PROVIDER_CONF: HDFS_PROVIDER},
    "rocksdb": {PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "false"},
    "rocksdb-changelog": {PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "true"},
}


def state_store_confs(name: str) -> dict[str, str]:
    try:
        return dict(STATE_STORES[name])
    except KeyError:
        raise ValueError(f"unknown state store {name!r}; choose one of {', '.join(STATE_STORES)}") from None


def require_pyspark(what: str) -> None:
    """MissingExtraError unless the full pyspark (the [spark] extra) is installed: the
    `pyspark` that the apache-spark provider 6.x brings (pyspark-client, Spark Connect only)
    imports, but starts no local Spark."""
    import importlib.metadata

    try:
        importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise missing_extra("pyspark", what) from None


def spark_session(
    app_name: str,
    jars: Sequence[str] = (),
    *,
    master: str | None = "local[2]",
    state_store: str = "rocksdb-changelog",
    shuffle_partitions: int = 4,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka connector jars on its classpath (no download).

    `master=None` leaves the master to spark-submit; a local master also binds the
    driver to loopback and turns the UI off (tests, demo, benchmarks).
    """
    require_pyspark(f"a local Spark session ({app_name})")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            # Python stateful operators (transformWithStateInPandas...) and UDFs run their
            # workers with this interpreter (the one with pandas and pyarrow), not whatever
            # `python3` is first on PATH: PySpark reads it from the environment only.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            for key, value in {
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "2g",
            }.items():
                builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in {**state_store_confs(state_store), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_state(spark: SparkSession, checkpoint: str, **options: object) -> DataFrame:
    """Spark's state data source on `checkpoint` (options: batchId, operatorId, storeName...).

    PySpark 4.1 cannot load a RocksDB store offline in a session that never touched
    streaming (`Cannot find endpoint StateStoreCoordinator`); reading `streams.active`
    first creates the coordinator.
    """
    _ = spark.streams.active
    reader = spark.read.format("statestore")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, str(value))
    return reader.load(checkpoint)
