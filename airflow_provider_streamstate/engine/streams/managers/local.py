"""Local mode (`--master local[*]`, or no master at all): the driver, and its executors as
threads, are the process spark-submit starts on this host. Nothing to submit and nothing to
ask a cluster: the launcher watches the process itself (engine/streams/processes.py)."""

from __future__ import annotations

from airflow_provider_streamstate.engine.streams.managers.base import ClusterManager


class LocalManager(ClusterManager):
    """`local`, `local[N]`, `local[*]`, `local[N,F]`, or no `--master` (spark-submit's default)."""

    name = "local"

    def accepts(self, master: str) -> bool:
        return master == "" or master.startswith("local")
