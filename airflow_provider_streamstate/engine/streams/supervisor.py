"""Keep a stream running: one supervision round decides, from what the checkpoint's
records say, whether the stream is healthy, needs a restart, or needs its state restored
from a snapshot first, and does it.

A round, in order:

1. **Running or starting**: healthy unless it stalls (no batch committed within
   `freshness_s` while Kafka holds records it has not read) or lags (more than `max_lag`
   records behind on some partition). Nothing is touched: a slow stream is an alert for a
   person, not a reason to kill it.
2. **Stopped on request** (`StopStreamOperator`, `streamstate stop`): left alone.
3. **Dead, failed, or stopped without a request**: restarted from its own checkpoint
   (Spark resumes after the last committed batch: no event lost or counted twice), then
   watched until it commits a new batch, fails, or `settle_s` passes quietly (an idle
   stream commits nothing).
4. **The restart fails on an unusable checkpoint** (Spark cannot load the state or read
   the checkpoint: `checkpoint_unusable`), or on any failure with `restore="any-failure"`:
   the newest snapshot of the current timeline that verifies (every blob re-hashed) is
   restored over the checkpoint and the stream restarted from it. The snapshot's batch
   and Kafka offsets are consistent, so Spark replays from there to the same state.
5. Anything else is an alert: `SupervisionFailed` with one line saying what happened.

Every round returns a `SupervisionReport` with the action taken, the snapshot restored
(if any) and the timings of a recovery (launch, Spark start, first batch). Pure Python:
the caller provides the stream's start (spark-submit through Airflow's hook, or any
launcher) and its store and broker offsets.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_provider_streamstate.engine.catalog.index import list_summaries
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, resolve_snapshot
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.sidecar import Sidecar, open_sidecar
from airflow_provider_streamstate.engine.core.cancel import check_cancelled
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
from airflow_provider_streamstate.engine.kafka.offsets import PartitionOffsets
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.health import (
    FAILED,
    READY,
    check_lag,
    check_progress,
    newest_commit,
)
from airflow_provider_streamstate.engine.streams.records import LOG_DIR, stop_requested

log = logging.getLogger("streamstate.supervisor")

RestorePolicy = Literal["checkpoint-errors", "any-failure", "never"]
RESTORE_POLICIES: tuple[str, ...] = ("checkpoint-errors", "any-failure", "never")

# What Spark says when the checkpoint itself is unusable: a state store version it cannot
# load (a deleted or truncated delta, snapshot, changelog or zip file), an unreadable
# offset/commit log, metadata it cannot parse, or a repartition that wrote its batch's offsets
# and failed before its commit (Spark 4.2+). Restarting on the same checkpoint fails
# the same way every time; only other state (a snapshot) helps.
_CHECKPOINT_ERRORS = re.compile(
    r"CANNOT_LOAD_STATE_STORE|STATE_STORE_[A-Z_]*(?:NOT_FOUND|CORRUPT|MISSING|INVALID)|CANNOT_READ_"
    r"|CHECKPOINT_FILE|Error reading (?:delta|snapshot|changelog|streaming state) file"
    r"|(?:delta|snapshot|changelog|zip) file .* does not exist|FileNotFoundException.*(?:/state/|/offsets/|/commits/)"
    r"|STDS_|INCOMPATIBLE_STATE|CorruptedCheckpoint|Log file was malformed|STREAMING_UNFINISHED_REPARTITION",
)


def checkpoint_unusable(error: str | None) -> bool:
    """Whether a stream's failure says its checkpoint cannot be used (restoring state
    from a snapshot can help), rather than its code, input or cluster failed."""
    return bool(error and _CHECKPOINT_ERRORS.search(error))


class SupervisionFailed(StreamstateError):
    """The stream is unhealthy and this round could not (or must not) fix it."""

    retryable = False


@dataclass(frozen=True)
class RecoveryTimings:
    """Seconds from the round's decision to restart: until the driver was launched, its
    query ran (Spark started, checkpoint loaded), and its first new batch committed."""

    launch_s: float | None = None
    spark_start_s: float | None = None
    first_batch_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 2) if v is not None else None) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class SupervisionReport:
    """One round's outcome: `action` is none | left-stopped | restarted | restored."""

    stream: str
    checkpoint: str
    state_before: str
    action: str
    message: str
    batch_id: int | None
    total_lag: int | None = None
    restored_snapshot: str | None = None
    restored_batch: int | None = None
    failure: str | None = None  # what the stream died of, when it was recovered
    timings: list[RecoveryTimings] = field(default_factory=list)  # one per start attempt
    decided_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream, "checkpoint": self.checkpoint, "state_before": self.state_before,
            "action": self.action, "message": self.message, "batch_id": self.batch_id,
            "total_lag": self.total_lag, "restored_snapshot": self.restored_snapshot,
            "restored_batch": self.restored_batch, "failure": self.failure,
            "timings": [t.to_json() for t in self.timings], "decided_at": self.decided_at,
        }


