"""Running a state job as a Spark application of this package (jobs/state_job.py) on the
user's cluster, and bringing back its small result.

The caller builds the spark-submit command (the Airflow layer from a `spark` connection:
utils/spark_submit.py; the CLI from `--master`/`--deploy-mode`);
this module completes it and runs it, on any cluster manager a stream runs on
(engine/streams/managers/), through the same submission (engine/streams/submission.py):

1. The request is written to the store (`streams/<stream>/state-jobs/<job>/request.json`):
   the application's arguments are the store, the stream and the job id, nothing secret.
2. What the application needs to reach the store comes from the store itself
   (`SnapshotStore.spark_access`: for S3, the client's endpoint and credentials as S3A
   per-bucket confs for the store's bucket, which the executors read the scratch copies
   with and a driver on the cluster opens the store with); the sensitive ones go into the
   submission's properties file, never into a container's environment (whose launch
   script YARN may log). A driver here gets them as its own environment. On a cluster
   the application gets this package's code too, as a zip in its py-files
   (engine/streams/package_code.py): the cluster's Python needs pyspark, not this package.
3. spark-submit runs. With the driver on the cluster (cluster deploy mode) it returns once
   the manager accepted the application, whose state is then polled from the manager: the
   calling process holds no Spark driver and no state. Otherwise spark-submit is the
   driver, on this machine.
4. The result record the application wrote is read; a failed application's record (or its
   log's last error line) becomes the error, retryable when the failure was (a store that
   could not be reached, an application that ended without a result). The scratch copies
   and the job's records are deleted whatever happened: after success, failure, or
   cancellation (Ctrl-C, a task's `on_kill`), which first kills the application (through
   its manager, or the local process group) within seconds: Airflow sends SIGKILL 5 s
   after SIGTERM. What a caller killed outright leaves (and what a killed application still
   wrote) is swept by the next state job on the store: scratch objects and job records
   older than `STALE_AFTER_S`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import location_scheme, streamstate_home
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError, UsageError
from airflow_provider_streamstate.engine.state.jobs import (
    StateJobRequest,
    job_records_prefix,
    request_key,
    result_key,
)
from airflow_provider_streamstate.engine.state.reader import require_state_reader
from airflow_provider_streamstate.engine.state.scratch import job_started, remove_scratch
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams.applications import RunningApplication, run_to_end
from airflow_provider_streamstate.engine.streams.command import access_confs_to_add, with_confs
from airflow_provider_streamstate.engine.streams.driver_logs import last_error_line, prune_logs
from airflow_provider_streamstate.engine.streams.managers import manager_for
from airflow_provider_streamstate.engine.streams.package_code import with_package_code
from airflow_provider_streamstate.engine.streams.submission import Submission, spark_version_of

log = logging.getLogger("streamstate.state")

RESULT_FORMAT = "streamstate.state-job-result/v1"
STALE_AFTER_S = 6 * 3600  # no state job runs this long unnoticed: its leftovers are garbage


class StateJobError(StreamstateError):
    """The state job's application failed; the message is its own error line."""


