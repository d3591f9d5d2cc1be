"""Start, stop and watch a stream's driver without holding on to it.

A stream never ends, so whoever starts it (an Airflow task, a person at a terminal)
must be able to go away: `launch` runs the prepared spark-submit command as a detached
driver (engine/streams/submission.py: its own session and process group, output to a log
file, secret confs in a properties file) and returns a small `StreamHandle`. Everything
needed to find, watch and stop the driver later is written beside the checkpoint, which
every worker can reach, never kept in the launching process (engine/streams/records.py);
the driver's log stays on the launching host (beside a local checkpoint, else below
$STREAMSTATE_HOME: engine/checkpoint/sidecar.py).

Where the driver runs is its cluster manager's business (engine/streams/managers/): a
driver here (local mode, client mode) is watched and signalled as a process of this host
(engine/streams/processes.py); a driver on the cluster (cluster deploy mode) through the
manager, from any host.

Two copies of a stream on one checkpoint corrupt it: `launch` refuses while the
heartbeat says a query is running, or while an earlier launch is still starting; of
launches racing from several hosts, the create-only launch record lets one win. `stop`
is graceful first: it asks (stop request, and SIGTERM to the Python driver on this host),
the supervised driver lets the current batch finish and stops its queries, and only after
`timeout_s` is the driver killed (its process group here, its application through the
manager). `status` tells starting / running / stopped / failed / dead from the heartbeat,
the launch record and, on this host, whether the process lives; a dead driver's last
error line comes from its log. Pure Python: no Airflow or pyspark import.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.liveness import (
    Heartbeat,
    beat_says_running,
    now_iso,
    read_heartbeat,
    unmanaged_writer,
)
from airflow_provider_streamstate.engine.checkpoint.sidecar import (
    Sidecar,
    local_root,
    open_sidecar,
    refuse_unfinished_restore,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled, current_token
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamRunningError,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.streams import processes
from airflow_provider_streamstate.engine.streams.command import with_checkpoint_access
from airflow_provider_streamstate.engine.streams.driver_logs import last_error_line, prune_logs
from airflow_provider_streamstate.engine.streams.managers import AppReport, ClusterApp, manager_named
from airflow_provider_streamstate.engine.streams.records import (
    DRIVER_FILE,
    KEEP_LAUNCHES,
    LOCK_FILE,
    LOG_DIR,
    STOP_FILE,
    DriverRecord,
    LaunchRecord,
    StreamHandle,
    launch_generations,
    launch_path,
    parse_time,
    read_driver,
    read_launch,
    write_stop_request,
)
from airflow_provider_streamstate.engine.streams.submission import Submission

log = logging.getLogger("streamstate.launcher")

# The environment the launcher gives the supervised driver (jobs/supervised.py).
ENV_CHECKPOINT = "STREAMSTATE_CHECKPOINT"
ENV_LAUNCH_ID = "STREAMSTATE_LAUNCH_ID"
ENV_LAUNCH_GENERATION = "STREAMSTATE_LAUNCH_GENERATION"
ENV_HEARTBEAT_INTERVAL = "STREAMSTATE_HEARTBEAT_INTERVAL"
ENV_QUERY_NAME = "STREAMSTATE_QUERY_NAME"
ENV_STREAM = "STREAMSTATE_STREAM"
# Set: the driver reaches its checkpoint as its Spark conf says (the launcher's connection to
# it gave the application its address and user: CheckpointFS.spark_access), not only as
# its own environment would.
ENV_CHECKPOINT_FROM_CONF = "STREAMSTATE_CHECKPOINT_FROM_CONF"
# Set: every query the application starts runs once (Trigger.Once), so a checkpoint holding a
# planned, uncommitted batch gets exactly that batch committed and the driver exits.
ENV_FINISH_PLANNED_BATCH = "STREAMSTATE_FINISH_PLANNED_BATCH"

# A launch on another host that has not beaten yet is taken as starting for this long.
STARTUP_GRACE_S = 600.0


class StreamStartError(StreamstateError):
    """The driver exited, or its query failed, before the stream ran."""


def supervised_application() -> str:
    """The path of the wrapper spark-submit runs (`jobs/supervised.py`), with the
    user's application and its arguments after it."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "supervised.py")


