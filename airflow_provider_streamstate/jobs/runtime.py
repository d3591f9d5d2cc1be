"""What a stream's driver needs around its query (its Spark session comes from
engine/state/spark.py): a heartbeat beside the checkpoint, one log
line per committed batch, and a graceful stop on SIGINT/SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

def attach_heartbeat(
    spark: SparkSession, checkpoint: str, *, interval_s: float = 5.0, query_name: str | None = None
) -> object:
    """Make the stream on `checkpoint` say it is alive (`engine.checkpoint.liveness`): a
    StreamingQueryListener writes the heartbeat when the query starts, on every progress
    event (Spark emits one on idle too) and once more when it stops or fails, and a timer
    thread keeps beating during a long batch. Follows the first query started after it is
    attached, or the one named `query_name`. Returns the listener (remove it with
    `spark.streams.removeListener`).

    One listener per session and checkpoint: an application that attaches its own under the
    supervised wrapper (which attached one first) gets the wrapper's, so the last beat has
    one writer (two would let the one that never saw the stop write `running` over the
    other's `stopped`). A listener whose query ended (`stopped` set) is not handed out again."""
    import socket

    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
    from airflow_provider_streamstate.engine.core.errors import StreamstateError
    from airflow_provider_streamstate.jobs.query_events import light_listener_base

    key = _checkpoint_key(checkpoint)
    attached: dict[str, Any] = spark.__dict__.setdefault("_streamstate_heartbeats", {})
    if key in attached and not attached[key].stopped.is_set():
        return attached[key]
    spark_version = str(spark.version)

    class HeartbeatListener(light_listener_base()):  # type: ignore[misc]  # events as views (query_events)
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.query_id: str | None = None
            self.beat: Heartbeat | None = None
            self.stopped = threading.Event()  # the last beat is written
            self.terminated = threading.Event()  # Spark's own event for it came
            self.stopping = False  # the driver stopped the query: an interrupted batch is no failure
            self.signalled: int | None = None  # a signal asked for the stop: its exit status (query_error)
            self.muted = False
            self.written_at = time.monotonic()
            threading.Thread(target=self._timer, name="streamstate-heartbeat", daemon=True).start()

        def mute(self) -> None:
            """Beat no more: a newer launch owns the checkpoint, and the record is its driver's."""
            with self.lock:
                self.muted = True

        def _write(self, *, keep_last: bool = False, **changes: object) -> None:
            with self.lock:
                if self.muted:
                    return
                assert self.beat is not None
                if self.beat.state in ("stopped", "failed") and (
                        keep_last or changes.get("state") not in ("stopped", "failed")):
                    return  # a progress or idle event the listener bus delivered after the last beat
                fields = {**self.beat.__dict__, **changes, "updated_at": now_iso()}
                self.beat = Heartbeat(**fields)  # type: ignore[arg-type]
                try:
                    write_heartbeat(checkpoint, self.beat)
                except (OSError, StreamstateError):
                    pass  # a full disk or an unreachable S3 must not kill the stream; the beat goes stale
                self.written_at = time.monotonic()

        def _timer(self) -> None:
            # Beats only when no event wrote one for an interval: a stream whose batches
            # report every few seconds is not written twice as often (each beat is a PUT on
            # S3), and a long batch still beats at least every 1.5 intervals.
            while not self.stopped.wait(interval_s / 2):
                if (self.beat is not None and self.beat.state in ("starting", "running")
                        and time.monotonic() - self.written_at >= interval_s):
                    self._write()

        def _ours(self, qid: str, name: str | None = None) -> bool:
            if self.query_id is None and (query_name is None or name == query_name):
                self.query_id = qid
            return qid == self.query_id

        def onQueryStarted(self, event: object) -> None:
            qid, name = str(event.id), event.name  # type: ignore[attr-defined]
            if not self._ours(qid, name):
                return
            with self.lock:
                self.beat = Heartbeat(
                    query_id=qid, run_id=str(event.runId), query_name=name or "",  # type: ignore[attr-defined]
                    host=socket.gethostname(), pid=os.getpid(), state="starting", batch_id=None,
                    input_rows=None, updated_at=now_iso(), interval_s=interval_s,
                    launch_id=os.environ.get("STREAMSTATE_LAUNCH_ID") or None, spark_version=spark_version,
                )
            self._write()

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            if self.beat is not None and self._ours(str(p.id)):
                self._write(state="running", batch_id=p.batchId, input_rows=p.numInputRows)

        def onQueryIdle(self, event: object) -> None:
            if self.beat is not None and self._ours(str(event.id)):  # type: ignore[attr-defined]
                self._write(state="running")

        def onQueryTerminated(self, event: object) -> None:
            if self.beat is None or not self._ours(str(event.id)):  # type: ignore[attr-defined]
                return
            exc = query_error(event.exception, stopping=self.stopping,  # type: ignore[attr-defined]
                              signalled=self.signalled)
            self._write(state="failed" if exc else "stopped", exception=error_line(exc))
            self.stopped.set()
            self.terminated.set()

        def finish(self, query: Any) -> None:
            """Write the last beat now, from the driver's own view of its stopped `query`:
            the listener bus delivers onQueryTerminated late, and not at all once Spark
            stops, which would leave a `running` record until it goes stale."""
            if self.beat is None or query.isActive or str(query.id) != self.query_id or self.stopped.is_set():
                return
            exc = query_error(query.exception(), stopping=self.stopping, signalled=self.signalled,
                              trace=failure_trace(query))
            last = query.lastProgress or {}
            # A batch's progress comes after its commit; an idle trigger's names the next batch.
            batch = last.get("batchId") if "addBatch" in (last.get("durationMs") or {}) else self.beat.batch_id
            self._write(state="failed" if exc is not None else "stopped", batch_id=batch, exception=error_line(exc))
            self.stopped.set()

        def close(self, error: str | None) -> None:
            """The last beat when nothing else wrote it: an application that stops its query
            and then Spark itself leaves no query to `finish` and may lose Spark's event for
            it, and a `running` record would outlive the driver. `failed` with `error`, or
            `stopped` (also when `error` is the stop's own interrupt, as in `finish`). A last
            beat Spark's event writes meanwhile is kept."""
            if self.beat is None or self.stopped.is_set():
                return
            why = query_error(error, stopping=self.stopping, signalled=self.signalled)
            self._write(state="failed" if why else "stopped", exception=error_line(why), keep_last=True)
            self.stopped.set()

    listener = HeartbeatListener()
    spark.streams.addListener(listener)
    attached[key] = listener
    return listener


def _checkpoint_key(checkpoint: str) -> str:
    """A local checkpoint's absolute path (however given), else its URL."""
    from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme, open_checkpoint_fs

    if location_scheme(checkpoint) != "file":
        return checkpoint.rstrip("/")
    return str(open_checkpoint_fs(checkpoint).local_path)  # a local one: its resolved path, no client


def attach_batch_log(spark: SparkSession, out: TextIO | None = None) -> object:
    """Print one line per committed batch: id, input rows, duration, state rows."""
    from airflow_provider_streamstate.jobs.query_events import light_listener_base

    stream = out or sys.stdout

    class BatchLog(light_listener_base()):  # type: ignore[misc]  # events as views (query_events)
        def onQueryStarted(self, event: object) -> None:
            print(f"query {event.name or event.id} started", file=stream, flush=True)  # type: ignore[attr-defined]

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            state_rows = sum(op.numRowsTotal for op in p.stateOperators)
            duration = p.durationMs.get("triggerExecution", 0)
            print(f"batch {p.batchId}: {p.numInputRows} input rows, {duration} ms, {state_rows} state rows",
                  file=stream, flush=True)

        def onQueryIdle(self, event: object) -> None:
            pass

        def onQueryTerminated(self, event: object) -> None:
            pass

    listener = BatchLog()
    spark.streams.addListener(listener)
    return listener


def error_line(text: str | None, limit: int = 1000) -> str | None:
    """One line that says why a query failed, for the heartbeat and the driver's exit.

    Spark's first line says it, except for an error raised in Python (a foreachBatch
    function, a UDF): that line ends at "Traceback (most recent call last):", and the
    Python exception's own line (`RuntimeError: ...`) is the one that says why.
    """
    lines = [ln.rstrip() for ln in (text or "").strip().splitlines()]
    if not lines:
        return None
    line = lines[0]
    if line.endswith("Traceback (most recent call last):"):
        # Frames and source lines are indented; the exception line that ends them is not.
        line = next((ln for ln in lines[1:] if ln and not ln[0].isspace()), line)
    line = re.sub(r"[\x00-\x1f\x7f]", " ", line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


class StopSignals:
    """SIGINT and SIGTERM as a graceful stop request, whichever process receives them.

    Under spark-submit the driver is two processes: Spark's JVM (spark-submit's own pid,
    which a terminal's Ctrl-C, `kill <pid>` or a container runtime signal) and this Python
    process, its child. Left alone, the JVM exits on the signal and takes the Python side
    down mid-call (a Py4J traceback, exit 143). And PySpark's SparkContext replaces
    Python's SIGINT handler with one that raises KeyboardInterrupt in the middle of a Py4J
    call. So: `install()` before Spark starts, `install_spark(spark)` once it has; both
    handlers only set `requested`, and the driver then stops its query and Spark itself.
    A second signal exits at once.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.reason: str | None = None
        self._counts = {"python": 0, "jvm": 0}  # a terminal's Ctrl-C reaches both processes once
        self._lock = threading.RLock()  # taken in signal handlers, which run on the main thread
        self._jvm_handler: Any = None  # kept referenced: the JVM calls back into it
        self._callbacks: list[Callable[[StopSignals], None]] = []

    @property
    def signal_exit(self) -> int | None:
        """The exit status the signal that asked for the stop gives a process it kills, None
        when no signal did."""
        return _signal_exit(self.reason)

    def on_request(self, callback: Callable[[StopSignals], None]) -> None:
        """Call `callback(self)` when a stop is requested (now, if one was)."""
        with self._lock:
            self._callbacks.append(callback)
            now = self.reason is not None
        if now:
            callback(self)

    def install(self) -> StopSignals:
        """Handle the signals in this (Python) process; call from the main thread."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request(signal.Signals(signum).name, source="python")

    def install_spark(self, spark: SparkSession) -> bool:
        """Once the SparkSession exists: take SIGINT back from PySpark, and handle INT and
        TERM in Spark's JVM too (a local JVM, not Spark Connect). False when the JVM would
        not take them: a signal ignored when it started (a non-interactive shell's
        background job ignores SIGINT) stays ignored there."""
        self.install()
        try:
            from pyspark.java_gateway import ensure_callback_server_started

            stop = self

            class JvmSignalHandler:
                def handle(self, sig: Any) -> None:
                    stop.request(f"SIG{sig.getName()}", source="jvm")

                class Java:
                    implements = ["sun.misc.SignalHandler"]

            gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
            jvm: Any = spark.sparkContext._jvm
            ensure_callback_server_started(gateway)
            self._jvm_handler = JvmSignalHandler()
            ignored = []
            for name in ("INT", "TERM"):
                previous = jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), self._jvm_handler)
                if previous.equals(jvm.sun.misc.SignalHandler.SIG_IGN):
                    ignored.append(f"SIG{name}")
            if ignored:
                print(f"streamstate: {' and '.join(ignored)} ignored by this spark-submit (a non-interactive shell "
                      "starts background jobs that way); stop it with SIGTERM", file=sys.stderr, flush=True)
            return not ignored
        except Exception as exc:  # noqa: BLE001 - without it the JVM keeps its default: exit
            print(f"streamstate: Spark's JVM keeps its own signal handling ({type(exc).__name__}: {exc})",
                  file=sys.stderr, flush=True)
            return False

    def request(self, reason: str, *, source: str = "python") -> None:
        """Ask for a graceful stop (from a signal handler or any thread). A second signal
        to the same process exits at once."""
        with self._lock:
            self._counts[source] = self._counts.get(source, 0) + 1
            again = self._counts[source] > 1
            first = self.reason is None
            if first:
                self.reason = reason
        if again:
            print(f"streamstate: {reason} again: exiting now", file=sys.stderr, flush=True)
            os._exit(_signal_exit(reason) or 143)
        if first:
            print(f"streamstate: {reason}: stopping the query after its batch in flight", file=sys.stderr, flush=True)
            for callback in list(self._callbacks):
                callback(self)
        self.requested.set()


