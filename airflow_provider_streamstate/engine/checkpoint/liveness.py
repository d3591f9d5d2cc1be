"""Is a stream running on this checkpoint? A heartbeat record beside the checkpoint says.

A stream outlives the task that started it, and the tasks that start, watch, snapshot and
restore it may run on different machines, so liveness cannot be a local pid alone: the
stream's runtime writes `<checkpoint>/_streamstate/heartbeat.json` (a file, or an object
beside a remote checkpoint: engine/checkpoint/sidecar.py; Spark ignores the directory,
snapshots leave it out) when the query starts, on every progress event and on a timer, and once more when it stops or fails. Every worker that can reach the checkpoint
can read it. A record is trusted only while fresh: a crashed driver stops beating.

A query that was not started through streamstate (a plain spark-submit) keeps no heartbeat.
What it cannot hide is its writes: each batch writes `offsets/<N>` and `commits/<N>`. A
checkpoint whose newest batch is newer than its last heartbeat's (or that has none), written
within the last `unmanaged_window_s()` seconds (and not by a restore: newer than its lineage
record or a swap's), is taken for running under someone else (`unmanaged_writer`): in-place rescales and
restores refuse it, and `stream status` says so. A query that idles longer than the window
writes nothing to tell by; the swaps guard against it at the moment they change the
checkpoint (engine/checkpoint/swap.py).

The record is untrusted input (anyone who can write the checkpoint can write it): a
record that is too big, malformed, or dated further in the future than its staleness
window never claims a stream is running, and its text fields are single lines of bounded
length, so errors that quote them stay one line.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import LINEAGE_FILE, pid_alive
from airflow_provider_streamstate.engine.checkpoint.sidecar import SIDECAR_DIR, Sidecar, open_sidecar
from airflow_provider_streamstate.engine.checkpoint.swap import LAST_SWAP_FILE
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.engine.core.records import load_record

FORMAT = "streamstate.heartbeat/v1"
HEARTBEAT_FILE = f"{SIDECAR_DIR}/heartbeat.json"
STATES = ("starting", "running", "stopped", "failed")
DEFAULT_INTERVAL_S = 5.0
STALE_SLACK_S = 10.0  # on top of 3 intervals: GC pauses, slow disks
MAX_RECORD_BYTES = 64 * 1024
MAX_NAME_CHARS = 256  # query_id, run_id, query_name, host
MAX_EXCEPTION_CHARS = 2048  # the first line of the query's exception; writers truncate
# How long after its last write a checkpoint without a heartbeat is taken for running: a
# trigger interval or two of most streams. STREAMSTATE_UNMANAGED_WINDOW_S overrides it (0: a
# checkpoint without a heartbeat is never taken for running).
UNMANAGED_WINDOW_S = 120.0
ENV_UNMANAGED_WINDOW = "STREAMSTATE_UNMANAGED_WINDOW_S"


@dataclass(frozen=True)
class Heartbeat:
    """The last word of a stream's runtime about its query."""

    query_id: str
    run_id: str
    query_name: str
    host: str
    pid: int
    state: str  # starting | running | stopped | failed
    batch_id: int | None
    input_rows: int | None
    updated_at: str  # UTC ISO 8601
    interval_s: float = DEFAULT_INTERVAL_S
    exception: str | None = None
    launch_id: str | None = None  # the launch whose driver beats (engine/streams/launcher.py), if any
    spark_version: str | None = None  # the driver's Spark: what a snapshot of the checkpoint records
    format: str = FORMAT

    def age_s(self, now: datetime | None = None) -> float:
        """Seconds since the last beat (negative when the writer's clock is ahead)."""
        return ((now or datetime.now(UTC)) - _parse_time(self.updated_at)).total_seconds()

    def stale_after_s(self) -> float:
        return 3 * self.interval_s + STALE_SLACK_S

    def is_fresh(self, now: datetime | None = None) -> bool:
        """Beat within the staleness window; a beat dated further ahead than the window
        is a clock that far off or a forged record, and is not trusted either."""
        window = self.stale_after_s()
        return -window <= self.age_s(now) <= window

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Heartbeat:
        """Validate an untrusted record; ValueError on anything off."""
        d = load_record(data, FORMAT, "heartbeat record")
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        for k in ("query_id", "run_id", "query_name", "host", "state", "updated_at"):
            _check_line(k, fields[k], MAX_NAME_CHARS)
        if fields["state"] not in STATES:
            raise ValueError(f"unknown state {fields['state']!r}")
        for k in ("pid", "batch_id", "input_rows"):
            v = fields[k]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{k} is not a non-negative integer")
        if fields["pid"] is None or fields["pid"] < 1:
            raise ValueError("pid is missing or not a process id")  # kill(0, ...) would mean "my group"
        interval = fields["interval_s"]
        if not isinstance(interval, int | float) or isinstance(interval, bool) or not 0 < interval <= 3600:
            raise ValueError("interval_s is not a positive number of seconds")
        if fields["exception"] is not None:
            _check_line("exception", fields["exception"], MAX_EXCEPTION_CHARS)
        for k in ("launch_id", "spark_version"):
            if fields[k] is not None:
                _check_line(k, fields[k], MAX_NAME_CHARS)
        _parse_time(fields["updated_at"])
        fields["interval_s"] = float(interval)
        return cls(**fields)


