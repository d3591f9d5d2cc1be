"""Starting a stream's driver from a `StreamSpec`: the spark-submit command the apache-spark
provider's SparkSubmitHook builds from the spec and its `spark` connection, launched (or
reconnected to) through the engine's launcher. What StartStreamOperator, the supervisor's
restarts, the deploy gate and `streamstate stream start` share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import StreamSpec


def spark_submit_command(spec: StreamSpec) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line that runs `spec.application` under the supervised
    wrapper, built by the apache-spark provider's SparkSubmitHook (the `spark` connection's
    master, deploy mode, binary, queue and principal; `spec.master` and `spec.deploy_mode`
    override them),
    and the environment the driver gets on top of the worker's."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_streamstate.engine.streams.launcher import (
        package_python_env,
        resolve_spark_submit,
        supervised_application,
    )

    if not spec.application:
        raise UsageError(f"stream {spec.name} has no application", hint="set the spec's application (its .py file)")
    if spec.master is None:
        require_spark_connection(spec.spark_conn_id, what="spark-submit",
                                 example='{"conn_type": "spark", "host": "local[2]"}',
                                 otherwise="set the stream's master")
    master = spec.master

    class _Hook(SparkSubmitHook):
        def _resolve_connection(self) -> dict[str, Any]:
            data = super()._resolve_connection()
            if master:
                data["master"] = master
            return data

    application = spec.application
    if "://" not in application and os.path.exists(application):
        application = os.path.abspath(application)
    hook = _Hook(
        conf=dict(spec.conf), conn_id=spec.spark_conn_id, jars=",".join(spec.jars) or None, name=spec.name,
        application_args=[application, *spec.resolved_args()], env_vars=dict(spec.env) or None,
        deploy_mode=spec.deploy_mode,
    )
    command = hook._build_spark_submit_command(supervised_application())
    return resolve_spark_submit(command, package_python_env(command, spec.env))


def require_spark_connection(conn_id: str, *, what: str, example: str, otherwise: str) -> None:
    """A UsageError naming how to define the Spark connection `conn_id` when it does not exist."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise UsageError(
            f"Airflow connection {conn_id!r} does not exist (it gives {what} its master)",
            hint=f"define it (e.g. AIRFLOW_CONN_{conn_id.upper()}='{example}'), or {otherwise}",
        ) from None


def start_stream(
    spec: StreamSpec, *, startup_timeout_s: float, log: Any, on_launch: Callable[[Any], None] = lambda h: None
) -> tuple[Any, Any, bool]:
    """Launch `spec` (or reconnect to the copy running or starting on its checkpoint) and
    wait until its query runs. Returns (handle, status, reconnected). A driver that dies
    before its query runs fails with its log's last error line; one that does not run in
    `startup_timeout_s` is killed (a retry starts afresh)."""
    from airflow_provider_streamstate.engine.core.errors import TransientError
    from airflow_provider_streamstate.engine.streams import launcher
    from airflow_provider_streamstate.hooks.store import use_checkpoint_connection

    # The records beside an S3 checkpoint are read and written with the spec's connection
    # here; the driver writes its own with the credentials of its environment.
    use_checkpoint_connection(spec.checkpoint, spec.aws_conn_id)
    handle = launcher.running_handle(spec.checkpoint)
    reconnected = handle is not None
    if handle is not None:
        if handle.stream != spec.name:
            raise UsageError(
                f"checkpoint {spec.checkpoint} belongs to stream {handle.stream}, not {spec.name}",
                hint="give each stream its own checkpoint",
            )
        log.info("stream %s is already %s on %s (pid %d on %s): reconnecting", spec.name,
                 launcher.status(spec.checkpoint).state, spec.checkpoint, handle.pid, handle.host)
    else:
        from airflow_provider_streamstate.engine.core.errors import StreamRunningError

        command, env = spark_submit_command(spec)
        _warn_if_the_driver_stays_here(spec, command, log)
        try:
            handle = launcher.launch(command, stream=spec.name, checkpoint=spec.checkpoint, env=env,
                                     heartbeat_interval_s=spec.heartbeat_interval_s)
        except StreamRunningError as exc:  # another task, on any host, started it first
            handle = launcher.running_handle(spec.checkpoint)
            if handle is None or handle.stream != spec.name:
                raise
            reconnected = True
            log.info("%s: reconnecting to launch %s", exc.message, handle.launch_id)
    on_launch(handle)
    try:
        status = launcher.wait_until_running(handle, timeout_s=startup_timeout_s)
    except TransientError:
        launcher.stop(handle, timeout_s=0)
        raise
    except launcher.StreamStartError:
        launcher.stop(handle, timeout_s=0)  # whatever of it is left
        raise
    return handle, status, reconnected


def _warn_if_the_driver_stays_here(spec: StreamSpec, command: list[str], log: Any) -> None:
    """Client mode on a cluster: the driver lives on this worker, as long as this host (and,
    under the Kubernetes executor, this task's pod) does. Said once per launch."""
    from airflow_provider_streamstate.engine.streams.kubernetes import kubernetes_cluster_mode, option_value
    from airflow_provider_streamstate.engine.streams.launcher import yarn_cluster_mode

    master = option_value(command, "--master") or ""
    if master.startswith("local") or yarn_cluster_mode(command) or kubernetes_cluster_mode(command):
        return
    log.warning("stream %s: its driver runs on this worker (client mode on %s): it dies with this host, or with "
                "this task's pod under the Kubernetes executor; to outlive the worker, run it in cluster deploy "
                "mode (YARN, Kubernetes: deploy_mode='cluster')", spec.name, master)

