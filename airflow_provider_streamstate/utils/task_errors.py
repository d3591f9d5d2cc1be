"""Engine errors as Airflow task outcomes: bad input and corrupt data fail the task at once
(`AirflowFailException`, no retry: a retry cannot fix them); an unreachable store or broker
raises an ordinary error, which Airflow retries. The message is the engine's one line. A
missing optional dependency (pyspark, great_expectations, pandas: an extra not installed on
this worker) fails the same way, with the extra to install."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation
from airflow_provider_streamstate.engine.core.errors import StreamstateError, missing_extra_of


@contextmanager
def engine_errors() -> Iterator[None]:
    try:
        yield
    except StreamstateError as exc:
        if exc.retryable:
            raise AirflowException(exc.one_line()) from exc
        raise AirflowFailException(exc.one_line()) from exc
    except ModuleNotFoundError as exc:
        missing = missing_extra_of(exc)
        if missing is None:
            raise
        raise AirflowFailException(missing.one_line()) from None


class CancellableTask:
    """Mixin for operators that run engine work: `on_kill` (SIGTERM, execution_timeout)
    cancels it, so queued transfers stop and nothing is published."""

    _cancel_token: CancelToken | None = None

    @contextmanager
    def cancellable(self) -> Iterator[CancelToken]:
        self._cancel_token = CancelToken()
        with cancellation(self._cancel_token), engine_errors():
            yield self._cancel_token

    def on_kill(self) -> None:
        if self._cancel_token is not None:
            self._cancel_token.cancel("the task was killed")