def state_job_application() -> str:
    """The path of the application spark-submit runs for a state job."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "state_job.py")


def state_job_arguments(request: StateJobRequest) -> list[str]:
    return [request.store, request.stream, request.job_id]


def job_log_dir() -> Path:
    return streamstate_home() / "state-jobs"


SUBMITTER_ENV = ("HADOOP_USER_NAME",)  # of a store's driver environment, given to spark-submit in cluster mode too


def complete_command(command: Sequence[str], request: StateJobRequest, store: SnapshotStore,
                     env: Mapping[str, str], *, ship_code: bool | None = None) -> tuple[list[str], dict[str, str]]:
    """The caller's spark-submit command with what the job needs to reach its store (a conf
    the caller set stays: `access_confs_to_add`, as for a stream's checkpoint; and this
    package's code in its py-files: engine/streams/package_code.py, `ship_code` None where
    it runs on a cluster), and the environment spark-submit runs with (`env` is the whole
    environment: the store's variables win over this process's); refused in one
    line when its cluster manager cannot run it, or when it names a local path a driver on
    the cluster would lose."""
    cmd = list(command)
    manager = manager_for(cmd)
    manager.check(cmd, env)
    confs: list[tuple[str, str]] = []
    if not any(a.startswith("spark.sql.session.timeZone=") for a in cmd):
        confs.append(("spark.sql.session.timeZone", "UTC"))  # rows read back as the local path shows them
    store_confs, driver_env = store.spark_access(env)
    confs += access_confs_to_add(cmd, store_confs)
    child_env = dict(env)
    if manager.driver_on_cluster(cmd):
        jobs = request.batch() if request.kind == "batch" else [request]
        for what, path in [p for job in jobs for p in (("Data Docs", job.data_docs), ("the export", job.output))]:
            if path and location_scheme(path) == "file":  # the driver runs on some node of the cluster
                raise UsageError(f"{what} of a job in cluster deploy mode cannot go to the local path {path}",
                                 hint="give an s3:// or hdfs:// location (s3a:// for an export), or run the job "
                                 "in client mode")
        # The driver opens the store with the confs above: no secret in the container's
        # environment. spark-submit's own HDFS user is the one every container acts as.
        child_env.update({k: v for k, v in driver_env.items() if k in SUBMITTER_ENV})
    else:
        child_env.update(driver_env)
    return with_package_code(with_confs(cmd, confs), ship_code), child_env


def submit_state_job(
    request: StateJobRequest,
    store: SnapshotStore,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    on_submit: Any = None,
    ship_code: bool | None = None,
) -> dict[str, Any]:
    """Run `request` as the Spark application `command` (spark-submit ... state_job.py with
    `state_job_arguments(request)`) and return its result; see the module docstring.
    `on_submit(job)` is called as soon as there is something to kill; `ship_code`: whether
    the application gets this package's code in its py-files (None: on a cluster)."""
    if not request.job_id:
        raise UsageError("a submitted state job needs a job id", hint="use request.with_job_id()")
    child = {**os.environ, **(env or {})}
    spark = spark_version_of(command, child)
    if spark is not None:  # refused here, not after a round trip through the cluster
        require_state_reader(spark[0], who=f"the Spark at {spark[1]}")
    argv, child_env = complete_command(command, request, store, child, ship_code=ship_code)
    logs = job_log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    prune_logs(logs)  # old logs, and secrets files nobody deleted (older than an hour)
    sweep_stale(store, request.stream)
    submission = Submission.prepare(argv, env=child_env, log_path=logs / f"{request.job_id}.log",
                                    name=f"streamstate-{request.kind}-{request.stream}", launch_id=request.job_id,
                                    secret_env=env or {})
    try:
        store.put_record(request_key(request.stream, request.job_id), request.to_json())
        job = run_to_end(submission, f"state job {request.job_id}", timeout_s=timeout_s, poll_s=poll_s,
                         on_submit=on_submit)
        return _result(job, store, request)
    finally:
        submission.forget_secrets()
        _clean_up(store, request)


def sweep_stale(store: SnapshotStore, stream: str, *, older_than_s: float = STALE_AFTER_S) -> int:
    """Delete scratch objects and `stream`'s job records older than `older_than_s`: what
    callers killed outright left (and anything their applications still wrote). Never fails
    the job that sweeps; how many were deleted."""
    from airflow_provider_streamstate.engine.state.scratch import remove_stale_scratch

    deleted = 0
    try:
        deleted += remove_stale_scratch(store, older_than_s)
        cutoff = time.time() - older_than_s
        for key in store.list_records(job_records_prefix(stream)):
            started = job_started(key.rsplit("/", 1)[-1])
            if started is not None and started < cutoff:
                store.delete_record(key)
                deleted += 1
    except StreamstateError as exc:
        log.warning("could not sweep old state job leftovers in %s: %s", store.url, exc.one_line())
    if deleted:
        log.info("swept %d leftovers of earlier state jobs in %s", deleted, store.url)
    return deleted


def _last_error(log_path: str) -> str:
    return last_error_line(log_path) or "no error line in its log"


def _result(job: RunningApplication, store: SnapshotStore, request: StateJobRequest) -> dict[str, Any]:
    data = store.get_record(result_key(request.stream, request.job_id))
    where = f"application {job.app_id}" if job.app_id else f"log {job.log_path}"
    if data is None:  # lost before it could answer (killed, preempted, out of memory): try again
        code = job.proc.returncode if job.proc is not None else None
        raise TransientError(f"state job {request.job_id} ended without a result (exit {code}): "
                             f"{_last_error(job.log_path) if not job.app_id else 'see the application log'}",
                             hint=f"retry; if it fails again, see its {where}")
    record = json.loads(data)
    if record.get("format") != RESULT_FORMAT:
        raise StateJobError(f"state job {request.job_id} wrote a result of unknown format {record.get('format')}")
    if record.get("error") or "result" not in record:
        err = record.get("error") or {}
        message = err.get("message") or "the state job failed"
        hint = err.get("hint") or f"see its {where}"
        if err.get("usage"):
            raise UsageError(message, hint=hint)
        if err.get("retryable", True):
            raise TransientError(message, hint=hint)
        raise StateJobError(message, hint=hint)
    result: dict[str, Any] = record["result"]
    result["ran_on"] = record.get("ran_on")
    return result


def _clean_up(store: SnapshotStore, request: StateJobRequest) -> None:
    """The job's scratch copies and records: gone however the job ended."""
    try:
        remove_scratch(store, request.job_id)
        store.delete_record(result_key(request.stream, request.job_id))
        store.delete_record(request_key(request.stream, request.job_id))
    except StreamstateError as exc:
        log.warning("state job %s: could not clean up in %s: %s", request.job_id, store.url, exc.one_line())
