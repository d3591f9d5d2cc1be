"""Spark's standalone cluster manager (`--master spark://host:7077`): executors on the
cluster's workers, the driver in the process spark-submit starts here. Spark runs no Python
application in cluster deploy mode on a standalone master (spark-submit refuses it), so
neither does the launcher: it says so before anything is submitted."""

from __future__ import annotations

from airflow_provider_streamstate.engine.streams.managers.base import ClusterManager


class StandaloneManager(ClusterManager):
    """`spark://host:port` (several masters: `spark://a:7077,b:7077`)."""

    name = "standalone"

    def accepts(self, master: str) -> bool:
        return master.startswith("spark://")