@dataclass(frozen=True)
class SupervisionPolicy:
    """What a round tolerates and what it may do.

    `freshness_s`: a running stream must commit a batch at least this often while records
    wait (None: not checked). `max_lag`: most records any partition may lag (None: not
    checked; needs broker offsets). `restart`: restart a dead or failed stream.
    `restore`: when to restore a snapshot after a failed restart. `settle_s`: how long a
    restarted stream is watched for its first batch or failure.
    """

    freshness_s: float | None = None
    max_lag: int | None = None
    restart: bool = True
    restore: str = "checkpoint-errors"
    settle_s: float = 180.0

    def __post_init__(self) -> None:
        if self.restore not in RESTORE_POLICIES:
            raise UsageError(f"restore must be one of {', '.join(RESTORE_POLICIES)}, not {self.restore!r}")
        if self.freshness_s is not None and not self.freshness_s > 0:
            raise UsageError(f"freshness must be a positive duration, not {self.freshness_s!r} seconds")
        if self.max_lag is not None and (isinstance(self.max_lag, bool) or self.max_lag < 0):
            raise UsageError(f"max_lag must be a number of records >= 0, not {self.max_lag!r}")
        if not self.settle_s > 0:
            raise UsageError(f"settle must be a positive duration, not {self.settle_s!r} seconds")


# The stream's start: launches (or reconnects to) its driver and returns once its query
# runs; raises StreamstateError when the driver dies first.
StartFn = Callable[[], Any]
BrokerOffsets = Callable[[dict[str, dict[str, int]]], list[PartitionOffsets]]


