"""What the streamstate sensors share: engine errors as Airflow's (retry only what a retry
can fix), the deferrable path (poke once, then hand the waiting to a trigger that runs the
same engine check), and for sensors on one stream, the stream as a templated spec."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.base import ERROR, FAILED, SUCCESS, Check
from airflow_provider_streamstate.utils.configured_streams import stream_spec
from airflow_provider_streamstate.utils.task_errors import engine_errors

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS


class StreamstateSensor(BaseSensorOperator):
    """A sensor over one engine check, usable in poke, reschedule and deferrable mode:
    `check()` runs in the worker, `trigger()` runs the same check in the triggerer.

    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    def __init__(
        self, *, deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False), **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def check(self) -> Check:
        """One engine check (run in the worker; the trigger runs the same one)."""
        raise NotImplementedError

    def trigger(self) -> BaseTrigger:
        """The trigger that goes on checking in deferrable mode."""
        raise NotImplementedError

    def say(self, message: str) -> str:
        """A check's message as the task log and its errors show it."""
        return message

    def describe(self, result: Check) -> str:
        return self.say(result.message)

    def poke(self, context: Context) -> PokeReturnValue:
        with engine_errors():
            result = self.check()
        self.log.info("%s", self.describe(result))
        if result.outcome == "failed":
            raise AirflowFailException(self.say(result.message))
        return PokeReturnValue(result.outcome == "ready", result.to_json() if result.outcome == "ready" else None)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        with engine_errors():
            trigger = self.trigger()
        self.defer(timeout=timedelta(seconds=self.timeout), trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger fired: its result on success, else the error it names."""
        if not isinstance(event, dict) or event.get("status") not in (SUCCESS, FAILED, ERROR):
            raise AirflowException(f"{self.task_id}: the trigger sent an unexpected event {event!r}")
        message = self.say(str(event.get("message")))
        if event["status"] == FAILED:
            raise AirflowFailException(message)
        if event["status"] == ERROR:
            raise AirflowException(message)
        self.log.info("%s", message)
        return event.get("result")


class StreamSensorBase(StreamstateSensor):
    """A sensor on one stream, usable in poke, reschedule and deferrable mode.

    :param stream: the stream, a `StreamSpec` or its `to_dict()` (or that as JSON, e.g. from
        XCom) (templated).
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: tuple[str, ...] = ("stream",)

    def __init__(self, *, stream: StreamSpec | dict[str, Any] | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(stream, str) or "{{" not in stream:
            try:  # a mistake in a literal spec is a DAG import error, not a run-time failure
                StreamSpec.from_value(stream)
            except StreamstateError as exc:
                raise ValueError(f"{self.task_id}: {exc.one_line()}") from None
        self.stream = stream

    @property
    def spec(self) -> StreamSpec:
        """The rendered stream (not cached: templates render after construction)."""
        with engine_errors():
            return stream_spec(self.stream)

    def checkpoint(self) -> CheckpointFS:
        """The stream's checkpoint, opened with the spec's connection."""
        from airflow_provider_streamstate.hooks.store import open_checkpoint

        spec = self.spec
        with engine_errors():
            return open_checkpoint(spec.checkpoint, spec.storage_conn_id)

    def say(self, message: str) -> str:
        return f"stream {self.spec.name}: {message}"
