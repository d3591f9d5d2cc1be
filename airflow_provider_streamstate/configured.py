"""Which streams a DAG works on: the run's `streams` param (a manual run with one's own
streams), else the Airflow Variable `streamstate_streams` (what the schedule uses). Each
is checked as a `StreamSpec` before any task touches a stream, so one typo fails the run
at once with its name, instead of one mapped task per stream later."""

from __future__ import annotations

from typing import Any

STREAMS_VARIABLE = "streamstate_streams"


def configured_streams(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The streams as `StreamSpec.to_dict()`s. Runs inside a task (reads a Variable):
    skips the task when none is configured, fails it on an invalid spec."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from airflow_provider_streamstate.engine.core.errors import UsageError
    from airflow_provider_streamstate.spec import StreamSpec

    streams = (params or {}).get("streams") or Variable.get(STREAMS_VARIABLE, default=[], deserialize_json=True)
    if not streams:
        raise AirflowSkipException(f"no streams configured: set the Variable {STREAMS_VARIABLE} or the streams param")
    if not isinstance(streams, list):
        raise AirflowFailException(f"streams must be a list of stream specs, not {type(streams).__name__}")
    try:
        return [StreamSpec.from_value(s).to_dict() for s in streams]
    except UsageError as exc:
        raise AirflowFailException(exc.one_line()) from exc
