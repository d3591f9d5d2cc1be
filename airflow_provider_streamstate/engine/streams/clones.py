"""Clones with an expiry, found from the store and torn down when they expire.

A clone (CloneStreamOperator) is labelled beside its own checkpoint
(`_streamstate/clone.json`, engine/streams/launcher.py), which nobody can list from elsewhere; so
at clone time a record goes into the source stream's store too:

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
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import delete_snapshots
from airflow_provider_streamstate.engine.catalog.timeline import LINEAGE_FILE, read_lineage
from airflow_provider_streamstate.engine.checkpoint.filesystems import is_s3_location, open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.sidecar import S3Sidecar
from airflow_provider_streamstate.engine.core.errors import StreamstateError, TransientError, UsageError
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name
from airflow_provider_streamstate.engine.core.records import load_record
from airflow_provider_streamstate.engine.stores.base import STREAMS_PREFIX, SnapshotStore, record_key
from airflow_provider_streamstate.engine.streams import launcher

log = logging.getLogger("streamstate.clones")

RECORD_FORMAT = "streamstate.clone-record/v1"
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


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
    dry_run: bool = False, stop_timeout_s: float = 120.0, s3_client: Any = None,
) -> CloneExpiry:
    """Tear one clone down (see the module docstring). A clone whose checkpoint is in S3
    (`s3a://`) is stopped the same way, through the records beside it, and its objects are
    deleted (with `s3_client`, else the AWS environment's)."""

    if rec.delete_topics and kafka_config is None:
        raise UsageError(
            f"clone {rec.clone} asked for its topics {', '.join(rec.delete_topics)} to be deleted, "
            "but no Kafka cluster was given",
            hint=f"give the cluster (--kafka-bootstrap, or the Airflow connection {rec.kafka_conn_id or 'kafka_conn_id'})",
        )
    notes: list[str] = []
    s3 = s3_checkpoint(rec.checkpoint, s3_client)
    if s3 is not None:
        return _expire_s3_clone(store, rec, s3, kafka_config=kafka_config, dry_run=dry_run,
                                stop_timeout_s=stop_timeout_s)
    root = launcher.local_checkpoint(rec.checkpoint)
    label = launcher.read_clone_label(root)
    ours = label is not None and label.clone == rec.clone and label.source_stream == rec.source_stream
    if root.exists() and not ours:
        notes.append(f"checkpoint {root} is not labelled as clone {rec.clone}: neither stopped nor deleted")
    ids = store.list_snapshot_ids(rec.clone)
    if dry_run:
        return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, "would stop" if ours else "-",
                           ours and root.exists(), len(ids), list(rec.delete_topics), notes)
    stopped = "-"
    deleted_dir = False
    if ours and root.exists():
        stopped = launcher.stop(root, timeout_s=stop_timeout_s, requested_by=f"clone expiry of {rec.clone}").outcome
        shutil.rmtree(root)
        deleted_dir = True
    n = len(ids)
    topics = _release(store, rec, ids, kafka_config)
    log.info("clone %s of %s expired (%s): stopped %s, checkpoint deleted %s, %d snapshots, topics %s",
             rec.clone, rec.source_stream, rec.expires_at, stopped, deleted_dir, n, topics)
    return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, stopped, deleted_dir, n, topics, notes)


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
    s3_client: Any = None,
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
                     dry_run=dry_run, stop_timeout_s=stop_timeout_s,
                     s3_client=s3_client if s3_client is not None else getattr(store, "client", None))
        for r in due
    )
    return ExpiryResult(store.url, dry_run, done, len(records) - len(due), time.monotonic() - started)



# A clone's checkpoint in S3 (`s3a://`): its label and lineage are objects beside the
# checkpoint's files, read and written with the checkpoint's S3 client.


def s3_checkpoint(location: str, s3_client: Any = None) -> Any:
    """The S3CheckpointFS of an `s3a://`/`s3://` location, or None for a local one."""

    return open_checkpoint_fs(location, s3_client=s3_client) if is_s3_location(location) else None


def read_lineage_s3(fs: Any) -> Any:
    """The lineage of an S3 checkpoint, parsed as locally, or None."""
    import tempfile


    data = fs.get_text(LINEAGE_FILE)
    if data is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / LINEAGE_FILE).parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / LINEAGE_FILE).write_bytes(data)
        return read_lineage(Path(tmp))


def _expire_s3_clone(store: SnapshotStore, rec: CloneRecord, fs: Any, *, kafka_config: Mapping[str, Any] | None,
                     dry_run: bool, stop_timeout_s: float) -> CloneExpiry:
    """As for a local clone: stop it (through the records beside its S3 checkpoint), then
    delete its objects, only when its label names it."""

    notes: list[str] = []
    side = S3Sidecar(fs)
    label = launcher.read_clone_label(side)
    ours = label is not None and label.clone == rec.clone and label.source_stream == rec.source_stream
    present = fs.exists()
    if present and not ours:
        notes.append(f"checkpoint {fs.location} is not labelled as clone {rec.clone}: neither stopped nor deleted")
    ids = store.list_snapshot_ids(rec.clone)
    if dry_run:
        return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, "would stop" if ours else "-",
                           ours and present, len(ids), list(rec.delete_topics), notes)
    stopped = "-"
    if ours and present:
        stopped = launcher.stop(side, timeout_s=stop_timeout_s, requested_by=f"clone expiry of {rec.clone}").outcome
    deleted = bool(ours and present and fs.delete_all())
    topics = _release(store, rec, ids, kafka_config)
    log.info("clone %s of %s expired (%s): stopped %s, checkpoint %s deleted %s, %d snapshots, topics %s",
             rec.clone, rec.source_stream, rec.expires_at, stopped, fs.location, deleted, len(ids), topics)
    return CloneExpiry(rec.clone, rec.source_stream, rec.expires_at, stopped, deleted, len(ids), topics, notes)
