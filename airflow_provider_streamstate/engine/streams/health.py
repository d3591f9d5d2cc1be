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
* **Liveness** is `engine.streams.launcher.status()`, the one place that reads the heartbeat, the
  launch record and (on this host) the driver's process: a query that stopped or failed,
  a stale heartbeat, a driver gone, or a launch that never beat. A failure message names
  the query's exception and the last error line of the driver log the launch recorded.
* **Lag** per partition is the broker's end offset (high watermark) minus the offset the
  newest committed batch recorded in `offsets/N` (Kafka source offsets live only in the
  checkpoint; the source never commits them to Kafka).

Pure Python: no Airflow import. Broker offsets come from a callable (the Kafka hook's
`broker_offsets`, or `engine.kafka.offsets.broker_offsets` with a bootstrap address).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.liveness import HEARTBEAT_FILE
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, _kafka_offsets
from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar, open_sidecar
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged, NotFoundError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import PartitionOffsets
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.driver_logs import last_error_line

Outcome = Literal["ready", "waiting", "failed"]
READY: Outcome = "ready"
WAITING: Outcome = "waiting"
FAILED: Outcome = "failed"


# --- progress --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressCheck:
    """The outcome of one progress check, and what it saw."""

    outcome: Outcome
    message: str
    batch_id: int | None  # the newest committed batch, None when there is none yet
    state: str  # launcher.status(): absent | starting | running | stopped | failed | dead
    heartbeat_age_s: float | None  # None when no heartbeat of the current run
    progress_age_s: float | None  # since the newest batch committed

    def to_json(self) -> dict[str, Any]:
        """What a sensor returns (XCom): small and flat."""
        return {
            "batch_id": self.batch_id, "state": self.state,
            "heartbeat_age_s": self.heartbeat_age_s, "progress_age_s": self.progress_age_s,
        }


Checkpoint = str | Path | Sidecar | CheckpointFS


def _reader(checkpoint: Checkpoint) -> CheckpointReader:
    """A reader of the checkpoint as it is now, through the connection it was opened with."""
    return CheckpointReader(open_sidecar(checkpoint).fs.fresh())


def newest_commit(checkpoint: Checkpoint) -> tuple[int | None, datetime | None]:
    """The newest committed batch and when its commit was written; (None, None) when the
    checkpoint does not exist yet or has no committed batch (the file's modification time:
    S3's to the second)."""
    try:
        reader = _reader(checkpoint)
    except NotFoundError:
        return None, None
    committed = reader.committed_batches()
    if not committed:
        return None, None
    n = committed[-1]
    st = reader.fs.stat(f"commits/{n}")
    if st is None:
        raise CheckpointChanged(f"commits/{n} of {reader.where} vanished while it was read",
                                hint="the checkpoint was replaced (a restore?); check again")
    seconds = st.mtime_ns / 1e9 if st.etag is None else st.mtime_ns // 1_000_000_000  # S3: sub-second is a fingerprint
    return n, datetime.fromtimestamp(seconds, UTC)


def _why(st: launcher.StreamStatus, now: datetime) -> str:
    """What the stream is doing, in words, from its status."""
    beat, handle = st.heartbeat, st.handle
    if beat is not None:
        who = f"query {beat.query_name or beat.query_id} (host {beat.host}, pid {beat.pid})"
        age, stale = beat.age_s(now), beat.stale_after_s()
        if st.state == "failed":
            return f"{who} failed at batch {beat.batch_id}: {beat.exception or 'no exception recorded'}"
        if st.state == "stopped":
            return f"{who} stopped at batch {beat.batch_id}; it makes no progress until restarted"
        if st.state == "dead" and age > stale:
            return f"{who} is dead or hung: last heartbeat {age:.0f}s ago (stale after {stale:.0f}s) in state {beat.state}"
        if st.state == "dead":
            return f"{who} is dead: its driver process is gone, last heartbeat {age:.0f}s ago"
        return f"{who} is {beat.state} at batch {beat.batch_id}, last heartbeat {age:.0f}s ago"
    if handle is None:
        return f"no heartbeat at {st.checkpoint}/{HEARTBEAT_FILE} yet (the stream's runtime writes it once its query starts)"
    since = (now - datetime.fromisoformat(handle.started_at.replace("Z", "+00:00"))).total_seconds()
    driver = f"the driver launched {since:.0f}s ago (host {handle.host}, pid {handle.pid})"
    if st.state == "starting":
        return f"{driver} is starting; waiting for its first heartbeat"
    if st.process_alive is False or st.exit_code is not None:
        code = f" with code {st.exit_code}" if st.exit_code is not None else ""
        return f"{driver} exited{code} before its first heartbeat"
    return f"{driver} has not written a heartbeat within {launcher.STARTUP_GRACE_S:.0f}s"


