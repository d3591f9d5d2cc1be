"""Starting a stream's driver from a `StreamSpec`: the spark-submit command its `spark`
connection gives (utils/spark_submit.py), launched (or reconnected to) through the engine's
launcher, the records beside its checkpoint read and written with the spec's connection.
What StartStreamOperator, the supervisor's restarts, the deploy gate and `streamstate
stream start` share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.utils.spark_submit import require_spark_connection, spark_submit_command

if TYPE_CHECKING:
    from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar


def stream_command(spec: StreamSpec) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line that runs `spec.application` under the supervised
    wrapper, through the spec's `spark` connection (its master, deploy mode, binary, queue
    and principal; `spec.master` and `spec.deploy_mode` override them), and the environment
    the driver gets on top of the worker's."""
    from airflow_provider_streamstate.engine.streams.launcher import supervised_application
    from airflow_provider_streamstate.engine.streams.package_code import ships_driver_code, with_package_code

    if not spec.application:
        raise UsageError(f"stream {spec.name} has no application", hint="set the spec's application (its .py file)")
    if spec.master is None:
        require_spark_connection(spec.spark_conn_id, what="spark-submit",
                                 example='{"conn_type": "spark", "host": "local[2]"}',
                                 otherwise="set the stream's master")
    application = spec.application
    if "://" not in application and os.path.exists(application):
        application = os.path.abspath(application)
    command, env = spark_submit_command(
        supervised_application(), conn_id=spec.spark_conn_id, application_args=[application, *spec.resolved_args()],
        name=spec.name, conf=spec.conf, jars=spec.jars, env=spec.env, master=spec.master,
        deploy_mode=spec.deploy_mode)
    return with_package_code(command, ships_driver_code(command, spec.ship_code)), env


def start_stream(
    spec: StreamSpec, *, startup_timeout_s: float, log: Any, on_launch: Callable[[Any], None] = lambda h: None,
    checkpoint: Sidecar | None = None,
) -> tuple[Any, Any, bool]:
    """Launch `spec` (or reconnect to the copy running or starting on its checkpoint) and
    wait until its query runs. Returns (handle, status, reconnected). A driver that dies
    before its query runs fails with its log's last error line; one that does not run in
    `startup_timeout_s` is killed (a retry starts afresh). `checkpoint`: the spec's
    checkpoint as the caller opened it (`opened_checkpoint`), else opened here."""
    from airflow_provider_streamstate.engine.core.errors import TransientError
    from airflow_provider_streamstate.engine.streams import launcher

    side = checkpoint if checkpoint is not None else opened_checkpoint(spec)
    handle = launcher.running_handle(side)
    reconnected = handle is not None
    if handle is not None:
        if handle.stream != spec.name:
            raise UsageError(
                f"checkpoint {spec.checkpoint} belongs to stream {handle.stream}, not {spec.name}",
                hint="give each stream its own checkpoint",
            )
        log.info("stream %s is already %s on %s (pid %d on %s): reconnecting", spec.name,
                 launcher.status(side).state, spec.checkpoint, handle.pid, handle.host)
    else:
        from airflow_provider_streamstate.engine.core.errors import StreamRunningError

        command, env = stream_command(spec)
        _warn_if_the_driver_stays_here(spec, command, log)
        try:
            handle = launcher.launch(command, stream=spec.name, checkpoint=side, env=env,
                                     heartbeat_interval_s=spec.heartbeat_interval_s)
        except StreamRunningError as exc:  # another task, on any host, started it first
            handle = launcher.running_handle(side)
            if handle is None or handle.stream != spec.name:
                raise
            reconnected = True
            log.info("%s: reconnecting to launch %s", exc.message, handle.launch_id)
    on_launch(handle)
    try:
        status = launcher.wait_until_running(handle, timeout_s=startup_timeout_s, checkpoint=side)
    except TransientError:
        launcher.stop(handle, timeout_s=0, checkpoint=side)
        raise
    except launcher.StreamStartError:
        launcher.stop(handle, timeout_s=0, checkpoint=side)  # whatever of it is left
        raise
    return handle, status, reconnected


def opened_checkpoint(spec: StreamSpec, *, max_connections: int = 16) -> Sidecar:
    """The records beside the spec's checkpoint, reached with the spec's connection: opened
    once per operation and handed to every step of it (the driver writes its own records
    with the credentials of its environment)."""
    from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
    from airflow_provider_streamstate.hooks.store import open_checkpoint

    return open_sidecar(open_checkpoint(spec.checkpoint, spec.storage_conn_id, max_connections=max_connections))


