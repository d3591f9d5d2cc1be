"""spark-submit commands from Airflow's `spark` connections, for streams and state jobs alike.

The apache-spark provider's SparkSubmitHook turns a connection (master, deploy mode, binary,
queue, Kerberos principal) and the application's options into a command line. It has no
public way to build that command without running it (`submit()` runs it and blocks; a
stream never ends, and the engine starts it detached: engine/streams/submission.py), so this
module is the one place that calls its `_build_spark_submit_command`, `_resolve_connection`
(to let a spec's `master` win over the connection's) and `_mask_cmd`; the provider range that
has them is pinned in pyproject.toml (`>=5.0,<6`), and docs/deployment.md says why. The hook
logs the command at INFO masked by its own rule (only names with `secret` or `password`):
`_mask_cmd` is the project's redaction here, so a conf named `*api_key*` or an environment
entry named `*TOKEN*` never shows, whatever logs the command.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_streamstate.engine.core.config.redact import redact_command, sensitive_values
from airflow_provider_streamstate.engine.core.config.values import optional_duration
from airflow_provider_streamstate.engine.core.errors import UsageError

_HOOK_LOG = logging.getLogger("streamstate.spark_submit")


@dataclass
class SparkJobOptions:
    """Where and how a Spark application of this package runs (a state job: validation,
    report, bisect), as one templated value.

    :param conn_id: the Spark connection to submit to (its master and deploy mode: YARN,
        Kubernetes, standalone, local). None: the job runs in the task, on a local Spark
        session, with the snapshot copied to the worker's disk.
    :param deploy_mode: `client` or `cluster`; default the connection's.
    :param conf: Spark confs of the application (executors, memory, S3A, ...).
    :param jars: jars the application needs (the S3A connector for an S3 store).
    :param env: environment of spark-submit and of a driver that runs here (HADOOP_CONF_DIR...).
    :param timeout: how long the application may run before it is killed (`30m`, seconds);
        None: no limit.
    """

    conn_id: str | None = None
    deploy_mode: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    jars: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout: str | float | None = None

    # Airflow renders these when the value is an operator's templated argument.
    template_fields: ClassVar[tuple[str, ...]] = ("conn_id", "deploy_mode", "conf", "jars", "env", "timeout")

    @classmethod
    def of(cls, value: SparkJobOptions | Mapping[str, Any] | None) -> SparkJobOptions:
        """The options as given: this value, its dict (from a DAG's JSON), or none at all."""
        if value is None:
            return cls()
        if isinstance(value, SparkJobOptions):
            return value
        if not isinstance(value, Mapping):
            raise UsageError(f"spark must be SparkJobOptions or a dict, not {type(value).__name__}",
                             hint="pass SparkJobOptions(conn_id=..., conf={...})")
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise UsageError(f"unknown Spark job option(s) {', '.join(unknown)}",
                             hint=f"they are {', '.join(cls.__dataclass_fields__)}")
        return cls(**dict(value))

    @property
    def on_cluster(self) -> bool:
        return bool(self.conn_id)

    @property
    def timeout_s(self) -> float | None:
        return optional_duration(self.timeout, "the Spark job's timeout")

    def jar_list(self) -> list[str]:
        return self.jars.split(",") if isinstance(self.jars, str) else list(self.jars or [])


def spark_submit_command(
    application: str, *, conn_id: str, application_args: Sequence[str], name: str,
    conf: Mapping[str, str] | None = None, jars: Sequence[str] = (), env: Mapping[str, str] | None = None,
    master: str | None = None, deploy_mode: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command of `application` through the Spark connection `conn_id`
    (`master` and `deploy_mode`, when given, win over the connection's), and the environment
    it runs with on top of the worker's; spark-submit itself is the one on the PATH, else
    the one pyspark ships."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_streamstate.engine.streams.submission import (
        package_python_env,
        resolve_spark_submit,
    )

    hidden = sensitive_values(conf=dict(conf or {}), env=dict(env or {}), args=list(application_args))

    class _Hook(SparkSubmitHook):
        def _resolve_connection(self) -> dict[str, Any]:
            data = super()._resolve_connection()
            if master:
                data["master"] = master
            return data

        @property
        def log(self) -> Any:  # type: ignore[override]
            """The project's logger, not the hook's structlog one, which prints to stdout
            outside a task: there it would mix `Spark-Submit cmd:` into the CLI's results
            (`--json` included). Through stdlib logging it reaches a task's log as before,
            and the CLI's stderr with --verbose."""
            return _HOOK_LOG

        def _mask_cmd(self, connection_cmd: str | list[str]) -> str:
            args = connection_cmd.split() if isinstance(connection_cmd, str) else list(connection_cmd)
            return " ".join(redact_command(args, secrets=hidden))

    if "://" not in application and os.path.exists(application):
        application = os.path.abspath(application)
    hook = _Hook(conf=dict(conf or {}), conn_id=conn_id, jars=",".join(jars) or None, name=name,
                 application_args=list(application_args), env_vars=dict(env or {}) or None, deploy_mode=deploy_mode)
    command = hook._build_spark_submit_command(application)
    return resolve_spark_submit(command, package_python_env(command, env or {}))


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
