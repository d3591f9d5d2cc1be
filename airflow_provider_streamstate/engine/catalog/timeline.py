"""Timelines: history stays unambiguous after a rollback.

Restoring an older snapshot into a stream's checkpoint rewinds the stream: the batches
after it are processed again, and the snapshots the old run took of them describe a
future that no longer happens. As in PostgreSQL after point-in-time recovery, the
rewound stream continues on a new *timeline* branched from the restored snapshot, and
"latest" means newest on the current timeline:

    timeline 1:  s0 ── s3 ── s5 ── s9 ── s13        (s9, s13 abandoned)
                              └─ timeline 2:  s6' ── s9' ── s11'   (current)

A branch is a write-once record `streams/<stream>/timelines/<N>.json` in the store
(timeline N, the timeline and snapshot it branched from, when); snapshot ids carry their
timeline (`...Z-t2`), so the history of any timeline is known from a listing plus these
few records, without reading manifests. Snapshot N of timeline T is on the history of
the current timeline C when T == C, or T is an ancestor of C and the snapshot's batch is
at or before the batch where the line left T (and it was taken before the branch).

A checkpoint carries its lineage in `<checkpoint>/_streamstate/lineage.json`, written by
restore: which stream, timeline and snapshot it was restored as. Spark ignores the
directory; snapshots read it to know which timeline the checkpoint continues.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from airflow_provider_streamstate.engine.checkpoint.filesystems import CheckpointFS
from airflow_provider_streamstate.engine.checkpoint.filesystems.base import LINEAGE_FILE
from airflow_provider_streamstate.engine.core.durability import fsync_path, write_atomically, write_file
from airflow_provider_streamstate.engine.core.errors import StreamstateError, UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import (
    MAX_BATCH_ID,
    MAX_TIMELINE,
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.records import dump_record, load_record
from airflow_provider_streamstate.engine.stores.base import (
    TIMELINES_KIND,
    ManifestExistsError,
    SnapshotStore,
    record_key,
    timelines_prefix,
)

log = logging.getLogger("streamstate.timeline")

TIMELINE_FORMAT = "streamstate.timeline/v1"
LINEAGE_FORMAT = "streamstate.lineage/v1"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _id_time(created_at: str) -> str:
    """An ISO time as the sortable text snapshot ids carry (YYYYMMDDTHHMMSSffffffZ)."""
    dt = datetime.fromisoformat(created_at.replace("Z", "+00:00")).astimezone(UTC)
    return dt.strftime("%Y%m%dT%H%M%S%f") + "Z"


@dataclass(frozen=True)
class TimelineRecord:
    """Timeline `timeline` branched from `branch_snapshot` (batch `branch_batch`) of
    `parent_timeline`; a root timeline (a stream that started afresh) has no parent."""

    timeline: int
    parent_timeline: int | None
    branch_snapshot: str | None
    branch_batch: int | None
    created_at: str
    reason: str = ""
    restore_id: str = ""  # the restore that started it: lets a retry find its timeline

    def to_json(self) -> bytes:
        return dump_record(TIMELINE_FORMAT, asdict(self))

    @classmethod
    def from_json(cls, data: bytes, *, expect: int) -> TimelineRecord:
        """Validate an untrusted record (a store can be written by anyone with its keys)."""
        try:
            d = load_record(data, TIMELINE_FORMAT, "timeline record")
            rec = cls(
                timeline=d["timeline"], parent_timeline=d.get("parent_timeline"),
                branch_snapshot=d.get("branch_snapshot"), branch_batch=d.get("branch_batch"),
                created_at=d["created_at"], reason=d.get("reason", ""), restore_id=d.get("restore_id", ""),
            )
            ints = [rec.timeline] + [v for v in (rec.parent_timeline, rec.branch_batch) if v is not None]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
                raise ValueError("timeline numbers and batches must be integers")
            if rec.timeline != expect or not 1 <= rec.timeline <= MAX_TIMELINE:
                raise ValueError(f"record of timeline {rec.timeline} stored as {expect}")
            if rec.parent_timeline is not None:
                if not 1 <= rec.parent_timeline < rec.timeline:
                    raise ValueError(f"parent timeline {rec.parent_timeline} must precede {rec.timeline}")
                if rec.branch_snapshot is None or rec.branch_batch is None:
                    raise ValueError("a branch needs its snapshot and batch")
                ref = SnapshotRef.parse(validate_snapshot_id(rec.branch_snapshot))
                if (ref.timeline, ref.batch_id) != (rec.parent_timeline, rec.branch_batch):
                    raise ValueError("branch snapshot does not match its timeline and batch")
            if rec.branch_batch is not None and not 0 <= rec.branch_batch <= MAX_BATCH_ID:
                raise ValueError("branch batch out of range")
            if not all(isinstance(v, str) for v in (rec.reason, rec.created_at, rec.restore_id)):
                raise ValueError("reason, created_at and restore_id must be strings")
            _id_time(rec.created_at)
            return rec
        except (ValueError, KeyError, TypeError, StreamstateError) as exc:
            raise UnsafeManifestError(f"timeline record {expect} is invalid: {exc}") from None


def _record_name(timeline: int) -> str:
    return f"{timeline:09d}"


@dataclass(frozen=True)
class Timelines:
    """A stream's timelines: the branch records and which one is current (the newest)."""

    records: dict[int, TimelineRecord]
    current: int
    # Lineages worked out so far: `contains` asks for the same one for every snapshot.
    _lineages: dict[int, tuple[tuple[int, int | None, str | None], ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    def lineage(self, timeline: int) -> list[tuple[int, int | None, str | None]]:
        """(timeline, last batch on it, branch time) from `timeline` back to its root.

        The first entry is `timeline` itself, unbounded; each ancestor is bounded by the
        batch and time at which the line left it.
        """
        return list(self._lineage(timeline))

    def _lineage(self, timeline: int) -> tuple[tuple[int, int | None, str | None], ...]:
        known = self._lineages.get(timeline)
        if known is not None:
            return known
        out: list[tuple[int, int | None, str | None]] = [(timeline, None, None)]
        seen = {timeline}
        rec = self.records.get(timeline)
        while rec is not None and rec.parent_timeline is not None and rec.parent_timeline not in seen:
            out.append((rec.parent_timeline, rec.branch_batch, _id_time(rec.created_at)))
            seen.add(rec.parent_timeline)
            rec = self.records.get(rec.parent_timeline)
        self._lineages[timeline] = found = tuple(out)
        return found

    def contains(self, ref: SnapshotRef, timeline: int | None = None) -> bool:
        """Whether snapshot `ref` is on the history of `timeline` (default: the current one)."""
        for tl, last_batch, branched in self._lineage(self.current if timeline is None else timeline):
            if ref.timeline == tl:
                if last_batch is None:
                    return True
                return ref.batch_id <= last_batch and branched is not None and ref.created <= branched
        return False

    def is_root(self, timeline: int) -> bool:
        rec = self.records.get(timeline)
        return rec is None or rec.parent_timeline is None


def snapshot_refs(store: SnapshotStore, stream: str) -> list[SnapshotRef]:
    """Every snapshot of `stream` as its id describes it, oldest first (by creation time)."""
    refs = []
    for sid in store.list_snapshot_ids(validate_stream_name(stream)):
        try:
            refs.append(SnapshotRef.parse(sid))
        except StreamstateError:
            log.warning("ignoring a manifest with an invalid id %r in stream %s", sid, stream)
    return sorted(refs)


def timeline_key(stream: str, timeline: int) -> str:
    return record_key(stream, TIMELINES_KIND, _record_name(timeline))


def read_timeline_records(
    store: SnapshotStore, stream: str, keys: list[str], known: dict[int, TimelineRecord] | None = None,
) -> dict[int, TimelineRecord]:
    """The records behind the listed `keys`: those in `known` taken as they are (records are
    write-once), the others read."""
    prefix = timelines_prefix(validate_stream_name(stream))
    records: dict[int, TimelineRecord] = {}
    for key in keys:
        name = key[len(prefix):].removesuffix(".json") if key.startswith(prefix) else ""
        if not name.isdigit():
            continue
        if known and int(name) in known:
            records[int(name)] = known[int(name)]
            continue
        data = store.get_record(key)
        if data is not None:
            records[int(name)] = TimelineRecord.from_json(data, expect=int(name))
    return records


def load_timelines(store: SnapshotStore, stream: str, refs: list[SnapshotRef] | None = None, *,
                   keys: list[str] | None = None) -> Timelines:
    """The stream's timelines (`refs`: its snapshots, listed when not given; `keys`: its
    timeline records, the same)."""
    if keys is None:
        keys = store.list_records(timelines_prefix(validate_stream_name(stream)))
    records = read_timeline_records(store, stream, keys)
    refs = snapshot_refs(store, stream) if refs is None else refs
    return Timelines(records, max([1, *records, *(r.timeline for r in refs)]))


def new_timeline(
    store: SnapshotStore, stream: str, *, branch_from: SnapshotRef | None, reason: str, restore_id: str = ""
) -> TimelineRecord:
    """Allocate the next timeline number with a write-once record (racing writers each get
    their own number); `branch_from=None` starts a new root line of history. With a
    `restore_id`, a timeline already started by that restore is returned instead."""
    for _ in range(20):
        tls = load_timelines(store, stream)
        if restore_id:
            for rec in tls.records.values():
                if rec.restore_id == restore_id:
                    return rec
        tl = tls.current + 1
        rec = TimelineRecord(
            timeline=tl,
            parent_timeline=branch_from.timeline if branch_from else None,
            branch_snapshot=branch_from.snapshot_id if branch_from else None,
            branch_batch=branch_from.batch_id if branch_from else None,
            created_at=_now(),
            reason=reason,
            restore_id=restore_id,
        )
        try:
            store.put_record(timeline_key(stream, tl), rec.to_json())
        except ManifestExistsError:
            continue
        log.info("stream %s: timeline %d starts (%s)", stream, tl, reason)
        return rec
    raise StreamstateError(f"could not allocate a new timeline for stream {stream}", hint="retry")


# --- the lineage a restored checkpoint carries ------------------------------------------


@dataclass(frozen=True)
class Lineage:
    """Written by restore into the checkpoint: what it was restored as."""

    stream: str | None  # None for a clone: a new stream, named when first snapshotted
    timeline: int | None  # None until the timeline the restore branched is recorded
    snapshot_id: str
    query_id: str
    restored_at: str
    restore_id: str
    source_stream: str = ""

    def branch(self, store: SnapshotStore) -> int:
        """The timeline this checkpoint continues: recorded, or branched now (idempotent)."""
        if self.timeline is not None:
            return self.timeline
        assert self.stream is not None
        return new_timeline(
            store, self.stream, branch_from=SnapshotRef.parse(self.snapshot_id),
            reason=f"restored {self.snapshot_id}", restore_id=self.restore_id,
        ).timeline

    def to_json(self) -> bytes:
        return dump_record(LINEAGE_FORMAT, asdict(self))


def write_lineage(checkpoint_root: Path, lineage: Lineage, *, fsync: bool = True) -> Path:
    """Write the lineage file; replacing an existing one goes through a temp file and a
    rename, so a reader never sees half of it."""
    path = checkpoint_root / LINEAGE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        write_atomically(path, lineage.to_json(), fsync=fsync)
        return path
    write_file(path, lineage.to_json(), fsync=fsync)  # a new file (a restore's staging): no reader yet
    if fsync:
        fsync_path(path.parent)
    return path


def read_lineage(checkpoint: Path | CheckpointFS) -> Lineage | None:
    """The checkpoint's lineage (a local directory, or any checkpoint's filesystem), or None
    when it was never restored by streamstate (or the record is unreadable: it only ever
    narrows which timeline a snapshot joins)."""
    try:
        if isinstance(checkpoint, CheckpointFS):
            data = checkpoint.read_record(LINEAGE_FILE)
            if data is None:
                return None
        else:
            data = (checkpoint / LINEAGE_FILE).read_bytes()
        d = load_record(data, LINEAGE_FORMAT, "lineage record")
        stream = d.get("stream")
        if stream is not None:
            validate_stream_name(stream)
        timeline = d["timeline"]
        if timeline is not None and (
            not isinstance(timeline, int) or isinstance(timeline, bool) or not 1 <= timeline <= MAX_TIMELINE
        ):
            raise ValueError(f"bad timeline {timeline!r}")
        return Lineage(
            stream=stream, timeline=timeline, snapshot_id=validate_snapshot_id(d["snapshot_id"]),
            query_id=str(d["query_id"]), restored_at=str(d["restored_at"]), restore_id=str(d["restore_id"]),
            source_stream=str(d.get("source_stream", "")),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, StreamstateError) as exc:
        log.warning("ignoring unreadable %s in %s: %s", LINEAGE_FILE, checkpoint, exc)
        return None
