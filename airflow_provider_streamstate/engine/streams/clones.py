"""Clones with an expiry, found from the store and torn down when they expire.

A clone (CloneStreamOperator) is labelled beside its own checkpoint
(`_streamstate/clone.json`: `CloneLabel`), which nobody can list from elsewhere; so at clone
time a record goes into the source stream's store too:

    streams/<source stream>/clones/<clone name>.json    checkpoint, snapshot, sinks,
                                                         expires_at, topics to delete

Expiring a clone: stop its stream (launcher.stop: graceful, then forced), delete its
checkpoint directory (only when the label beside it names this clone: a record can never
make expiry delete another stream's checkpoint), delete its snapshots in the store (as
retention does: tombstones, so GC frees their blobs after its grace period), delete its
output topics when asked to at clone time, and last remove the record, so an expiry that
fails half-way is finished by the next run.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.sidecar import SIDECAR_DIR, Sidecar, open_sidecar
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError, UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.stores.base import STREAMS_PREFIX, SnapshotStore, record_key
from airflow_provider_streamstate.engine.streams import launcher

log = logging.getLogger("streamstate.clones")

RECORD_FORMAT = "streamstate.clone-record/v1"
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
CLONE_FILE = f"{SIDECAR_DIR}/clone.json"
CLONE_FORMAT = "streamstate.clone/v1"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def kafka_topics(sinks: Mapping[str, str]) -> list[str]:
    """The sinks that name Kafka topics (not paths or URLs)."""
    return sorted({v for v in sinks.values() if TOPIC_RE.match(v) and v not in (".", "..")})


@dataclass(frozen=True)
class CloneRecord:
    clone: str
    source_stream: str
    checkpoint: str
    snapshot_id: str
    created_at: str
    expires_at: str
    sinks: dict[str, str] = field(default_factory=dict)
    delete_topics: list[str] = field(default_factory=list)  # deleted on expiry, as asked at clone time
    kafka_conn_id: str | None = None  # the Airflow connection of the cluster they are on

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= _time(self.expires_at)

    def to_json(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: bytes) -> CloneRecord:
        d = load_record(data, RECORD_FORMAT, "clone record")
        rec = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        validate_stream_name(rec.clone)
        validate_stream_name(rec.source_stream)
        _time(rec.expires_at)
        if not isinstance(rec.sinks, dict) or not all(isinstance(t, str) and TOPIC_RE.match(t) for t in rec.delete_topics):
            raise ValueError("invalid sinks or topics")
        return rec


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
        return (now or datetime.now(UTC)) >= _parse_time_iso(self.expires_at)

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
        _parse_time_iso(label.expires_at)
        return label


def read_clone_label(checkpoint: str | Path | Sidecar | CheckpointFS) -> CloneLabel | None:
    """The clone label of a checkpoint, or None (not a clone, or unreadable)."""
    try:
        data = open_sidecar(checkpoint).read(CLONE_FILE)
        return None if data is None else CloneLabel.from_json(data)
    except (ValueError, TypeError, OSError, UsageError):
        return None


def write_clone_label(checkpoint: str | Path | Sidecar | CheckpointFS, label: CloneLabel) -> None:
    open_sidecar(checkpoint).write(CLONE_FILE, label.to_json())


def _parse_time_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def clone_record_key(source_stream: str, clone: str) -> str:
    return record_key(source_stream, "clones", clone)


def record_clone(
    store: SnapshotStore, *, clone: str, source_stream: str, checkpoint: str, snapshot_id: str, expires_at: str,
    sinks: Mapping[str, str], delete_sinks: bool = False, kafka_conn_id: str | None = None,
) -> CloneRecord:
    """Record a clone in its source stream's store (a retry replaces its own record)."""
    validate_stream_name(clone)
    validate_stream_name(source_stream)
    rec = CloneRecord(clone, source_stream, checkpoint, snapshot_id, _now_iso(), expires_at, dict(sinks),
                      kafka_topics(sinks) if delete_sinks else [], kafka_conn_id)
    store.replace_record(clone_record_key(source_stream, clone), json.dumps(rec.to_json(), indent=1).encode())
    return rec


def list_clones(store: SnapshotStore, source_stream: str | None = None) -> list[CloneRecord]:
    """Every clone recorded in the store (of one source stream, or of all); unreadable
    records are skipped with a warning."""
    streams = [validate_stream_name(source_stream)] if source_stream else store.list_streams()
    out = []
    for s in streams:
        prefix = f"{STREAMS_PREFIX}/{s}/clones/"
        for key in store.list_records(prefix):
            data = store.get_record(key)
            if data is None:
                continue
            try:
                out.append(CloneRecord.from_json(data))
            except (ValueError, TypeError, KeyError, StreamstateError) as exc:
                log.warning("ignoring unreadable clone record %s: %s", key, exc)
    return sorted(out, key=lambda r: (r.expires_at, r.clone))


