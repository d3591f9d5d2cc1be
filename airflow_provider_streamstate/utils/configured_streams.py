"""Which streams a DAG works on: the run's `streams` param (a manual run with one's own
streams), else the Airflow Variable `streamstate_streams` (what the schedule uses). Each
is checked as a `StreamSpec` before any task touches a stream, so one typo fails the run
at once with its name, instead of one mapped task per stream later.

Secrets stay out of XCom and task logs: the specs a task returns carry their secrets
(confs, environment and options with sensitive names: engine/core/config/redact.py) as `***`,
and every task that resolves a spec registers its secrets with Airflow's secrets masker
and completes a redacted spec from the configured streams by its name.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_streamstate.engine.core.config.redact import REDACTED
from airflow_provider_streamstate.spec import StreamSpec

STREAMS_VARIABLE = "streamstate_streams"


def configured_streams(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The streams as redacted `StreamSpec.to_dict()`s. Runs inside a task (reads a
    Variable): skips the task when none is configured, fails it on an invalid spec."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from airflow_provider_streamstate.engine.core.errors import UsageError

    streams = _configured(params)
    if not streams:
        raise AirflowSkipException(f"no streams configured: set the Variable {STREAMS_VARIABLE} or the streams param")
    if not isinstance(streams, list):
        raise AirflowFailException(f"streams must be a list of stream specs, not {type(streams).__name__}")
    try:
        specs = [StreamSpec.from_value(s) for s in streams]
    except UsageError as exc:
        raise AirflowFailException(exc.one_line()) from exc
    for spec in specs:
        mask_secrets(spec)
    return [spec.redacted().to_dict() for spec in specs]


def stream_spec(value: StreamSpec | dict[str, Any] | str) -> StreamSpec:
    """The spec a task was given, with its secrets masked in the task's log; a redacted one
    (from XCom) completed from the configured streams by its name. Raises UsageError."""
    from airflow_provider_streamstate.engine.core.errors import UsageError

    spec = StreamSpec.from_value(value)
    if spec.is_redacted():
        found = [s for s in _configured_specs() if s.name == spec.name]
        if not found:
            raise UsageError(
                f"stream {spec.name} comes with its secrets redacted and is not among the configured streams",
                hint=f"add it to the Variable {STREAMS_VARIABLE} or the run's streams param, or pass its whole spec",
            )
        spec = found[0]
    mask_secrets(spec)
    return spec


def mask_secrets(spec: StreamSpec) -> None:
    """Register the spec's secret values with Airflow's secrets masker (task logs, rendered
    fields)."""
    from airflow.sdk.log import mask_secret

    for value in spec.secret_values():
        if value != REDACTED:
            mask_secret(value)


def _configured(params: dict[str, Any] | None) -> Any:
    from airflow.sdk import Variable

    return (params or {}).get("streams") or Variable.get(STREAMS_VARIABLE, default=[], deserialize_json=True)


def _configured_specs() -> list[StreamSpec]:
    """The streams of the running task's DAG run (its params, else the Variable); [] outside a task."""
    from airflow.sdk import get_current_context

    try:
        params = get_current_context().get("params")
    except Exception:  # noqa: BLE001 - not in a task: only the Variable
        params = None
    streams = _configured(dict(params) if params else None)
    if not isinstance(streams, list):
        return []
    out = []
    for s in streams:
        try:
            out.append(StreamSpec.from_value(s))
        except Exception:  # noqa: BLE001 - a bad entry is reported by configured_streams
            continue
    return out
