"""Wait, in the triggerer, for a stream to make progress (`StreamProgressSensor` deferred)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_streamstate.engine.streams.health import ProgressCheck, check_progress
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.base import poll


class StreamProgressTrigger(BaseTrigger):
    """Fires once the stream has committed a batch after `after_batch` (and, with
    `freshness_s`, recently enough), or at once when it is dead, stopped or failed.

    :param stream: the stream, as `StreamSpec.to_dict()`.
    :param after_batch: wait for a committed batch newer than this one (None: any batch).
    :param freshness_s: and committed at most this many seconds ago (None: any time).
    :param poke_interval: seconds between two checks.
    """

    def __init__(
        self, stream: dict[str, Any], after_batch: int | None = None, freshness_s: float | None = None,
        poke_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.stream = stream
        self.after_batch = after_batch
        self.freshness_s = freshness_s
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"stream": self.stream, "after_batch": self.after_batch, "freshness_s": self.freshness_s,
             "poke_interval": self.poke_interval},
        )

    def check(self) -> ProgressCheck:
        from airflow_provider_streamstate.hooks.store import open_checkpoint

        spec = StreamSpec.from_value(self.stream)
        return check_progress(open_checkpoint(spec.checkpoint, spec.storage_conn_id), after_batch=self.after_batch,
                              freshness_s=self.freshness_s)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        name = self.stream.get("name") if isinstance(self.stream, dict) else None
        async for ev in poll(self, self.check, self.poke_interval, lambda r: f"stream {name}: {r.message}"):
            yield ev
