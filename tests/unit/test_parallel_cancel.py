"""Parallel transfers stop promptly when cancelled: pending items never start, running ones
notice within one chunk and clean up, and the caller gets `Cancelled` (or its interrupt)."""

from __future__ import annotations

import contextvars
import io
import signal
import threading
import time

import pytest

from airflow_provider_streamstate.engine.core.cancel import (
    CancelToken,
    cancellation,
    check_cancelled,
    current_token,
)
from airflow_provider_streamstate.engine.core.digest import CHUNK, copy_hashing
from airflow_provider_streamstate.engine.core.errors import Cancelled
from airflow_provider_streamstate.engine.core.parallel import GRACE_SECONDS, run_parallel

LONG = 30.0  # what an item would take if it did not notice the cancellation


class Recorder:
    """Items that run for LONG seconds unless cancelled, noting what started, stopped and cleaned up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[int] = []
        self.cleaned: list[int] = []
        self.all_started = threading.Event()
        self.expect = 0

    def item(self, i: int) -> int:
        with self.lock:
            self.started.append(i)
            if len(self.started) == self.expect:
                self.all_started.set()
        try:
            deadline = time.monotonic() + LONG
            while time.monotonic() < deadline:
                check_cancelled()
                time.sleep(0.01)
            return i
        except Cancelled:
            with self.lock:
                self.cleaned.append(i)  # e.g. abort a multipart upload
            raise


def test_a_token_cancelled_from_another_thread_stops_run_parallel_promptly_and_pending_items_never_start() -> None:
    rec, token = Recorder(), CancelToken()
    rec.expect = 3

    def cancel_when_running() -> None:
        assert rec.all_started.wait(10)
        token.cancel("task killed")

    threading.Thread(target=cancel_when_running, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(Cancelled, match="task killed"):
        run_parallel(rec.item, list(range(50)), 3, cancel=token)
    assert time.monotonic() - started < 2.0
    assert sorted(rec.started) == [0, 1, 2]  # the 47 pending items never started
    assert sorted(rec.cleaned) == [0, 1, 2]  # the running ones noticed and cleaned up


def test_the_current_token_is_used_when_none_is_passed() -> None:
    rec, token = Recorder(), CancelToken()
    rec.expect = 2
    threading.Thread(target=lambda: rec.all_started.wait(10) and token.cancel(), daemon=True).start()
    with cancellation(token), pytest.raises(Cancelled):
        run_parallel(rec.item, list(range(10)), 2)
    assert len(rec.started) == 2


def test_a_token_cancelled_before_the_call_starts_nothing() -> None:
    token = CancelToken()
    token.cancel()
    ran: list[int] = []
    with pytest.raises(Cancelled):
        run_parallel(ran.append, [1, 2, 3], 2, cancel=token)
    assert ran == []


def test_a_copy_loop_notices_within_one_chunk() -> None:
    token = CancelToken()
    copied: list[int] = []

    class Endless(io.RawIOBase):
        """A source that never ends; cancels the token once 3 chunks went through."""

        def read(self, n: int = -1) -> bytes:
            if len(copied) == 3:
                token.cancel()
            copied.append(n)
            return b"x" * CHUNK

    with pytest.raises(Cancelled):
        run_parallel(lambda _: copy_hashing(Endless(), io.BytesIO()), [0], 1, cancel=token)  # type: ignore[arg-type]
    assert len(copied) == 4  # the chunk read after the cancellation was not written


class TaskTimeout(BaseException):
    """What Airflow raises from its SIGALRM handler when a task runs too long."""


def _raise_timeout(signum: int, frame: object) -> None:
    raise TaskTimeout()


@pytest.mark.parametrize(
    ("handler", "raised"),
    [(signal.default_int_handler, KeyboardInterrupt), (_raise_timeout, TaskTimeout)],
    ids=["ctrl-c", "task-timeout"],
)
def test_an_interrupt_in_the_waiting_thread_cancels_everything_and_is_raised_after_running_items_clean_up(
    handler, raised
) -> None:
    rec, token = Recorder(), CancelToken()
    rec.expect = 4
    sent: list[float] = []

    def interrupt_once_four_run() -> None:  # not a timer: on a loaded machine four may take longer to start
        if rec.all_started.wait(30):
            sent.append(time.monotonic())
            signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)  # type: ignore[arg-type]

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        threading.Thread(target=interrupt_once_four_run, daemon=True).start()
        with pytest.raises(raised):
            run_parallel(rec.item, list(range(20)), 4, cancel=token)
        elapsed = time.monotonic() - sent[0]
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert elapsed < GRACE_SECONDS
    assert token.cancelled  # the operation around it stops too
    assert sorted(rec.started) == [0, 1, 2, 3]
    assert sorted(rec.cleaned) == [0, 1, 2, 3]


def test_the_first_failure_is_raised_as_is_and_stops_the_rest() -> None:
    rec = Recorder()

    def item(i: int) -> int:
        if i == 1:
            time.sleep(0.1)
            raise ValueError("boom")
        return rec.item(i)

    started = time.monotonic()
    with pytest.raises(ValueError, match="boom"):
        run_parallel(item, list(range(10)), 2)
    assert time.monotonic() - started < 2.0  # the running sibling was cancelled, not waited for
    assert rec.started == [0]
    assert rec.cleaned == [0]


def test_a_failure_does_not_cancel_the_callers_token() -> None:
    token = CancelToken()

    def item(i: int) -> int:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        run_parallel(item, [1, 2], 2, cancel=token)
    assert not token.cancelled  # a retry of the operation may go on


def test_results_come_back_in_order_from_daemon_threads_that_see_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    seen: list[tuple[str, bool, bool]] = []

    def item(i: int) -> int:
        seen.append((var.get(), threading.current_thread().daemon, current_token() is not None))
        time.sleep(0.01 * (5 - i))
        return i * i

    assert run_parallel(item, list(range(5)), 3) == [0, 1, 4, 9, 16]
    assert set(seen) == {("caller", True, True)}


def test_a_child_token_follows_its_parent_but_not_the_other_way_round() -> None:
    parent = CancelToken()
    child = CancelToken(parent)
    child.cancel()
    assert not parent.cancelled
    other = CancelToken(parent)
    parent.cancel("stop")
    assert other.cancelled
    assert other.reason == "stop"
    assert CancelToken(parent).cancelled


def test_cancellation_none_keeps_the_enclosing_token() -> None:
    outer = CancelToken()
    with cancellation(outer):
        with cancellation(None) as inner:
            assert inner is outer
            assert current_token() is outer
    assert current_token() is None
    check_cancelled()  # no token: never raises


class RecordingClient:
    """Just enough of a boto3 client to see whether a write was sent."""

    def __init__(self) -> None:
        self.puts: list[str] = []

    def put_object(self, **kwargs: object) -> dict[str, object]:
        self.puts.append(str(kwargs["Key"]))
        return {}


def test_a_cancelled_operation_publishes_no_manifest_but_may_finish_a_record(tmp_path) -> None:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.backends.s3.store import S3Store

    token = CancelToken()
    token.cancel()
    local, client = LocalStore(tmp_path / "store", fsync=False), RecordingClient()
    remote = S3Store(client, "bucket", "p")
    with cancellation(token):
        for store in (local, remote):
            with pytest.raises(Cancelled):
                store.put_manifest("s", "0001", b"{}")
            # Records are written by the caller's choice (e.g. after a restore's swap).
            store.put_record("streams/s/timelines/1.json", b"{}")
    assert local.list_snapshot_ids("s") == []
    assert client.puts == ["p/streams/s/timelines/1.json"]


class _SlowBlob(io.RawIOBase):
    """A blob body on a slow link: each read takes up to LONG seconds, noticing a
    cancellation between its network chunks as the stores' bodies do."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 - a writable buffer
        deadline = time.monotonic() + LONG
        while time.monotonic() < deadline:
            check_cancelled()
            time.sleep(0.01)
        return 0


