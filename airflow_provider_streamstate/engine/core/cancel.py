"""Cooperative cancellation: Ctrl-C, an Airflow task timeout or `on_kill` stop an operation promptly.

Python delivers signals to the main thread only, and a thread cannot be killed, so work
running on other threads stops by asking: a `CancelToken` is cancelled from anywhere
(a signal handler, another thread), and loops that move bytes call `check_cancelled()`
once per chunk, which raises `errors.Cancelled` in the thread doing the work. The
current token lives in a context variable, so callees deep in a store need no extra
argument, and `run_parallel` copies the caller's context into its worker threads.

    token = CancelToken()
    with cancellation(token):        # on_kill: token.cancel("task killed")
        create_snapshot(...)         # raises Cancelled; nothing is published
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from airflow_provider_streamstate.engine.core.errors import Cancelled


class CancelToken:
    """A one-way flag: once cancelled, stays cancelled. Safe to use from any thread.

    A token made with a `parent` is cancelled when its parent is (never the other way
    round), so one part of an operation can be stopped without stopping the whole.
    """

    def __init__(self, parent: CancelToken | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._children: weakref.WeakSet[CancelToken] = weakref.WeakSet()
        self.reason = ""
        if parent is not None:
            with parent._lock:
                parent._children.add(self)
                cancelled, reason = parent.cancelled, parent.reason
            if cancelled:
                self.cancel(reason)

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask everything running under this token (and its children) to stop."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            children = list(self._children)
        for child in children:
            child.cancel(reason)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise `errors.Cancelled` when the token was cancelled."""
        if self._event.is_set():
            raise Cancelled(
                f"operation cancelled ({self.reason}); nothing was published",
                hint="run it again to finish; blobs it already stored are reused or garbage-collected",
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking early on cancellation; True if cancelled."""
        return self._event.wait(timeout)


_current: ContextVar[CancelToken | None] = ContextVar("streamstate_cancel_token", default=None)


def current_token() -> CancelToken | None:
    """The token of the enclosing `cancellation(...)` block, if any."""
    return _current.get()


@contextmanager
def cancellation(token: CancelToken | None) -> Iterator[CancelToken | None]:
    """Make `token` the current one for the block (None keeps the enclosing one)."""
    if token is None:
        yield _current.get()
        return
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)


def check_cancelled() -> None:
    """Raise `errors.Cancelled` if the current token was cancelled; cheap enough for every chunk."""
    token = _current.get()
    if token is not None and token._event.is_set():
        token.raise_if_cancelled()


def pause(seconds: float) -> None:
    """Sleep `seconds`, cut short (raising `errors.Cancelled`) when the current token is cancelled."""
    if seconds <= 0:
        return
    token = _current.get()
    if token is None:
        time.sleep(seconds)
        return
    token.wait(seconds)
    token.raise_if_cancelled()
