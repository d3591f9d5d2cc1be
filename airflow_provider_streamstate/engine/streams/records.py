"""The records a launch keeps beside its checkpoint, where every host finds them
(engine/checkpoint/sidecar.py):

    <checkpoint>/_streamstate/
        launches/<N>.json   launch generation N (the newest is the stream's launch): the
                            handle, the command (its secrets as ***), the driver's process
                            group here, and for a driver on a cluster where its manager knows
                            it. Created create-only: of two starts racing from any hosts
                            exactly one wins; N is the fencing token its driver checks.
        driver.json         written by the supervised driver (jobs/supervised.py): its pid,
                            and its exit code and last error once it exits
        stop.json           a stop request; the driver polls for it (any host can ask)

Records are untrusted input: each is read through its own class, and one that does not
parse reads as absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.sidecar import (
    LAUNCHES_DIR,
    SIDECAR_DIR,
    Sidecar,
    open_sidecar,
)
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.streams.managers import ClusterApp, manager_named

LAUNCH_FORMAT = "streamstate.launch/v1"
DRIVER_FORMAT = "streamstate.driver/v1"
STOP_FORMAT = "streamstate.stop/v1"
LAUNCH_FILE = f"{SIDECAR_DIR}/launch.json"  # the single record of releases before launch generations
DRIVER_FILE = f"{SIDECAR_DIR}/driver.json"
STOP_FILE = f"{SIDECAR_DIR}/stop.json"
LOG_DIR = f"{SIDECAR_DIR}/logs"
LOCK_FILE = f"{SIDECAR_DIR}/launch.lock"
KEEP_LAUNCHES = 10  # generations kept per checkpoint; older ones are deleted by the next launch


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
        if cluster is not None:
            manager_named(cluster.manager)  # ValueError: a manager this release does not know
        return cls(handle, [str(a) for a in d["command"]], d["pgid"], proc_start if isinstance(proc_start, int) else None,
                   cluster)


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


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def read_record(checkpoint: str | Path | Sidecar, rel: str) -> bytes | None:
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


def launch_path(generation: int) -> str:
    return f"{LAUNCHES_DIR}/{generation:08d}.json"


def read_launch(checkpoint: str | Path | Sidecar) -> LaunchRecord | None:
    """The latest launch on `checkpoint` (its highest generation), or None (none, or unreadable)."""
    try:
        side = open_sidecar(checkpoint)
        generations = launch_generations(side)
        data = read_record(side, launch_path(generations[-1]) if generations else LAUNCH_FILE)
        return None if data is None else LaunchRecord.from_json(data)
    except (ValueError, TypeError, UsageError):
        return None


def read_driver(checkpoint: str | Path | Sidecar, launch_id: str | None = None) -> DriverRecord | None:
    """The supervised driver's record, when it belongs to `launch_id` (if given)."""
    try:
        data = read_record(checkpoint, DRIVER_FILE)
        rec = None if data is None else DriverRecord.from_json(data)
    except (ValueError, TypeError, UsageError):
        return None
    return rec if rec is not None and (launch_id is None or rec.launch_id == launch_id) else None


def write_driver(checkpoint: str | Path | Sidecar, record: DriverRecord) -> None:
    """For the supervised driver: say who it is, and later how it ended."""
    open_sidecar(checkpoint).write(DRIVER_FILE, record.to_json())


def write_stop_request(side: Sidecar, *, requested_at: str, by: str, launch_id: str | None) -> None:
    side.write(STOP_FILE, json.dumps(
        {"format": STOP_FORMAT, "requested_at": requested_at, "by": by, "launch_id": launch_id}).encode())


def stop_requested(checkpoint: str | Path | Sidecar, *, since: datetime, launch_id: str | None = None) -> str | None:
    """For the supervised driver: the reason of a stop request made after `since` (for its
    launch `launch_id`, when the request names one), or None."""
    try:
        data = read_record(checkpoint, STOP_FILE)
        if data is None:
            return None
        d: Any = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != STOP_FORMAT:
            return None
        if parse_time(str(d["requested_at"])) < since:
            return None  # an old request, for a driver that is gone
        if launch_id and d.get("launch_id") and d["launch_id"] != launch_id:
            return None  # a request for another launch of this stream
        return f"stop requested by {d.get('by', 'someone')} at {d['requested_at']}"
    except (ValueError, KeyError, TypeError):
        return None