def supervise(
    stream: str,
    checkpoint: str | Path | CheckpointFS | Sidecar,
    *,
    start: StartFn,
    policy: SupervisionPolicy,
    store: Callable[[], SnapshotStore] | None = None,
    broker_offsets: BrokerOffsets | None = None,
    snapshot: str = "latest",
    parallelism: int = 8,
) -> SupervisionReport:
    """One supervision round of `stream` on `checkpoint` (see the module docstring).
    `store` opens the snapshot store (needed only to restore); `snapshot` names what to
    restore: `latest` (the newest on the current timeline that verifies) or an id. A remote
    checkpoint given opened (a `CheckpointFS`, or its `Sidecar` that `start` also uses) is
    read and written with its connection."""

    # Every step below reads the records and the checkpoint through its storage, from any host.
    root = open_sidecar(checkpoint)
    st = launcher.status(root)
    decided_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    batch = _newest_batch(root)

    def report(action: str, message: str, **kw: Any) -> SupervisionReport:
        return SupervisionReport(stream, root.location, st.state, action, message, kw.pop("batch_id", batch),
                                 decided_at=decided_at, **kw)

    if st.state in ("running", "starting"):
        return _check_running(stream, root, st.state, policy, broker_offsets, report)
    if st.state == "absent":
        raise SupervisionFailed(
            f"stream {stream} was never started on {root} (no launch record, no heartbeat)",
            hint="start it (StartStreamOperator) before supervising it",
        )
    requested = stop_requested(root, since=_started_at(st)) if st.state == "stopped" else None
    if requested:
        return report("left-stopped", f"stream {stream} is stopped ({requested}); left alone")

    failure = st.last_error or (f"its query stopped at batch {batch} without a stop request"
                                if st.state == "stopped" else f"driver {st.state}")
    if not policy.restart:
        raise SupervisionFailed(f"stream {stream} is {st.state}: {failure}",
                                hint="restart it, or let the supervisor do it (restart=True)")
    log.info("stream %s is %s (%s): restarting it from its checkpoint at batch %s", stream, st.state, failure, batch)
    launcher.clean_up_ended(root)  # what its ended application left on the cluster (its confs)
    timings: list[RecoveryTimings] = []
    ok, why = _start_and_settle(stream, root, start, policy.settle_s, timings, broker_offsets)
    if ok:
        return report("restarted", f"stream {stream} was {st.state} ({failure}); restarted from its checkpoint "
                      f"at batch {batch}: {why}", failure=failure, timings=timings, batch_id=_newest_batch(root))

    restorable = policy.restore == "any-failure" or (policy.restore == "checkpoint-errors" and checkpoint_unusable(why))
    if not restorable:
        raise SupervisionFailed(
            f"stream {stream} was {st.state} ({failure}) and its restart failed: {why}",
            hint="read the driver log; restore a snapshot by hand if its checkpoint is damaged "
            "(runbook: docs/runbooks/rollback.md)" if policy.restore != "never"
            else "restoring snapshots is off for this stream (restore='never')",
        )
    if store is None:
        raise SupervisionFailed(f"stream {stream}'s checkpoint is unusable ({why}) and no snapshot store is configured",
                                hint="give the stream spec a store")
    launcher.stop(root, timeout_s=0)  # whatever is left of the failed restart
    manifest = _newest_verified(store(), stream, snapshot, parallelism)
    log.info("stream %s: checkpoint unusable (%s); restoring snapshot %s (batch %d)", stream, why,
             manifest.snapshot_id, manifest.batch_id)

    with _logs_kept(root):  # the failed runs' logs are the post-mortem: a restore replaces the whole directory
        restore_snapshot(store(), stream, manifest.snapshot_id, root.fs.fresh(), force=True, parallelism=parallelism)
    ok, why_after = _start_and_settle(stream, root, start, policy.settle_s, timings, broker_offsets)
    if not ok:
        raise SupervisionFailed(
            f"stream {stream}: restored snapshot {manifest.snapshot_id} (batch {manifest.batch_id}) after its checkpoint "
            f"failed ({why}), and the restart failed again: {why_after}",
            hint="the failure is not in the state: read the driver log",
        )
    return report(
        "restored",
        f"stream {stream} was {st.state} ({failure}); its restart failed on an unusable checkpoint ({why}); restored "
        f"snapshot {manifest.snapshot_id} (batch {manifest.batch_id}) and restarted: {why_after}",
        failure=why, timings=timings, restored_snapshot=manifest.snapshot_id, restored_batch=manifest.batch_id,
        batch_id=_newest_batch(root),
    )


def _check_running(stream: str, root: Sidecar, state: str, policy: SupervisionPolicy,
                   broker_offsets: BrokerOffsets | None, report: Callable[..., SupervisionReport]) -> SupervisionReport:
    if state == "starting":
        return report("none", f"stream {stream} is starting")
    lag = None
    if policy.max_lag is not None or policy.freshness_s is not None:
        if broker_offsets is None:
            raise UsageError(f"checking stream {stream}'s lag needs its Kafka cluster",
                             hint="give the stream spec a kafka_conn_id")
        lag = check_lag(root, max_lag=policy.max_lag or 0, broker_offsets=broker_offsets)
    total = lag.total_lag if lag is not None else None
    if policy.freshness_s is not None and total:
        progress = check_progress(root, freshness_s=policy.freshness_s)
        if progress.outcome != READY:
            raise SupervisionFailed(
                f"stream {stream} is stalled: {progress.message}, while {total} records wait on its topics",
                hint="read the driver log and the Spark UI; restart it if it hangs (StopStreamOperator, then start)",
            )
    if policy.max_lag is not None and lag is not None and lag.outcome != READY:
        raise SupervisionFailed(
            f"stream {stream} lags: {lag.message}",
            hint="give it more executors or partitions, or raise max_lag",
        )
    return report("none", f"stream {stream} is running" + (f", {total} records behind" if total is not None else ""),
                  total_lag=total)


