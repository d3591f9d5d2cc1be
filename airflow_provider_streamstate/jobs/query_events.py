"""Streaming query events for a driver's own listeners, read from the JVM's event objects
field by field, only where a listener asks.

PySpark's StreamingQueryListener converts every event in full before a listener sees it,
in the listener bus's thread: the progress's maps become dicts through py4j iterators that
end by raising in the JVM, and PySpark's handler for each such exception resolves
`py4j.reflection.TypeUtil` by name again and again, each miss a lookup through every jar of
the classpath. Profiled (Java Flight Recorder) on the example stream, that took a third of
its driver's CPU, per batch and per listener, to fill fields the heartbeat never reads. The
views here answer, under PySpark's names, the attributes the runtime's listeners read
(jobs/runtime.py: `id`, `runId`, `name`, `exception`, `progress.id`, `progress.batchId`,
`progress.numInputRows`, `progress.durationMs.get`, `progress.stateOperators[i].numRowsTotal`),
so those listeners work with either; they are not PySpark's events in full.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

# The JVM interface PySpark's listener wrapper calls back into (Spark 3.4 to 4.3).
_JAVA_INTERFACE = "org.apache.spark.sql.streaming.PythonStreamingQueryListener"


def _option(value: Any) -> Any:
    """A Scala Option's value, or None."""
    return value.get() if value.isDefined() else None


class QueryEvent:
    """A query's started, idle or terminated event: its fields read on first access."""

    def __init__(self, jevent: Any) -> None:
        self._j = jevent

    @cached_property
    def id(self) -> str:  # noqa: A003 - PySpark's name
        return str(self._j.id().toString())

    @cached_property
    def runId(self) -> str:  # noqa: N802 - PySpark's name
        return str(self._j.runId().toString())

    @cached_property
    def name(self) -> str | None:
        return self._j.name()

    @cached_property
    def exception(self) -> str | None:
        """Why a terminated query failed (None: it stopped); a terminated event's only."""
        return _option(self._j.exception())


class StateOperatorView:
    """One stateful operator's progress in a batch."""

    def __init__(self, joperator: Any) -> None:
        self._j = joperator

    @cached_property
    def numRowsTotal(self) -> int:  # noqa: N802 - PySpark's name
        return int(self._j.numRowsTotal())


class DurationsView:
    """A batch's phase durations (ms) by name, read one key at a time from the JVM's map:
    `get` and `in`, as the listeners use PySpark's dict."""

    def __init__(self, jmap: Any) -> None:
        self._j = jmap

    def __contains__(self, phase: object) -> bool:
        return bool(self._j.containsKey(phase))

    def get(self, phase: str, default: int | None = None) -> int | None:
        value = self._j.get(phase)  # one call: the map holds no nulls, so None is "absent"
        return default if value is None else int(value)


class ProgressView:
    """A batch's progress (StreamingQueryProgress): the fields the runtime's listeners read."""

    def __init__(self, jprogress: Any) -> None:
        self._j = jprogress

    @cached_property
    def id(self) -> str:  # noqa: A003 - PySpark's name
        return str(self._j.id().toString())

    @cached_property
    def batchId(self) -> int:  # noqa: N802 - PySpark's name
        return int(self._j.batchId())

    @cached_property
    def numInputRows(self) -> int:  # noqa: N802 - PySpark's name
        return int(self._j.numInputRows())

    @cached_property
    def durationMs(self) -> DurationsView:  # noqa: N802 - PySpark's name
        return DurationsView(self._j.durationMs())

    @cached_property
    def stateOperators(self) -> list[StateOperatorView]:  # noqa: N802 - PySpark's name
        operators = self._j.stateOperators()
        return [StateOperatorView(operators[i]) for i in range(len(operators))]


class ProgressEvent:
    """A batch's progress event."""

    def __init__(self, jevent: Any) -> None:
        self.progress = ProgressView(jevent.progress())


class _Forwarder:
    """The Python object the JVM calls (it implements Spark's Python listener interface):
    hands each event to `listener` as a view."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 - the Java interface's names
        self.listener.onQueryStarted(QueryEvent(jevent))

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        self.listener.onQueryProgress(ProgressEvent(jevent))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        self.listener.onQueryIdle(QueryEvent(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        self.listener.onQueryTerminated(QueryEvent(jevent))

    class Java:
        implements = [_JAVA_INTERFACE]


def light_listener_base() -> type:
    """A StreamingQueryListener base class whose subclasses receive the views above.

    PySpark's `addListener` and `removeListener` register the JVM object a listener's
    `_jlistener` gives (PySpark 3.4 to 4.3); this one wraps `_Forwarder` instead of
    PySpark's converting forwarder. Should a PySpark line not ask `_jlistener`, the
    listener gets PySpark's own events, which answer the same attributes."""
    from pyspark.sql.streaming import StreamingQueryListener

    class LightListener(StreamingQueryListener):
        @property
        def _jlistener(self) -> Any:
            if not hasattr(self, "_jlistenerobj"):
                from pyspark import SparkContext

                self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(  # type: ignore[union-attr]  # noqa: SLF001
                    _Forwarder(self)
                )
            return self._jlistenerobj

    return LightListener
