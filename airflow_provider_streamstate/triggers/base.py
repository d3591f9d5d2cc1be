"""The polling loop the streamstate triggers share: one engine check per `poke_interval`,
run in a thread (engine calls block), until the check decides; then exactly one event.

Events are `{"status": "success" | "failed" | "error", "message": str, "result": dict | None}`:
`success` carries the sensor's XCom in `result` (a `failed` check's, what it saw); `failed` means waiting longer cannot help
(the stream is dead, or the input is wrong), so the task fails without retry; `error` is a
failure a retry may fix (an unreachable broker). A trigger keeps no state between checks,
so running it twice (triggerer failover) decides alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_streamstate.engine.core.errors import StreamstateError

SUCCESS, FAILED, ERROR = "success", "failed", "error"


class Check(Protocol):
    """An engine check's result (`engine.streams.health.ProgressCheck`, `LagCheck`)."""

    @property
    def outcome(self) -> str: ...

    @property
    def message(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


def event(status: str, message: str, result: dict[str, Any] | None = None) -> TriggerEvent:
    return TriggerEvent({"status": status, "message": message, "result": result})


async def poll(
    trigger: BaseTrigger, check: Callable[[], Check], poke_interval: float,
    describe: Callable[[Check], str] | None = None,
) -> AsyncIterator[TriggerEvent]:
    """Run `check` in a thread every `poke_interval` seconds; yield one event once it is
    READY or FAILED, or raises."""
    while True:
        try:
            result = await asyncio.to_thread(check)
        except StreamstateError as exc:
            yield event(ERROR if exc.retryable else FAILED, exc.one_line())
            return
        except Exception as exc:  # unknown: let a retry try again, and say what it was
            yield event(ERROR, f"{type(exc).__name__}: {exc}")
            return
        trigger.log.info("%s", describe(result) if describe else result.message)
        if result.outcome == "ready":
            yield event(SUCCESS, result.message, result.to_json())
            return
        if result.outcome == "failed":
            yield event(FAILED, result.message, result.to_json())
            return
        await asyncio.sleep(poke_interval)