@dataclass(frozen=True)
class CloneExpiry:
    """What expiring one clone did (or, on a dry run, would do)."""

    clone: str
    source_stream: str
    expires_at: str
    stopped: str  # the launcher's outcome: stopped / killed / not-running / (dry run) would stop
    checkpoint_deleted: bool
    snapshots_deleted: int
    topics_deleted: list[str]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExpiryResult:
    store: str
    dry_run: bool
    expired: tuple[CloneExpiry, ...]
    not_expired: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "dry_run": self.dry_run,
            "clones_expired": len(self.expired),
            "clones_not_expired": self.not_expired,
            "expired": [e.to_json() for e in self.expired],
            "seconds": round(self.seconds, 3),
        }


def delete_topics(kafka_config: Mapping[str, Any], topics: list[str], *, timeout_s: float = 30.0) -> list[str]:
    """Delete Kafka topics; those already gone count as deleted. Returns the topics gone."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    if not topics:
        return []
    admin = AdminClient(dict(kafka_config))
    gone = []
    for topic, fut in admin.delete_topics(topics, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
            gone.append(topic)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                gone.append(topic)
                continue
            raise TransientError(f"cannot delete topic {topic}: {exc}", hint="check the Kafka cluster, then retry") from None
    return gone


def expire_clone(
    store: SnapshotStore, rec: CloneRecord, *, kafka_config: Mapping[str, Any] | None = None,
    dry_run: bool = False, stop_timeout_s: float = 120.0, connection: Any = None,
) -> CloneExpiry:
    """Tear one clone down (see the module docstring), wherever its checkpoint lives: it is
    stopped through the records beside it and its files deleted through its filesystem
    (a remote one with `connection`, else the store's own when on the same service, else
    the environment's)."""

    if rec.delete_topics and kafka_config is None:
        raise UsageError(
            f"clone {rec.clone} asked for its topics {', '.join(rec.delete_topics)} to be deleted, "
            "but no Kafka cluster was given",
            hint=f"give the cluster (--kafka-bootstrap, or the Airflow connection {rec.kafka_conn_id or 'kafka_conn_id'})",
        )
    notes: list[str] = []
    fs = open_checkpoint_fs(rec.checkpoint, connection=connection if connection is not None
                            else store.checkpoint_connection(rec.checkpoint))
    side = Sidecar(fs)
    label = read_clone_label(side)
    ours = label is not None and label.clone == rec.clone and label.source_stream == rec.source_stream
    present = fs.exists()
    if present and not ours:
        notes.append(f"checkpoint {fs.shared_location} is not labelled as clone {rec.clone}: neither stopped nor "
                     "deleted")
    ids = store.list_snapshot_ids(rec.clone)
    if dry_run:
        return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, "would stop" if ours else "-",
                           ours and present, len(ids), list(rec.delete_topics), notes)
    stopped = "-"
    deleted = False
    if ours and present:
        stopped = launcher.stop(side, timeout_s=stop_timeout_s, requested_by=f"clone expiry of {rec.clone}").outcome
        fs.delete_all()
        deleted = True
    topics = _release(store, rec, ids, kafka_config)
    log.info("clone %s of %s expired (%s): stopped %s, checkpoint %s deleted %s, %d snapshots, topics %s",
             rec.clone, rec.source_stream, rec.expires_at, stopped, fs.location, deleted, len(ids), topics)
    return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, stopped, deleted, len(ids), topics, notes)


def _release(store: SnapshotStore, rec: CloneRecord, ids: list[str],
             kafka_config: Mapping[str, Any] | None) -> list[str]:
    """What every expired clone gives back once its checkpoint is handled: its snapshots
    (tombstoned), its topics, and last its record. Returns the topics deleted."""

    delete_snapshots(store, rec.clone, ids)
    topics = delete_topics(kafka_config or {}, list(rec.delete_topics))
    store.delete_record(clone_record_key(rec.source_stream, rec.clone))
    return topics


def expire_clones(
    store: SnapshotStore, *, source_stream: str | None = None, names: list[str] | None = None,
    force: bool = False, now: float | None = None, dry_run: bool = False,
    kafka_config: Callable[[CloneRecord], Mapping[str, Any] | None] | None = None, stop_timeout_s: float = 120.0,
    connection: Any = None,
) -> ExpiryResult:
    """Expire every recorded clone past its expiry (or, with `force`, the ones in `names`
    whatever their expiry). `kafka_config(record)` gives the Kafka client configuration for
    a clone whose topics are to be deleted."""
    started = time.monotonic()
    records = list_clones(store, source_stream)
    if names:
        unknown = sorted(set(names) - {r.clone for r in records})
        if unknown:
            raise UsageError(f"no clone record for {', '.join(unknown)} in {store.url}",
                             hint=f"see `streamstate clone list --store {store.url}`")
        records = [r for r in records if r.clone in names]
    due = [r for r in records if (force and names) or r.expired(now)]
    done = tuple(
        expire_clone(store, r, kafka_config=kafka_config(r) if kafka_config and r.delete_topics else None,
                     dry_run=dry_run, stop_timeout_s=stop_timeout_s, connection=connection)
        for r in due
    )
    return ExpiryResult(store.url, dry_run, done, len(records) - len(due), time.monotonic() - started)
