"""Wait for a stream to make progress; fail fast when it is dead or its query failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.health import ProgressCheck, check_progress
from airflow_provider_streamstate.sensors.base import StreamSensorBase
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.stream import StreamProgressTrigger


class StreamProgressSensor(StreamSensorBase):
    """Succeeds when the stream has committed a batch newer than `after_batch` and, with
    `freshness`, committed it within that window. Fails without retry as soon as the
    stream cannot progress: its heartbeat went stale, its driver process is gone (on this
    host), or its query stopped or failed (the message names the exception, and the
    driver log's last error line when the launcher recorded the log). Returns
    `{"batch_id", "state", "heartbeat_age_s", "progress_age_s"}`, where `state` is the
    launcher's (absent, starting, running, stopped, failed or dead).

    :param stream: the stream, a `StreamSpec` or its `to_dict()` (templated).
    :param after_batch: wait for a committed batch newer than this id, e.g. the batch a
        restore resumed from; None waits for any committed batch (templated).
    :param freshness: and committed no longer ago than this (a `timedelta` or seconds).
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: tuple[str, ...] = ("stream", "after_batch")

    def __init__(
        self, *, stream: StreamSpec | dict[str, Any] | str, after_batch: int | str | None = None,
        freshness: timedelta | float | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(stream=stream, **kwargs)
        self.after_batch = after_batch
        seconds = freshness.total_seconds() if isinstance(freshness, timedelta) else freshness
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0):
            raise ValueError(f"{self.task_id}: freshness must be a positive timedelta or number of seconds, not {freshness!r}")
        self.freshness_s = float(seconds) if seconds is not None else None

    def batch(self) -> int | None:
        """`after_batch` as rendered: an int, its text, or None / "" / "None"."""
        value = self.after_batch
        if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
            return None
        try:
            batch = int(value)
        except (TypeError, ValueError):
            batch = -1
        if isinstance(value, bool) or batch < 0 or (isinstance(value, float) and value != batch):
            raise UsageError(f"after_batch must be a batch id >= 0, got {value!r}",
                             hint="pass an int or a template that renders one, such as a snapshot's batch_id")
        return batch

    def check(self) -> ProgressCheck:
        return check_progress(self.checkpoint(), after_batch=self.batch(), freshness_s=self.freshness_s)

    def trigger(self) -> StreamProgressTrigger:
        return StreamProgressTrigger(
            stream=self.spec.redacted().to_dict(), after_batch=self.batch(), freshness_s=self.freshness_s,
            poke_interval=self.poke_interval,
        )