def local_checkpoint(checkpoint: str | Path) -> Path:
    """The checkpoint as a local path (a path, or a `file:` URI), for what only works on a
    filesystem this host has: swapping a restored directory, deleting a clone's directory."""
    text = str(checkpoint)
    return local_root(text, refusal=(
        f"this needs the checkpoint on a local or mounted path, not {text}",
        "give the checkpoint as a path (a shared mount for drivers on other hosts); "
        "docs/deployment.md says what works on an s3a:// checkpoint"))


@dataclass(frozen=True)
class StreamStatus:
    """What is known about the stream on a checkpoint, from here."""

    checkpoint: str
    state: str  # absent | starting | running | stopped | failed | dead
    handle: StreamHandle | None  # the latest launch through this module, if any
    heartbeat: Heartbeat | None  # the latest beat, when it belongs to that launch (or there was none)
    process_alive: bool | None  # the driver's process, when it was launched on this host
    exit_code: int | None
    last_error: str | None  # the query's exception, or the log's last error line, once it died
    log: str | None  # the driver's log: a file on the launching host, or the cluster's container logs
    app: AppReport | None = None  # the cluster manager's view, for a driver on a cluster
    writer: str | None = None  # running, but not through streamstate: what says so (liveness.unmanaged_writer)

    def to_json(self) -> dict[str, Any]:
        beat = self.heartbeat
        return {
            "checkpoint": self.checkpoint,
            "state": self.state,
            "handle": self.handle.to_json() if self.handle else None,
            "query_id": beat.query_id if beat else None,
            "query_name": beat.query_name if beat else None,
            "batch_id": beat.batch_id if beat else None,
            "beat_age_s": round(beat.age_s(), 1) if beat else None,
            "process_alive": self.process_alive,
            "exit_code": self.exit_code,
            "last_error": self.last_error,
            "log": self.log,
            "cluster_app": self.app.to_json() if self.app else None,
            "unmanaged_writer": self.writer,
        }


@dataclass(frozen=True)
class StopResult:
    """How a stop went: `stopped` (the driver stopped its query and exited when asked),
    `killed` (it had not after the timeout: its process group was killed), or
    `not-running` (nothing to stop)."""

    checkpoint: str
    outcome: str
    seconds: float
    state: str  # the stream's state afterwards (status().state)
    exit_code: int | None
    pid: int | None = None
    detail: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 3),
            "state": self.state,
            "exit_code": self.exit_code,
            "pid": self.pid,
        }


@contextlib.contextmanager
def _launch_lock(side: Sidecar) -> Iterator[None]:
    """One launch at a time per checkpoint on this host (two tasks starting one stream)."""
    path = side.local_dir / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- status -----------------------------------------------------------------------------


def status(checkpoint: str | Path | Sidecar | CheckpointFS) -> StreamStatus:
    """The state of the stream on `checkpoint`:

    - `running` / `starting`: a fresh heartbeat says so (and on this host its driver lives),
      or a launch whose driver lives has not beaten yet (JVM and query starting);
    - `stopped` / `failed`: the query's last beat (failed carries its exception);
    - `dead`: the driver is gone without saying so (killed, crashed, stale heartbeat),
      or it exited before its query started;
    - `absent`: nothing was ever launched or beaten on this checkpoint.

    A checkpoint that is not `running`/`starting` by these records but whose own files say
    a query is writing it (a plain spark-submit: `liveness.unmanaged_writer`) is `running`,
    with `writer` saying so.
    """
    side = open_sidecar(checkpoint)
    launch = read_launch(side)
    beat = read_heartbeat(side)
    here = socket.gethostname()
    handle = launch.handle if launch else None
    driver = read_driver(side, handle.launch_id) if handle else None
    alive: bool | None = None
    exit_code = driver.exit_code if driver else None
    if beat is not None and handle is not None and (
            parse_time(beat.updated_at) < parse_time(handle.started_at)
            or (beat.launch_id is not None and beat.launch_id != handle.launch_id)):
        beat = None  # from an earlier run on this checkpoint (or a superseded driver's last words)
    log_path = handle.log if handle else None
    if launch is not None and launch.cluster is not None:
        return _cluster_status(side, launch, beat, driver)
    if launch and handle and handle.host == here:
        alive = processes.process_alive(handle.pid, launch.proc_start)
        if exit_code is None:
            exit_code = processes.exit_code(handle.pid)

    if beat is not None and beat.state in ("starting", "running"):
        if beat_says_running(beat) and alive is not False:
            state = beat.state
        else:  # a driver that recorded a clean exit stopped its query; the last beat was lost
            state = "stopped" if driver is not None and driver.exit_code == 0 else "dead"
    elif beat is not None:
        state = beat.state
    elif handle is not None:
        if alive is None:  # launched on another host: only the records tell
            age = (datetime.now(UTC) - parse_time(handle.started_at)).total_seconds()
            if driver is not None and driver.exit_code is not None:
                state = "stopped" if driver.exit_code == 0 else "dead"
            else:
                state = "starting" if age < STARTUP_GRACE_S else "dead"
        elif alive:
            state = "starting"
        else:
            state = "stopped" if exit_code == 0 else "dead"
    else:
        state = "absent"

    writer = unmanaged_writer(side, beat) if state not in ("running", "starting") else None
    if writer is not None:
        state = "running"
    last_error = None
    if state in ("failed", "dead"):  # the log is on the launching host; the driver record is everywhere
        last_error = ((beat.exception if beat and state == "failed" else None) or last_error_line(log_path)
                      or (driver.error if driver else None))
    return StreamStatus(side.location, state, handle, beat, alive, exit_code, last_error, log_path, writer=writer)


