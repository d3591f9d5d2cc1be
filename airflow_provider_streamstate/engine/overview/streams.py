"""One row per stream on the Streams page: is it alive, how far has it got, what is its
newest snapshot and newest known-good one, how far the DR store lags, what retention holds.

The state is `engine.streams.launcher.status()`, the records the stream sensors read too
(heartbeat, launch and driver records beside the checkpoint): absent, starting, running,
stopped, failed or dead. The last committed batch and its age are the checkpoint's
(`health.newest_commit`, as StreamProgressSensor). Kafka lag is a separate call
(`kafka_lag`): it asks the brokers, which may be slow or unreachable, so the page asks for it
apart and an unreachable cluster gives a message, never an error page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.repartition import unfinished_repartition
from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.engine.overview.history import (
    SnapshotBrief,
    StreamCatalog,
    age_seconds,
    is_pinned,
    read_catalog,
)
from airflow_provider_streamstate.engine.stores.base import SnapshotStore
from airflow_provider_streamstate.engine.streams import launcher
from airflow_provider_streamstate.engine.streams.health import BrokerOffsets, check_lag, newest_commit


def _why(exc: Exception) -> str:
    return exc.one_line() if isinstance(exc, StreamstateError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class StreamState:
    """What the stream's records say about its query, as the sensors read them."""

    state: str  # absent | starting | running | stopped | failed | dead | unknown (not readable)
    message: str
    heartbeat_age_s: float | None
    last_batch: int | None  # newest committed batch of the checkpoint
    last_batch_age_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "message": self.message, "heartbeat_age_s": self.heartbeat_age_s,
                "last_batch": self.last_batch, "last_batch_age_s": self.last_batch_age_s}


def stream_state(checkpoint: str | CheckpointFS | None, *, now: datetime | None = None) -> StreamState:
    """The stream's state from the records beside `checkpoint` (a location, or its
    filesystem opened with the stream's connection; never raises: a checkpoint that cannot
    be read is `unknown`, saying why)."""
    now = now or datetime.now(UTC)
    if not checkpoint:
        return StreamState("unknown", "no checkpoint configured for this stream", None, None, None)
    try:
        side = open_sidecar(checkpoint)  # opened once: the records, the newest commit and the layout
        st = launcher.status(side)
    except Exception as exc:  # noqa: BLE001 - a page shows the reason instead of failing
        return StreamState("unknown", f"records beside {_name(checkpoint)} could not be read: {_why(exc)}", None,
                           None, None)
    beat = st.heartbeat
    beat_age = round(beat.age_s(now), 1) if beat is not None else None
    if st.state in ("failed", "dead") and st.last_error:
        message = st.last_error
    elif beat is not None:
        message = f"query {beat.query_name or beat.query_id} on {beat.host}, last beat {max(beat_age or 0, 0):.0f}s ago"
    elif st.state == "absent":
        message = "never started by streamstate (no heartbeat or launch record)"
    else:
        message = st.state
    try:
        batch, at = newest_commit(side)
        unfinished = unfinished_repartition(CheckpointReader(side.fs.fresh()))
    except Exception as exc:  # noqa: BLE001
        return StreamState(st.state, f"{message}; checkpoint unreadable: {_why(exc)}", beat_age, None, None)
    if unfinished is not None:
        message = (f"{message}; checkpoint: {unfinished.describe()}; restore its newest good snapshot "
                   "(docs/runbooks/rescale.md)")
    batch_age = round(max(0.0, (now - at).total_seconds()), 1) if at is not None else None
    return StreamState(st.state, message, beat_age, batch, batch_age)


def _name(checkpoint: str | CheckpointFS) -> str:
    return checkpoint.shared_location if isinstance(checkpoint, CheckpointFS) else checkpoint


@dataclass(frozen=True)
class KafkaLag:
    """How far the stream's newest committed batch is behind the brokers' end offsets."""

    available: bool
    message: str
    batch_id: int | None = None
    total_lag: int | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "message": self.message, "batch_id": self.batch_id,
                "total_lag": self.total_lag, "partitions": self.partitions}


def kafka_lag(checkpoint: str | CheckpointFS | None, broker_offsets: BrokerOffsets | None) -> KafkaLag:
    """Lag per partition (the KafkaLagSensor's measure); unavailable, saying why, when no
    cluster is configured, nothing is committed yet or the brokers cannot be reached."""
    if not checkpoint:
        return KafkaLag(False, "no checkpoint configured")
    if broker_offsets is None:
        return KafkaLag(False, "no Kafka connection configured for this stream (kafka_conn_id)")
    try:
        check = check_lag(checkpoint, max_lag=0, broker_offsets=broker_offsets)
    except Exception as exc:  # noqa: BLE001 - unreachable brokers are a message on the page
        return KafkaLag(False, f"Kafka lag not measured: {_why(exc)}")
    if check.batch_id is None:
        return KafkaLag(False, check.message)
    return KafkaLag(True, check.message, check.batch_id, check.total_lag, [p.to_json() for p in check.partitions])


