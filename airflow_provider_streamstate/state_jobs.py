"""State jobs from Airflow: the spark-submit command the apache-spark provider's
SparkSubmitHook builds for one (the Spark connection's master, deploy mode, binary, queue
and principal), and the store's endpoint and credentials from the stream's `aws` connection.
What the state operators share when they run their job on a cluster (engine/state/submit.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_streamstate.engine.state.jobs import StateJobRequest
from airflow_provider_streamstate.engine.state.submit import (
    StoreAccess,
    state_job_application,
    state_job_arguments,
)


def store_access(aws_conn_id: str | None) -> StoreAccess:
    """The store's endpoint and credentials: the Airflow `aws` connection's (through the amazon
    provider's AwsBaseHook: role assumption, profiles), else this process's AWS environment."""
    if not aws_conn_id:
        return StoreAccess.from_environment()
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    creds = hook.get_credentials()
    return StoreAccess(endpoint_url=hook.conn_config.get_service_endpoint_url("s3"),
                       region=hook.conn_config.region_name, access_key=creds.access_key,
                       secret_key=creds.secret_key, session_token=creds.token)


def state_job_command(
    request: StateJobRequest, *, spark_conn_id: str, conf: Mapping[str, str] | None = None,
    jars: Sequence[str] | str | None = None, env: Mapping[str, str] | None = None, deploy_mode: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """spark-submit of jobs/state_job.py for `request`, and the environment it runs with."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_streamstate.engine.streams.launcher import package_python_env, resolve_spark_submit
    from airflow_provider_streamstate.stream_start import require_spark_connection

    require_spark_connection(spark_conn_id, what="the state job",
                             example='{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}',
                             otherwise="leave spark_conn_id out to run the job in the task")
    jar_list = jars.split(",") if isinstance(jars, str) else list(jars or [])
    hook = SparkSubmitHook(conf=dict(conf or {}), conn_id=spark_conn_id, jars=",".join(jar_list) or None,
                           name=f"streamstate-{request.kind}-{request.stream}",
                           application_args=state_job_arguments(request), env_vars=dict(env or {}) or None,
                           deploy_mode=deploy_mode)
    command = hook._build_spark_submit_command(state_job_application())
    return resolve_spark_submit(command, package_python_env(command, env or {}))


def run_state_job_on_cluster(
    request: StateJobRequest, store: Any, *, aws_conn_id: str | None, spark_conn_id: str,
    conf: Mapping[str, str] | None, jars: Sequence[str] | str | None, env: Mapping[str, str] | None,
    deploy_mode: str | None, timeout_s: float | None, log: Any,
) -> dict[str, Any]:
    """Submit `request` and wait for its result (engine/state/submit.py)."""
    from airflow_provider_streamstate.engine.state.scratch import is_s3_store
    from airflow_provider_streamstate.engine.state.submit import submit_state_job

    request = request.with_job_id()
    command, job_env = state_job_command(request, spark_conn_id=spark_conn_id, conf=conf, jars=jars, env=env,
                                         deploy_mode=deploy_mode)
    access = store_access(aws_conn_id) if is_s3_store(store) else None

    def submitted(job: Any) -> None:
        where = f"YARN application {job.app_id}" if job.app_id else f"pid {job.proc.pid if job.proc else '?'}"
        log.info("state job %s submitted through %s (%s); spark-submit log %s", request.job_id, spark_conn_id, where,
                 job.log_path)

    return submit_state_job(request, store, command, env=job_env, access=access, timeout_s=timeout_s,
                            on_submit=submitted)