def _cluster_status(side: Sidecar, launch: LaunchRecord, beat: Heartbeat | None,
                    driver: DriverRecord | None) -> StreamStatus:
    """A driver on the cluster: the cluster manager says whether its application lives
    (and why it ended), the heartbeat how its query does. While the manager cannot be asked,
    the records alone decide, as for a driver on another host."""
    assert launch.cluster is not None
    handle = launch.handle
    app = cluster_report(launch.cluster)
    exit_code = driver.exit_code if driver else None
    last_error: str | None = driver.error if driver else None
    if app is None:  # no id yet, the manager forgot it or cannot be reached: the records decide
        age = (datetime.now(UTC) - parse_time(handle.started_at)).total_seconds()
        if driver is not None and driver.exit_code is not None:
            state = "stopped" if driver.exit_code == 0 else "dead"
        elif beat is not None:
            state = beat.state if beat.state not in ("starting", "running") or beat_says_running(beat) else "dead"
        else:
            state = "starting" if age < STARTUP_GRACE_S else "dead"
        if state == "dead":
            last_error = last_error or last_error_line(handle.log)
    elif app.missing and driver is None and (
            datetime.now(UTC) - parse_time(handle.started_at)).total_seconds() < STARTUP_GRACE_S:
        state = "starting"  # spark-submit has not created it yet (a Kubernetes pod)
    elif not app.ended:
        if beat is None or app.stream_state() != "running":
            state = "starting"  # JVM, SparkContext, executors: the query has not said anything yet
        elif beat.state in ("stopped", "failed"):
            state = "running"  # its query ended, but the application still holds the checkpoint
        else:
            # The application holds the checkpoint whatever its beat says (a stale beat is a
            # stuck or silent driver: the supervisor's freshness check tells, not this).
            state = "running" if beat.state == "running" or not beat_says_running(beat) else beat.state
    else:
        state = app.stream_state()
        if beat is not None and beat.state == "failed":
            state, last_error = "failed", beat.exception
        last_error = last_error or app.diagnostics or None
    if state == "failed" and last_error is None and beat is not None:
        last_error = beat.exception
    return StreamStatus(side.location, state, handle, beat, None, exit_code, last_error,
                        app.am_container_logs if app is not None and app.am_container_logs else handle.log,
                        app)


# --- launch -----------------------------------------------------------------------------