@dataclass(frozen=True)
class DrLag:
    """How far the DR store is behind the primary on the current timeline."""

    store: str
    snapshots_behind: int | None  # primary snapshots newer than the newest one in DR
    seconds_behind: float | None  # the primary's newest minus DR's newest creation time
    newest_in_dr: SnapshotBrief | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "snapshots_behind": self.snapshots_behind,
                "seconds_behind": self.seconds_behind,
                "newest_in_dr": self.newest_in_dr.to_json() if self.newest_in_dr else None, "message": self.message}


def dr_lag(catalog: StreamCatalog, now: datetime | None = None) -> DrLag | None:
    """The DR replica lag (None without a DR store): counted on the primary's current
    timeline, from the DR store's id listing (a replica keeps its snapshot's id)."""
    if catalog.dr_store is None:
        return None
    if catalog.dr_ids is None:
        return DrLag(catalog.dr_store, None, None, None, "; ".join(catalog.problems) or "not readable")
    current = catalog.current_line
    if not current:
        return DrLag(catalog.dr_store, 0, 0.0, None, "no snapshot on the primary's current timeline")
    there = next((i for i in range(len(current) - 1, -1, -1) if current[i].snapshot_id in catalog.dr_ids), None)
    if there is None:
        return DrLag(catalog.dr_store, len(current), None, None,
                     f"none of the {len(current)} snapshot(s) of the current timeline is in the DR store")
    newest_dr, behind = current[there], current[there + 1:]
    seconds = round(max(0.0, age_seconds(newest_dr.created_at, now) - age_seconds(current[-1].created_at, now)), 1)
    message = "up to date" if not behind else f"{len(behind)} snapshot(s) behind, {seconds:.0f}s"
    return DrLag(catalog.dr_store, len(behind), seconds, SnapshotBrief.of(newest_dr, now), message)


@dataclass(frozen=True)
class RetentionSummary:
    """What the store holds of the stream, as retention sees it."""

    snapshots: int
    on_current_timeline: int
    abandoned: int  # on timelines a rollback left behind
    pinned: int
    known_good: int
    deleted_awaiting_gc: int  # tombstones: manifests retention deleted, blobs kept for GC's grace period
    oldest: SnapshotBrief | None
    bytes_newest: int | None  # the state size of the newest snapshot

    def to_json(self) -> dict[str, Any]:
        return {"snapshots": self.snapshots, "on_current_timeline": self.on_current_timeline,
                "abandoned": self.abandoned, "pinned": self.pinned, "known_good": self.known_good,
                "deleted_awaiting_gc": self.deleted_awaiting_gc,
                "oldest": self.oldest.to_json() if self.oldest else None, "bytes_newest": self.bytes_newest}


def retention_summary(catalog: StreamCatalog, tombstones: int, now: datetime | None = None) -> RetentionSummary:
    snaps = catalog.snapshots
    current = len(catalog.current_line)
    newest = catalog.newest()
    return RetentionSummary(
        len(snaps), current, len(snaps) - current, sum(1 for s in snaps if is_pinned(s, catalog.pinned)),
        sum(1 for s in snaps if catalog.known_good(s.snapshot_id)), tombstones,
        SnapshotBrief.of(snaps[0], now) if snaps else None, newest.bytes_total if newest else None,
    )


@dataclass(frozen=True)
class StreamRow:
    """One stream on the Streams page."""

    stream: str
    store: str
    checkpoint: str | None
    state: StreamState
    current_timeline: int
    newest: SnapshotBrief | None
    newest_known_good: SnapshotBrief | None
    dr: DrLag | None
    retention: RetentionSummary | None
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "store": self.store, "checkpoint": self.checkpoint,
                **self.state.to_json(), "current_timeline": self.current_timeline,
                "newest": self.newest.to_json() if self.newest else None,
                "newest_known_good": self.newest_known_good.to_json() if self.newest_known_good else None,
                "dr": self.dr.to_json() if self.dr else None,
                "retention": self.retention.to_json() if self.retention else None, "problems": self.problems}


def stream_row(store: SnapshotStore, stream: str, *, checkpoint: str | CheckpointFS | None = None,
               dr_store: SnapshotStore | None = None, now: datetime | None = None) -> StreamRow:
    """The stream's row; a store that cannot be read is a problem on the row, not an error."""
    now = now or datetime.now(UTC)
    state = stream_state(checkpoint, now=now)
    checkpoint = _name(checkpoint) if checkpoint is not None else None
    try:
        catalog = read_catalog(store, stream, dr_store=dr_store)
        tombstones = len(store.list_tombstones(stream))
    except Exception as exc:  # noqa: BLE001 - one unreadable store must not hide the other streams
        return StreamRow(stream, store.url, checkpoint, state, 1, None, None, None, None,
                         [f"store {store.url} could not be read: {_why(exc)}"])
    newest, good = catalog.newest(), catalog.newest(good=True)
    return StreamRow(
        stream, store.url, checkpoint, state, catalog.listing.timelines.current if catalog.listing else 1,
        SnapshotBrief.of(newest, now) if newest else None, SnapshotBrief.of(good, now) if good else None,
        dr_lag(catalog, now), retention_summary(catalog, tombstones, now), list(catalog.problems),
    )
