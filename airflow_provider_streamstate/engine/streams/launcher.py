"""Start, stop and watch a stream's driver without holding on to it.

A stream never ends, so whoever starts it (an Airflow task, a person at a terminal)
must be able to go away: `launch` runs the prepared spark-submit command as a detached
driver (its own session and process group, output to a log file) and returns a small
`StreamHandle`. Everything needed to find, watch and stop the driver later is written
beside the checkpoint, which every worker can reach, never kept in the launching process
(files beside a local checkpoint, objects beside an S3 one: engine/checkpoint/sidecar.py):

    <checkpoint>/_streamstate/
        heartbeat.json      the runtime's word on its query (engine/checkpoint/liveness.py)
        launches/<N>.json   launch generation N (the newest is the stream's launch): launch
                            id, pid and process group, host, command (its secrets as ***:
                            engine/core/redact.py), log. Created create-only (S3
                            If-None-Match, a hard link locally): of two starts racing from
                            any hosts exactly one wins; N is the fencing token its driver
                            checks (jobs/supervised.py). The last 10 are kept.
        driver.json         written by the supervised driver (jobs/supervised.py): its pid,
                            and its exit code once it exits
        stop.json           a stop request; the driver polls for it (any host can ask); kept
                            after the stop (the stream was stopped on purpose) until the next launch
        logs/<launch>.log   the driver's stdout and stderr (on the launching host; for an S3
                            checkpoint below $STREAMSTATE_HOME, see engine/checkpoint/sidecar.py)

Secrets never reach a command line, a record or a log the launcher writes: Spark confs
with sensitive names go to spark-submit in a properties file only this user can read,
deleted once Spark has read it (engine/streams/secret_confs.py).

Two copies of a stream on one checkpoint corrupt it: `launch` refuses while the
heartbeat says a query is running, or while an earlier launch on this host is still
starting. `stop` is graceful first: it asks (stop request, and SIGTERM to the Python
driver on this host), the supervised driver lets the current batch finish and stops its
queries, and only after `timeout_s` is the process group killed. `status` tells
starting / running / stopped / failed / dead from the heartbeat, the launch record and,
on this host, whether the process lives; a dead driver's last error line comes from its
log. Pure Python: no Airflow or pyspark import.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.timeline import SIDECAR_DIR
from airflow_provider_streamstate.engine.checkpoint.liveness import (
    Heartbeat,
    is_running,
    now_iso,
    read_heartbeat,
)
from airflow_provider_streamstate.engine.checkpoint.sidecar import (
    LAUNCHES_DIR,
    S3Sidecar,
    Sidecar,
    local_root,
    open_sidecar,
)
from airflow_provider_streamstate.engine.core.cancel import check_cancelled, current_token
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamRunningError,
    StreamstateError,
    TransientError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.core.redact import redact_command, sensitive_values
from airflow_provider_streamstate.engine.lifecycle.restore_s3 import (
    refuse_unfinished_restore as refuse_s3_unfinished_restore,
)
from airflow_provider_streamstate.engine.streams.kubernetes import (
    DriverPod,
    KubernetesApi,
    driver_pod_name,
    kubernetes_cluster_mode,
    namespace_of,
    submission_confs,
)
from airflow_provider_streamstate.engine.streams.secret_confs import ENV_SECRETS_FILE, move_secrets_to_file
from airflow_provider_streamstate.engine.streams.yarn import (
    ResourceManager,
    YarnApp,
    resource_manager_urls,
    submitted_app_id,
    yarn_cluster_mode,
)

log = logging.getLogger("streamstate.launcher")

LAUNCH_FORMAT = "streamstate.launch/v1"
DRIVER_FORMAT = "streamstate.driver/v1"
STOP_FORMAT = "streamstate.stop/v1"
LAUNCH_FILE = f"{SIDECAR_DIR}/launch.json"  # the single record of releases before launch generations
KEEP_LAUNCHES = 10  # generations kept per checkpoint; older ones are deleted by the next launch
DRIVER_FILE = f"{SIDECAR_DIR}/driver.json"
STOP_FILE = f"{SIDECAR_DIR}/stop.json"
LOG_DIR = f"{SIDECAR_DIR}/logs"
LOCK_FILE = f"{SIDECAR_DIR}/launch.lock"
CLONE_FILE = f"{SIDECAR_DIR}/clone.json"
CLONE_FORMAT = "streamstate.clone/v1"
KEEP_LOGS = 10  # per checkpoint; older launches' logs are deleted at launch

# The environment the launcher gives the supervised driver (jobs/supervised.py).
ENV_CHECKPOINT = "STREAMSTATE_CHECKPOINT"
ENV_LAUNCH_ID = "STREAMSTATE_LAUNCH_ID"
ENV_LAUNCH_GENERATION = "STREAMSTATE_LAUNCH_GENERATION"
ENV_HEARTBEAT_INTERVAL = "STREAMSTATE_HEARTBEAT_INTERVAL"
ENV_QUERY_NAME = "STREAMSTATE_QUERY_NAME"
ENV_STREAM = "STREAMSTATE_STREAM"

# A launch on another host that has not beaten yet is taken as starting for this long.
STARTUP_GRACE_S = 600.0
_ERROR_LINE = re.compile(r"\w*(?:Exception|Error)\b|\berror: ")  # the last for argparse
_PY_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Exception|Error|Exit|Interrupt)\b(?::|$)")

# Drivers this process started: polled so they never linger as zombies (a zombie still
# answers `kill(pid, 0)`), and so their exit codes are known.
_children: dict[int, subprocess.Popen[bytes]] = {}


class StreamStartError(StreamstateError):
    """The driver exited, or its query failed, before the stream ran."""


def supervised_application() -> str:
    """The path of the wrapper spark-submit runs (`jobs/supervised.py`), with the
    user's application and its arguments after it."""
    return str(Path(__file__).resolve().parents[2] / "jobs" / "supervised.py")