def _signal_exit(reason: str | None) -> int | None:
    """128 + the number of the signal a stop reason names ("SIGINT", "signal SIGTERM")."""
    sig = signal.Signals.__members__.get((reason or "").rsplit(" ", 1)[-1])
    return None if sig is None else 128 + int(sig)


def query_error(
    error: object, *, stopping: bool, signalled: int | None = None, trace: str | None = None
) -> str | None:
    """A query's error as text, or None when there is none or it is the stop's own doing to
    a batch not committed, which runs again after a restart (so the stop was clean):
    - on a stop the driver asked for (`stopping`), its interrupt of a batch that had just
      begun (Spark can report it as a task failure when a state store's abort is interrupted);
    - on a stop a signal asked for (`signalled`: the exit status, 128 + its number, it gives
      the processes it kills), a helper process of a file write killed by that signal. Spark's
      local filesystem runs `chmod` for every file it writes, in the driver's process group,
      which a terminal's Ctrl-C, or a SIGTERM to the group, reaches too; when the signal
      reaches Java's spawn helper before it has started `chmod`, the write fails with
      "Failed to exec spawn helper: ..., signal: <n>" instead.
    `trace` (`failure_trace`) is looked at too: the error's own text may not name its cause."""
    text = None if error is None else str(error)
    if not text:
        return text
    evidence = text if trace is None else f"{text}\n{trace}"
    if stopping and ("InterruptedException" in evidence or "ClosedByInterruptException" in evidence):
        return None
    if signalled is not None and (
        f"ExitCodeException exitCode={signalled}" in evidence
        or re.search(rf"Failed to exec spawn helper: pid: \d+, signal: {signalled - 128}\b", evidence)
    ):
        return None
    return text


