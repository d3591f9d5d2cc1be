"""Operator and sensor arguments that were renamed: a DAG file written before the rename
still passes the old name (engine/core/config/renamed.py lists them). The old names stay in
the operators' signatures, so that `default_args`, `.partial()` and `.expand()` take them."""

from __future__ import annotations

from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_streamstate.engine.core.config.renamed import renamed_value

# The snapshot DAGs' DR store connection: their param, or a run conf written before the rename.
DR_STORAGE_CONN = "{{ params.dr_storage_conn_id or params.get('dr_aws_conn_id') or None }}"


def current_argument(new: str, current: Any, old_value: Any, *, owner: str) -> Any:
    """The argument `new`, or what the caller passed under its old name (with Airflow's
    deprecation warning for providers' renamed arguments)."""
    return renamed_value(new, current, old_value, owner=owner, category=AirflowProviderDeprecationWarning,
                         stacklevel=4)
