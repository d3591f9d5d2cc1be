"""The cluster managers a spark-submit command can name, chosen by its master.

Adding one: a module here with a `ClusterManager` subclass (managers/base.py says what each
method must do) and its line in `MANAGERS`. Nothing outside this package compares master
strings or deploy modes.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.command import master_of
from airflow_provider_streamstate.engine.streams.managers.base import (
    AppReport,
    ClusterApp,
    ClusterManager,
    Prepared,
)
from airflow_provider_streamstate.engine.streams.managers.kubernetes import KubernetesManager
from airflow_provider_streamstate.engine.streams.managers.local import LocalManager
from airflow_provider_streamstate.engine.streams.managers.standalone import StandaloneManager
from airflow_provider_streamstate.engine.streams.managers.yarn import YarnManager

__all__ = ["AppReport", "ClusterApp", "ClusterManager", "MANAGERS", "Prepared", "manager_for", "manager_named"]

MANAGERS: tuple[ClusterManager, ...] = (
    YarnManager(),
    KubernetesManager(),
    StandaloneManager(),
    LocalManager(),
)


def manager_for(command: Sequence[str]) -> ClusterManager:
    """The manager of `command`'s master; UsageError naming the master when none accepts it."""
    master = master_of(command)
    for manager in MANAGERS:
        if manager.accepts(master):
            return manager
    raise UsageError(f"unsupported Spark master {master!r}",
                     hint=f"use one of: {', '.join(m.name for m in MANAGERS)} (local[*], spark://, yarn, k8s://)")


def manager_named(name: str) -> ClusterManager:
    """The manager a launch record names (ValueError for an unknown one: the record is unreadable)."""
    for manager in MANAGERS:
        if manager.name == name:
            return manager
    raise ValueError(f"unknown cluster manager {name!r}")