def _warn_if_the_driver_stays_here(spec: StreamSpec, command: list[str], log: Any) -> None:
    """Client mode on a cluster: the driver lives on this worker, as long as this host (and,
    under the Kubernetes executor, this task's pod) does. Said once per launch."""
    from airflow_provider_streamstate.engine.streams.command import master_of
    from airflow_provider_streamstate.engine.streams.managers import manager_for

    manager = manager_for(command)
    if manager.name == "local" or manager.driver_on_cluster(command):
        return
    master = master_of(command)
    log.warning("stream %s: its driver runs on this worker (client mode on %s): it dies with this host, or with "
                "this task's pod under the Kubernetes executor; to outlive the worker, run it in cluster deploy "
                "mode (YARN, Kubernetes: deploy_mode='cluster')", spec.name, master)



def finish_planned_batch(spec: StreamSpec, *, timeout_s: float, log: Any, checkpoint: Sidecar | None = None
                         ) -> int | None:
    """Commit the batch a stop interrupted, as Spark planned it, and leave the stream stopped.

    A stop lets the batch in flight finish, but a busy stream plans its next batch the moment
    one commits: a stop that lands after that leaves `offsets/N+1` without `commits/N+1`. A
    restart would redo that batch as planned (the sinks that record batch ids rely on it), so
    whatever works on the stopped checkpoint at batch N (a rescale, an edit) would drop it.
    This runs the stream's application once with every query on Trigger.Once, which runs
    exactly the planned batch and ends. Returns the batch it committed, None when the
    checkpoint held none (nothing is launched then). The stream must be stopped. `checkpoint`:
    the spec's checkpoint as the caller opened it (the stop's), else opened here."""
    import time

    from airflow_provider_streamstate.engine.checkpoint.liveness import now_iso
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.core.errors import StreamRunningError, TransientError
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.engine.streams.records import write_stop_request

    side = checkpoint if checkpoint is not None else opened_checkpoint(spec)
    fs = side.fs
    reader = CheckpointReader(fs.fresh())
    offsets, commits = reader.offset_batches(), reader.committed_batches()
    if not offsets or (commits and commits[-1] >= offsets[-1]):
        return None
    planned = offsets[-1]
    state = launcher.status(side).state
    if state in ("starting", "running"):
        raise StreamRunningError(f"stream {spec.name} is {state} on {spec.checkpoint}: its planned batch {planned} "
                                 "is its own to finish", hint="stop it first")
    log.info("stream %s: batch %d was planned but not committed when it stopped: running it once to commit it",
             spec.name, planned)
    command, env = stream_command(spec)
    handle = launcher.launch(command, stream=spec.name, checkpoint=side,
                             env={**env, launcher.ENV_FINISH_PLANNED_BATCH: "1"},
                             heartbeat_interval_s=spec.heartbeat_interval_s)
    deadline = time.monotonic() + timeout_s
    while (status := launcher.status(side)).state in ("starting", "running"):
        if time.monotonic() > deadline:
            launcher.stop(handle, timeout_s=60, checkpoint=side, requested_by="finish_planned_batch timeout")
            raise TransientError(f"stream {spec.name} did not commit its planned batch {planned} within "
                                 f"{timeout_s:.0f}s", hint=f"see its log {handle.log}")
        time.sleep(0.5)
    launcher.forget_secrets(handle)
    # Stopped on purpose, as before this run (its launch cleared the request): a supervisor
    # reads the request beside the checkpoint and leaves the stream stopped.
    write_stop_request(side, requested_at=now_iso(), by=f"finish_planned_batch of {spec.name}",
                       launch_id=handle.launch_id)
    if planned not in CheckpointReader(fs.fresh()).committed_batches():
        raise launcher.StreamStartError(f"stream {spec.name} ended ({status.state}) without committing its planned batch "
                                f"{planned}: {status.last_error or 'no error recorded'}",
                                hint=f"see its log {handle.log}; starting it redoes the batch")
    log.info("stream %s: committed its planned batch %d; stopped", spec.name, planned)
    return planned


def put_back(spec: StreamSpec, pinned: str | None, *, start: bool, requested_by: str, log: Any) -> dict[str, Any]:
    """A stream put back as it was before an offline change that failed after the stop: the
    pinned snapshot restored over its checkpoint (when the change had put its state in
    place: `pinned`), then the stream started (`start`: it ran before the stop). What the
    rescale and repair DAGs' rollbacks do."""
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.hooks.store import StreamstateStoreHook

    if not pinned and not start:
        return {"restored": None, "started": False}
    side = opened_checkpoint(spec)
    if pinned:
        launcher.stop(side, timeout_s=120, requested_by=requested_by)
        store = StreamstateStoreHook(spec.store, storage_conn_id=spec.storage_conn_id).store
        restore_snapshot(store, spec.name, pinned, side.fs, force=True)
        log.info("restored %s over %s: the stream is back at its state before the change", pinned, spec.checkpoint)
    if not start:
        return {"restored": pinned, "started": False}
    handle, status, reconnected = start_stream(spec, startup_timeout_s=900, log=log, checkpoint=side)
    return {"restored": pinned, "started": True, "launch_id": handle.launch_id, "reconnected": reconnected,
            "state": status.state}