def _slow_store(tmp_path):  # noqa: ANN202
    """A local store holding one snapshot of a fake checkpoint, whose blob reads crawl."""
    from contextlib import contextmanager

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

    ckpt = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(ckpt):
        for v in (1, 2):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    store = LocalStore(tmp_path / "store", fsync=False)
    sid = create_snapshot(str(ckpt), store, "s").manifest.snapshot_id

    @contextmanager
    def crawling(digest: str):  # noqa: ANN202
        yield _SlowBlob()

    store.open_blob = crawling  # type: ignore[method-assign]
    return store, sid


def _cancel_soon(token: CancelToken) -> None:
    threading.Timer(0.3, token.cancel).start()


def test_a_cancelled_restore_stops_promptly_and_leaves_the_target_as_it_was(tmp_path) -> None:
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from tests.unit.fake_checkpoint import write

    store, sid = _slow_store(tmp_path)
    target = tmp_path / "target"
    write(target / "metadata", '{"id": "before"}')
    token = CancelToken()
    _cancel_soon(token)
    began = time.monotonic()
    with pytest.raises(Cancelled):
        restore_snapshot(store, "s", sid, str(target), force=True, fsync=False, cancel=token)
    assert time.monotonic() - began < 0.3 + GRACE_SECONDS + 2
    assert sorted(p.name for p in target.iterdir()) == ["metadata"]
    assert (target / "metadata").read_text() == '{"id": "before"}'
    assert [p.name for p in tmp_path.iterdir() if ".streamstate-" in p.name] == []


def test_a_cancelled_verify_stops_promptly(tmp_path) -> None:
    from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots

    store, sid = _slow_store(tmp_path)
    token = CancelToken()
    _cancel_soon(token)
    began = time.monotonic()
    with pytest.raises(Cancelled):
        verify_snapshots(store, "s", sid, cancel=token)
    assert time.monotonic() - began < 0.3 + GRACE_SECONDS + 2
