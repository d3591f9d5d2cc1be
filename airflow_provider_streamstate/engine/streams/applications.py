"""A Spark application that ends (a state job, a repartition), run to its end wherever its
driver runs.

The submission (engine/streams/submission.py) is started detached. With the driver here
(local master, client mode) spark-submit is the driver: its process is waited for. With the
driver on the cluster (cluster deploy mode) spark-submit returns once the manager accepted
the application, which is then watched through its manager (engine/streams/managers/): the
caller holds no Spark driver. A caller that is cancelled (Ctrl-C, a task's `on_kill`) or
out of time kills the application first, through its manager or the local process group,
within seconds (Airflow sends SIGKILL 5 s after SIGTERM); whatever happened, the secrets
file goes and the manager cleans up what the application left on the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, streamstate_home
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError
from airflow_provider_streamstate.engine.streams.command import with_checkpoint_access
from airflow_provider_streamstate.engine.streams.driver_logs import last_error_line, prune_logs
from airflow_provider_streamstate.engine.streams.managers import AppReport, ClusterApp, manager_named
from airflow_provider_streamstate.engine.streams.package_code import with_package_code
from airflow_provider_streamstate.engine.streams.submission import Submission

log = logging.getLogger("streamstate.applications")

KILL_WAIT_S = 3.0  # how long a kill waits for the application to end (Airflow's SIGKILL comes at 5 s)

# The spark-submit command (and its environment) that runs one of the engine's jobs
# (jobs/rescale_job.py, jobs/edit_check_job.py) with the given arguments through the
# stream's Spark: built by the caller (the Airflow layer from the stream's spec and
# connection, the CLI from its spec), as for state jobs.
CommandFor = Callable[[Sequence[str]], tuple[Sequence[str], Mapping[str, str]]]


class ApplicationError(StreamstateError):
    """The application could not be submitted, or its driver failed."""


@dataclass
class RunningApplication:
    """An application while it runs: what `kill` needs, and how it ended."""

    what: str  # "state job 20260101-ab12", for messages
    proc: subprocess.Popen[bytes] | None = None
    app: ClusterApp | None = None  # where the manager runs its driver, once spark-submit said
    log_path: str = ""
    report: AppReport | None = None  # the manager's last word on a driver on the cluster

    @property
    def app_id(self) -> str | None:
        """The application as its manager names it (an id, a pod), for logs."""
        return manager_named(self.app.manager).describe(self.app) if self.app is not None else None

    def last_error(self) -> str:
        """The most telling line of why it failed: the manager's diagnostics, else its log's."""
        if self.report is not None and self.report.diagnostics:
            return " ".join(self.report.diagnostics.split())[:500]
        return last_error_line(self.log_path) or "no error line in its log"

    def kill(self, *, wait_s: float = KILL_WAIT_S) -> None:
        """End the application wherever it still runs, waiting up to `wait_s` for it to end
        (a killed driver may still be writing); safe to call twice, and on an ended one."""
        if self.app is not None:
            manager = manager_named(self.app.manager)
            try:
                if not manager.report(self.app).ended:
                    manager.kill(self.app)
                    log.info("killed %s (%s)", self.app_id, self.what)
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline and not manager.report(self.app).ended:
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


def run_job(
    command: CommandFor, arguments: Sequence[str], *, logs: str, job_id: str, name: str, what: str,
    timeout_s: float | None = None, on_submit: Callable[[RunningApplication], None] | None = None,
    ship_code: bool | None = None, checkpoints: Sequence[CheckpointFS] = (),
) -> RunningApplication:
    """Run one of the engine's jobs, `command(arguments)`, to its end (`run_to_end`): its
    log `<streamstate home>/<logs>/<job_id>.log` (older ones pruned), the application named
    `name`, the command's environment kept as secrets (off the command line and the log),
    this package's code in its py-files as `ship_code` says (None: on a cluster;
    engine/streams/package_code.py), and what it needs to reach the `checkpoints` it works
    on as the engine does (`with_checkpoint_access`)."""
    argv, env = command(arguments)
    for fs in checkpoints:
        argv, env, _ = with_checkpoint_access(argv, env, fs)
    argv = with_package_code(argv, ship_code)
    folder = streamstate_home() / logs
    folder.mkdir(parents=True, exist_ok=True)
    prune_logs(folder)
    submission = Submission.prepare(list(argv), env={**os.environ, **env}, log_path=folder / f"{job_id}.log",
                                    name=name, launch_id=job_id, secret_env=env)
    return run_to_end(submission, what, timeout_s=timeout_s, on_submit=on_submit)


def run_to_end(
    submission: Submission, what: str, *, timeout_s: float | None = None, poll_s: float = 1.0,
    on_submit: Callable[[RunningApplication], None] | None = None,
) -> RunningApplication:
    """Run the prepared `submission` until its application ends and return it (the exit code
    of a driver here in `proc.returncode`, the manager's report of one on the cluster in
    `report`). `on_submit(app)` is called as soon as there is something to kill, and again
    once the manager named the application. ApplicationError when spark-submit could not
    submit it; TransientError when `timeout_s` passes first (the application is killed)."""
    running = RunningApplication(what, log_path=str(submission.log_path))
    try:
        started = time.monotonic()
        running.proc = submission.start(what)
        if on_submit is not None:
            on_submit(running)
        _wait_for_process(running, started, timeout_s, poll_s)
        if submission.app is not None:  # spark-submit only handed the driver to the cluster
            submission.forget_secrets()
            _submitted(running, submission)
            if on_submit is not None:
                on_submit(running)
            _wait_for_cluster(running, started, timeout_s, poll_s)
        return running
    except BaseException:
        running.kill()
        raise
    finally:
        submission.forget_secrets()
        if running.app is not None:
            manager_named(running.app.manager).clean_up(running.app)


def _deadline_passed(started: float, timeout_s: float | None) -> bool:
    return timeout_s is not None and time.monotonic() - started > timeout_s


def _wait_for_process(running: RunningApplication, started: float, timeout_s: float | None, poll_s: float) -> None:
    assert running.proc is not None
    while running.proc.poll() is None:
        check_cancelled()
        if _deadline_passed(started, timeout_s):
            raise TransientError(f"{running.what} did not end within {timeout_s:.0f} s",
                                 hint=f"its log: {running.log_path}")
        time.sleep(min(poll_s, 0.2))


def _submitted(running: RunningApplication, submission: Submission) -> None:
    """spark-submit of a driver on the cluster returned once the manager accepted it: which
    application it is."""
    assert running.proc is not None
    app = submission.identify()
    assert app is not None
    manager = manager_named(app.manager)
    if manager.known(app):
        running.app = app  # whatever happens next, it can be killed
    if running.proc.returncode != 0 or not manager.known(app):
        raise ApplicationError(f"spark-submit of {running.what} failed (exit {running.proc.returncode}): "
                               f"{last_error_line(running.log_path) or 'no error line in its log'}",
                               hint=f"its log: {running.log_path}")
    log.info("%s runs as %s on %s", running.what, manager.describe(app), manager.name)


def _wait_for_cluster(running: RunningApplication, started: float, timeout_s: float | None, poll_s: float) -> None:
    assert running.app is not None
    manager = manager_named(running.app.manager)
    while True:
        check_cancelled()
        try:
            report = manager.report(running.app)
        except TransientError as exc:
            log.warning("%s: %s", manager.name, exc.one_line())
        else:
            if report.ended:
                running.report = report
                log.info("%s ended: %s", running.app_id, report.stream_state())
                return
        if _deadline_passed(started, timeout_s):
            raise TransientError(f"{running.what} ({running.app_id}) did not end within {timeout_s:.0f} s",
                                 hint="the application was killed")
        time.sleep(poll_s)