def launch(
    command: Sequence[str],
    *,
    stream: str,
    checkpoint: str | Path | Sidecar | CheckpointFS,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    log_dir: str | Path | None = None,
    heartbeat_interval_s: float = 5.0,
    query_name: str | None = None,
    submit_timeout_s: float = 600.0,
) -> StreamHandle:
    """Start `command` (spark-submit on `supervised_application()`) as a detached driver
    for `stream` on `checkpoint`, and return at once.

    A driver the cluster manager runs (cluster deploy mode on YARN or Kubernetes:
    engine/streams/managers/) is only submitted: this waits up to `submit_timeout_s` for
    spark-submit to return, and where the application is (an id, a pod) is recorded beside
    the checkpoint, where any host finds it: status and the kill go through the manager.

    The driver gets its own session and process group (it outlives the caller and is
    not hit by signals meant for the caller's group), `env` on top of this process's
    environment plus the STREAMSTATE_* variables the supervised wrapper reads, stdin
    from /dev/null and stdout+stderr in a log file (`log_dir`, default beside the
    checkpoint). Raises StreamRunningError when a stream runs or is starting on the
    checkpoint: a second copy would corrupt it.
    """
    if not command:
        raise UsageError("nothing to launch: the command is empty", hint="give the spark-submit command line")
    side = open_sidecar(checkpoint)
    side.local_dir.mkdir(parents=True, exist_ok=True)
    with _launch_lock(side):
        # The generation to claim comes from a listing made before the check: a launch that
        # claimed one since is refused by the create-only write, one before it by the check.
        generations = launch_generations(side)
        generation = (generations[-1] if generations else 0) + 1
        _refuse_second_copy(side, stream)
        refuse_unfinished_restore(side)
        launch_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
        logs = Path(log_dir).expanduser().absolute() if log_dir else side.local_dir / LOG_DIR
        logs.mkdir(parents=True, exist_ok=True)
        prune_logs(logs)
        reached, env, given = with_checkpoint_access(command, dict(env or {}), side.fs)
        settings = {
            ENV_CHECKPOINT: side.location, ENV_LAUNCH_ID: launch_id, ENV_STREAM: stream,
            ENV_LAUNCH_GENERATION: str(generation), ENV_HEARTBEAT_INTERVAL: str(heartbeat_interval_s),
            **({ENV_QUERY_NAME: query_name} if query_name else {}),
            **({ENV_CHECKPOINT_FROM_CONF: "1"} if given else {}),
        }
        submission = Submission.prepare(
            reached, env={**os.environ, **env, **settings}, log_path=logs / f"{stream}-{launch_id}.log",
            name=stream, launch_id=launch_id, settings=settings, secret_env=env)
        started_at = now_iso()
        proc = submission.start(f"launching {stream} ({launch_id}) at {started_at}", cwd=cwd)
        handle = StreamHandle(stream, side.location, launch_id, proc.pid, socket.gethostname(),
                              str(submission.log_path), started_at, generation)
        record = LaunchRecord(handle, submission.shown, proc.pid, processes.proc_start(proc.pid), submission.app)
        _claim(side, record, proc)
        side.delete(STOP_FILE)  # a request for an earlier run
        _prune_launches(side, generation)
    if submission.app is not None:  # claimed: others see it starting; no need to hold this host's lock
        _submitted(side, record, submission, proc, submit_timeout_s)
    log.info("launched %s on %s: pid %d, generation %d, log %s", stream, side.location, proc.pid, generation,
             submission.log_path)
    return handle


def _submitted(side: Sidecar, record: LaunchRecord, submission: Submission, proc: subprocess.Popen[bytes],
               timeout_s: float) -> None:
    """Wait for spark-submit to hand the driver to the cluster manager (it returns once the
    application is accepted) and record where the manager has it (YARN: the application id
    spark-submit printed; a Kubernetes pod was named before) beside the checkpoint. Fails,
    killing what was submitted and recording the failure as the driver's exit, when
    spark-submit fails or names no application."""
    handle = record.handle
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.signal_group(proc.pid, signal.SIGKILL)
        code = None
    finally:
        submission.forget_secrets()
    cluster = submission.identify()
    assert cluster is not None
    manager = manager_named(cluster.manager)
    if cluster != record.cluster:
        side.write(launch_path(handle.generation), replace(record, cluster=cluster).to_json())
    if code != 0 or not manager.known(cluster):
        if manager.known(cluster):
            with contextlib.suppress(Exception):
                manager.kill(cluster)
        why = f"did not return within {timeout_s:.0f}s" if code is None else f"exited {code}"
        # Said beside the checkpoint, so no host waits for a driver that will never start.
        side.write(DRIVER_FILE, DriverRecord(handle.launch_id, handle.host, handle.pid, handle.started_at,
                                             exit_code=code if code else 1, exited_at=now_iso(),
                                             error=f"spark-submit {why}").to_json())
        raise StreamStartError(
            f"spark-submit of {handle.stream} to {manager.name} {why} without submitting it"
            + (f": {err}" if (err := last_error_line(handle.log)) else ""),
            hint=f"see its log {handle.log}",
        )
    log.info("submitted %s to %s: %s", handle.stream, manager.name, manager.describe(cluster))


