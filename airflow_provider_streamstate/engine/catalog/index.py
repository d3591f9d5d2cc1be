"""The catalog index: a stream's snapshots and validation outcomes without reading every manifest.

A manifest lists every file of the state (a 1,000-file state makes a ~150 KB manifest), so
listing a history of 10,000 snapshots by reading them all is minutes of GETs. What
`snapshot list`, retention, failover and the UI need of each is a few fields, and manifests
and validation records are write-once, so those fields never change once read. The index
keeps them in segments beside the manifests:

    streams/<stream>/index/<time>-<id>.json
        {"format", "stream", "snapshots": [summary...], "validations": {id: {suite: passed}}}

It is a cache, never the truth:
- The listing of manifest ids is authoritative. A listed snapshot the index does not cover
  is read from its manifest (and added to a new segment); a summary whose snapshot is no
  longer listed is ignored. So a lost or stale index can cost reads, never hide a snapshot
  or bring back a deleted one.
- Likewise the listing of validation records decides which outcomes exist; the index only
  saves reading records it has seen.
- Segments are written once (a new name each time). Once there are more than
  `MAX_SEGMENTS`, a reader writes one segment with everything still listed and deletes the
  segments it merged; a reader that misses a segment deleted meanwhile reads manifests.
- Segment contents are validated like manifests; an unreadable segment is skipped with a
  warning. Retention re-reads the manifest of every snapshot it is about to delete and
  refuses when the index disagrees with it.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, no_snapshots_error
from airflow_provider_streamstate.engine.catalog.timeline import Timelines, load_timelines, snapshot_refs
from airflow_provider_streamstate.engine.catalog.validation_records import (
    VALIDATIONS_KIND,
    get_validation,
)
from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    UnsafeManifestError,
    UsageError,
)
from airflow_provider_streamstate.engine.core.manifest import Manifest, SnapshotRef, validate_snapshot_id
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import (
    MANIFEST_SUFFIX,
    STREAMS_PREFIX,
    SnapshotStore,
    record_key,
)

log = logging.getLogger("streamstate.catalog")

INDEX_KIND = "index"
INDEX_FORMAT = "streamstate.catalog-index/v1"
MAX_SEGMENTS = 8  # more than this and a reader merges them into one
# A summary's creation time must be its id's (the id is written from the same clock moments
# before): the order retention keeps by cannot be forged by a segment.
MAX_CREATED_SKEW_SECONDS = 60.0


@dataclass(frozen=True)
class SnapshotSummary:
    """What listing, retention and the UI need of a manifest (not its files, operators,
    sources, Spark conf or Kafka anchors)."""

    snapshot_id: str
    stream: str
    batch_id: int
    timeline: int
    created_at: str
    parent: str | None
    query_id: str
    labels: dict[str, str]
    files: int
    blobs: int
    bytes_total: int
    state_store: str
    kafka_offsets: dict[str, dict[str, int]]
    watermark_ms: int | None
    checkpoint: str | None
    spark_version: str | None

    @classmethod
    def of(cls, m: Manifest) -> SnapshotSummary:
        return cls(
            m.snapshot_id, m.stream, m.batch_id, m.timeline, m.created_at, m.parent, m.query_id, dict(m.labels),
            len(m.files), len(m.blobs), m.bytes_total, m.state_store,
            {t: dict(p) for t, p in m.kafka_offsets.items()}, m.watermark_ms, m.checkpoint, m.spark_version,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id, "stream": self.stream, "batch_id": self.batch_id,
            "timeline": self.timeline, "created_at": self.created_at, "parent": self.parent,
            "query_id": self.query_id, "labels": self.labels, "files": self.files, "blobs": self.blobs,
            "bytes_total": self.bytes_total, "state_store": self.state_store, "kafka_offsets": self.kafka_offsets,
            "watermark_ms": self.watermark_ms, "checkpoint": self.checkpoint, "spark_version": self.spark_version,
        }

    @classmethod
    def from_json(cls, d: Any, *, stream: str) -> SnapshotSummary:
        """A summary read from a segment; ValueError when it is not one this engine wrote."""
        if not isinstance(d, dict) or d.get("stream") != stream:
            raise ValueError("not a summary of this stream")
        sid = validate_snapshot_id(str(d["snapshot_id"]))
        ref = SnapshotRef.parse(sid)

        def opt(key: str, kind: type) -> Any:
            v = d.get(key)
            if v is not None and not isinstance(v, kind):
                raise ValueError(f"{key} is not a {kind.__name__}")
            return v
        labels, offsets = d["labels"], d["kafka_offsets"]
        if not (isinstance(labels, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
            raise ValueError("labels are not strings")
        if not (isinstance(offsets, dict) and all(
                isinstance(p, dict) and all(isinstance(o, int) for o in p.values()) for p in offsets.values())):
            raise ValueError("kafka_offsets are not offsets")
        s = cls(
            sid, stream, int(d["batch_id"]), int(d["timeline"]), str(d["created_at"]), opt("parent", str),
            str(d["query_id"]), dict(labels), int(d["files"]), int(d["blobs"]), int(d["bytes_total"]),
            str(d["state_store"]), {str(t): {str(k): int(v) for k, v in p.items()} for t, p in offsets.items()},
            opt("watermark_ms", int), opt("checkpoint", str), opt("spark_version", str),
        )
        if (s.batch_id, s.timeline) != (ref.batch_id, ref.timeline):
            raise ValueError(f"{sid}: batch or timeline disagrees with the id")
        id_time = datetime.strptime(ref.created, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC)
        created = datetime.fromisoformat(s.created_at.replace("Z", "+00:00"))
        if abs((created - id_time).total_seconds()) > MAX_CREATED_SKEW_SECONDS:
            raise ValueError(f"{sid}: created_at {s.created_at} is not the id's time")
        return s


@dataclass(frozen=True)
class SummaryListing:
    """A stream's snapshots (oldest first) as summaries, with their timelines and the
    outcome of every stored validation record ({snapshot: {suite: passed, None: unreadable}})."""

    snapshots: list[SnapshotSummary]
    timelines: Timelines
    validations: dict[str, dict[str, bool | None]]
    manifests_read: int  # manifests read because the index did not cover them

    def on_current_timeline(self, s: SnapshotSummary) -> bool:
        return self.timelines.contains(SnapshotRef.parse(s.snapshot_id))


def _segment_prefix(stream: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/{INDEX_KIND}/"


def _validation_keys(store: SnapshotStore, stream: str) -> dict[str, list[str]]:
    """{snapshot id: [suite...]} of the stored validation records, from listings only."""
    prefix = f"{STREAMS_PREFIX}/{stream}/{VALIDATIONS_KIND}/"
    out: dict[str, list[str]] = {}
    for key in store.list_record_tree(prefix):
        parts = key[len(prefix):].split("/")
        if len(parts) == 2 and parts[1].endswith(MANIFEST_SUFFIX):
            out.setdefault(parts[0], []).append(parts[1][: -len(MANIFEST_SUFFIX)])
    return out


def _read_segments(
    store: SnapshotStore, stream: str, parallelism: int
) -> tuple[list[str], dict[str, SnapshotSummary], dict[str, dict[str, bool]]]:
    keys = store.list_records(_segment_prefix(stream))

    def read(key: str) -> tuple[list[SnapshotSummary], dict[str, dict[str, bool]]] | None:
        data = store.get_record(key)
        if data is None:
            return None  # merged and deleted by another reader meanwhile
        try:
            d = json.loads(data)
            if d.get("format") != INDEX_FORMAT or d.get("stream") != stream:
                raise ValueError(f"format {d.get('format')!r} of stream {d.get('stream')!r}")
            summaries = [SnapshotSummary.from_json(x, stream=stream) for x in d["snapshots"]]
            validations = {validate_snapshot_id(str(sid)): {str(suite): ok for suite, ok in v.items() if isinstance(ok, bool)}
                           for sid, v in d["validations"].items()}
            return summaries, validations
        except (ValueError, KeyError, TypeError, AttributeError, StreamstateError) as exc:
            log.warning("ignoring unreadable catalog index segment %s in %s: %s", key, store.url, exc)
            return None

    summaries: dict[str, SnapshotSummary] = {}
    validations: dict[str, dict[str, bool]] = {}
    for got in run_parallel(read, keys, parallelism):
        if got is None:
            continue
        for s in got[0]:
            summaries[s.snapshot_id] = s
        for sid, v in got[1].items():
            validations.setdefault(sid, {}).update(v)
    return keys, summaries, validations


def _write_segment(store: SnapshotStore, stream: str, summaries: list[SnapshotSummary],
                   validations: dict[str, dict[str, bool]]) -> str:
    name = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}"
    key = record_key(stream, INDEX_KIND, name)
    body = {"format": INDEX_FORMAT, "stream": stream, "snapshots": [s.to_json() for s in summaries],
            "validations": validations}
    store.put_record(key, json.dumps(body, separators=(",", ":")).encode())
    return key


def list_summaries(
    store: SnapshotStore, stream: str, *, parallelism: int = 8, update_index: bool = True
) -> SummaryListing:
    """Every snapshot of `stream` (oldest first) as a summary, through the catalog index;
    NotFoundError when it has none. `update_index` adds what the index lacked (a new
    segment, or one merged segment) so the next call reads fewer manifests."""
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    listed = {r.snapshot_id for r in refs}
    segments, indexed, known = _read_segments(store, stream, parallelism)
    missing = [r.snapshot_id for r in refs if r.snapshot_id not in indexed]

    def summarise(sid: str) -> SnapshotSummary | None:
        try:  # a damaged manifest stops the listing, naming it, as reading every manifest did
            return SnapshotSummary.of(get_snapshot(store, stream, sid))
        except NotFoundError:
            return None  # deleted since the listing
    new = [s for s in run_parallel(summarise, missing, parallelism) if s is not None]
    by_id = {**{sid: s for sid, s in indexed.items() if sid in listed}, **{s.snapshot_id: s for s in new}}

    stored = _validation_keys(store, stream)
    outcomes: dict[str, dict[str, bool | None]] = {}
    unknown = [(sid, suite) for sid, suites in stored.items() if sid in by_id
               for suite in suites if suite not in known.get(sid, {})]

    def outcome(item: tuple[str, str]) -> bool | None:
        try:
            rec = get_validation(store, stream, *item)
            return None if rec is None else rec.success
        except (UnsafeManifestError, UsageError) as exc:
            log.warning("unreadable validation record of %s, suite %s: %s", item[0], item[1], exc.one_line())
            return None
    learned: dict[str, dict[str, bool]] = {}
    for (sid, suite), ok in zip(unknown, run_parallel(outcome, unknown, parallelism), strict=True):
        outcomes.setdefault(sid, {})[suite] = ok
        if ok is not None:
            learned.setdefault(sid, {})[suite] = ok
    for sid, suites in stored.items():
        for suite in suites:
            if sid in by_id and suite in known.get(sid, {}):
                outcomes.setdefault(sid, {})[suite] = known[sid][suite]

    if update_index and (new or learned):
        _update_index(store, stream, segments, by_id, known, new, learned)
    ordered = [by_id[r.snapshot_id] for r in refs if r.snapshot_id in by_id]
    return SummaryListing(ordered, load_timelines(store, stream, refs), outcomes, len(missing))


def _update_index(
    store: SnapshotStore, stream: str, segments: list[str], by_id: dict[str, SnapshotSummary],
    known: dict[str, dict[str, bool]], new: list[SnapshotSummary], learned: dict[str, dict[str, bool]],
) -> None:
    """Add a segment with what was read, or merge everything still listed into one."""
    try:
        if len(segments) + 1 <= MAX_SEGMENTS:
            _write_segment(store, stream, new, learned)
            return
        merged = {sid: {**known.get(sid, {}), **learned.get(sid, {})} for sid in by_id}
        _write_segment(store, stream, list(by_id.values()), {k: v for k, v in merged.items() if v})
        for key in segments:
            store.delete_record(key)
    except (StreamstateError, OSError) as exc:  # a cache: failing to write it costs the next reader time only
        why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
        log.warning("could not update the catalog index of %s in %s: %s", stream, store.url, why)
