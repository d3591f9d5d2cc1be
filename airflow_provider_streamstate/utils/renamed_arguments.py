"""Operator and sensor arguments that were renamed: a DAG file written before the rename
still passes the old name (engine/core/config/renamed.py lists them)."""

from __future__ import annotations

from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_streamstate.engine.core.config.renamed import renamed_argument


def current_argument(kwargs: dict[str, Any], new: str, current: Any, *, owner: str) -> Any:
    """The argument `new`, or what the caller passed under its old name (popped from `kwargs`,
    with Airflow's deprecation warning for providers' renamed arguments)."""
    return renamed_argument(kwargs, new, current, owner=owner, category=AirflowProviderDeprecationWarning)