def failure_trace(query: Any) -> str | None:
    """`query`'s error with every cause and stack trace, as Spark's listener event gives it:
    PySpark's `exception()` keeps the top message, and a file write that failed in the driver
    names its cause only below it. None when there is no error or no JVM to ask (Connect)."""
    try:
        from pyspark import SparkContext

        failure = query._jsq.exception()
        if not failure.isDefined():
            return None
        return str(SparkContext._jvm.org.apache.spark.util.Utils.exceptionString(failure.get()))  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - the error's own text is then all there is
        return None


# How often a stop looks whether the batch in flight has committed: a busy stream plans its
# next batch a few milliseconds after a commit, and a stop that comes after that interrupts it
# (the checkpoint then holds a planned, uncommitted batch, which a restart redoes).
STOP_POLL_S = 0.005

def stop_query(query: Any, *, batch_wait_s: float = 60.0) -> None:
    """Stop `query` once the batch in flight has committed (at most `batch_wait_s`): an
    interrupted batch is run again after a restart, and Spark logs its abort as errors.
    A busy stream may start its next batch at once, so "committed" is the trigger going
    idle or a progress event for the batch that was in flight."""
    deadline = time.monotonic() + batch_wait_s
    in_flight: int | None = None
    while query.isActive and time.monotonic() < deadline and query.status.get("isTriggerActive"):
        last = (query.lastProgress or {}).get("batchId")
        if in_flight is None:
            in_flight = -1 if last is None else int(last) + 1
        elif last is not None and int(last) >= in_flight:
            break
        time.sleep(STOP_POLL_S)
    query.stop()