def _claim(side: Sidecar, record: LaunchRecord, proc: subprocess.Popen[bytes]) -> None:
    """Record the launch as generation N with a create-only write: of launches racing from
    any hosts, exactly one creates it. A launch that lost kills the driver it started (it is
    still a JVM starting, long before it can touch the checkpoint; the driver also checks its
    generation is the newest before it runs anything: jobs/supervised.py) and is refused."""
    handle = record.handle
    try:
        won = side.create(launch_path(handle.generation), record.to_json())
    except BaseException:
        processes.signal_group(proc.pid, signal.SIGKILL)
        raise
    if won:
        return
    processes.signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    forget_secrets(handle)
    other = read_launch(side)
    where = (f"launch {other.handle.launch_id} from host {other.handle.host} at {other.handle.started_at}"
             if other else "another launch")
    raise StreamRunningError(
        f"cannot launch {handle.stream}: {where} claimed {side.location} first (generation "
        f"{handle.generation}); a second copy would corrupt it",
        hint="reconnect to the stream that runs (StartStreamOperator does), or stop it first",
    )


def _prune_launches(side: Sidecar, newest: int) -> None:
    """Delete launch records older than the last KEEP_LAUNCHES generations."""
    for generation in launch_generations(side):
        if generation <= newest - KEEP_LAUNCHES:
            side.delete(launch_path(generation))


def superseded_by(checkpoint: str | Path | Sidecar, generation: int, launch_id: str | None = None
                  ) -> LaunchRecord | None:
    """For the driver of launch `launch_id`, generation `generation`: the launch that owns
    its checkpoint instead (one of a higher generation, or another launch recorded under its
    own generation: its launcher lost the claim), else None. Its own record may not be there
    yet (the launcher writes it right after starting the driver)."""
    latest = read_launch(checkpoint)
    if latest is None or generation <= 0 or latest.handle.generation < generation:
        return None
    if latest.handle.generation == generation and (not launch_id or latest.handle.launch_id == launch_id):
        return None
    return latest


def _refuse_second_copy(side: Sidecar, stream: str) -> None:
    st = status(side)
    root = side.location
    if st.state == "running" and st.heartbeat is not None:
        beat = st.heartbeat
        raise StreamRunningError(
            f"cannot launch {stream}: query {beat.query_name or beat.query_id} is running on {root} "
            f"(host {beat.host}, pid {beat.pid}, last beat {beat.age_s():.0f}s ago); a second copy would corrupt it",
            hint="stop it first, or reconnect to it (StartStreamOperator returns its handle)",
        )
    if st.state in ("starting", "running"):
        where = f"host {st.handle.host}, pid {st.handle.pid}, launched {st.handle.started_at}" if st.handle else "no launch record"
        raise StreamRunningError(
            f"cannot launch {stream}: a driver is {st.state} on {root} ({where}); a second copy would corrupt it",
            hint="wait for it to run, or stop it first",
        )


def running_handle(checkpoint: str | Path | Sidecar | CheckpointFS) -> StreamHandle | None:
    """The handle of the stream that is running or starting on `checkpoint`, if it was
    launched through this module (a retried start reconnects to it)."""
    st = status(checkpoint)
    return st.handle if st.state in ("starting", "running") else None


def wait_until_running(
    handle: StreamHandle, *, timeout_s: float = 300.0, poll_s: float = 0.5,
    checkpoint: Sidecar | CheckpointFS | None = None,
) -> StreamStatus:
    """Block until the stream's heartbeat says `running` (its first progress event).

    Raises StreamStartError (with the log's last error line) when the driver dies, its
    query fails or it stops before that, TransientError when `timeout_s` passes first,
    and `Cancelled` when the enclosing cancellation token is cancelled (on_kill)."""
    try:
        return _wait_until_running(handle, open_sidecar(checkpoint or handle.checkpoint), timeout_s=timeout_s,
                                   poll_s=poll_s)
    finally:
        forget_secrets(handle)


