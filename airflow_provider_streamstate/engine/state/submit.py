"""Running a state job as a Spark application of this package (jobs/state_job.py) on the
user's cluster, and bringing back its small result.

The caller builds the spark-submit command (the Airflow layer with the apache-spark
provider's SparkSubmitHook and a Spark connection, the CLI from `--master`/`--deploy-mode`);
this module completes it and runs it:

1. The request is written to the store (`streams/<stream>/state-jobs/<job>/request.json`):
   the application's arguments are the store, the stream and the job id, nothing secret.
2. The store's endpoint and credentials reach the application off the command line, as
   S3A per-bucket confs for the store's bucket, which the executors read the scratch copies
   with and the driver opens the store with; the sensitive ones go into a properties file
   only this user can read (engine/streams/secret_confs.py), deleted by the driver as soon
   as it starts (client mode) or once spark-submit returned (YARN cluster mode). They never
   become environment variables of a YARN container (whose launch script YARN may log).
3. spark-submit runs. In YARN cluster mode it returns once YARN accepted the application,
   whose state is then polled from the ResourceManager's REST API: the calling process
   holds no Spark driver and no state. Otherwise (local master, client mode) spark-submit
   is the driver, on this machine.
4. The result record the application wrote is read; a failed application's record (or its
   log's last error line) becomes the error, retryable when the failure was (a store that
   could not be reached, an application that ended without a result). The scratch copies
   and the job's records are deleted whatever happened: after success, failure, or
   cancellation (Ctrl-C, a task's `on_kill`), which first kills the application (the
   ResourceManager, or the local process group) within seconds: Airflow sends SIGKILL 5 s
   after SIGTERM. What a caller killed outright leaves (and what a killed application still
   wrote) is swept by the next state job on the store: scratch objects and job records
   older than `STALE_AFTER_S`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError, UsageError
from airflow_provider_streamstate.engine.core.redact import redact_command, sensitive_values
from airflow_provider_streamstate.engine.state.jobs import (
    StateJobRequest,
    job_records_prefix,
    request_key,
    result_key,
)
from airflow_provider_streamstate.engine.state.scratch import is_s3_store, job_started, remove_scratch
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams.kubernetes import kubernetes_cluster_mode, option_value
from airflow_provider_streamstate.engine.streams.secret_confs import ENV_SECRETS_FILE, move_secrets_to_file
from airflow_provider_streamstate.engine.streams.yarn import (
    ResourceManager,
    resource_manager_urls,
    submitted_app_id,
    yarn_cluster_mode,
)

log = logging.getLogger("streamstate.state")

RESULT_FORMAT = "streamstate.state-job-result/v1"
STALE_AFTER_S = 6 * 3600  # no state job runs this long unnoticed: its leftovers are garbage
KILL_WAIT_S = 3.0  # how long a kill waits for the application to end (Airflow's SIGKILL comes at 5 s)
SUBMIT_CLIENT_JVM = "-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class StateJobError(StreamstateError):
    """The state job's application failed; the message is its own error line."""


def state_job_application() -> str:
    """The path of the application spark-submit runs for a state job."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "state_job.py")


def state_job_arguments(request: StateJobRequest) -> list[str]:
    return [request.store, request.stream, request.job_id]


@dataclass(frozen=True)
class StoreAccess:
    """How a state job reaches an S3 store: the endpoint and the credentials it runs with.
    All None: the cluster's own (an instance role, its core-site.xml)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None

    @classmethod
    def from_environment(cls) -> StoreAccess:
        """This process's AWS environment, as boto3 resolves it."""
        import boto3

        session = boto3.session.Session()
        creds = session.get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        return cls(
            endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None,
            region=session.region_name,
            access_key=frozen.access_key if frozen else None,
            secret_key=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None,
        )

    def driver_env(self) -> dict[str, str]:
        """The AWS_* variables of a driver that runs here (client mode, local master)."""
        pairs = {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_DEFAULT_REGION": self.region,
                 "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                 "AWS_SESSION_TOKEN": self.session_token}
        return {k: v for k, v in pairs.items() if v}

    @classmethod
    def from_spark_conf(cls, get: Any, bucket: str) -> StoreAccess | None:
        """What `s3a_confs(bucket)` gave the application, read back from its Spark conf
        (`get(key)` returns None when unset): how a driver in the cluster opens the store."""
        p = f"spark.hadoop.fs.s3a.bucket.{bucket}."
        found = cls(get(p + "endpoint"), get(p + "endpoint.region"), get(p + "access.key"), get(p + "secret.key"),
                    get(p + "session.token"))
        return found if any((found.endpoint_url, found.access_key)) else None

    def s3_client(self, max_connections: int = 16) -> Any:
        """A boto3 client with this endpoint and these credentials."""
        import boto3

        from airflow_provider_streamstate.engine.stores import client_config

        return boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token, region_name=self.region,
        ).client("s3", endpoint_url=self.endpoint_url,
                 config=client_config(max_connections, path_style=bool(self.endpoint_url)))

    def s3a_confs(self, bucket: str) -> dict[str, str]:
        """S3A per-bucket options for `bucket` only: the executors read the scratch copies
        there, and whatever the user configured for other buckets stays as it is."""
        p = f"spark.hadoop.fs.s3a.bucket.{bucket}."
        out: dict[str, str] = {}
        if self.endpoint_url:
            out[p + "endpoint"] = self.endpoint_url
            out[p + "path.style.access"] = "true"
            out[p + "connection.ssl.enabled"] = "true" if self.endpoint_url.startswith("https") else "false"
        if self.region:
            out[p + "endpoint.region"] = self.region
        if self.access_key and self.secret_key:
            out[p + "access.key"] = self.access_key
            out[p + "secret.key"] = self.secret_key
            if self.session_token:
                out[p + "session.token"] = self.session_token
                out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            else:
                out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return out