def run_until_stopped(
    spark: SparkSession, query: Any, stop: StopSignals, *, heartbeat: Any = None, batch_wait_s: float = 60.0,
) -> int:
    """A driver's main loop: wait until `query` ends by itself (drained or failed) or `stop`
    is requested, stop it gracefully, write its last heartbeat, stop Spark. The exit code:
    0 when it stopped or drained, 1 when it failed (one line on stderr says why)."""
    from pyspark.errors import StreamingQueryException

    while query.isActive and not stop.requested.is_set():
        try:
            query.awaitTermination(1)
        except StreamingQueryException:
            break  # reported below
    stopping = bool(getattr(heartbeat, "stopping", False))  # the supervised wrapper stopped it
    if query.isActive:
        stopping = True
        if heartbeat is not None:
            heartbeat.stopping = True
        stop_query(query, batch_wait_s=batch_wait_s)
    raw = query.exception()
    error = query_error(raw, stopping=stopping, signalled=stop.signal_exit, trace=failure_trace(query))
    if raw is not None and error is None:
        print("streamstate: the stop interrupted a batch that was not committed; it runs again on restart",
              file=sys.stderr, flush=True)
    if heartbeat is not None:
        heartbeat.finish(query)
    spark.stop()
    if error is not None:
        print(f"streamstate: the query failed: {error_line(error)}", file=sys.stderr, flush=True)
        return 1
    how = f"on {stop.reason}" if stop.reason else "(no more input)"
    print(f"streamstate: query {query.name or query.id} stopped {how}", file=sys.stderr, flush=True)
    return 0


def run_example_stream(
    app_name: str, *, bootstrap_servers: str, topics: list[str], partitions: int, checkpoint: str,
    state_store: str, shuffle_partitions: int, start: Callable[[SparkSession], Any],
) -> int:
    """The example streams' spark-submit entry point: creates their topics when missing,
    prints one line per committed batch, keeps a heartbeat beside a local checkpoint, starts
    the query with `start(spark)` and runs it until it stops (`run_until_stopped`; a signal
    that came while Spark started exits 0 at once)."""
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.generator import ensure_topic

    for topic in topics:
        ensure_topic(bootstrap_servers, topic, partitions)
    stop = StopSignals().install()
    # spark-submit chooses the master and passes the connector jars (--jars / --packages).
    spark = spark_session(app_name, master=None, state_store=state_store, shuffle_partitions=shuffle_partitions)
    stop.install_spark(spark)
    attach_batch_log(spark)
    heartbeat = None
    if "://" not in checkpoint or checkpoint.startswith("file:"):
        heartbeat = attach_heartbeat(spark, checkpoint.removeprefix("file://").removeprefix("file:"))
        stop.on_request(lambda s: setattr(heartbeat, "signalled", s.signal_exit))
    if stop.requested.is_set():  # signalled while Spark started
        spark.stop()
        return 0
    return run_until_stopped(spark, start(spark), stop, heartbeat=heartbeat)