def forget_secrets(handle: StreamHandle) -> None:
    """Delete the launch's properties file of secret confs (engine/streams/secret_confs.py),
    if it is on this host and still there: Spark has read it once the query runs or the
    driver is gone (the supervised driver deletes it itself as it starts)."""
    if handle.host == socket.gethostname() and handle.log.endswith(".log"):
        Path(handle.log[: -len(".log")] + ".properties").unlink(missing_ok=True)


def _wait_until_running(handle: StreamHandle, side: Sidecar, *, timeout_s: float, poll_s: float) -> StreamStatus:
    deadline = time.monotonic() + timeout_s
    token = current_token()
    while True:
        check_cancelled()
        st = status(side)
        if st.handle is not None and st.handle.launch_id != handle.launch_id:
            raise StreamStartError(
                f"stream {handle.stream} on {handle.checkpoint} was launched again ({st.handle.launch_id}) "
                f"while launch {handle.launch_id} was starting",
                hint="two tasks start this stream; let one of them do it",
            )
        if st.state == "running":
            return st
        if st.state not in ("starting", "absent"):
            detail = f": {st.last_error}" if st.last_error else ""
            raise StreamStartError(
                f"stream {handle.stream} {st.state} before it ran (exit code {st.exit_code}){detail}",
                hint=f"see the driver log {st.log}",
            )
        if time.monotonic() >= deadline:
            # A driver the cluster has not started yet says why (YARN: "Queue's AM resource limit exceeded").
            cluster = f"; the cluster says: {' '.join(st.app.diagnostics.split())[:300]}" if (
                st.app is not None and st.app.diagnostics) else ""
            raise TransientError(
                f"stream {handle.stream} did not report a running query within {timeout_s:.0f}s "
                f"(state {st.state}){cluster}",
                hint=f"see the driver log {handle.log}; a slow cluster may need a longer startup timeout",
            )
        if token is not None:
            token.wait(poll_s)
        else:
            time.sleep(poll_s)


# --- stop -------------------------------------------------------------------------------


