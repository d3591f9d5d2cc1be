"""Starting a stream's driver from a `StreamSpec`: the spark-submit command its `spark`
connection gives (spark_submit.py), launched (or reconnected to) through the engine's
launcher, the records beside its checkpoint read and written with the spec's connection.
What StartStreamOperator, the supervisor's restarts, the deploy gate and `streamstate
stream start` share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spark_submit import require_spark_connection, spark_submit_command
from airflow_provider_streamstate.spec import StreamSpec


def stream_command(spec: StreamSpec) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line that runs `spec.application` under the supervised
    wrapper, through the spec's `spark` connection (its master, deploy mode, binary, queue
    and principal; `spec.master` and `spec.deploy_mode` override them), and the environment
    the driver gets on top of the worker's."""
    from airflow_provider_streamstate.engine.streams.launcher import supervised_application

    if not spec.application:
        raise UsageError(f"stream {spec.name} has no application", hint="set the spec's application (its .py file)")
    if spec.master is None:
        require_spark_connection(spec.spark_conn_id, what="spark-submit",
                                 example='{"conn_type": "spark", "host": "local[2]"}',
                                 otherwise="set the stream's master")
    application = spec.application
    if "://" not in application and os.path.exists(application):
        application = os.path.abspath(application)
    return spark_submit_command(
        supervised_application(), conn_id=spec.spark_conn_id, application_args=[application, *spec.resolved_args()],
        name=spec.name, conf=spec.conf, jars=spec.jars, env=spec.env, master=spec.master,
        deploy_mode=spec.deploy_mode)


def start_stream(
    spec: StreamSpec, *, startup_timeout_s: float, log: Any, on_launch: Callable[[Any], None] = lambda h: None
) -> tuple[Any, Any, bool]:
    """Launch `spec` (or reconnect to the copy running or starting on its checkpoint) and
    wait until its query runs. Returns (handle, status, reconnected). A driver that dies
    before its query runs fails with its log's last error line; one that does not run in
    `startup_timeout_s` is killed (a retry starts afresh)."""
    from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
    from airflow_provider_streamstate.engine.core.errors import TransientError
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.hooks.store import open_checkpoint

    # The records beside a remote checkpoint are read and written with the spec's connection
    # here; the driver writes its own with the credentials of its environment.
    side = open_sidecar(open_checkpoint(spec.checkpoint, spec.aws_conn_id))
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

