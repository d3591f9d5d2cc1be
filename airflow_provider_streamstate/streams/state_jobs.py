"""State jobs from Airflow: the spark-submit command a Spark connection gives for one
(utils/spark_submit.py), submitted through the engine (engine/state/submit.py), which takes what
the application needs to reach the store from the store itself. What the state operators
share when they run their job on a cluster."""

from __future__ import annotations

from typing import Any

from airflow_provider_streamstate.engine.state.jobs import StateJobRequest
from airflow_provider_streamstate.engine.state.submit import state_job_application, state_job_arguments
from airflow_provider_streamstate.utils.spark_submit import (
    SparkJobOptions,
    require_spark_connection,
    spark_submit_command,
)


def state_job_command(request: StateJobRequest, options: SparkJobOptions) -> tuple[list[str], dict[str, str]]:
    """spark-submit of jobs/state_job.py for `request`, and the environment it runs with."""
    assert options.conn_id is not None
    require_spark_connection(options.conn_id, what="the state job",
                             example='{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}',
                             otherwise="leave the Spark connection out to run the job in the task")
    return spark_submit_command(state_job_application(), conn_id=options.conn_id,
                                application_args=state_job_arguments(request),
                                name=f"streamstate-{request.kind}-{request.stream}", conf=options.conf,
                                jars=options.jar_list(), env=options.env, deploy_mode=options.deploy_mode or None)


def run_state_job_on_cluster(request: StateJobRequest, store: Any, options: SparkJobOptions, *,
                             log: Any) -> dict[str, Any]:
    """Submit `request` through `options`' Spark connection and wait for its result; logs
    where it ran."""
    from airflow_provider_streamstate.engine.state.submit import submit_state_job

    request = request.with_job_id()
    command, env = state_job_command(request, options)

    def submitted(job: Any) -> None:
        where = job.app_id or f"pid {job.proc.pid if job.proc else '?'}"
        log.info("state job %s submitted through %s (%s); spark-submit log %s", request.job_id, options.conn_id,
                 where, job.log_path)

    result: dict[str, Any] = submit_state_job(request, store, command, env=env, timeout_s=options.timeout_s,
                                              on_submit=submitted, ship_code=options.ship_code)
    ran_on = result.get("ran_on") or {}
    log.info("state job ran on %s (%s mode, application %s)", ran_on.get("master"), ran_on.get("deploy_mode"),
             ran_on.get("app_id"))
    return result
