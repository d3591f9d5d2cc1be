"""spark-submit commands from Airflow's `spark` connections, for streams and state jobs alike.

A `spark` connection (the apache-spark provider's connection type) says where applications
go: its host (and port) is the master, its extra the deploy mode, spark-binary, YARN queue,
Kubernetes namespace and Kerberos principal/keytab. This module reads it and builds the
command itself, as the provider's SparkSubmitHook does, without the provider: the hook has
no public way to build a command without running it (`submit()` runs it and blocks; a
stream never ends, and the engine starts it detached: engine/streams/submission.py), and a
worker that only submits needs neither the provider nor its line's pyspark (5.x: the full
pyspark; 6.x: pyspark-client). Which spark-submit runs is engine/streams/submission.py's
`resolve_spark_submit` (the connection's spark-binary, SPARK_HOME, the PATH, pyspark's).
The command is logged at INFO with the project's redaction: a conf named `*api_key*` or an
environment entry named `*TOKEN*` never shows, whatever logs the command.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_streamstate.engine.core.config.redact import redact_command, sensitive_values
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.spec import SparkJobOptions  # noqa: F401 - where it lived before spec.py

_LOG = logging.getLogger("streamstate.spark_submit")


@dataclass(frozen=True)
class SparkConnection:
    """Where a `spark` connection sends applications, read as SparkSubmitHook reads it."""

    master: str
    deploy_mode: str | None = None
    binary: str = "spark-submit"
    queue: str | None = None
    namespace: str | None = None
    principal: str | None = None
    keytab: str | None = None  # the connection's base64 keytab, as a file path

    @classmethod
    def of(cls, conn: Any) -> SparkConnection:
        """From an Airflow Connection: a UI connection keeps the whole master URL in its host
        (`yarn`, `local[2]`, `k8s://https://host`); one from a URI has the scheme as its type."""
        if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
            master = conn.host
        else:
            master = f"{conn.conn_type}://{conn.host or ''}"
        if conn.port:
            master = f"{master}:{conn.port}"
        extra = conn.extra_dejson
        if extra.get("spark-home"):
            raise UsageError(f"connection {conn.conn_id!r}: the spark-home extra is not read",
                             hint="set SPARK_HOME in the worker's environment, or spark-binary to the "
                             "spark-submit's path")
        keytab = extra.get("keytab")
        return cls(master=master, deploy_mode=extra.get("deploy-mode") or None,
                   binary=extra.get("spark-binary") or "spark-submit", queue=extra.get("queue") or None,
                   namespace=extra.get("namespace") or None, principal=extra.get("principal") or None,
                   keytab=_keytab_file(keytab, extra.get("principal")) if keytab else None)


def _keytab_file(base64_keytab: str, principal: str | None) -> str:
    """The connection's keytab written where only this user reads it, once per content."""
    import base64
    import binascii
    import hashlib

    from airflow_provider_streamstate.engine.checkpoint.filesystems import streamstate_home

    try:
        data = base64.b64decode(base64_keytab, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError("the spark connection's keytab is not base64",
                         hint="give the keytab file's bytes base64-encoded (base64 -w0 my.keytab)") from None
    folder = streamstate_home() / "keytabs"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{principal or 'keytab'}-{hashlib.sha256(data).hexdigest()[:16]}".replace("/", "_")
    if not path.exists():
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(staging, path)
    return str(path)


def spark_connection(conn_id: str, *, master: str | None = None) -> SparkConnection:
    """The connection `conn_id`, `master` (when given) winning over its own; without the
    connection, `master` alone (none either: UsageError saying how to define it)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        found = SparkConnection.of(BaseHook.get_connection(conn_id))
    except AirflowNotFoundException:
        if not master:
            raise UsageError(f"Airflow connection {conn_id!r} does not exist (it gives spark-submit its master)",
                             hint=f"define it (e.g. AIRFLOW_CONN_{conn_id.upper()}="
                             '\'{"conn_type": "spark", "host": "yarn"}\'), or give the master') from None
        return SparkConnection(master=master)
    return replace(found, master=master) if master else found


def spark_submit_command(
    application: str, *, conn_id: str, application_args: Sequence[str], name: str,
    conf: Mapping[str, str] | None = None, jars: Sequence[str] = (), env: Mapping[str, str] | None = None,
    master: str | None = None, deploy_mode: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command of `application` through the Spark connection `conn_id`
    (`master` and `deploy_mode`, when given, win over the connection's), and the environment
    it runs with on top of the worker's. `env` is spark-submit's (and so a driver's that runs
    here); on YARN and Kubernetes it also becomes the driver's on the cluster
    (`spark.yarn.appMasterEnv.*`, `spark.kubernetes.driverEnv.*`), as SparkSubmitHook does."""
    from airflow_provider_streamstate.engine.streams.submission import (
        package_python_env,
        resolve_spark_submit,
    )

    connection = spark_connection(conn_id, master=master)
    deploy_mode = deploy_mode or connection.deploy_mode
    conf, env = dict(conf or {}), dict(env or {})
    is_yarn, is_kubernetes = "yarn" in connection.master, "k8s" in connection.master
    cmd = [connection.binary, "--master", connection.master]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    if env and (is_yarn or is_kubernetes):
        template = "spark.yarn.appMasterEnv.{}={}" if is_yarn else "spark.kubernetes.driverEnv.{}={}"
        for key, value in env.items():
            cmd += ["--conf", template.format(key, value)]
    elif env and deploy_mode == "cluster":
        raise UsageError(f"an environment for the driver cannot reach it on {connection.master} in cluster mode",
                         hint="pass the values as Spark confs, or run in client mode")
    namespace = conf.get("spark.kubernetes.namespace") or connection.namespace
    if is_kubernetes and namespace and "spark.kubernetes.namespace" not in conf:
        cmd += ["--conf", f"spark.kubernetes.namespace={namespace}"]
    if jars:
        cmd += ["--jars", ",".join(jars)]
    if connection.keytab:
        cmd += ["--keytab", connection.keytab]
    if connection.principal:
        cmd += ["--principal", connection.principal]
    cmd += ["--name", name]
    if connection.queue:
        cmd += ["--queue", connection.queue]
    if deploy_mode:
        cmd += ["--deploy-mode", deploy_mode]
    if "://" not in application and os.path.exists(application):
        application = os.path.abspath(application)
    cmd += [application, *application_args]
    hidden = sensitive_values(conf=conf, env=env, args=list(application_args))
    _LOG.info("spark-submit command: %s", " ".join(redact_command(cmd, secrets=hidden)))
    return resolve_spark_submit(cmd, package_python_env(cmd, env))


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
