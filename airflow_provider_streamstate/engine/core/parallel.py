"""Bounded parallel transfers on threads (I/O and hashlib both release the GIL), cancellable.

Worker threads are daemons and run each item in a copy of the caller's context, whose
current `CancelToken` is a child of the caller's: `check_cancelled()` in a copy loop
stops an item within one chunk. The calling thread only waits, waking every
`POLL_SECONDS`, so Ctrl-C (and any exception a signal handler raises, such as an
Airflow task timeout) reaches it promptly. Then, or when the caller's token is
cancelled from another thread, nothing more is started, running items get
`GRACE_SECONDS` to notice and clean up (abort a multipart upload, remove a temp file),
and the interrupt (or `errors.Cancelled`) is raised without waiting any longer: daemon
threads do not hold the interpreter open at exit, as a ThreadPoolExecutor's would.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from airflow_provider_streamstate.engine.core.cancel import CancelToken, cancellation, current_token

T = TypeVar("T")
R = TypeVar("R")

POLL_SECONDS = 0.05
GRACE_SECONDS = 2.0


class _Run(Generic[T, R]):
    """The shared state of one `run_parallel` call: what to start next, results, first failure."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], token: CancelToken) -> None:
        self.fn = fn
        self.items = items
        self.token = token
        with cancellation(token):
            self.context = contextvars.copy_context()
        self.results: list[R | None] = [None] * len(items)
        self.failure: BaseException | None = None
        self.next = 0
        self.live = 0  # worker threads that have not exited
        self.cond = threading.Condition()

    def worker(self) -> None:
        try:
            while True:
                with self.cond:
                    if self.token.cancelled or self.next >= len(self.items):
                        return
                    i = self.next
                    self.next += 1
                try:
                    self.results[i] = self.context.copy().run(self.fn, self.items[i])
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    with self.cond:
                        if self.failure is None:
                            self.failure = exc
                    self.token.cancel(f"another item failed: {type(exc).__name__}")
                    return
        finally:
            with self.cond:
                self.live -= 1
                self.cond.notify_all()

    def wait(self, until: float | None, outer: CancelToken | None) -> bool:
        """Wait for every worker to exit (True), or until `until` / `outer` is cancelled (False)."""
        with self.cond:
            while self.live:
                if outer is not None and outer.cancelled:
                    return False
                timeout = POLL_SECONDS if until is None else min(POLL_SECONDS, until - time.monotonic())
                if timeout <= 0:
                    return False
                self.cond.wait(timeout)
            return True


def run_parallel(
    fn: Callable[[T], R], items: Sequence[T], parallelism: int, *, cancel: CancelToken | None = None
) -> list[R]:
    """`[fn(i) for i in items]` on up to `parallelism` threads, in order.

    The first failure stops what has not started, cancels running items, and is raised as
    is once they have stopped. `cancel` (default: the current token) stops everything:
    `errors.Cancelled` is raised. An exception raised in the calling thread while it waits
    (KeyboardInterrupt) cancels `cancel` too, and is raised after the grace period.
    """
    if not items:
        return []
    outer = cancel if cancel is not None else current_token()
    if outer is not None:
        outer.raise_if_cancelled()
    run: _Run[T, R] = _Run(fn, items, CancelToken(parent=outer))
    try:
        threads = max(1, min(parallelism, len(items)))
        for n in range(threads):
            with run.cond:
                run.live += 1
            threading.Thread(target=run.worker, name=f"streamstate-transfer-{n}", daemon=True).start()
        finished = run.wait(None, outer)
    except BaseException as exc:
        # Ctrl-C, a task timeout: stop the whole operation, let running items clean up, go.
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"interrupted by {type(exc).__name__}"
        run.token.cancel(reason)
        if outer is not None:
            outer.cancel(reason)
        run.wait(time.monotonic() + GRACE_SECONDS, None)
        raise
    if not finished:  # the caller's token was cancelled from another thread
        run.wait(time.monotonic() + GRACE_SECONDS, None)
    if outer is not None:
        outer.raise_if_cancelled()  # also when the work ended as the cancellation came
    if run.failure is not None:
        raise run.failure
    return run.results  # type: ignore[return-value]  # every slot was filled
