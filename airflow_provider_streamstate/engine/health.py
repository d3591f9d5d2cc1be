"""Is a stream alive and making progress, and is it keeping up with Kafka?

The checks the sensors (poke and reschedule mode) and their triggers (deferrable mode)
share, so both paths decide alike. A check never raises for "not yet": it returns an
outcome, READY (the condition holds), WAITING (it may hold later) or FAILED (the stream is
dead, stopped or failed: waiting longer cannot help, so a sensor fails at once instead of
at its timeout). A check that cannot be made at all raises a `StreamstateError` whose
`retryable` says whether trying again can help (an unreachable broker can; a vanished
topic cannot).

* **Progress** is what the checkpoint says: the newest committed batch (`offsets/N` and
  `commits/N` both present) and when `commits/N` was written. A heartbeat beats on a
  timer even when no batch runs, so it tells liveness, not progress.
* **Liveness** is what the heartbeat beside the checkpoint says (`engine.liveness`): a
  failed or stopped query, a stale record, or (on this host) a driver pid that is gone.
  The launcher also leaves `_streamstate/launch.json` (`{"log": <driver log>, "pid",
  "host", "started_at", "proc_start"}`; each is optional here): a heartbeat older than
  the launch belongs to an earlier run, so the new driver may take its time to beat while
  its process lives (on this host) or for a grace period (on another), and the driver
  log's last error line goes into the failure message.
* **Lag** per partition is the broker's end offset (high watermark) minus the offset the
  newest committed batch recorded in `offsets/N` (Kafka source offsets live only in the
  checkpoint; the source never commits them to Kafka).

Pure Python: no Airflow import. Broker offsets come from a callable (the Kafka hook's
`broker_offsets`, or `engine.kafka.broker_offsets` with a bootstrap address).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_provider_streamstate.engine.checkpoint import (
    CheckpointReader,
    _kafka_offsets,
    local_checkpoint_path,
)
from airflow_provider_streamstate.engine.errors import CheckpointChanged, NotFoundError, UsageError
from airflow_provider_streamstate.engine.kafka import PartitionOffsets
from airflow_provider_streamstate.engine.liveness import HEARTBEAT_FILE, Heartbeat, read_heartbeat

Outcome = Literal["ready", "waiting", "failed"]
READY: Outcome = "ready"
WAITING: Outcome = "waiting"
FAILED: Outcome = "failed"

LAUNCH_FILE = "_streamstate/launch.json"
STARTUP_GRACE_S = 600.0  # how long a driver launched on another host may take to beat first
LOG_TAIL_BYTES = 256 * 1024
_LOG_KEYS = ("log", "log_path", "driver_log")
_PY_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Exception|Error|Exit|Interrupt)\b(?::|$)")
_ERROR_LINE = re.compile(r"\b(?:ERROR|FATAL)\b|\w(?:Exception|Error)\b")


# --- progress --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressCheck:
    """The outcome of one progress check, and what it saw."""

    outcome: Outcome
    message: str
    batch_id: int | None  # the newest committed batch, None when there is none yet
    state: str | None  # the heartbeat's state, None when there is no record
    heartbeat_age_s: float | None
    progress_age_s: float | None  # since the newest batch committed

    def to_json(self) -> dict[str, Any]:
        """What a sensor returns (XCom): small and flat."""
        return {
            "batch_id": self.batch_id, "state": self.state,
            "heartbeat_age_s": self.heartbeat_age_s, "progress_age_s": self.progress_age_s,
        }


@dataclass(frozen=True)
class Launch:
    """What a launcher recorded about the driver it started; every field is optional."""

    launched_at: datetime
    log: str | None
    pid: int | None
    host: str | None
    proc_start: int | None  # the process's start time in clock ticks since boot: guards pid reuse


def read_launch(checkpoint: str | Path) -> Launch | None:
    """The launch record, or None when there is none or it is unreadable (it only adds
    detail to a message and a grace period; it never decides a stream is alive)."""
    path = Path(checkpoint) / LAUNCH_FILE
    try:
        data: Any = json.loads(path.read_bytes())
        mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    launched_at = mtime
    stamp = data.get("launched_at") or data.get("started_at")
    if isinstance(stamp, str):
        try:
            launched_at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            if launched_at.tzinfo is None:
                launched_at = launched_at.replace(tzinfo=UTC)
        except ValueError:
            pass
    log = next((data[k] for k in _LOG_KEYS if isinstance(data.get(k), str) and data[k]), None)
    pid, proc_start = (v if isinstance(v, int) and not isinstance(v, bool) else None
                       for v in (data.get("pid"), data.get("proc_start")))
    host = data.get("host") if isinstance(data.get("host"), str) else None
    return Launch(launched_at, log, pid, host, proc_start)


def process_alive(pid: int, proc_start: int | None = None) -> bool:
    """Whether the process `pid` of this host lives: not gone, not a zombie (the parent that
    launched it may not have reaped it yet), and, with `proc_start`, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc: kill(0) is all we know
    if fields[0] in ("Z", "X"):
        return False
    return proc_start is None or len(fields) < 20 or int(fields[19]) == proc_start


