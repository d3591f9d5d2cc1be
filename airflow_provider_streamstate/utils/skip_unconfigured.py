"""DAG steps that run only when the run configures them: a scheduled DAG chains optional
steps (validation, replication, retention) and skips each whose Param is empty."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowSkipException


class SkipUnlessConfigured:
    """Mixin for an operator or sensor: skipped when any attribute named in `needs` (rendered
    from a Param) is empty, None or "None"."""

    needs: tuple[str, ...] = ()

    def execute(self, context: Context) -> Any:
        for name in self.needs:
            value = getattr(self, name)
            if not value or value == "None":
                raise AirflowSkipException(f"not configured: set the {name} param to run this step")
        return super().execute(context)  # type: ignore[misc]