def local_checkpoint(checkpoint: str | Path) -> Path:
    """The checkpoint as a local path (a path, or a `file:` URI), for what only works on a
    filesystem this host has: swapping a restored directory, deleting a clone's directory."""
    text = str(checkpoint)
    return local_root(text, refusal=(
        f"this needs the checkpoint on a local or mounted path, not {text}",
        "give the checkpoint as a path (a shared mount for drivers on other hosts); "
        "docs/deployment.md says what works on an s3a:// checkpoint"))


def resolve_spark_submit(command: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """`command` and `env` with a spark-submit that runs: the one on the PATH, else the one
    pyspark ships (with its SPARK_HOME), so a plain `pip install` of the provider works."""
    cmd, out = list(command), dict(env)
    if not cmd or os.sep in cmd[0] or shutil.which(cmd[0], path=out.get("PATH", os.environ.get("PATH"))):
        return cmd, out
    found = importlib.util.find_spec("pyspark")
    homes = list(found.submodule_search_locations or []) if found else []
    for home in homes:
        candidate = Path(home) / "bin" / cmd[0]
        if candidate.is_file():
            cmd[0] = str(candidate)
            if "SPARK_HOME" not in os.environ:
                out.setdefault("SPARK_HOME", home)
            break
    return cmd, out


def package_python_env(command: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus the Python that runs this package's wrapper or job: a driver that runs here
    uses this process's Python unless told (never in YARN cluster mode: YARN would hand the
    variable to the application master, on another host, whose Python the confs say), and
    a local master's executors too."""
    from airflow_provider_streamstate.engine.streams.kubernetes import option_value
    from airflow_provider_streamstate.engine.streams.yarn import yarn_cluster_mode

    out = dict(env)
    inherited = {**os.environ, **out}
    if "PYSPARK_DRIVER_PYTHON" not in inherited and not yarn_cluster_mode(command):
        out["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if (option_value(command, "--master") or "").startswith("local") and "PYSPARK_PYTHON" not in inherited:
        out["PYSPARK_PYTHON"] = sys.executable
    return out


@dataclass(frozen=True)
class StreamHandle:
    """A launched driver, as XCom carries it: enough to watch it and stop it later."""

    stream: str
    checkpoint: str
    launch_id: str
    pid: int  # spark-submit's process, leader of the driver's process group
    host: str
    log: str
    started_at: str  # UTC ISO 8601
    generation: int = 0  # the launch's fencing token: its number among the checkpoint's launches

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StreamHandle:
        try:
            handle = cls(**{k: value[k] for k in cls.__dataclass_fields__ if k != "generation"},
                         generation=int(value.get("generation") or 0))
        except (KeyError, TypeError) as exc:
            raise UsageError(
                f"not a stream handle: missing {exc}", hint="pass what StartStreamOperator returned"
            ) from None
        if not isinstance(handle.pid, int) or handle.pid <= 0:
            raise UsageError(f"not a stream handle: pid {handle.pid!r}", hint="pass what StartStreamOperator returned")
        return handle


@dataclass(frozen=True)
class LaunchRecord:
    """`launches/<N>.json`: the handle plus what only the launching host needs, and for a
    driver on a cluster (deploy mode cluster) where the cluster manager knows it."""

    handle: StreamHandle
    command: list[str]
    pgid: int
    proc_start: int | None  # the process's start time (clock ticks since boot): guards pid reuse
    cluster: ClusterApp | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {"format": LAUNCH_FORMAT, **self.handle.to_json(), "command": self.command, "pgid": self.pgid,
             "proc_start": self.proc_start, "cluster": self.cluster.to_json() if self.cluster else None},
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LaunchRecord:
        d = load_record(data, LAUNCH_FORMAT, "launch record")
        handle = StreamHandle.from_json(d)
        if not isinstance(d.get("pgid"), int) or not isinstance(d.get("command"), list):
            raise ValueError("launch record without pgid or command")
        proc_start = d.get("proc_start")
        cluster = ClusterApp.from_json(d["cluster"]) if isinstance(d.get("cluster"), dict) else None
        return cls(handle, [str(a) for a in d["command"]], d["pgid"], proc_start if isinstance(proc_start, int) else None,
                   cluster)


@dataclass(frozen=True)
class ClusterApp:
    """A driver the cluster manager runs (cluster deploy mode): where to ask about it. Any
    host that reaches the manager can watch and kill it. YARN: its application id and the
    ResourceManager; Kubernetes: its driver pod (named by the launcher)."""

    manager: str  # yarn | kubernetes
    app_id: str | None  # YARN: None until spark-submit said which (or when it failed to submit)
    rm_urls: list[str]
    user: str  # who submitted it: YARN's REST API acts as this user
    namespace: str | None = None  # Kubernetes
    pod: str | None = None  # Kubernetes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClusterApp:
        if d.get("manager") not in ("yarn", "kubernetes") or not isinstance(d.get("rm_urls", []), list):
            raise ValueError("unknown cluster record")

        def text(key: str) -> str | None:
            return d[key] if isinstance(d.get(key), str) else None

        return cls(str(d["manager"]), text("app_id"), [str(u) for u in d.get("rm_urls", [])], str(d.get("user") or ""),
                   text("namespace"), text("pod"))

    @property
    def known(self) -> bool:
        """Whether the manager can be asked about it (YARN: once spark-submit said its id)."""
        return bool(self.pod if self.manager == "kubernetes" else self.app_id and self.rm_urls)

    @property
    def name(self) -> str:
        return f"pod {self.namespace}/{self.pod}" if self.manager == "kubernetes" else str(self.app_id)

    def app(self) -> YarnApp | DriverPod | None:
        """What the cluster manager says of it now; None when it cannot say (no id yet, not reachable)."""
        if not self.known:
            return None
        try:
            if self.manager == "kubernetes":
                assert self.namespace is not None and self.pod is not None
                return KubernetesApi().pod(self.namespace, self.pod)
            assert self.app_id is not None
            return ResourceManager(self.rm_urls, user=self.user or None, timeout_s=5).app(self.app_id)
        except Exception as exc:  # noqa: BLE001 - unreachable or unconfigured: the records decide
            why = exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"
            log.warning("cannot ask the cluster manager about %s: %s", self.name, why)
            return None

    def kill(self) -> None:
        """Kill the driver through the cluster manager: YARN kills the application, Kubernetes
        deletes the pod."""
        if self.manager == "kubernetes" and self.namespace and self.pod:
            KubernetesApi().delete(self.namespace, self.pod)
        elif self.app_id:
            ResourceManager(self.rm_urls, user=self.user or None).kill(self.app_id)


@dataclass(frozen=True)
class DriverRecord:
    """`driver.json`: what the supervised driver says about itself."""

    launch_id: str
    host: str
    pid: int  # the Python driver (spark-submit's child): where a graceful SIGTERM goes
    started_at: str
    exit_code: int | None = None
    exited_at: str | None = None
    stop_reason: str | None = None
    error: str | None = None  # the exception the application died of, one line

    def to_json(self) -> bytes:
        return dump_record(DRIVER_FORMAT, asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> DriverRecord:
        d = load_record(data, DRIVER_FORMAT, "driver record")
        values: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        rec = cls(**values)
        if not isinstance(rec.pid, int) or not isinstance(rec.launch_id, str):
            raise ValueError("driver record without pid or launch id")
        return rec


@dataclass(frozen=True)
class StreamStatus:
    """What is known about the stream on a checkpoint, from here."""

    checkpoint: str
    state: str  # absent | starting | running | stopped | failed | dead
    handle: StreamHandle | None  # the latest launch through this module, if any
    heartbeat: Heartbeat | None  # the latest beat, when it belongs to that launch (or there was none)
    process_alive: bool | None  # the driver's process, when it was launched on this host
    exit_code: int | None
    last_error: str | None  # the query's exception, or the log's last error line, once it died
    log: str | None  # the driver's log: a file on the launching host, or the cluster's container logs
    app: YarnApp | DriverPod | None = None  # the cluster manager's view, for a driver on a cluster

    def to_json(self) -> dict[str, Any]:
        beat = self.heartbeat
        return {
            "checkpoint": self.checkpoint,
            "state": self.state,
            "handle": self.handle.to_json() if self.handle else None,
            "query_id": beat.query_id if beat else None,
            "query_name": beat.query_name if beat else None,
            "batch_id": beat.batch_id if beat else None,
            "beat_age_s": round(beat.age_s(), 1) if beat else None,
            "process_alive": self.process_alive,
            "exit_code": self.exit_code,
            "last_error": self.last_error,
            "log": self.log,
            "cluster_app": self.app.to_json() if self.app else None,
        }


@dataclass(frozen=True)
class StopResult:
    """How a stop went: `stopped` (the driver stopped its query and exited when asked),
    `killed` (it had not after the timeout: its process group was killed), or
    `not-running` (nothing to stop)."""

    checkpoint: str
    outcome: str
    seconds: float
    state: str  # the stream's state afterwards (status().state)
    exit_code: int | None
    pid: int | None = None
    detail: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 3),
            "state": self.state,
            "exit_code": self.exit_code,
            "pid": self.pid,
        }


# --- records ----------------------------------------------------------------------------


def _read_record(checkpoint: str | Path | Sidecar, rel: str) -> bytes | None:
    """A record beside the checkpoint; None when absent, or when the checkpoint cannot hold
    records (a location no sidecar can be opened for)."""
    try:
        return open_sidecar(checkpoint).read(rel)
    except (OSError, UsageError):
        return None


def launch_generations(checkpoint: str | Path | Sidecar) -> list[int]:
    """The generations of the launches recorded on `checkpoint`, oldest first."""
    names = open_sidecar(checkpoint).names(LAUNCHES_DIR)
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def _launch_path(generation: int) -> str:
    return f"{LAUNCHES_DIR}/{generation:08d}.json"


def read_launch(checkpoint: str | Path | Sidecar) -> LaunchRecord | None:
    """The latest launch on `checkpoint` (its highest generation), or None (none, or unreadable)."""
    try:
        side = open_sidecar(checkpoint)
        generations = launch_generations(side)
        data = _read_record(side, _launch_path(generations[-1]) if generations else LAUNCH_FILE)
        return None if data is None else LaunchRecord.from_json(data)
    except (ValueError, TypeError, UsageError):
        return None


def read_driver(checkpoint: str | Path | Sidecar, launch_id: str | None = None) -> DriverRecord | None:
    """The supervised driver's record, when it belongs to `launch_id` (if given)."""
    try:
        data = _read_record(checkpoint, DRIVER_FILE)
        rec = None if data is None else DriverRecord.from_json(data)
    except (ValueError, TypeError, UsageError):
        return None
    return rec if rec is not None and (launch_id is None or rec.launch_id == launch_id) else None


def write_driver(checkpoint: str | Path | Sidecar, record: DriverRecord) -> None:
    """For the supervised driver: say who it is, and later how it ended."""
    open_sidecar(checkpoint).write(DRIVER_FILE, record.to_json())


def stop_requested(checkpoint: str | Path | Sidecar, *, since: datetime, launch_id: str | None = None) -> str | None:
    """For the supervised driver: the reason of a stop request made after `since` (for its
    launch `launch_id`, when the request names one), or None."""
    try:
        data = _read_record(checkpoint, STOP_FILE)
        if data is None:
            return None
        d: Any = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != STOP_FORMAT:
            return None
        if _parse_time(str(d["requested_at"])) < since:
            return None  # an old request, for a driver that is gone
        if launch_id and d.get("launch_id") and d["launch_id"] != launch_id:
            return None  # a request for another launch of this stream
        return f"stop requested by {d.get('by', 'someone')} at {d['requested_at']}"
    except (ValueError, KeyError, TypeError):
        return None


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@contextlib.contextmanager
def _launch_lock(side: Sidecar) -> Iterator[None]:
    """One launch at a time per checkpoint on this host (two tasks starting one stream)."""
    path = side.local_dir / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- processes --------------------------------------------------------------------------


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _process_alive(pid: int, proc_start: int | None = None) -> bool:
    """Alive and the same process (not a zombie, not a reused pid)."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) is all we know
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return False
    return proc_start is None or int(fields[19]) == proc_start


def _group_alive(pgid: int) -> bool:
    for child in _children.values():
        child.poll()  # reap
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies still count for killpg; a group of zombies only is gone.
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return not Path("/proc").is_dir()


def _exit_code(pid: int) -> int | None:
    child = _children.get(pid)
    return None if child is None else child.poll()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# --- status -----------------------------------------------------------------------------


def last_error_line(log_path: str | Path | None, *, tail_bytes: int = 512 * 1024) -> str | None:
    """The most telling error line at the end of a driver log: the last Python exception
    line (`pyspark.errors....StreamingQueryException: ...`) if any, else the last line
    naming an Exception or Error."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for pattern in (_PY_EXCEPTION_LINE, _ERROR_LINE):
        for line in reversed(lines):
            if pattern.search(line):
                return line.strip()[:1000]
    return None


def status(checkpoint: str | Path | Sidecar) -> StreamStatus:
    """The state of the stream on `checkpoint`:

    - `running` / `starting`: a fresh heartbeat says so (and on this host its driver lives),
      or a launch whose driver lives has not beaten yet (JVM and query starting);
    - `stopped` / `failed`: the query's last beat (failed carries its exception);
    - `dead`: the driver is gone without saying so (killed, crashed, stale heartbeat),
      or it exited before its query started;
    - `absent`: nothing was ever launched or beaten on this checkpoint.
    """
    side = open_sidecar(checkpoint)
    launch = read_launch(side)
    beat = read_heartbeat(side)
    here = socket.gethostname()
    handle = launch.handle if launch else None
    driver = read_driver(side, handle.launch_id) if handle else None
    alive: bool | None = None
    exit_code = driver.exit_code if driver else None
    if beat is not None and handle is not None and (
            _parse_time(beat.updated_at) < _parse_time(handle.started_at)
            or (beat.launch_id is not None and beat.launch_id != handle.launch_id)):
        beat = None  # from an earlier run on this checkpoint (or a superseded driver's last words)
    log_path = handle.log if handle else None
    if launch is not None and launch.cluster is not None:
        return _cluster_status(side, launch, beat, driver)
    if launch and handle and handle.host == here:
        alive = _process_alive(handle.pid, launch.proc_start)
        if exit_code is None:
            exit_code = _exit_code(handle.pid)

    if beat is not None and beat.state in ("starting", "running"):
        if is_running(side) and alive is not False:
            state = beat.state
        else:  # a driver that recorded a clean exit stopped its query; the last beat was lost
            state = "stopped" if driver is not None and driver.exit_code == 0 else "dead"
    elif beat is not None:
        state = beat.state
    elif handle is not None:
        if alive is None:  # launched on another host: only the records tell
            age = (datetime.now(UTC) - _parse_time(handle.started_at)).total_seconds()
            if driver is not None and driver.exit_code is not None:
                state = "stopped" if driver.exit_code == 0 else "dead"
            else:
                state = "starting" if age < STARTUP_GRACE_S else "dead"
        elif alive:
            state = "starting"
        else:
            state = "stopped" if exit_code == 0 else "dead"
    else:
        state = "absent"

    last_error = None
    if state in ("failed", "dead"):  # the log is on the launching host; the driver record is everywhere
        last_error = ((beat.exception if beat and state == "failed" else None) or last_error_line(log_path)
                      or (driver.error if driver else None))
    return StreamStatus(side.location, state, handle, beat, alive, exit_code, last_error, log_path)


def _cluster_status(side: Sidecar, launch: LaunchRecord, beat: Heartbeat | None,
                    driver: DriverRecord | None) -> StreamStatus:
    """A driver on the cluster: the cluster manager says whether its application lives
    (and why it ended), the heartbeat how its query does. While the manager cannot be asked,
    the records alone decide, as for a driver on another host."""
    assert launch.cluster is not None
    handle = launch.handle
    app = launch.cluster.app()
    exit_code = driver.exit_code if driver else None
    last_error: str | None = driver.error if driver else None
    if app is None:  # no id yet, the manager forgot it or cannot be reached: the records decide
        age = (datetime.now(UTC) - _parse_time(handle.started_at)).total_seconds()
        if driver is not None and driver.exit_code is not None:
            state = "stopped" if driver.exit_code == 0 else "dead"
        elif beat is not None:
            state = beat.state if beat.state not in ("starting", "running") or is_running(side) else "dead"
        else:
            state = "starting" if age < STARTUP_GRACE_S else "dead"
        if state == "dead":
            last_error = last_error or last_error_line(handle.log)
    elif isinstance(app, DriverPod) and app.state == "Gone" and driver is None and (
            datetime.now(UTC) - _parse_time(handle.started_at)).total_seconds() < STARTUP_GRACE_S:
        state = "starting"  # spark-submit has not created the pod yet
    elif not app.ended:
        if beat is None or app.stream_state() != "running":
            state = "starting"  # JVM, SparkContext, executors: the query has not said anything yet
        elif beat.state in ("stopped", "failed"):
            state = "running"  # its query ended, but the application still holds the checkpoint
        else:
            # The application holds the checkpoint whatever its beat says (a stale beat is a
            # stuck or silent driver: the supervisor's freshness check tells, not this).
            state = "running" if beat.state == "running" or not is_running(side) else beat.state
    else:
        state = app.stream_state()
        if beat is not None and beat.state == "failed":
            state, last_error = "failed", beat.exception
        last_error = last_error or app.diagnostics or None
    if state == "failed" and last_error is None and beat is not None:
        last_error = beat.exception
    return StreamStatus(side.location, state, handle, beat, None, exit_code, last_error,
                        app.am_container_logs if app is not None and app.am_container_logs else handle.log,
                        app)


# --- launch -----------------------------------------------------------------------------


def launch(
    command: Sequence[str],
    *,
    stream: str,
    checkpoint: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    log_dir: str | Path | None = None,
    heartbeat_interval_s: float = 5.0,
    query_name: str | None = None,
    submit_timeout_s: float = 600.0,
) -> StreamHandle:
    """Start `command` (spark-submit on `supervised_application()`) as a detached driver
    for `stream` on `checkpoint`, and return at once.

    With `--master yarn --deploy-mode cluster` the driver runs on the cluster: spark-submit
    only submits it (`spark.yarn.submit.waitAppCompletion=false`), this waits up to
    `submit_timeout_s` for that, and the application id is recorded beside the checkpoint,
    where any host finds it (status and the kill go through the ResourceManager).

    The driver gets its own session and process group (it outlives the caller and is
    not hit by signals meant for the caller's group), `env` on top of this process's
    environment plus the STREAMSTATE_* variables the supervised wrapper reads, stdin
    from /dev/null and stdout+stderr in a log file (`log_dir`, default beside the
    checkpoint). Raises StreamRunningError when a stream runs or is starting on the
    checkpoint: a second copy would corrupt it.
    """
    if not command:
        raise UsageError("nothing to launch: the command is empty", hint="give the spark-submit command line")
    side = open_sidecar(checkpoint)
    side.local_dir.mkdir(parents=True, exist_ok=True)
    with _launch_lock(side):
        # The generation to claim comes from a listing made before the check: a launch that
        # claimed one since is refused by the create-only write, one before it by the check.
        generations = launch_generations(side)
        generation = (generations[-1] if generations else 0) + 1
        _refuse_second_copy(side, stream)
        refuse_unfinished_restore(side)
        launch_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
        logs = Path(log_dir).expanduser().absolute() if log_dir else side.local_dir / LOG_DIR
        logs.mkdir(parents=True, exist_ok=True)
        prune_logs(logs)
        log_path = logs / f"{stream}-{launch_id}.log"
        child_env = {
            **os.environ, **(env or {}),
            ENV_CHECKPOINT: side.location, ENV_LAUNCH_ID: launch_id, ENV_STREAM: stream,
            ENV_LAUNCH_GENERATION: str(generation),
            ENV_HEARTBEAT_INTERVAL: str(heartbeat_interval_s),
        }
        if query_name:
            child_env[ENV_QUERY_NAME] = query_name
        cluster = None
        ours = {k: v for k, v in child_env.items() if k.startswith("STREAMSTATE_") and k != ENV_SECRETS_FILE}
        if kubernetes_cluster_mode(command):
            # The driver runs in a pod the launcher names: known before spark-submit says anything.
            pod = driver_pod_name(stream, launch_id)
            cluster = ClusterApp("kubernetes", None, [], getpass.getuser(), namespace_of(command), pod)
            command = [command[0], *submission_confs(pod, ours), *command[1:]]
        elif yarn_cluster_mode(command):
            # The driver runs in the application master's container: it gets the same
            # STREAMSTATE_* variables through Spark, and spark-submit returns once submitted.
            rm_urls = resource_manager_urls(child_env)
            if not rm_urls:
                raise UsageError("cluster deploy mode on YARN needs the cluster's configuration",
                                 hint="set YARN_CONF_DIR or HADOOP_CONF_DIR (the spec's env) to the directory of "
                                 "its yarn-site.xml")
            cluster = ClusterApp("yarn", None, rm_urls, getpass.getuser())
            # One attempt: a second attempt of the application master would run the same
            # launch (the same fencing token) beside a first one YARN lost touch with.
            command = [command[0], "--conf", "spark.yarn.submit.waitAppCompletion=false",
                       "--conf", "spark.yarn.maxAppAttempts=1",
                       *(a for k, v in sorted(ours.items()) for a in ("--conf", f"spark.yarn.appMasterEnv.{k}={v}")),
                       *command[1:]]
        secrets_file = logs / f"{stream}-{launch_id}.properties"
        argv, moved = move_secrets_to_file(command, secrets_file, env=child_env)
        if moved:
            child_env[ENV_SECRETS_FILE] = str(secrets_file)
        hidden = sensitive_values(env=env or {}, args=command)
        shown = redact_command(argv, secrets=hidden)
        started_at = now_iso()
        with open(log_path, "ab") as out:
            out.write(f"streamstate: launching {stream} ({launch_id}) at {started_at}: {' '.join(shown)}\n".encode())
            if moved:
                out.write(f"streamstate: {len(moved)} secret conf(s) passed in a properties file: "
                          f"{', '.join(moved)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True, env=child_env, cwd=cwd,
                )
            except OSError as exc:
                secrets_file.unlink(missing_ok=True)
                raise UsageError(
                    f"cannot run {command[0]!r}: {exc.strerror or exc}",
                    hint="install Spark (pyspark ships spark-submit) and put spark-submit on the PATH, "
                    "or set the spark connection's spark-binary",
                ) from None
        _children[proc.pid] = proc
        handle = StreamHandle(stream, side.location, launch_id, proc.pid, socket.gethostname(), str(log_path),
                              started_at, generation)
        record = LaunchRecord(handle, shown, proc.pid, _proc_start(proc.pid), cluster)
        _claim(side, record, proc)
        side.delete(STOP_FILE)  # a request for an earlier run
        _prune_launches(side, generation)
    if cluster is not None:  # claimed: others see it starting; no need to hold this host's lock
        _submitted(side, record, proc, submit_timeout_s)
    log.info("launched %s on %s: pid %d, generation %d, log %s", stream, side.location, proc.pid, generation,
             log_path)
    return handle


def _submitted(side: Sidecar, record: LaunchRecord, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait for spark-submit to hand the driver to the cluster manager (it returns once the
    application is accepted) and, for YARN, record the application id it printed beside the
    checkpoint (a Kubernetes pod was named before). Fails, killing what was submitted and
    recording the failure as the driver's exit, when spark-submit fails or names no application."""
    handle = record.handle
    assert record.cluster is not None
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        code = None
    finally:
        forget_secrets(handle)
    cluster = record.cluster
    if cluster.manager == "yarn":
        try:
            with open(handle.log, encoding="utf-8", errors="replace") as f:
                cluster = replace(cluster, app_id=submitted_app_id(f.read()))
        except OSError:
            pass
        if cluster.app_id is not None:
            side.write(_launch_path(handle.generation), replace(record, cluster=cluster).to_json())
    if code != 0 or not cluster.known:
        if cluster.known:
            with contextlib.suppress(Exception):
                cluster.kill()
        why = f"did not return within {timeout_s:.0f}s" if code is None else f"exited {code}"
        # Said beside the checkpoint, so no host waits for a driver that will never start.
        side.write(DRIVER_FILE, DriverRecord(handle.launch_id, handle.host, handle.pid, handle.started_at,
                                             exit_code=code if code else 1, exited_at=now_iso(),
                                             error=f"spark-submit {why}").to_json())
        raise StreamStartError(
            f"spark-submit of {handle.stream} to {'YARN' if cluster.manager == 'yarn' else 'Kubernetes'} {why} "
            "without submitting it" + (f": {err}" if (err := last_error_line(handle.log)) else ""),
            hint=f"see its log {handle.log}",
        )
    log.info("submitted %s to %s: %s", handle.stream, cluster.manager, cluster.name)


def _claim(side: Sidecar, record: LaunchRecord, proc: subprocess.Popen[bytes]) -> None:
    """Record the launch as generation N with a create-only write: of launches racing from
    any hosts, exactly one creates it. A launch that lost kills the driver it started (it is
    still a JVM starting, long before it can touch the checkpoint; the driver also checks its
    generation is the newest before it runs anything: jobs/supervised.py) and is refused."""
    handle = record.handle
    try:
        won = side.create(_launch_path(handle.generation), record.to_json())
    except BaseException:
        _signal_group(proc.pid, signal.SIGKILL)
        raise
    if won:
        return
    _signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    forget_secrets(handle)
    other = read_launch(side)
    where = (f"launch {other.handle.launch_id} from host {other.handle.host} at {other.handle.started_at}"
             if other else "another launch")
    raise StreamRunningError(
        f"cannot launch {handle.stream}: {where} claimed {side.location} first (generation "
        f"{handle.generation}); a second copy would corrupt it",
        hint="reconnect to the stream that runs (StartStreamOperator does), or stop it first",
    )


def _prune_launches(side: Sidecar, newest: int) -> None:
    """Delete launch records older than the last KEEP_LAUNCHES generations."""
    for generation in launch_generations(side):
        if generation <= newest - KEEP_LAUNCHES:
            side.delete(_launch_path(generation))


def superseded_by(checkpoint: str | Path | Sidecar, generation: int, launch_id: str | None = None
                  ) -> LaunchRecord | None:
    """For the driver of launch `launch_id`, generation `generation`: the launch that owns
    its checkpoint instead (one of a higher generation, or another launch recorded under its
    own generation: its launcher lost the claim), else None. Its own record may not be there
    yet (the launcher writes it right after starting the driver)."""
    latest = read_launch(checkpoint)
    if latest is None or generation <= 0 or latest.handle.generation < generation:
        return None
    if latest.handle.generation == generation and (not launch_id or latest.handle.launch_id == launch_id):
        return None
    return latest


def refuse_unfinished_restore(side: Sidecar) -> None:
    """A checkpoint a restore left half-published is never run: Spark would start over on what
    is there and the state would be lost (the restore's own check: only S3 restores publish
    in steps; a local one swaps a whole directory)."""
    if isinstance(side, S3Sidecar):
        refuse_s3_unfinished_restore(side.fs)


def _refuse_second_copy(side: Sidecar, stream: str) -> None:
    st = status(side)
    root = side.location
    if st.state == "running" and st.heartbeat is not None:
        beat = st.heartbeat
        raise StreamRunningError(
            f"cannot launch {stream}: query {beat.query_name or beat.query_id} is running on {root} "
            f"(host {beat.host}, pid {beat.pid}, last beat {beat.age_s():.0f}s ago); a second copy would corrupt it",
            hint="stop it first, or reconnect to it (StartStreamOperator returns its handle)",
        )
    if st.state in ("starting", "running"):
        where = f"host {st.handle.host}, pid {st.handle.pid}, launched {st.handle.started_at}" if st.handle else "no launch record"
        raise StreamRunningError(
            f"cannot launch {stream}: a driver is {st.state} on {root} ({where}); a second copy would corrupt it",
            hint="wait for it to run, or stop it first",
        )


def prune_logs(logs: Path) -> None:
    """Keep the newest KEEP_LOGS - 1 logs in `logs` (room for the next one), and drop
    properties files of secrets older than an hour."""
    try:
        old = sorted(logs.glob("*.log"), key=lambda p: p.stat().st_mtime)
        # A launch's secrets file that nobody deleted (its driver died before Python started,
        # and nobody waited for it): Spark has long read it.
        stale = [p for p in logs.glob("*.properties") if time.time() - p.stat().st_mtime > 3600]
    except OSError:
        return
    for path in [*old[: max(0, len(old) - (KEEP_LOGS - 1))], *stale]:
        path.unlink(missing_ok=True)


def running_handle(checkpoint: str | Path) -> StreamHandle | None:
    """The handle of the stream that is running or starting on `checkpoint`, if it was
    launched through this module (a retried start reconnects to it)."""
    st = status(checkpoint)
    return st.handle if st.state in ("starting", "running") else None


def wait_until_running(
    handle: StreamHandle, *, timeout_s: float = 300.0, poll_s: float = 0.5
) -> StreamStatus:
    """Block until the stream's heartbeat says `running` (its first progress event).

    Raises StreamStartError (with the log's last error line) when the driver dies, its
    query fails or it stops before that, TransientError when `timeout_s` passes first,
    and `Cancelled` when the enclosing cancellation token is cancelled (on_kill)."""
    try:
        return _wait_until_running(handle, timeout_s=timeout_s, poll_s=poll_s)
    finally:
        forget_secrets(handle)


def forget_secrets(handle: StreamHandle) -> None:
    """Delete the launch's properties file of secret confs (engine/streams/secret_confs.py),
    if it is on this host and still there: Spark has read it once the query runs or the
    driver is gone (the supervised driver deletes it itself as it starts)."""
    if handle.host == socket.gethostname() and handle.log.endswith(".log"):
        Path(handle.log[: -len(".log")] + ".properties").unlink(missing_ok=True)


def _wait_until_running(handle: StreamHandle, *, timeout_s: float, poll_s: float) -> StreamStatus:
    deadline = time.monotonic() + timeout_s
    token = current_token()
    while True:
        check_cancelled()
        st = status(handle.checkpoint)
        if st.handle is not None and st.handle.launch_id != handle.launch_id:
            raise StreamStartError(
                f"stream {handle.stream} on {handle.checkpoint} was launched again ({st.handle.launch_id}) "
                f"while launch {handle.launch_id} was starting",
                hint="two tasks start this stream; let one of them do it",
            )
        if st.state == "running":
            return st
        if st.state not in ("starting", "absent"):
            detail = f": {st.last_error}" if st.last_error else ""
            raise StreamStartError(
                f"stream {handle.stream} {st.state} before it ran (exit code {st.exit_code}){detail}",
                hint=f"see the driver log {st.log}",
            )
        if time.monotonic() >= deadline:
            raise TransientError(
                f"stream {handle.stream} did not report a running query within {timeout_s:.0f}s "
                f"(state {st.state})",
                hint=f"see the driver log {handle.log}; a slow cluster may need a longer startup timeout",
            )
        if token is not None:
            token.wait(poll_s)
        else:
            time.sleep(poll_s)


# --- stop -------------------------------------------------------------------------------


def stop(
    target: StreamHandle | str | Path | Sidecar,
    *,
    timeout_s: float = 120.0,
    poll_s: float = 0.25,
    requested_by: str | None = None,
) -> StopResult:
    """Stop the stream on a checkpoint (a handle's, or the one given): graceful, then forced.

    Writes a stop request beside the checkpoint (the supervised driver polls for it,
    from any host) and, on this host, sends SIGTERM to the Python driver (to the whole
    process group while it has not started Python yet). The supervised driver waits for
    the batch in flight, stops its queries (the heartbeat says `stopped`) and exits.
    When the driver has not exited after `timeout_s`, its process group gets SIGKILL
    (a restart re-runs the unfinished batch from the checkpoint). Stopping a stream that
    does not run succeeds (`not-running`). A driver on another host cannot be killed from
    here: TransientError when it has not stopped in time.
    """
    started = time.monotonic()
    side = open_sidecar(target.checkpoint if isinstance(target, StreamHandle) else target)
    root = side.location
    st = status(side)
    launch = read_launch(side)
    if isinstance(target, StreamHandle) and launch is not None and launch.handle.launch_id != target.launch_id:
        # That launch is not the stream's any more: never stop a newer one in its place.
        return StopResult(root, "not-running", time.monotonic() - started, "superseded", None, target.pid,
                          [f"launch {target.launch_id} was superseded by {launch.handle.launch_id}"])
    handle = launch.handle if launch else None
    cluster = launch.cluster if launch else None
    local = handle is not None and handle.host == socket.gethostname() and cluster is None
    group_alive = local and launch is not None and _group_alive(launch.pgid)
    if st.state not in ("starting", "running") and not group_alive:
        return StopResult(root, "not-running", time.monotonic() - started, st.state, st.exit_code,
                          handle.pid if handle else None)

    by = requested_by or f"{socket.gethostname()}:{os.getpid()}"
    side.write(STOP_FILE, json.dumps(
        {"format": STOP_FORMAT, "requested_at": now_iso(), "by": by,
         "launch_id": handle.launch_id if handle else None}).encode())
    detail = [f"stop requested by {by}"]
    beat = st.heartbeat
    if local and launch is not None and handle is not None:
        driver = read_driver(side, handle.launch_id)
        if driver is not None and driver.exit_code is None and _process_alive(driver.pid):
            _signal_pid(driver.pid, signal.SIGTERM)
            detail.append(f"SIGTERM to driver {driver.pid}")
        else:
            _signal_group(launch.pgid, signal.SIGTERM)
            detail.append(f"SIGTERM to process group {launch.pgid}")
    elif beat is not None and beat.host == socket.gethostname() and _process_alive(beat.pid):
        _signal_pid(beat.pid, signal.SIGTERM)  # a stream not launched by us, on this host
        detail.append(f"SIGTERM to driver {beat.pid}")

    deadline = started + timeout_s
    while time.monotonic() < deadline:
        if _stopped(side, launch, local):
            break
        time.sleep(poll_s)
    else:
        if cluster is not None and cluster.known:
            with contextlib.suppress(NotFoundError):  # gone already
                cluster.kill()  # through the cluster manager, from whichever host this runs on
            detail.append(f"killed {cluster.name} through the cluster manager after {timeout_s:.0f}s")
            kill_deadline = time.monotonic() + 60
            while time.monotonic() < kill_deadline and not ((app := cluster.app()) is not None and app.ended):
                time.sleep(max(poll_s, 0.5))
            st = status(side)
            return StopResult(root, "killed", time.monotonic() - started, st.state, st.exit_code,
                              handle.pid if handle else None, detail)
        if not local or launch is None:
            st = status(side)
            raise TransientError(
                f"stream on {root} has not stopped within {timeout_s:.0f}s of the stop request (state {st.state})",
                hint=f"its driver runs on {handle.host if handle else 'another host'}: stop it there, or wait",
            )
        _signal_group(launch.pgid, signal.SIGKILL)
        detail.append(f"SIGKILL to process group {launch.pgid} after {timeout_s:.0f}s")
        kill_deadline = time.monotonic() + 30
        while _group_alive(launch.pgid) and time.monotonic() < kill_deadline:
            time.sleep(poll_s)
        st = status(side)
        return StopResult(root, "killed", time.monotonic() - started, st.state, st.exit_code,
                          handle.pid if handle else None, detail)
    st = status(side)  # stop.json stays: it tells a supervisor the stream was stopped on purpose
    return StopResult(root, "stopped", time.monotonic() - started, st.state, st.exit_code,
                      handle.pid if handle else None, detail)


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _stopped(side: Sidecar, launch: LaunchRecord | None, local: bool) -> bool:
    """The query said it stopped (or never ran) and, on this host, the driver's processes are
    gone (on a cluster: its application ended)."""
    st = status(side)
    if st.state in ("starting", "running"):
        return False
    if st.app is not None:
        return st.app.ended
    if local and launch is not None:
        return not _group_alive(launch.pgid)
    return True


# --- clone labels -----------------------------------------------------------------------


@dataclass(frozen=True)
class CloneLabel:
    """`_streamstate/clone.json` beside a clone's checkpoint: where it came from, where it
    writes and when it expires (retention deletes expired clones)."""

    clone: str
    source_stream: str
    source_checkpoint: str
    snapshot_id: str
    batch_id: int | None
    query_id: str
    sinks: dict[str, str]
    created_at: str
    expires_at: str

    @classmethod
    def new(cls, *, clone: str, source_stream: str, source_checkpoint: str, snapshot_id: str,
            batch_id: int | None, query_id: str, sinks: Mapping[str, str], ttl_s: float) -> CloneLabel:
        now = datetime.now(UTC)
        return cls(clone, source_stream, source_checkpoint, snapshot_id, batch_id, query_id, dict(sinks),
                   now.isoformat().replace("+00:00", "Z"),
                   (now + timedelta(seconds=ttl_s)).isoformat().replace("+00:00", "Z"))

    def expired(self, now: datetime | None = None) -> bool:
        return (now or datetime.now(UTC)) >= _parse_time(self.expires_at)

    def to_json(self) -> bytes:
        return dump_record(CLONE_FORMAT, asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> CloneLabel:
        d = load_record(data, CLONE_FORMAT, "clone label")
        values: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        label = cls(**values)
        for k in ("clone", "source_stream", "snapshot_id", "expires_at"):
            if not isinstance(getattr(label, k), str):
                raise ValueError(f"{k} is not a string")
        _parse_time(label.expires_at)
        return label


def read_clone_label(checkpoint: str | Path | Sidecar) -> CloneLabel | None:
    """The clone label of a checkpoint, or None (not a clone, or unreadable)."""
    try:
        data = _read_record(checkpoint, CLONE_FILE)
        return None if data is None else CloneLabel.from_json(data)
    except (ValueError, TypeError, UsageError):
        return None


def write_clone_label(checkpoint: str | Path | Sidecar, label: CloneLabel) -> None:
    open_sidecar(checkpoint).write(CLONE_FILE, label.to_json())
