"""Bounded parallel transfers on threads (I/O and hashlib both release the GIL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(fn: Callable[[T], R], items: Sequence[T], parallelism: int) -> list[R]:
    """`[fn(i) for i in items]` on up to `parallelism` threads, in order.

    The first failure cancels what has not started and is raised as is.
    """
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallelism, len(items)))) as pool:
        futures = [pool.submit(fn, item) for item in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            exc = f.exception()
            if exc is not None:
                for other in futures:
                    other.cancel()
                raise exc
        return [f.result() for f in futures]
