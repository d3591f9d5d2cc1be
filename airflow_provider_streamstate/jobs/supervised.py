"""Run any PySpark streaming application as a supervised stream, without changing its code.

    STREAMSTATE_CHECKPOINT=/data/ckpt spark-submit [options] supervised.py APP.py [APP ARGS...]

The launcher (`engine/streams/launcher.py`) runs spark-submit on this file with the user's
application and its arguments after it. The wrapper then runs the application as
`python APP.py ARGS` would (`runpy`, `__main__`, `sys.argv`, `sys.path[0]`), and:

- says who it is beside the checkpoint (`_streamstate/driver.json`: launch id, pid), and
  at exit how it ended (exit code, stop reason);
- attaches the heartbeat listener (`jobs.runtime.attach_heartbeat`) to the SparkSession
  the application creates, before any of its queries can start: `SparkSession.Builder.
  getOrCreate` is wrapped, so the application's own builder configuration is kept;
- stops gracefully on SIGTERM, SIGINT or a stop request beside the checkpoint (any host
  can write one): it lets the batch in flight finish, stops every active query (the
  heartbeat says `stopped`), and the application's `awaitTermination()` returns, so the
  driver exits 0 without a Py4J traceback. A second signal exits at once.

A driver is fenced: it runs only while its launch (STREAMSTATE_LAUNCH_GENERATION) is the
newest recorded beside the checkpoint; it refuses to start, or stops as it would on a stop
request, once a launch of a higher generation owns the checkpoint (one driver per
checkpoint, whichever hosts started them).

Environment: STREAMSTATE_CHECKPOINT (required), STREAMSTATE_LAUNCH_ID, STREAMSTATE_LAUNCH_GENERATION,
STREAMSTATE_SECRETS_FILE (the launcher's properties file of secret confs, deleted at
start: spark-submit has read it), STREAMSTATE_HEARTBEAT_INTERVAL (seconds, default 5), STREAMSTATE_QUERY_NAME (which query
the heartbeat follows; default the first one started), STREAMSTATE_STOP_BATCH_WAIT
(seconds a stop waits for the batch in flight, default 60), STREAMSTATE_FINISH_PLANNED_BATCH
(set: every query runs once, which commits a planned batch a stop interrupted, and the driver
exits: `streams.start.finish_planned_batch`), STREAMSTATE_CHECKPOINT_FROM_CONF (set: the
checkpoint is reached as the application's Spark conf says, read from spark-submit's JVM
before the application runs: what the launcher's connection to it gave,
`CheckpointFS.spark_access`).
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.liveness import now_iso
from airflow_provider_streamstate.engine.checkpoint.sidecar import (
    open_sidecar,
    reach_location_as,
    refuse_unfinished_restore,
)
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.streams.launcher import (
    ENV_CHECKPOINT,
    ENV_CHECKPOINT_FROM_CONF,
    ENV_FINISH_PLANNED_BATCH,
    ENV_HEARTBEAT_INTERVAL,
    ENV_LAUNCH_GENERATION,
    ENV_LAUNCH_ID,
    ENV_QUERY_NAME,
    superseded_by,
)
from airflow_provider_streamstate.engine.streams.records import DriverRecord, stop_requested, write_driver
from airflow_provider_streamstate.engine.streams.secret_confs import remove_secrets_file
from airflow_provider_streamstate.jobs.runtime import STOP_POLL_S

ENV_STOP_BATCH_WAIT = "STREAMSTATE_STOP_BATCH_WAIT"
FENCE_CHECK_S = 10.0  # how often a running driver checks that no newer launch owns its checkpoint
LAST_EVENT_WAIT_S = 10.0  # how long an exiting driver waits for Spark's event that its query ended
USAGE = "usage: spark-submit [options] supervised.py APP.py [ARGS...] (with STREAMSTATE_CHECKPOINT set)"


def _say(message: str) -> None:
    """A line in the driver log, shaped like Spark's own (`yy/MM/dd HH:mm:ss LEVEL source: ...`)."""
    print(f"{datetime.now():%y/%m/%d %H:%M:%S} INFO streamstate: {message}", file=sys.stderr, flush=True)