def job_log_dir() -> Path:
    from airflow_provider_streamstate.engine.checkpoint.sidecar import streamstate_home

    return streamstate_home() / "state-jobs"


@dataclass
class SubmittedJob:
    """A state job's application while it runs: what `kill` needs."""

    request: StateJobRequest
    proc: subprocess.Popen[bytes] | None = None
    app_id: str | None = None
    rm: ResourceManager | None = None
    log_path: str = ""

    def kill(self, *, wait_s: float = KILL_WAIT_S) -> None:
        """End the application wherever it still runs, waiting up to `wait_s` for it to end
        (a killed driver may still be writing); safe to call twice, and on an ended one."""
        if self.rm is not None and self.app_id is not None:
            try:
                if not self.rm.app(self.app_id).ended:
                    self.rm.kill(self.app_id)
                    log.info("killed YARN application %s (state job %s)", self.app_id, self.request.job_id)
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline and not self.rm.app(self.app_id).ended:
                    time.sleep(0.25)
            except StreamstateError as exc:
                log.warning("could not kill %s: %s", self.app_id, exc.one_line())
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def complete_command(command: Sequence[str], request: StateJobRequest, store: SnapshotStore,
                     access: StoreAccess | None, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The caller's spark-submit command with what the job needs to reach its store, and the
    environment spark-submit runs with."""
    cmd = list(command)
    if kubernetes_cluster_mode(cmd):
        raise UsageError("state jobs do not run in Kubernetes cluster deploy mode yet",
                         hint="run them in client mode (the driver in the calling pod) or on YARN")
    master = option_value(cmd, "--master") or ""
    if master.startswith("spark://") and option_value(cmd, "--deploy-mode") == "cluster":
        raise UsageError("Spark standalone has no cluster deploy mode for Python applications",
                         hint="use client deploy mode on a standalone master (or cluster mode on YARN)")
    child_env = {**env}
    extra: list[str] = []
    if not any(a.startswith("spark.sql.session.timeZone=") for a in cmd):
        extra += ["--conf", "spark.sql.session.timeZone=UTC"]  # rows read back as the local path shows them
    driver_env = access.driver_env() if access is not None and is_s3_store(store) else {}
    if access is not None and is_s3_store(store):
        extra += [a for k, v in sorted(access.s3a_confs(store.bucket).items())  # type: ignore[attr-defined]
                  for a in ("--conf", f"{k}={v}")]
    if yarn_cluster_mode(cmd):
        jobs = request.batch() if request.kind == "batch" else [request]
        for what, path in [p for job in jobs for p in (("Data Docs", job.data_docs), ("the export", job.output))]:
            if path and "://" not in path.removeprefix("file://"):  # the driver runs on some NodeManager
                raise UsageError(f"{what} of a job in cluster deploy mode cannot go to the local path {path}",
                                 hint="give an s3:// location (s3a:// for an export), or run the job in client mode")
        if not resource_manager_urls(child_env):  # before YARN accepts anything we could not follow
            raise UsageError("cluster deploy mode on YARN needs the cluster's configuration",
                             hint="set YARN_CONF_DIR or HADOOP_CONF_DIR to the directory of its yarn-site.xml")
        extra += ["--conf", "spark.yarn.submit.waitAppCompletion=false", "--conf", "spark.yarn.maxAppAttempts=1"]
        # spark-submit only hands the application to YARN: a small JVM (cluster mode sets no
        # -Xmx of its own, so the default would be a quarter of the host's memory).
        child_env["SPARK_SUBMIT_OPTS"] = f"{SUBMIT_CLIENT_JVM} {child_env.get('SPARK_SUBMIT_OPTS', '')}".strip()
        # The driver opens the store with the S3A confs above: no secret in the container's environment.
    else:
        child_env.update(driver_env)
    return [cmd[0], *extra, *cmd[1:]], child_env


def submit_state_job(
    request: StateJobRequest,
    store: SnapshotStore,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    access: StoreAccess | None = None,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    on_submit: Any = None,
) -> dict[str, Any]:
    """Run `request` as the Spark application `command` (spark-submit ... state_job.py with
    `state_job_arguments(request)`) and return its result; see the module docstring.
    `on_submit(job)` is called as soon as there is something to kill."""
    from airflow_provider_streamstate.engine.streams.launcher import prune_logs

    if not request.job_id:
        raise UsageError("a submitted state job needs a job id", hint="use request.with_job_id()")
    argv, child_env = complete_command(command, request, store, access, {**os.environ, **(env or {})})
    logs = job_log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    prune_logs(logs)  # old logs, and secrets files nobody deleted (older than an hour)
    sweep_stale(store, request.stream)
    log_path = logs / f"{request.job_id}.log"
    props = logs / f"{request.job_id}.properties"
    job = SubmittedJob(request, log_path=str(log_path))
    try:
        argv, moved = move_secrets_to_file(argv, props, env=child_env)
        if moved and not yarn_cluster_mode(argv):
            child_env[ENV_SECRETS_FILE] = str(props)  # the driver deletes it once it runs
        shown = redact_command(argv, secrets=sensitive_values(env=dict(env or {}), args=list(command)))
        store.put_record(request_key(request.stream, request.job_id), request.to_json())
        started = time.monotonic()
        with open(log_path, "ab") as out:
            out.write(f"streamstate: state job {request.job_id}: {' '.join(shown)}\n".encode())
            if moved:
                out.write(f"streamstate: {len(moved)} secret conf(s) passed in a properties file\n".encode())
            out.flush()
            try:
                job.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, close_fds=True, env=child_env)
            except OSError as exc:
                raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror or exc}",
                                 hint="install Spark (pyspark ships spark-submit) or set the connection's "
                                 "spark-binary") from None
        if on_submit is not None:
            on_submit(job)
        if yarn_cluster_mode(argv):
            _wait_for_submission(job, props, child_env, started, timeout_s, poll_s)
            if on_submit is not None:
                on_submit(job)
            _wait_for_yarn(job, started, timeout_s, poll_s)
        else:
            _wait_for_process(job, started, timeout_s, poll_s)
        return _result(job, store)
    except BaseException:
        job.kill()
        raise
    finally:
        props.unlink(missing_ok=True)
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


def _deadline_passed(started: float, timeout_s: float | None) -> bool:
    return timeout_s is not None and time.monotonic() - started > timeout_s


def _wait_for_process(job: SubmittedJob, started: float, timeout_s: float | None, poll_s: float) -> None:
    assert job.proc is not None
    while job.proc.poll() is None:
        check_cancelled()
        if _deadline_passed(started, timeout_s):
            raise TransientError(f"state job {job.request.job_id} did not end within {timeout_s:.0f} s",
                                 hint=f"its log: {job.log_path}")
        time.sleep(min(poll_s, 0.2))


def _wait_for_submission(job: SubmittedJob, props: Path, env: Mapping[str, str], started: float,
                         timeout_s: float | None, poll_s: float) -> None:
    """spark-submit in YARN cluster mode returns once YARN accepted the application."""
    _wait_for_process(job, started, timeout_s, poll_s)
    props.unlink(missing_ok=True)
    assert job.proc is not None
    text = Path(job.log_path).read_text(errors="replace")
    job.app_id = submitted_app_id(text)
    urls = resource_manager_urls(dict(env))
    if job.app_id is not None:
        job.rm = ResourceManager(urls)  # whatever happens next, it can be killed
    if job.proc.returncode != 0 or job.app_id is None:
        raise StateJobError(f"spark-submit of state job {job.request.job_id} failed (exit {job.proc.returncode}): "
                            f"{_last_error(job.log_path)}", hint=f"its log: {job.log_path}")
    log.info("state job %s runs as YARN application %s", job.request.job_id, job.app_id)


def _wait_for_yarn(job: SubmittedJob, started: float, timeout_s: float | None, poll_s: float) -> None:
    assert job.rm is not None and job.app_id is not None
    while True:
        check_cancelled()
        try:
            app = job.rm.app(job.app_id)
        except TransientError as exc:
            log.warning("ResourceManager: %s", exc.one_line())
        else:
            if app.ended:
                log.info("YARN application %s ended: %s/%s", job.app_id, app.state, app.final_status)
                return
        if _deadline_passed(started, timeout_s):
            raise TransientError(f"state job {job.request.job_id} ({job.app_id}) did not end within "
                                 f"{timeout_s:.0f} s", hint="the application was killed")
        time.sleep(poll_s)


def _last_error(log_path: str) -> str:
    from airflow_provider_streamstate.engine.streams.launcher import last_error_line

    return last_error_line(log_path) or "no error line in its log"


def _result(job: SubmittedJob, store: SnapshotStore) -> dict[str, Any]:
    data = store.get_record(result_key(job.request.stream, job.request.job_id))
    where = f"application {job.app_id}" if job.app_id else f"log {job.log_path}"
    if data is None:  # lost before it could answer (killed, preempted, out of memory): try again
        code = job.proc.returncode if job.proc is not None else None
        raise TransientError(f"state job {job.request.job_id} ended without a result (exit {code}): "
                             f"{_last_error(job.log_path) if not job.app_id else 'see the application log'}",
                             hint=f"retry; if it fails again, see its {where}")
    record = json.loads(data)
    if record.get("format") != RESULT_FORMAT:
        raise StateJobError(f"state job {job.request.job_id} wrote a result of unknown format {record.get('format')}")
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