def _check_line(name: str, value: Any, limit: int) -> None:
    """A string of one line, at most `limit` characters, without control characters."""
    if not isinstance(value, str):
        raise ValueError(f"{name} is not a string")
    if len(value) > limit or any(c < " " or c == "\x7f" for c in value):
        raise ValueError(f"{name} is not a single line of at most {limit} characters")


def _parse_time(text: str) -> datetime:
    """An ISO 8601 time with a UTC offset (a naive time has no meaning across hosts)."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"updated_at {text!r} has no UTC offset")
    return when


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def write_heartbeat(checkpoint: str | Path | Sidecar | CheckpointFS, beat: Heartbeat) -> None:
    """Replace the record atomically: a reader never sees half."""
    open_sidecar(checkpoint).write(HEARTBEAT_FILE, beat.to_json())


def read_heartbeat(checkpoint: str | Path | Sidecar | CheckpointFS) -> Heartbeat | None:
    """The record, or None when there is none or it is unreadable (hostile or torn input
    never claims a stream is running)."""
    try:
        data = open_sidecar(checkpoint).read(HEARTBEAT_FILE, limit=MAX_RECORD_BYTES)
        if data is None or len(data) > MAX_RECORD_BYTES:
            return None
        return Heartbeat.from_json(data)
    except (ValueError, TypeError, OSError, RecursionError):  # RecursionError: JSON nested too deep
        return None


def beat_says_running(beat: Heartbeat | None, now: datetime | None = None) -> bool:
    """Whether `beat` (a record already read) says its stream runs: starting/running, fresh,
    and (beaten on this host) its driver process alive."""
    if beat is None or beat.state not in ("starting", "running") or not beat.is_fresh(now):
        return False
    return not (beat.host == socket.gethostname() and not pid_alive(beat.pid))


def is_running(checkpoint: str | Path | Sidecar | CheckpointFS, *, now: datetime | None = None) -> bool:
    """Whether a stream is running on `checkpoint`: its last beat says starting/running, is
    fresh, and (when it beat on this host) its driver process is alive."""
    return beat_says_running(read_heartbeat(checkpoint), now)


def unmanaged_window_s() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_UNMANAGED_WINDOW, UNMANAGED_WINDOW_S)))
    except ValueError:
        return UNMANAGED_WINDOW_S


def _newest(times: dict[str, float]) -> tuple[int, float] | None:
    batches = [(int(n), t) for n, t in times.items() if n.isdigit()]
    return max(batches) if batches else None


_READ = object()


def unmanaged_writer(checkpoint: str | Path | Sidecar | CheckpointFS, beat: Any = _READ, *,
                     now: float | None = None) -> str | None:
    """What says a query not started by streamstate is writing the checkpoint (its newest
    batch written lately, after the last heartbeat's batch: `beat`, read here unless the
    caller read it), or None; see the module docstring."""
    window = unmanaged_window_s()
    if window <= 0:
        return None
    side = open_sidecar(checkpoint)
    if beat is _READ:
        beat = read_heartbeat(side)
    fs = side.fs
    newest = [n for n in (_newest(fs.modified_times("offsets")), _newest(fs.modified_times("commits"))) if n]
    if not newest:
        return None
    batch = max(b for b, _ in newest)
    written = max(t for _, t in newest)
    if beat is not None and beat.batch_id is not None and batch <= beat.batch_id + 1:
        return None  # the heartbeat's own query wrote it (the next batch may be planned, not beaten)
    age = (now if now is not None else time.time()) - written
    if age > window:
        return None
    ours = fs.modified_times(SIDECAR_DIR)  # a restore's lineage and a swap's record, written after their files
    if any(ours.get(rel.rpartition("/")[2], 0.0) >= written for rel in (LINEAGE_FILE, LAST_SWAP_FILE)):
        return None  # streamstate wrote the files (a restore, a rescale)
    return (f"its batch {batch} was written {max(age, 0):.0f}s ago and no streamstate heartbeat is beside it: a query "
            "not started by streamstate is running on it")


def assert_not_running(checkpoint: str | Path | Sidecar | CheckpointFS, what: str) -> None:
    """Raise StreamRunningError when a stream is running on `checkpoint` (`what`: the
    operation refused, as in "cannot <what>"): a fresh heartbeat says so, or the
    checkpoint's own writes do (`unmanaged_writer`)."""
    side = open_sidecar(checkpoint)
    beat = read_heartbeat(side)  # read once: the verdict and the message agree
    if beat is None or not beat_says_running(beat):
        other = unmanaged_writer(side, beat)
        if other is not None:
            window = unmanaged_window_s()
            raise StreamRunningError(
                f"cannot {what}: {side.location} is being written: {other}",
                hint=f"stop that query; a checkpoint is taken for stopped {window:.0f}s after its last write "
                f"({ENV_UNMANAGED_WINDOW}=0 says it is stopped now)")
        return
    age = beat.age_s()
    raise StreamRunningError(
        f"cannot {what}: query {beat.query_name or beat.query_id} is running on {side.location} "
        f"(host {beat.host}, pid {beat.pid}, last beat {max(age, 0):.0f}s ago, batch {beat.batch_id})",
        hint=f"stop the stream first; if it is dead, its record goes stale in "
        f"{max(beat.stale_after_s() - age, 0) + 1:.0f}s (or remove {side.where(HEARTBEAT_FILE)})",
    )
