"""Where a command's state jobs run (`state`, `diff`, `validate`, `bisect`, `pipeline
validate`): here on a local Spark session, or as Spark applications on `--master` /
`--spark-conn-id` (engine/state/submit.py), the options that choose it, and the runner.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from types import TracebackType
from typing import Any

from airflow_provider_streamstate.cli.common import open_store_from_args


def add_job_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, metavar="URL",
                       help="run as a Spark application on this master (yarn, spark://..., local[*]); default: here")
    where.add_argument("--spark-conn-id", default=None, metavar="CONN",
                       help="run as a Spark application through this Airflow Spark connection (its master, deploy "
                       "mode, spark-binary)")
    p.add_argument("--deploy-mode", choices=("client", "cluster"), default=None,
                   help="where the application's driver runs (with --master; default client)")
    p.add_argument("--conf", action="append", default=[], metavar="K=V", dest="spark_conf",
                   help="a Spark conf of the application (repeat it)")
    p.add_argument("--jars", default=None, metavar="J,...", help="jars the application needs (S3A for an S3 store)")
    p.add_argument("--ship-code", action=argparse.BooleanOptionalAction, default=None,
                   help="give the application this package's code as a zip in its --py-files, so that the "
                   "cluster's Python needs only pyspark (default: on a cluster, any master but local)")


def submitted(args: argparse.Namespace) -> bool:
    return bool(args.master or args.spark_conn_id)


class StateJobs:
    """Answers state job requests where the options say: here (one local Spark session for
    every request of the command), or each request as its own Spark application."""

    def __init__(self, args: argparse.Namespace) -> None:
        from airflow_provider_streamstate.engine.core.errors import UsageError

        self.args = args
        self.store = open_store_from_args(args)
        self._reader: Any = None
        if not submitted(args) and (args.deploy_mode or args.spark_conf or args.jars or args.ship_code is not None):
            raise UsageError("--deploy-mode, --conf, --jars and --ship-code apply to a Spark application",
                             hint="add --master (e.g. yarn) or --spark-conn-id, or leave them out to run here")

    def __enter__(self) -> StateJobs:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._reader is not None:
            self._reader.__exit__(et, ev, tb)
            self._reader = None

    def run(self, request: Any) -> dict[str, Any]:
        """Answer `request` (an engine StateJobRequest); its JSON result."""
        from airflow_provider_streamstate.engine.state.jobs import run_state_job

        if not submitted(self.args):
            if self._reader is None:
                from airflow_provider_streamstate.engine.state.reader import StateReader

                self._reader = StateReader(self.store).__enter__()
            return run_state_job(request, self._reader)  # type: ignore[no-any-return]
        from airflow_provider_streamstate.engine.state.submit import submit_state_job

        request = request.with_job_id()
        command, env = _through_connection(self.args, request) if self.args.spark_conn_id \
            else _spark_submit(self.args, request)
        return submit_state_job(request, self.store, command, env=env,  # type: ignore[no-any-return]
                                ship_code=self.args.ship_code)


def run_job(args: argparse.Namespace, request: Any) -> dict[str, Any]:
    """Answer one request here, or as a Spark application on --master."""
    with StateJobs(args) as jobs:
        return jobs.run(request)


def _spark_submit(args: argparse.Namespace, request: Any) -> tuple[list[str], dict[str, str]]:
    from airflow_provider_streamstate.engine.state.submit import state_job_application, state_job_arguments
    from airflow_provider_streamstate.engine.streams.submission import (
        package_python_env,
        resolve_spark_submit,
    )

    cmd = ["spark-submit", "--master", args.master, "--name", f"streamstate-{request.kind}-{request.stream}"]
    if args.deploy_mode:
        cmd += ["--deploy-mode", args.deploy_mode]
    for pair in args.spark_conf:
        cmd += ["--conf", "=".join(_conf_pair(pair))]
    if args.jars:
        cmd += ["--jars", args.jars]
    cmd += [state_job_application(), *state_job_arguments(request)]
    return resolve_spark_submit(cmd, package_python_env(cmd, {}))


def _conf_pair(pair: str) -> tuple[str, str]:
    from airflow_provider_streamstate.engine.core.errors import UsageError

    key, eq, value = pair.partition("=")
    if not eq or not key:
        raise UsageError(f"--conf {pair!r} is not KEY=VALUE", hint="write --conf spark.executor.memory=2g")
    return key, value


def _through_connection(args: argparse.Namespace, request: Any) -> tuple[list[str], dict[str, str]]:
    """spark-submit as the Airflow Spark connection `--spark-conn-id` gives it (utils/spark_submit.py)."""
    from airflow_provider_streamstate.engine.core.errors import UsageError

    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):
        try:
            from airflow_provider_streamstate.spec import SparkJobOptions
            from airflow_provider_streamstate.streams.state_jobs import state_job_command
        except ImportError as exc:
            raise UsageError(f"--spark-conn-id needs Airflow: {exc}",
                             hint="install apache-airflow (the package's own dependency), or give --master") from None
        confs = dict(_conf_pair(pair) for pair in args.spark_conf)
        options = SparkJobOptions(conn_id=args.spark_conn_id, deploy_mode=args.deploy_mode, conf=confs,
                                  jars=args.jars.split(",") if args.jars else [])
        return state_job_command(request, options)