def last_error_line(log_path: str | Path, *, max_len: int = 500) -> str | None:
    """The most telling error line at the end of a driver log: the last Python exception
    line (`pyspark.errors....StreamingQueryException: ...`, which Spark's shutdown chatter
    follows) if any, else the last log4j ERROR/FATAL line or line naming an exception;
    None when the log is missing or holds no such line."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            lines = [ln.strip() for ln in f.read().decode("utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    for pattern in (_PY_EXCEPTION_LINE, _ERROR_LINE):
        for line in reversed(lines):
            if line and pattern.search(line) and not line.startswith(("at ", "File ", "Caused by")):
                return line if len(line) <= max_len else line[: max_len - 3] + "..."
    return None


def _newest_commit(root: Path) -> tuple[int | None, datetime | None]:
    """The newest committed batch and when its commit was written; (None, None) when the
    checkpoint does not exist yet or has no committed batch."""
    try:
        reader = CheckpointReader(str(root))
    except NotFoundError:
        return None, None
    committed = reader.committed_batches()
    if not committed:
        return None, None
    n = committed[-1]
    try:
        mtime = (root / "commits" / str(n)).stat().st_mtime
    except FileNotFoundError:
        raise CheckpointChanged(f"commits/{n} of {root} vanished while it was read",
                                hint="the checkpoint was replaced (a restore?); check again") from None
    return n, datetime.fromtimestamp(mtime, UTC)


def _with_log(message: str, launch: Launch | None) -> str:
    line = last_error_line(launch.log) if launch is not None and launch.log else None
    return f"{message}; driver log {launch.log}: {line}" if line and launch is not None else message


def _liveness(
    root: Path, beat: Heartbeat | None, launch: Launch | None, now: datetime, startup_grace_s: float
) -> tuple[Outcome, str]:
    """WAITING with what the stream is doing, or FAILED with why it will not progress."""
    here = socket.gethostname()
    if beat is not None:
        age = beat.age_s(now)
        who = f"query {beat.query_name or beat.query_id} (host {beat.host}, pid {beat.pid})"
        verdict: tuple[Outcome, str]
        if beat.state == "failed":
            verdict = FAILED, f"{who} failed at batch {beat.batch_id}: {beat.exception or 'no exception recorded'}"
        elif beat.state == "stopped":
            verdict = FAILED, f"{who} stopped at batch {beat.batch_id}; it makes no progress until restarted"
        elif age > beat.stale_after_s():
            verdict = FAILED, (f"{who} is dead or hung: last heartbeat {age:.0f}s ago "
                               f"(stale after {beat.stale_after_s():.0f}s) in state {beat.state}")
        elif beat.host == here and not process_alive(beat.pid):
            verdict = FAILED, f"{who} is dead: its driver process is gone, last heartbeat {age:.0f}s ago"
        else:
            return WAITING, f"{who} is {beat.state} at batch {beat.batch_id}, last heartbeat {age:.0f}s ago"
        updated = now.timestamp() - age
        if launch is None or launch.launched_at.timestamp() <= updated:
            return verdict
        # The record is from a run before the latest launch: judge the new driver instead.
    if launch is None:
        return WAITING, f"no heartbeat at {root / HEARTBEAT_FILE} yet (the stream's runtime writes it once its query starts)"
    since = (now - launch.launched_at).total_seconds()
    if launch.pid is not None and launch.host == here:
        if not process_alive(launch.pid, launch.proc_start):
            return FAILED, f"the driver launched {since:.0f}s ago (pid {launch.pid}) exited before its first heartbeat"
        return WAITING, f"the driver launched {since:.0f}s ago (pid {launch.pid}) is starting; waiting for its first heartbeat"
    if since > startup_grace_s:
        return FAILED, f"the driver launched {since:.0f}s ago has not written a heartbeat (grace {startup_grace_s:.0f}s)"
    return WAITING, f"the driver launched {since:.0f}s ago; waiting for its first heartbeat"


def check_progress(
    checkpoint: str, *, after_batch: int | None = None, freshness_s: float | None = None,
    now: datetime | None = None, startup_grace_s: float = STARTUP_GRACE_S,
) -> ProgressCheck:
    """Whether the stream on `checkpoint` has committed a batch newer than `after_batch`
    (any batch when None) and, with `freshness_s`, committed it less than that many
    seconds ago. When it has, READY even if the stream has since died (the state says);
    when not, FAILED if the stream is dead, stopped or failed, else WAITING."""
    if after_batch is not None and (isinstance(after_batch, bool) or not isinstance(after_batch, int) or after_batch < 0):
        raise UsageError(f"after_batch must be a batch id >= 0 or None, not {after_batch!r}")
    if freshness_s is not None and not freshness_s > 0:
        raise UsageError(f"freshness must be a positive duration, not {freshness_s!r} seconds")
    now = now or datetime.now(UTC)
    root = local_checkpoint_path(checkpoint)
    batch, progress_at = _newest_commit(root)
    beat = read_heartbeat(root)
    heartbeat_age = round(beat.age_s(now), 1) if beat is not None else None
    progress_age = round((now - progress_at).total_seconds(), 1) if progress_at is not None else None

    def result(outcome: Outcome, message: str) -> ProgressCheck:
        return ProgressCheck(outcome, message, batch, beat.state if beat else None, heartbeat_age, progress_age)

    new_enough = batch is not None and (after_batch is None or batch > after_batch)
    fresh = freshness_s is None or (progress_age is not None and progress_age <= freshness_s)
    if new_enough and fresh:
        state = f"; heartbeat: {beat.state}, {heartbeat_age:.0f}s ago" if beat is not None else "; no heartbeat"
        return result(READY, f"batch {batch} committed {progress_age:.0f}s ago{state}")

    if batch is None:
        wanted = "no committed batch yet"
    elif not new_enough:
        wanted = f"newest committed batch is {batch}, waiting for one after {after_batch}"
    else:
        wanted = f"newest committed batch {batch} is {progress_age:.0f}s old, waiting for one within {freshness_s:.0f}s"
    launch = read_launch(root)
    outcome, why = _liveness(root, beat, launch, now, startup_grace_s)
    if outcome == WAITING:
        return result(WAITING, f"{why}; {wanted}")
    return result(FAILED, _with_log(f"{why} ({wanted})", launch))


# --- lag -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    """One partition: what the stream has read up to, and what the broker holds."""

    topic: str
    partition: int
    committed: int  # the offset the newest committed batch read up to (the next one to read)
    end: int  # the broker's high watermark

    @property
    def lag(self) -> int:
        return self.end - self.committed

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "committed": self.committed,
                "end": self.end, "lag": self.lag}


@dataclass(frozen=True)
class LagCheck:
    """The outcome of one lag check, and every partition it measured."""

    outcome: Outcome
    message: str
    max_lag: int  # the threshold: every partition's lag must be at most this
    batch_id: int | None  # the newest committed batch whose offsets were compared
    partitions: tuple[PartitionLag, ...] = ()

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        """What a sensor returns (XCom)."""
        return {
            "max_lag": self.max_lag, "batch_id": self.batch_id, "total_lag": self.total_lag,
            "partitions": [p.to_json() for p in self.partitions],
        }

    def table(self) -> str:
        """One line per partition, for the task log."""
        return "\n".join(f"  {p.topic}[{p.partition}]: committed {p.committed}, end {p.end}, lag {p.lag}"
                         for p in self.partitions)


BrokerOffsets = Callable[[dict[str, dict[str, int]]], list[PartitionOffsets]]


def committed_kafka_offsets(checkpoint: str) -> tuple[int, dict[str, dict[str, int]]] | None:
    """The newest committed batch and the Kafka offsets it read up to, per topic and
    partition (all Kafka sources merged); None when there is no committed batch yet."""
    root = local_checkpoint_path(checkpoint)
    try:
        reader = CheckpointReader(str(root))
    except NotFoundError:
        return None
    committed = reader.committed_batches()
    if not committed:
        return None
    n = committed[-1]
    _, sources = reader.offsets(n)
    offsets: dict[str, dict[str, int]] = {}
    for value in sources:
        for topic, parts in (_kafka_offsets(value) or {}).items():
            offsets.setdefault(topic, {}).update(parts)
    if not offsets:
        raise UsageError(f"the stream on {root} reads no Kafka source (offsets/{n} records none)",
                         hint="a lag check needs a stream that reads Kafka")
    return n, offsets


def check_lag(checkpoint: str, *, max_lag: int, broker_offsets: BrokerOffsets) -> LagCheck:
    """Whether every partition the stream reads is at most `max_lag` records behind the
    broker's end offset. WAITING when some partition is further behind or nothing is
    committed yet; FAILED when the checkpoint is ahead of the broker (the topic was
    recreated or truncated: the query fails on it, or silently skips with
    failOnDataLoss=false)."""
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
        raise UsageError(f"max_lag must be a number of records >= 0, not {max_lag!r}")
    found = committed_kafka_offsets(checkpoint)
    if found is None:
        return LagCheck(WAITING, f"checkpoint {checkpoint} has no committed batch yet", max_lag, None)
    batch, offsets = found
    try:
        measured = broker_offsets(offsets)
    except NotFoundError as exc:  # engine.kafka speaks of snapshots; here it is the live stream's topic
        raise NotFoundError(
            exc.message.replace(" of the snapshot", f" that the stream on {checkpoint} reads"),
            hint="check that the Kafka connection points at the stream's cluster; if the topic was deleted, "
            "the stream must be reset or restored before it can catch up",
        ) from None
    parts = tuple(PartitionLag(p.topic, p.partition, p.snapshot, p.latest) for p in measured)
    ahead = [p for p in parts if p.lag < 0]
    if ahead:
        names = ", ".join(f"{p.topic}[{p.partition}] at {p.committed} > end {p.end}" for p in ahead)
        return LagCheck(FAILED, (f"batch {batch} read past the broker's end offsets ({names}): the topic was "
                                 "recreated or truncated; restore a snapshot or reset the stream"), max_lag, batch, parts)
    worst = max(parts, key=lambda p: p.lag)
    summary = f"batch {batch}: total lag {sum(p.lag for p in parts)} over {len(parts)} partition(s), " \
              f"largest {worst.lag} at {worst.topic}[{worst.partition}]"
    if worst.lag <= max_lag:
        return LagCheck(READY, f"{summary}, within max_lag {max_lag}", max_lag, batch, parts)
    return LagCheck(WAITING, f"{summary} > max_lag {max_lag}", max_lag, batch, parts)
