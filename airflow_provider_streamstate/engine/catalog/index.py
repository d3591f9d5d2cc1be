"""The catalog index: a stream's snapshots and validation outcomes without reading every
manifest, nor listing every manifest id.

What `snapshot list`, retention, failover and the UI need of each snapshot is a few fields
of its manifest, and manifests and validation records are write-once, so those fields never
change once read. The index keeps them in segments beside the manifests:

    streams/<stream>/index/<time>-<tag>-<b|d>-<newest id>.json
        {"format", "stream", "kind": "base"|"delta", "horizon" (base), "snapshots": [summary...],
         "validations": {id: {suite: passed}}, "deleted": [id...] (delta)}

A *base* segment is written from a full listing of the stream's manifest ids: it lists every
snapshot that existed when that listing began (its horizon H). What changed since is in the
journal (catalog/journal.py): one listing of the hints after H - skew. So a listing reads
the segments and that short journal, checks each snapshot a hint names (a hint is a
pointer, not the truth: a published one must have its manifest, a deleted one must not),
and lists no manifest id at all. *Delta* segments keep what such listings learned (new
summaries, snapshots found deleted) so the next reader does not ask again.

It is a cache, never the truth:
- A lost base (none, an unreadable one, one deleted while it was read), one older than half
  the journal's keep time, `MAX_SEGMENTS` segments or more, or more than `MAX_CHANGES`
  hints since the base: the manifest ids are listed in full, as before the index existed,
  and a new base is written from that listing (the segments it replaces are deleted).
- A summary whose snapshot is not in the base nor published since is ignored, and one
  listed since but not yet summarised is read from its manifest: a stale index costs reads,
  never hides a snapshot or brings back a deleted one. (A manifest added or deleted by hand,
  outside streamstate, leaves no hint: it is seen at the next full listing.)
- The listing of validation records decides which outcomes exist; the index only saves
  reading records it has seen.
- Segment contents are validated like manifests; an unreadable segment is skipped with a
  warning. Retention re-reads the manifest of every snapshot it is about to delete and
  refuses when the index disagrees with it.

The names of the segments carry the newest snapshot id each knew: `latest` lists the ids
after it (catalog/snapshots.py) instead of every id.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, NamedTuple

from airflow_provider_streamstate.engine.catalog import journal
from airflow_provider_streamstate.engine.catalog.manifests import get_snapshot, no_snapshots_error
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
from airflow_provider_streamstate.engine.core.manifest import (
    SNAPSHOT_ID_RE,
    Manifest,
    SnapshotRef,
    validate_snapshot_id,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import (
    MANIFEST_SUFFIX,
    STREAMS_PREFIX,
    SnapshotStore,
    record_key,
    timelines_prefix,
)

log = logging.getLogger("streamstate.catalog")

INDEX_KIND = "index"
INDEX_FORMAT = "streamstate.catalog-index/v2"
INDEX_FORMAT_V1 = "streamstate.catalog-index/v1"  # before bases and the journal: summaries only
MAX_SEGMENTS = 8  # this many and a reader lists every id and writes one base instead
MAX_CHANGES = 1000  # hints since the base: more, and the next listing writes a new base
REBASE_SECONDS = journal.KEEP_SECONDS / 2  # a base older than this is rebuilt before it is trusted
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
    chain: tuple[str, ...] = ()  # the manifests a delta builds on (retention keeps them with it)

    @cached_property
    def ref(self) -> SnapshotRef:
        """What its id says (parsed once: a process that keeps summaries sorts them often)."""
        return SnapshotRef.parse(self.snapshot_id)

    @classmethod
    def of(cls, m: Manifest) -> SnapshotSummary:
        """From the manifest's header alone (its totals; the file list is not read)."""
        t = m.totals
        return cls(
            m.snapshot_id, m.stream, m.batch_id, m.timeline, m.created_at, m.parent, m.query_id, dict(m.labels),
            t.files, t.blobs, t.bytes, m.state_store,
            {t: dict(p) for t, p in m.kafka_offsets.items()}, m.watermark_ms, m.checkpoint, m.spark_version,
            tuple(m.chain_ids),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id, "stream": self.stream, "batch_id": self.batch_id,
            "timeline": self.timeline, "created_at": self.created_at, "parent": self.parent,
            "query_id": self.query_id, "labels": self.labels, "files": self.files, "blobs": self.blobs,
            "bytes_total": self.bytes_total, "state_store": self.state_store, "kafka_offsets": self.kafka_offsets,
            "watermark_ms": self.watermark_ms, "checkpoint": self.checkpoint, "spark_version": self.spark_version,
            "chain": list(self.chain),
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
        chain = d.get("chain", [])  # absent in v1 segments: they summarise v1/v2 manifests only
        if not isinstance(chain, list):
            raise ValueError("chain is not a list of ids")
        s = cls(
            sid, stream, int(d["batch_id"]), int(d["timeline"]), str(d["created_at"]), opt("parent", str),
            str(d["query_id"]), dict(labels), int(d["files"]), int(d["blobs"]), int(d["bytes_total"]),
            str(d["state_store"]), {str(t): {str(k): int(v) for k, v in p.items()} for t, p in offsets.items()},
            opt("watermark_ms", int), opt("checkpoint", str), opt("spark_version", str),
            tuple(sys.intern(validate_snapshot_id(str(x))) for x in chain),  # shared: ids recur in 16 chains
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
    full_listing: bool = True  # every manifest id was listed (else: the base and the journal since)

    def on_current_timeline(self, s: SnapshotSummary) -> bool:
        return self.timelines.contains(s.ref)

    @cached_property
    def current_line(self) -> list[SnapshotSummary]:
        """The snapshots on the current timeline's history in the order of `latest` (highest
        batch, then newest, last), worked out once."""
        snaps = self.snapshots
        on = [i for i, s in enumerate(snaps) if self.timelines.contains(s.ref)]
        # Of two with the same batch and time (on two timelines), `latest` takes the first listed: last here.
        on.sort(key=lambda i: (snaps[i].ref.batch_id, snaps[i].ref.created, -i))
        return [snaps[i] for i in on]

    @cached_property
    def current_ids(self) -> frozenset[str]:
        return frozenset(s.snapshot_id for s in self.current_line)

    def with_validations(self, validations: dict[str, dict[str, bool | None]]) -> SummaryListing:
        """The same snapshots on the same timelines with other validation outcomes: what
        `current_line` and `current_ids` worked out is shared, not worked out again."""
        other = SummaryListing(self.snapshots, self.timelines, validations, self.manifests_read, self.full_listing)
        for name in ("current_line", "current_ids"):
            if name in self.__dict__:
                other.__dict__[name] = self.__dict__[name]
        return other


def _segment_prefix(stream: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/{INDEX_KIND}/"


@dataclass(frozen=True)
class _Segment:
    key: str
    kind: str  # base | delta | legacy (a v1 segment: summaries only)
    horizon: datetime | None  # base: when the full listing it was written from began
    summaries: list[SnapshotSummary]
    validations: dict[str, dict[str, bool]]
    deleted: set[str] = field(default_factory=set)


def segment_hint(key: str) -> str | None:
    """The newest snapshot id a segment's name carries (None for v1 names)."""
    name = key.rsplit("/", 1)[-1].removesuffix(MANIFEST_SUFFIX)
    parts = name.split("-", 3)
    if len(parts) == 4 and parts[2] in ("b", "d") and SNAPSHOT_ID_RE.match(parts[3]):
        return parts[3]
    return None


def newest_hint(store: SnapshotStore, stream: str) -> str | None:
    """The newest snapshot id any index segment knew when it was written (one listing of
    the segments' names, none read): where `latest` starts its listing of ids."""
    hints = [h for h in (segment_hint(k) for k in store.list_records(_segment_prefix(stream))) if h is not None]
    return max(hints) if hints else None


def _validation_keys(store: SnapshotStore, stream: str) -> dict[str, list[str]]:
    """{snapshot id: [suite...]} of the stored validation records, from listings only."""
    prefix = f"{STREAMS_PREFIX}/{stream}/{VALIDATIONS_KIND}/"
    out: dict[str, list[str]] = {}
    for key in store.list_record_tree(prefix):
        parts = key[len(prefix):].split("/")
        if len(parts) == 2 and parts[1].endswith(MANIFEST_SUFFIX):
            out.setdefault(parts[0], []).append(parts[1][: -len(MANIFEST_SUFFIX)])
    return out


class _LostSegment(Exception):
    """A base segment listed but gone when read (replaced by a newer base meanwhile)."""


class ListingBasis(NamedTuple):
    """The keys of the write-once objects a listing was worked out from: the same keys give
    the same listing."""

    segments: tuple[str, ...]
    journal: tuple[str, ...] | None  # the journal's records since the base; None: every id listed
    listed: tuple[str, ...]
    validations: tuple[tuple[str, tuple[str, ...]], ...]
    timelines: tuple[str, ...]


class CatalogMemo:
    """What a long-lived process (the Streams pages' API server) has worked out from a store,
    so that listing a stream again costs the listings and nothing more when nothing changed.

    - Segments parsed, by store and key: a segment is written once, under a name no other
      segment has (its time and a random tag), so what was parsed from it is what reading it
      again would give. The listing still decides which segments count, and a segment deleted
      since it was listed is one whose contents were read just before it went. Bounded by the
      summaries kept (least recently used first out; the newest segment stays whatever its size).
    - The outcomes of validation records the index did not hold, by record: records are
      write-once too (an unreadable one is read again).
    - The last listing of each stream, with the keys it was worked out from (the segments',
      the journal's since the base or every manifest id, the validation and timeline
      records'): those objects are write-once, so the same keys give the same listing, and
      keys that differ in validation records alone give its snapshots and timelines with the
      outcomes worked out again. One that had to read a manifest (a snapshot the index did
      not cover, a hint to check) is not kept: whether that manifest is there depends on
      when it is asked.
    """

    def __init__(self, max_summaries: int, max_listings: int = 256, max_outcomes: int = 100_000) -> None:
        self.max_summaries, self.max_listings, self.max_outcomes = max_summaries, max_listings, max_outcomes
        self._segments: OrderedDict[tuple[str, str | None, str], _Segment] = OrderedDict()
        self._outcomes: OrderedDict[tuple[str, str | None, str], bool] = OrderedDict()
        self._listings: OrderedDict[tuple[str, str | None, str], tuple[ListingBasis, SummaryListing]] = OrderedDict()
        self._summaries = 0
        self._lock = threading.Lock()

    @staticmethod
    def _id(store: SnapshotStore, key: str) -> tuple[str, str | None, str]:
        return store.url, store.endpoint, key  # one URL on two endpoints is two stores

    def get(self, store: SnapshotStore, key: str) -> _Segment | None:
        with self._lock:
            seg = self._segments.get(self._id(store, key))
            if seg is not None:
                self._segments.move_to_end(self._id(store, key))
            return seg

    def put(self, store: SnapshotStore, seg: _Segment) -> None:
        with self._lock:
            old = self._segments.pop(self._id(store, seg.key), None)
            self._summaries += len(seg.summaries) - (len(old.summaries) if old else 0)
            self._segments[self._id(store, seg.key)] = seg
            while self._summaries > self.max_summaries and len(self._segments) > 1:
                self._summaries -= len(self._segments.popitem(last=False)[1].summaries)

    def outcome(self, store: SnapshotStore, stream: str, snapshot_id: str, suite: str) -> bool | None:
        with self._lock:
            return self._outcomes.get(self._id(store, f"{stream}/{snapshot_id}/{suite}"))

    def keep_outcome(self, store: SnapshotStore, stream: str, snapshot_id: str, suite: str, passed: bool) -> None:
        with self._lock:
            self._outcomes[self._id(store, f"{stream}/{snapshot_id}/{suite}")] = passed
            while len(self._outcomes) > self.max_outcomes:
                self._outcomes.popitem(last=False)

    def listing(self, store: SnapshotStore, stream: str, basis: ListingBasis) -> SummaryListing | None:
        """The stream's last listing, if it was worked out from exactly `basis`."""
        kept = self.last_listing(store, stream)
        return kept[1] if kept is not None and kept[0] == basis else None

    def last_listing(self, store: SnapshotStore, stream: str) -> tuple[ListingBasis, SummaryListing] | None:
        """The stream's last listing kept, with the basis it was worked out from."""
        with self._lock:
            return self._listings.get(self._id(store, stream))

    def keep_listing(self, store: SnapshotStore, stream: str, basis: ListingBasis, listing: SummaryListing) -> None:
        with self._lock:
            self._listings[self._id(store, stream)] = (basis, listing)
            self._listings.move_to_end(self._id(store, stream))
            while len(self._listings) > self.max_listings:
                self._listings.popitem(last=False)


def _read_segments(store: SnapshotStore, stream: str, parallelism: int,
                   memo: CatalogMemo | None = None) -> tuple[list[str], list[_Segment], bool]:
    """(segment keys, the readable segments, whether a base was lost while it was read);
    those `memo` holds are not read again."""
    keys = store.list_records(_segment_prefix(stream))
    known = {k: seg for k in keys if memo is not None and (seg := memo.get(store, k)) is not None}

    def read(key: str) -> _Segment | None:
        seg = load(key)
        if seg is not None and memo is not None:
            memo.put(store, seg)
        return seg

    def load(key: str) -> _Segment | None:
        data = store.get_record(key)
        if data is None:
            if segment_hint(key) is not None and key.rsplit("/", 1)[-1].split("-", 3)[2] == "b":
                raise _LostSegment(key)
            return None  # merged and deleted by another reader meanwhile
        try:
            d = json.loads(data)
            if d.get("format") not in (INDEX_FORMAT, INDEX_FORMAT_V1) or d.get("stream") != stream:
                raise ValueError(f"format {d.get('format')!r} of stream {d.get('stream')!r}")
            summaries = [SnapshotSummary.from_json(x, stream=stream) for x in d["snapshots"]]
            validations = {validate_snapshot_id(str(sid)): {str(suite): ok for suite, ok in v.items() if isinstance(ok, bool)}
                           for sid, v in d["validations"].items()}
            if d["format"] == INDEX_FORMAT_V1:
                return _Segment(key, "legacy", None, summaries, validations)
            kind = d.get("kind", "delta")  # a segment of summaries alone (the UI's in-memory one) is a delta
            if kind == "base":
                horizon = datetime.fromisoformat(str(d["horizon"]).replace("Z", "+00:00"))
                if horizon.tzinfo is None:
                    raise ValueError("the horizon has no time zone")
                return _Segment(key, kind, horizon, summaries, validations)
            if kind != "delta":
                raise ValueError(f"kind {kind!r}")
            deleted = {validate_snapshot_id(str(x)) for x in d.get("deleted", [])}
            return _Segment(key, kind, None, summaries, validations, deleted)
        except (ValueError, KeyError, TypeError, AttributeError, StreamstateError) as exc:
            log.warning("ignoring unreadable catalog index segment %s in %s: %s", key, store.url, exc)
            return None

    missing = [k for k in keys if k not in known]
    try:
        got = dict(zip(missing, run_parallel(read, missing, parallelism), strict=True))
    except _LostSegment:
        return keys, [], True
    found = (known.get(k) or got.get(k) for k in keys)
    return keys, [g for g in found if g is not None], False


def _write_segment(store: SnapshotStore, stream: str, kind: str, summaries: Iterable[SnapshotSummary],
                   validations: dict[str, dict[str, bool]], *, newest: str | None, horizon: datetime | None = None,
                   deleted: Iterable[str] = ()) -> str:
    name = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}-{kind[0]}-{newest or 'none'}"
    key = record_key(stream, INDEX_KIND, name)
    body: dict[str, Any] = {"format": INDEX_FORMAT, "stream": stream, "kind": kind,
                            "snapshots": [s.to_json() for s in summaries], "validations": validations}
    if horizon is not None:
        body["horizon"] = horizon.isoformat().replace("+00:00", "Z")
    if kind == "delta":
        body["deleted"] = sorted(deleted)
    store.put_record(key, json.dumps(body, separators=(",", ":")).encode())
    return key


@dataclass
class _Known:
    """What the segments say: summaries, outcomes, snapshots found deleted, the base."""

    summaries: dict[str, SnapshotSummary]
    validations: dict[str, dict[str, bool]]
    deleted: set[str]
    base: _Segment | None


def _known(segments: list[_Segment]) -> _Known:
    summaries: dict[str, SnapshotSummary] = {}
    deleted: set[str] = set()
    for seg in segments:
        for s in seg.summaries:
            summaries[s.snapshot_id] = s
        deleted |= seg.deleted
    return _Known(summaries, _known_validations(segments), deleted, _newest_base(segments))


def _known_validations(segments: list[_Segment]) -> dict[str, dict[str, bool]]:
    """The outcomes the segments hold, as `_known` merges them."""
    validations: dict[str, dict[str, bool]] = {}
    for seg in segments:
        for sid, v in seg.validations.items():
            validations.setdefault(sid, {}).update(v)
    return validations


def _outcomes(
    store: SnapshotStore, stream: str, stored: dict[str, list[str]], present: Collection[str],
    known: dict[str, dict[str, bool]], memo: CatalogMemo | None, parallelism: int,
) -> tuple[dict[str, dict[str, bool | None]], dict[str, dict[str, bool]]]:
    """(the outcome of every stored validation record of a `present` snapshot, those read
    from records now): from the segments (`known`), else what `memo` kept, else the record."""
    outcomes: dict[str, dict[str, bool | None]] = {}
    unknown = [(sid, suite) for sid, suites in stored.items() if sid in present
               for suite in suites if suite not in known.get(sid, {})]

    def outcome(item: tuple[str, str]) -> bool | None:
        try:
            rec = get_validation(store, stream, *item)
            return None if rec is None else rec.success
        except (UnsafeManifestError, UsageError) as exc:
            log.warning("unreadable validation record of %s, suite %s: %s", item[0], item[1], exc.one_line())
            return None
    kept_outcomes = {} if memo is None else {
        item: ok for item in unknown if (ok := memo.outcome(store, stream, *item)) is not None}
    to_ask = [item for item in unknown if item not in kept_outcomes]
    asked_outcomes = dict(zip(to_ask, run_parallel(outcome, to_ask, parallelism), strict=True))
    learned_outcomes: dict[str, dict[str, bool]] = {}
    for (sid, suite) in unknown:
        ok = kept_outcomes.get((sid, suite), asked_outcomes.get((sid, suite)))
        outcomes.setdefault(sid, {})[suite] = ok
        if ok is not None:
            learned_outcomes.setdefault(sid, {})[suite] = ok
            if memo is not None and (sid, suite) in asked_outcomes:
                memo.keep_outcome(store, stream, sid, suite, ok)
    for sid, suites in stored.items():
        for suite in suites:
            if sid in present and suite in known.get(sid, {}):
                outcomes.setdefault(sid, {})[suite] = known[sid][suite]
    return outcomes, learned_outcomes


def _newest_base(segments: list[_Segment]) -> _Segment | None:
    bases = [s for s in segments if s.kind == "base" and s.horizon is not None]
    return max(bases, key=lambda s: s.horizon or datetime.min.replace(tzinfo=UTC)) if bases else None


def _since_base(
    store: SnapshotStore, stream: str, known: _Known, events: list[journal.Event], parallelism: int,
) -> tuple[dict[str, SnapshotSummary], dict[str, SnapshotSummary], set[str], int]:
    """The snapshots that exist now, from the base and the hints since it: (summaries by id,
    summaries read from manifests now, ids found deleted now, manifests asked for). Each
    hinted snapshot the segments do not settle is checked: a published one must have its
    manifest (none: in flight, or its writer died), a deleted one must not (still there: its
    deletion was interrupted)."""
    assert known.base is not None
    present = {s.snapshot_id: s for s in known.base.summaries}
    last = {e.snapshot_id: e for e in events}  # oldest first: the last hint of each id wins
    now_text = journal.time_text(datetime.now(UTC) - timedelta(seconds=journal.SKEW_SECONDS))
    to_read: list[tuple[str, str]] = []  # (id, the hint's kind)
    for sid, e in last.items():
        if e.kind == journal.PUBLISHED:
            if sid in known.summaries and sid not in known.deleted:
                present[sid] = known.summaries[sid]
            else:
                to_read.append((sid, e.kind))
        elif sid in known.deleted:
            present.pop(sid, None)
        else:
            to_read.append((sid, e.kind))

    def read(item: tuple[str, str]) -> SnapshotSummary | None:
        try:  # a damaged manifest stops the listing, naming it, as reading every manifest did
            return SnapshotSummary.of(get_snapshot(store, stream, item[0]))
        except NotFoundError:
            return None
    learned: dict[str, SnapshotSummary] = {}
    gone: set[str] = set()
    for (sid, kind), summary in zip(to_read, run_parallel(read, to_read, parallelism), strict=True):
        if summary is not None:
            present[sid] = learned[sid] = summary
            continue
        present.pop(sid, None)
        if kind == journal.DELETED or last[sid].when < now_text:
            gone.add(sid)  # deleted, or a hint whose writer died: not asked again
    return present, learned, gone, len(to_read)


def list_summaries(
    store: SnapshotStore, stream: str, *, parallelism: int = 8, update_index: bool = True,
    memo: CatalogMemo | None = None,
) -> SummaryListing:
    """Every snapshot of `stream` (oldest first) as a summary, through the catalog index;
    NotFoundError when it has none. `update_index` writes what the index lacked (a delta
    segment, or a new base after a full listing) so the next call reads less; `memo` keeps
    the segments parsed and, for a reader that does not update the index, the listing
    itself while the keys it comes from stay the same: for a process that lists again and
    again."""
    keys, segments, lost = _read_segments(store, stream, parallelism, memo)
    started = datetime.now(UTC)  # a new base's horizon: before its listing begins
    base = _newest_base(segments)
    events: list[journal.Event] | None = None
    if (base is not None and not lost and base.horizon is not None and len(keys) < MAX_SEGMENTS
            and (started - base.horizon).total_seconds() < REBASE_SECONDS):
        events = journal.changes_since(store, stream, base.horizon)
        if len(events) > MAX_CHANGES:
            events = None
    listed = snapshot_refs(store, stream) if events is None else []  # no base to trust: every id
    stored = _validation_keys(store, stream)
    timeline_keys = store.list_records(timelines_prefix(stream))
    basis = ListingBasis(tuple(keys), None if events is None else tuple(e.key for e in events),
                         tuple(r.snapshot_id for r in listed), tuple((sid, tuple(v)) for sid, v in stored.items()),
                         tuple(timeline_keys))
    keep = memo is not None and not update_index
    last = memo.last_listing(store, stream) if keep and memo is not None else None
    if last is not None and last[0] == basis:
        return last[1]
    if last is not None and last[0]._replace(validations=basis.validations) == basis:
        # Only validation records came or went since: the same segments, journal and manifest
        # ids, and timeline records give the same snapshots on the same timelines.
        kept = last[1]
        outcomes, _ = _outcomes(store, stream, stored, {s.snapshot_id for s in kept.snapshots},
                                _known_validations(segments), memo, parallelism)
        listing = kept.with_validations(outcomes)
        if memo is not None:
            memo.keep_listing(store, stream, basis, listing)
        return listing

    known = _known(segments)
    learned: dict[str, SnapshotSummary] = {}
    gone: set[str] = set()
    if events is not None:
        by_id, learned, gone, asked = _since_base(store, stream, known, events, parallelism)
    else:
        missing = [r.snapshot_id for r in listed if r.snapshot_id not in known.summaries]
        asked = len(missing)

        def summarise(sid: str) -> SnapshotSummary | None:
            try:  # a damaged manifest stops the listing, naming it, as reading every manifest did
                return SnapshotSummary.of(get_snapshot(store, stream, sid))
            except NotFoundError:
                return None  # deleted since the listing
        learned = {s.snapshot_id: s for s in run_parallel(summarise, missing, parallelism) if s is not None}
        by_id = {}
        for r in listed:
            found = known.summaries.get(r.snapshot_id) or learned.get(r.snapshot_id)
            if found is not None:
                by_id[r.snapshot_id] = found
    full = events is None
    if not by_id:
        raise no_snapshots_error(store, stream)
    refs = sorted(s.ref for s in by_id.values())

    outcomes, learned_outcomes = _outcomes(store, stream, stored, by_id.keys(), known.validations, memo,
                                           parallelism)

    if update_index:
        _update_index(store, stream, keys, by_id, known, learned, learned_outcomes, gone, started if full else None)
    ordered = [by_id[r.snapshot_id] for r in refs]
    listing = SummaryListing(ordered, load_timelines(store, stream, refs, keys=timeline_keys), outcomes,
                             len(learned) + (0 if full else len(gone)), full_listing=full)
    if keep and memo is not None and not asked:
        memo.keep_listing(store, stream, basis, listing)
    return listing


def _update_index(
    store: SnapshotStore, stream: str, keys: list[str], by_id: dict[str, SnapshotSummary], known: _Known,
    learned: dict[str, SnapshotSummary], learned_outcomes: dict[str, dict[str, bool]], gone: set[str],
    horizon: datetime | None,
) -> None:
    """After a full listing (`horizon` set): a new base with everything still listed, and the
    segments it replaces deleted. Else a delta segment with what was learned, if anything."""
    newest = max(by_id) if by_id else None
    try:
        if horizon is not None:
            merged = {sid: {**known.validations.get(sid, {}), **learned_outcomes.get(sid, {})} for sid in by_id}
            _write_segment(store, stream, "base", by_id.values(), {k: v for k, v in merged.items() if v},
                           newest=newest, horizon=horizon)
            for key in keys:
                store.delete_record(key)
        elif learned or learned_outcomes or gone:
            _write_segment(store, stream, "delta", learned.values(), learned_outcomes, newest=newest, deleted=gone)
    except (StreamstateError, OSError) as exc:  # a cache: failing to write it costs the next reader time only
        why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
        log.warning("could not update the catalog index of %s in %s: %s", stream, store.url, why)