def _start_and_settle(stream: str, root: Sidecar, start: StartFn, settle_s: float,
                      timings: list[RecoveryTimings], broker_offsets: BrokerOffsets | None) -> tuple[bool, str]:
    """Start the stream and watch it: (True, how) once it commits a batch newer than the
    checkpoint's, has nothing left to read (with `broker_offsets`), or stays running for
    `settle_s`; (False, why) when it fails or dies."""
    before = _newest_batch(root)
    t0 = time.monotonic()
    launch_s = spark_s = None
    try:
        handle = start()
        spark_s = time.monotonic() - t0
        launch_s = _launch_delay(handle, t0, spark_s)
    except StreamstateError as exc:
        timings.append(RecoveryTimings(launch_s, None, None))
        if exc.retryable and not isinstance(exc, launcher.StreamStartError):
            raise
        return False, exc.one_line()
    deadline = time.monotonic() + settle_s
    while True:
        check_cancelled()
        progress = check_progress(root, after_batch=before)
        if progress.outcome == READY and progress.state in ("running", "starting"):
            timings.append(RecoveryTimings(launch_s, spark_s, time.monotonic() - t0))
            return True, f"it committed batch {progress.batch_id}"
        if progress.outcome == FAILED or progress.state not in ("running", "starting"):
            timings.append(RecoveryTimings(launch_s, spark_s, None))
            st = launcher.status(root)
            return False, st.last_error or progress.message
        if _caught_up(root, broker_offsets):
            timings.append(RecoveryTimings(launch_s, spark_s, None))
            return True, "it runs, with no new input to commit a batch for"
        if time.monotonic() >= deadline:
            timings.append(RecoveryTimings(launch_s, spark_s, None))
            return True, f"it has run for {settle_s:.0f}s without failing (no new input to commit a batch for)"
        time.sleep(1.0)


def _caught_up(root: Sidecar, broker_offsets: BrokerOffsets | None) -> bool:
    """The running stream has read everything its topics hold (so no batch is coming)."""
    if broker_offsets is None:
        return False
    try:
        return check_lag(root, max_lag=0, broker_offsets=broker_offsets).total_lag == 0
    except StreamstateError:
        return False  # no Kafka source, broker unreachable: settle by time


def _launch_delay(handle: Any, t0: float, fallback: float) -> float:
    """Seconds from `t0` until the driver's launch was recorded (the rest of the start is
    Spark's JVM and the query starting)."""
    started = getattr(handle, "started_at", None)
    if not started:
        return fallback
    at = datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
    wall_t0 = time.time() - (time.monotonic() - t0)
    return max(0.0, min(fallback, at - wall_t0))


def _newest_verified(store: SnapshotStore, stream: str, snapshot: str, parallelism: int) -> Any:
    """The snapshot to restore: `snapshot` by id (it must verify), or for `latest` the
    newest of the current timeline whose every blob verifies (a damaged one is skipped)."""

    if snapshot != "latest":
        candidates = [resolve_snapshot(store, stream, snapshot).snapshot_id]
    else:
        listing = list_summaries(store, stream, parallelism=parallelism)
        candidates = [s.snapshot_id for s in reversed(listing.snapshots) if listing.on_current_timeline(s)]
    damaged = []
    for snapshot_id in candidates:
        result = verify_snapshots(store, stream, snapshot_id, parallelism=parallelism)
        if result.ok:
            return get_snapshot(store, stream, snapshot_id)
        damaged.append(snapshot_id)
        log.warning("stream %s: snapshot %s does not verify; trying an older one", stream, snapshot_id)
    raise SupervisionFailed(
        f"stream {stream}'s checkpoint is unusable and no snapshot verifies"
        + (f" (damaged: {', '.join(damaged)})" if damaged else " (there is none on its current timeline)"),
        hint="restore by hand from a replica of the store (runbook: docs/runbooks/rollback.md)",
    )


@contextlib.contextmanager
def _logs_kept(side: Sidecar) -> Iterator[None]:
    """Move the driver logs out of a local checkpoint for the duration, then back in (a
    remote checkpoint's logs live on the launching hosts, not in the checkpoint)."""
    root = side.fs.local_path
    if root is None:
        yield
        return
    logs = root / LOG_DIR
    if not logs.is_dir():
        yield
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{root.name}-logs-", dir=root.parent))
    shutil.move(str(logs), str(aside / "logs"))
    try:
        yield
    finally:
        logs.mkdir(parents=True, exist_ok=True)
        for f in (aside / "logs").iterdir():
            if not (logs / f.name).exists():
                shutil.move(str(f), str(logs / f.name))
        shutil.rmtree(aside, ignore_errors=True)


def _newest_batch(root: Sidecar) -> int | None:
    return newest_commit(root)[0]


def _started_at(st: launcher.StreamStatus) -> datetime:
    if st.handle is not None:
        return datetime.fromisoformat(st.handle.started_at.replace("Z", "+00:00"))
    return datetime.fromtimestamp(0, UTC)
