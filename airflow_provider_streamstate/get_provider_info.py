"""Provider metadata that Airflow's ProvidersManager reads through the entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Describe what the provider ships; validated against Airflow's provider_info schema."""
    from airflow_provider_streamstate import __version__

    return {
        "package-name": "airflow-provider-streamstate",
        "name": "streamstate",
        "description": (
            "State lifecycle for PySpark stateful streams: consistent snapshots of running "
            "streams, validation, restore, clones, cross-region replication and TTL cleanup."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "streamstate",
                "external-doc-url": "https://pypi.org/project/airflow-provider-streamstate/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "streamstate",
                "python-modules": [
                    "airflow_provider_streamstate.operators.approval",
                    "airflow_provider_streamstate.operators.base",
                    "airflow_provider_streamstate.operators.clones",
                    "airflow_provider_streamstate.operators.failover",
                    "airflow_provider_streamstate.operators.gc",
                    "airflow_provider_streamstate.operators.pipeline",
                    "airflow_provider_streamstate.operators.retention",
                    "airflow_provider_streamstate.operators.replicate",
                    "airflow_provider_streamstate.operators.rescale",
                    "airflow_provider_streamstate.operators.edit",
                    "airflow_provider_streamstate.operators.snapshot",
                    "airflow_provider_streamstate.operators.stream",
                    "airflow_provider_streamstate.operators.supervise",
                    "airflow_provider_streamstate.operators.validate",
                    "airflow_provider_streamstate.operators.bisect",
                    "airflow_provider_streamstate.operators.state",
                    "airflow_provider_streamstate.operators.lookup",
                ],
            }
        ],
        "extra-links": ["airflow_provider_streamstate.links.streams_ui.SnapshotLink"],
        "hooks": [
            {
                "integration-name": "streamstate",
                "python-modules": [
                    "airflow_provider_streamstate.hooks.kafka",
                    "airflow_provider_streamstate.hooks.store",
                    "airflow_provider_streamstate.backends.hdfs.hook",
                ],
            }
        ],
        # An HDFS store or checkpoint reached through an Airflow connection (backends/hdfs/hook.py).
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_streamstate.backends.hdfs.hook.StreamstateHdfsHook",
                "connection-type": "streamstate_hdfs",
            }
        ],
        "sensors": [
            {
                "integration-name": "streamstate",
                "python-modules": [
                    "airflow_provider_streamstate.sensors.base",
                    "airflow_provider_streamstate.sensors.kafka",
                    "airflow_provider_streamstate.sensors.replicate",
                    "airflow_provider_streamstate.sensors.stream",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "streamstate",
                "python-modules": [
                    "airflow_provider_streamstate.triggers.base",
                    "airflow_provider_streamstate.triggers.kafka",
                    "airflow_provider_streamstate.triggers.replicate",
                    "airflow_provider_streamstate.triggers.stream",
                ],
            }
        ],
        "plugins": [
            {
                "name": "streamstate",
                "plugin-class": "airflow_provider_streamstate.plugins.streams_plugin.StreamstatePlugin",
            }
        ],
        "config": {
            "streamstate": {
                "description": "Key lookups of the Streams pages and their JSON API, in the API server.",
                "options": {
                    "lookup_cache_mb": {
                        "description": "Memory for what key lookups read (decoded partitions, RocksDB "
                        "tables' indexes, filters and blocks), shared by all requests.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "512",
                        "default": "256",
                    },
                    "lookup_max_mb": {
                        "description": "The most one key request (a lookup, a live lookup, a key's "
                        "history) may read from its store or checkpoint; past it the request is "
                        "refused with HTTP 413 before the read.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "256",
                        "default": "64",
                    },
                },
            }
        },
    }