def stop(
    target: StreamHandle | str | Path | Sidecar | CheckpointFS,
    *,
    timeout_s: float = 120.0,
    poll_s: float = 0.25,
    requested_by: str | None = None,
    checkpoint: Sidecar | CheckpointFS | None = None,
) -> StopResult:
    """Stop the stream on a checkpoint (a handle's, or the one given): graceful, then forced.

    Writes a stop request beside the checkpoint (the supervised driver polls for it,
    from any host) and, on this host, sends SIGTERM to the Python driver (to the whole
    process group while it has not started Python yet). The supervised driver waits for
    the batch in flight, stops its queries (the heartbeat says `stopped`) and exits.
    When the driver has not exited after `timeout_s`, its process group gets SIGKILL
    (a restart re-runs the unfinished batch from the checkpoint). Stopping a stream that
    does not run succeeds (`not-running`). A driver on another host cannot be killed from
    here: TransientError when it has not stopped in time. A handle's checkpoint is read
    through `checkpoint` when given (opened with the caller's connection).
    """
    started = time.monotonic()
    side = open_sidecar(checkpoint or (target.checkpoint if isinstance(target, StreamHandle) else target))
    root = side.location
    st = status(side)
    launch = read_launch(side)
    if isinstance(target, StreamHandle) and launch is not None and launch.handle.launch_id != target.launch_id:
        # That launch is not the stream's any more: never stop a newer one in its place.
        return StopResult(root, "not-running", time.monotonic() - started, "superseded", None, target.pid,
                          [f"launch {target.launch_id} was superseded by {launch.handle.launch_id}"])
    handle = launch.handle if launch else None
    cluster = launch.cluster if launch else None
    local = handle is not None and handle.host == socket.gethostname() and cluster is None
    group_alive = local and launch is not None and processes.group_alive(launch.pgid)
    if st.state not in ("starting", "running") and not group_alive:
        return StopResult(root, "not-running", time.monotonic() - started, st.state, st.exit_code,
                          handle.pid if handle else None)

    by = requested_by or f"{socket.gethostname()}:{os.getpid()}"
    write_stop_request(side, requested_at=now_iso(), by=by, launch_id=handle.launch_id if handle else None)
    detail = [f"stop requested by {by}"]
    beat = st.heartbeat
    if local and launch is not None and handle is not None:
        driver = read_driver(side, handle.launch_id)
        if driver is not None and driver.exit_code is None and processes.process_alive(driver.pid):
            processes.signal_pid(driver.pid, signal.SIGTERM)
            detail.append(f"SIGTERM to driver {driver.pid}")
        else:
            processes.signal_group(launch.pgid, signal.SIGTERM)
            detail.append(f"SIGTERM to process group {launch.pgid}")
    elif beat is not None and beat.host == socket.gethostname() and processes.process_alive(beat.pid):
        processes.signal_pid(beat.pid, signal.SIGTERM)  # a stream not launched by us, on this host
        detail.append(f"SIGTERM to driver {beat.pid}")

    deadline = started + timeout_s
    while time.monotonic() < deadline:
        if _stopped(side, launch, local):
            break
        time.sleep(poll_s)
    else:
        manager = manager_named(cluster.manager) if cluster is not None else None
        if cluster is not None and manager is not None and manager.known(cluster):
            with contextlib.suppress(NotFoundError):  # gone already
                manager.kill(cluster)  # through the cluster manager, from whichever host this runs on
            detail.append(f"killed {manager.describe(cluster)} through the cluster manager after {timeout_s:.0f}s")
            kill_deadline = time.monotonic() + 60
            while time.monotonic() < kill_deadline and not ((app := cluster_report(cluster)) is not None and app.ended):
                time.sleep(max(poll_s, 0.5))
            detail += clean_up_cluster(cluster)
            st = status(side)
            return StopResult(root, "killed", time.monotonic() - started, st.state, st.exit_code,
                              handle.pid if handle else None, detail)
        if not local or launch is None:
            st = status(side)
            raise TransientError(
                f"stream on {root} has not stopped within {timeout_s:.0f}s of the stop request (state {st.state})",
                hint=f"its driver runs on {handle.host if handle else 'another host'}: stop it there, or wait",
            )
        processes.signal_group(launch.pgid, signal.SIGKILL)
        detail.append(f"SIGKILL to process group {launch.pgid} after {timeout_s:.0f}s")
        kill_deadline = time.monotonic() + 30
        while processes.group_alive(launch.pgid) and time.monotonic() < kill_deadline:
            time.sleep(poll_s)
        st = status(side)
        return StopResult(root, "killed", time.monotonic() - started, st.state, st.exit_code,
                          handle.pid if handle else None, detail)
    if cluster is not None:
        detail += clean_up_cluster(cluster)
    st = status(side)  # stop.json stays: it tells a supervisor the stream was stopped on purpose
    return StopResult(root, "stopped", time.monotonic() - started, st.state, st.exit_code,
                      handle.pid if handle else None, detail)


def cluster_report(app: ClusterApp) -> AppReport | None:
    """What the cluster manager says of `app` now; None when it cannot say (no id yet, not
    reachable, it forgot the application): the records beside the checkpoint decide then."""
    manager = manager_named(app.manager)
    if not manager.known(app):
        return None
    try:
        return manager.report(app)
    except Exception as exc:  # noqa: BLE001 - unreachable or unconfigured: the records decide
        why = exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"
        log.warning("cannot ask the cluster manager about %s: %s", manager.describe(app), why)
        return None


def clean_up_cluster(app: ClusterApp) -> list[str]:
    """Remove what `app` left on the cluster once it ended (its staging directory holds
    every conf it was given); nothing while it may still run. What was removed."""
    report = cluster_report(app)
    if report is None or not report.ended:
        return []
    done = manager_named(app.manager).clean_up(app)
    for line in done:
        log.info("%s", line)
    return done


def clean_up_ended(checkpoint: str | Path | Sidecar) -> list[str]:
    """`clean_up_cluster` for the latest launch on `checkpoint` (the supervisor, before a restart)."""
    launch = read_launch(checkpoint)
    return clean_up_cluster(launch.cluster) if launch is not None and launch.cluster is not None else []


def _stopped(side: Sidecar, launch: LaunchRecord | None, local: bool) -> bool:
    """The query said it stopped (or never ran) and, on this host, the driver's processes are
    gone (on a cluster: its application ended)."""
    st = status(side)
    if st.state in ("starting", "running"):
        return False
    if st.app is not None:
        return st.app.ended
    if local and launch is not None:
        return not processes.group_alive(launch.pgid)
    return True