def _float_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        _say(f"ignoring {name}={text!r} (not a positive number of seconds); using {default}")
        return default
    return value


class Supervisor:
    """Heartbeats, graceful stop and the driver record around one application run."""

    def __init__(self, checkpoint: str, *, launch_id: str, interval_s: float, query_name: str | None,
                 stop_batch_wait_s: float, generation: int = 0) -> None:
        self.checkpoint = checkpoint
        self.launch_id = launch_id
        self.generation = generation
        self.superseded = False
        self.interval_s = interval_s
        self.query_name = query_name
        self.stop_batch_wait_s = stop_batch_wait_s
        self.started = datetime.now(UTC)
        self.started_at = now_iso()
        self.lock = threading.Lock()
        self.sessions: list[Any] = []
        self.listeners: list[Any] = []
        self.stop_reason: str | None = None
        self.signals = 0
        self.signalled: int | None = None  # the exit status the stop's signal gives what it kills
        self.done = threading.Event()

    def install(self) -> None:
        write_driver(self.checkpoint, DriverRecord(self.launch_id, socket.gethostname(), os.getpid(), self.started_at))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        threading.Thread(target=self._watch_requests, name="streamstate-stop-requests", daemon=True).start()
        self._wrap_get_or_create()
        if os.environ.get(ENV_FINISH_PLANNED_BATCH):
            _wrap_stream_start_once()

    # -- heartbeat -----------------------------------------------------------------------

    def _wrap_get_or_create(self) -> None:
        from pyspark.sql import SparkSession

        original = SparkSession.Builder.getOrCreate
        supervisor = self

        def getOrCreate(builder: Any) -> Any:  # noqa: N802 - pyspark's name
            session = original(builder)
            supervisor.attach(session)
            return session

        SparkSession.Builder.getOrCreate = getOrCreate  # type: ignore[method-assign,assignment]

    def attach(self, session: Any) -> None:
        """Attach the heartbeat to `session` once (the app may call getOrCreate often)."""
        from airflow_provider_streamstate.jobs.runtime import attach_heartbeat

        with self.lock:
            if any(s is session for s in self.sessions):
                return
            self.sessions.append(session)
        try:
            listener: Any = attach_heartbeat(
                session, self.checkpoint, interval_s=self.interval_s, query_name=self.query_name)
        except Exception as exc:  # noqa: BLE001 - a session without listeners (Spark Connect) still runs
            _say(f"no heartbeat for this session ({type(exc).__name__}: {exc}); the stream will look dead")
            return
        with self.lock:
            self.listeners.append(listener)
            listener.signalled = self.signalled
        _say(f"heartbeat every {self.interval_s:g}s beside {self.checkpoint}")

    # -- stop ----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals > 1:
            _say(f"second {name}: exiting now")
            os._exit(128 + signum)
        self.signalled = 128 + signum  # a batch whose file write it failed is no failure (runtime.query_error)
        for listener in list(self.listeners):  # no lock in a handler: the main thread may hold it
            listener.signalled = self.signalled
        self.request_stop(f"signal {name}")

    def _watch_requests(self) -> None:
        # A stop request is a GET beside an S3 checkpoint: ask every 2 s there, 0.5 s locally;
        # whether a newer launch owns the checkpoint (the fence), every FENCE_CHECK_S.
        poll = 2.0 if "://" in self.checkpoint else 0.5
        last_fence = time.monotonic()
        while not self.done.wait(poll):
            try:
                reason = stop_requested(self.checkpoint, since=self.started, launch_id=self.launch_id)
                if reason is None and time.monotonic() - last_fence >= FENCE_CHECK_S:
                    last_fence = time.monotonic()
                    reason = self.superseded_reason()
            except StreamstateError as exc:  # S3 unreachable for a moment: ask again
                _say(f"cannot read stop requests beside the checkpoint: {exc.one_line()}")
                continue
            if reason:
                if self.superseded:  # not ours to write any more, nor to finish a batch on
                    for listener in list(self.listeners):
                        getattr(listener, "mute", lambda: None)()
                    self.stop_batch_wait_s = 0.0
                self.request_stop(reason)
                return

    def superseded_reason(self) -> str | None:
        """Why this driver must not run on: a launch of a higher generation owns the checkpoint."""
        newer = superseded_by(self.checkpoint, self.generation, self.launch_id)
        if newer is None:
            return None
        self.superseded = True
        h = newer.handle
        return f"superseded by launch {h.launch_id} (generation {h.generation}, host {h.host})"

    def request_stop(self, reason: str) -> None:
        """Stop gracefully, from any thread (a signal handler must not call into the JVM:
        its thread may be inside a Py4J call, so a thread does the stopping)."""
        with self.lock:
            if self.stop_reason is not None:
                return
            self.stop_reason = reason
        _say(f"stopping: {reason}")
        threading.Thread(target=self._stop_queries, name="streamstate-stop", daemon=True).start()

    def _stop_queries(self) -> None:
        """Stop every active query, now and until the app exits (a query still starting is
        stopped as soon as it shows up)."""
        batch_deadline = time.monotonic() + self.stop_batch_wait_s
        while not self.done.is_set():
            for session in list(self.sessions):
                try:
                    for query in session.streams.active:
                        self._stop_query(query, batch_deadline)
                except Exception as exc:  # noqa: BLE001 - the session may be stopping under us
                    _say(f"while stopping: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            self.done.wait(0.2)

    def _stop_query(self, query: Any, batch_deadline: float) -> None:
        """Let the batch in flight finish (it would be redone after a restart otherwise),
        then stop. A busy stream may start its next batch at once, so "finished" is the
        trigger going idle or the progress event of the batch that was in flight."""
        in_flight = None
        while time.monotonic() < batch_deadline and query.isActive and query.status.get("isTriggerActive"):
            last = (query.lastProgress or {}).get("batchId")
            if in_flight is None:
                in_flight = -1 if last is None else last + 1
            elif last is not None and last >= in_flight:
                break
            time.sleep(STOP_POLL_S)
        _say(f"stopping query {query.name or query.id}")
        for listener in list(self.listeners):
            listener.stopping = True
        query.stop()
        for listener in list(self.listeners):  # the last beat now: Spark's event may come late or never
            try:
                listener.finish(query)
            except Exception as exc:  # noqa: BLE001 - the session may be stopping under us
                _say(f"cannot write the last heartbeat: {type(exc).__name__}: {exc}")

    def finish(self, exit_code: int, error: str | None = None) -> None:
        """Wait briefly for Spark's event that each query ended (listener events are
        asynchronous, and a driver that exits before the JVM delivers one logs a Py4J error;
        the last beat may already be written, by whoever stopped the query), write the last
        beat where nothing did (the application stopped its query and Spark itself), then
        record how the driver ended (and the error it died of)."""
        self.done.set()
        if self.superseded:  # the driver record is the newer launch's now
            return
        failure = error or (f"the driver exited with status {exit_code}" if exit_code else None)
        for listener in list(self.listeners):
            if getattr(listener, "beat", None) is not None:
                listener.terminated.wait(LAST_EVENT_WAIT_S)
                if not self.superseded:  # found meanwhile: the records are the newer launch's
                    listener.close(failure)  # nothing when Spark's event or the stop wrote the last beat
        if self.superseded:
            return
        try:
            write_driver(self.checkpoint, DriverRecord(
                self.launch_id, socket.gethostname(), os.getpid(), self.started_at,
                exit_code=exit_code, exited_at=now_iso(), stop_reason=self.stop_reason, error=error,
            ))
        except (OSError, StreamstateError) as exc:
            _say(f"cannot record the exit beside the checkpoint: {exc}")


def _wrap_stream_start_once() -> None:
    """Every query the application starts runs once (Trigger.Once): on a checkpoint holding a
    planned batch that was not committed, Spark runs exactly that batch as planned, commits it
    and ends the query (checked on Spark 3.5, 4.0 and 4.3), so the application's
    `awaitTermination()` returns and the driver exits at a batch boundary."""
    from pyspark.sql.streaming import DataStreamWriter

    for name in ("start", "toTable"):
        original = getattr(DataStreamWriter, name)

        def once(writer: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            return __original(writer.trigger(once=True), *args, **kwargs)

        setattr(DataStreamWriter, name, once)
    _say("finishing the planned batch: every query runs once")


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    remove_secrets_file()
    checkpoint = os.environ.get(ENV_CHECKPOINT)
    if not args or not checkpoint:
        _say(USAGE)
        return 2
    app = os.path.abspath(args[0])
    if not os.path.isfile(app):
        _say(f"application {args[0]!r} is not a file; give the path of the stream's PySpark application")
        return 2
    try:
        generation = int(os.environ.get(ENV_LAUNCH_GENERATION) or 0)
    except ValueError:
        generation = 0
    supervisor = Supervisor(
        checkpoint,
        launch_id=os.environ.get(ENV_LAUNCH_ID, ""),
        generation=generation,
        interval_s=_float_env(ENV_HEARTBEAT_INTERVAL, 5.0),
        query_name=os.environ.get(ENV_QUERY_NAME) or None,
        stop_batch_wait_s=_float_env(ENV_STOP_BATCH_WAIT, 60.0),
    )
    if os.environ.get(ENV_CHECKPOINT_FROM_CONF):
        try:
            _reach_checkpoint_from_conf(checkpoint)
        except Exception as exc:  # noqa: BLE001 - the driver's own configuration may still reach it
            why = exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"
            _say(f"cannot reach {checkpoint} as the launcher said ({why}); trying this driver's own configuration")
    refusal = supervisor.superseded_reason()  # before the driver writes anything
    try:
        refuse_unfinished_restore(open_sidecar(checkpoint))
    except StreamstateError as exc:
        refusal = exc.one_line()
    if refusal:
        _say(f"not starting: {refusal}")
        return 3
    supervisor.install()
    # What `python APP.py ARGS` gives the app: its argv and its directory first on sys.path.
    sys.argv = [app, *args[1:]]
    sys.path[0] = os.path.dirname(app)
    code = 1
    error: str | None = None
    try:
        runpy.run_path(app, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
        if code and exc.code is not None and not isinstance(exc.code, int):
            error = str(exc.code)
        raise
    except BaseException as exc:
        error = _one_line(exc)  # beside the checkpoint: every host can say what the driver died of
        raise
    finally:
        supervisor.finish(code, error)
    return 0


def _reach_checkpoint_from_conf(checkpoint: str) -> None:
    """Reach the checkpoint, wherever this driver opens it by its location, as the launcher's
    connection to it does (`CheckpointFS.spark_access`, read back from this application's
    Spark conf: spark-submit's JVM, which holds it, is up before the application has a
    session; pyspark's SparkConf reads it only once connected to that JVM)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        raise UsageError("the driver was not started by spark-submit: no JVM holds its conf",
                         hint="start it with spark-submit, as the launcher does")
    from pyspark import SparkConf, SparkContext

    from airflow_provider_streamstate.engine.lookup.reading.reach import Reach

    SparkContext._ensure_initialized()  # what SparkContext() does first: connect to spark-submit's JVM
    conf = SparkConf()
    reach = Reach.from_spark_conf(lambda key: conf.get(key, None), checkpoint)
    reach_location_as(checkpoint, open_sidecar(reach.open(checkpoint)))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text[0] if text else ''}"[:1000]


if __name__ == "__main__":
    sys.exit(main())