def check_progress(checkpoint: Checkpoint, *, after_batch: int | None = None, freshness_s: float | None = None) -> ProgressCheck:
    """Whether the stream on `checkpoint` has committed a batch newer than `after_batch`
    (any batch when None) and, with `freshness_s`, committed it less than that many
    seconds ago. When it has, READY even if the stream has since stopped or died (the
    state says); when not, FAILED if it is dead, stopped or failed, else WAITING."""
    if after_batch is not None and (isinstance(after_batch, bool) or not isinstance(after_batch, int) or after_batch < 0):
        raise UsageError(f"after_batch must be a batch id >= 0 or None, not {after_batch!r}")
    if freshness_s is not None and not freshness_s > 0:
        raise UsageError(f"freshness must be a positive duration, not {freshness_s!r} seconds")
    side = open_sidecar(checkpoint)  # opened once for both reads
    batch, progress_at = newest_commit(side)
    st = launcher.status(side)
    now = datetime.now(UTC)
    beat = st.heartbeat
    heartbeat_age = round(beat.age_s(now), 1) if beat is not None else None
    progress_age = round((now - progress_at).total_seconds(), 1) if progress_at is not None else None

    def result(outcome: Outcome, message: str) -> ProgressCheck:
        return ProgressCheck(outcome, message, batch, st.state, heartbeat_age, progress_age)

    new_enough = batch is not None and (after_batch is None or batch > after_batch)
    fresh = freshness_s is None or (progress_age is not None and progress_age <= freshness_s)
    if new_enough and fresh:
        return result(READY, f"batch {batch} committed {progress_age:.0f}s ago; stream {st.state}")

    if batch is None:
        wanted = "no committed batch yet"
    elif not new_enough:
        wanted = f"newest committed batch is {batch}, waiting for one after {after_batch}"
    else:
        wanted = f"newest committed batch {batch} is {progress_age:.0f}s old, waiting for one within {freshness_s:.0f}s"
    why = _why(st, now)
    if st.state in ("absent", "starting", "running"):
        return result(WAITING, f"{why}; {wanted}")
    line = last_error_line(st.log)
    log = f"; driver log {st.log}: {line}" if line else ""
    return result(FAILED, f"{why} ({wanted}){log}")


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


def committed_kafka_offsets(checkpoint: Checkpoint) -> tuple[int, dict[str, dict[str, int]]] | None:
    """The newest committed batch and the Kafka offsets it read up to, per topic and
    partition (all Kafka sources merged); None when there is no committed batch yet."""
    try:
        reader = _reader(checkpoint)
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
        raise UsageError(f"the stream on {reader.where} reads no Kafka source (offsets/{n} records none)",
                         hint="a lag check needs a stream that reads Kafka")
    return n, offsets


def check_lag(checkpoint: Checkpoint, *, max_lag: int, broker_offsets: BrokerOffsets) -> LagCheck:
    """Whether every partition the stream reads is at most `max_lag` records behind the
    broker's end offset. WAITING when some partition is further behind or nothing is
    committed yet; FAILED when the checkpoint is ahead of the broker (the topic was
    recreated or truncated: the query fails on it, or silently skips with
    failOnDataLoss=false)."""
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
        raise UsageError(f"max_lag must be a number of records >= 0, not {max_lag!r}")
    side = open_sidecar(checkpoint)  # opened once for every read and message below
    found = committed_kafka_offsets(side)
    if found is None:
        return LagCheck(WAITING, f"checkpoint {side.location} has no committed batch yet", max_lag, None)
    batch, offsets = found
    try:
        measured = broker_offsets(offsets)
    except NotFoundError as exc:  # engine.kafka.offsets speaks of snapshots; here it is the live stream's topic
        raise NotFoundError(
            exc.message.replace(" of the snapshot", f" that the stream on {side.location} reads"),
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
