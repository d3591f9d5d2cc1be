"""Is a stream running on this checkpoint? A heartbeat record beside the checkpoint says.

A stream outlives the task that started it, and the tasks that start, watch, snapshot and
restore it may run on different machines, so liveness cannot be a local pid alone: the
stream's runtime writes `<checkpoint>/_streamstate/heartbeat.json` (Spark ignores the
directory; snapshots leave it out) when the query starts, on every progress event and on
a timer, and once more when it stops or fails. Every worker that can reach the checkpoint
can read it. A record is trusted only while fresh: a crashed driver stops beating.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.errors import StreamRunningError

FORMAT = "streamstate.heartbeat/v1"
HEARTBEAT_FILE = "_streamstate/heartbeat.json"
STATES = ("starting", "running", "stopped", "failed")
DEFAULT_INTERVAL_S = 5.0
STALE_SLACK_S = 10.0  # on top of 3 intervals: GC pauses, slow disks


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
    format: str = FORMAT

    def age_s(self, now: datetime | None = None) -> float:
        updated = datetime.fromisoformat(self.updated_at.replace("Z", "+00:00"))
        return ((now or datetime.now(UTC)) - updated).total_seconds()

    def stale_after_s(self) -> float:
        return 3 * self.interval_s + STALE_SLACK_S

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Heartbeat:
        """Validate an untrusted record; ValueError on anything off."""
        d: Any = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a heartbeat record")
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        for k in ("query_id", "run_id", "query_name", "host", "state", "updated_at"):
            if not isinstance(fields[k], str):
                raise ValueError(f"{k} is not a string")
        if fields["state"] not in STATES:
            raise ValueError(f"unknown state {fields['state']!r}")
        for k in ("pid", "batch_id", "input_rows"):
            v = fields[k]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{k} is not a non-negative integer")
        if fields["pid"] is None:
            raise ValueError("pid is missing")
        interval = fields["interval_s"]
        if not isinstance(interval, int | float) or isinstance(interval, bool) or not 0 < interval <= 3600:
            raise ValueError("interval_s is not a positive number of seconds")
        if fields["exception"] is not None and not isinstance(fields["exception"], str):
            raise ValueError("exception is not a string")
        datetime.fromisoformat(fields["updated_at"].replace("Z", "+00:00"))
        fields["interval_s"] = float(interval)
        return cls(**fields)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def write_heartbeat(checkpoint: str | Path, beat: Heartbeat) -> None:
    """Replace the record atomically (temp file, then rename): a reader never sees half."""
    path = Path(checkpoint) / HEARTBEAT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".heartbeat-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(beat.to_json())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_heartbeat(checkpoint: str | Path) -> Heartbeat | None:
    """The record, or None when there is none or it is unreadable (hostile or torn input
    never claims a stream is running)."""
    try:
        return Heartbeat.from_json((Path(checkpoint) / HEARTBEAT_FILE).read_bytes())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, OSError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_running(checkpoint: str | Path, *, now: datetime | None = None) -> bool:
    """Whether a stream is running on `checkpoint`: its last beat says starting/running, is
    fresh, and (when it beat on this host) its driver process is alive."""
    beat = read_heartbeat(checkpoint)
    if beat is None or beat.state not in ("starting", "running"):
        return False
    if beat.age_s(now) > beat.stale_after_s():
        return False
    return not (beat.host == socket.gethostname() and not pid_alive(beat.pid))


def assert_not_running(checkpoint: str | Path, what: str) -> None:
    """Raise StreamRunningError when a stream is running on `checkpoint`."""
    if not is_running(checkpoint):
        return
    beat = read_heartbeat(checkpoint)
    assert beat is not None
    raise StreamRunningError(
        f"cannot {what}: query {beat.query_name or beat.query_id} is running on {checkpoint} "
        f"(host {beat.host}, pid {beat.pid}, last beat {beat.age_s():.0f}s ago, batch {beat.batch_id})",
        hint=f"stop the stream first; if it is dead, its record goes stale in {beat.stale_after_s():.0f}s "
        f"(or remove {Path(checkpoint) / HEARTBEAT_FILE})",
    )
