"""A stream's history as the UI draws it: every snapshot on its timeline, with its parent,
validation outcomes, pin, clones taken from it and presence in the DR store; and the
timelines themselves (a branch per rollback or restore, the current one marked).

Everything comes from listings, the catalog index and a few small records (timelines, pins,
clones), never from reading one manifest per snapshot: a 1,000-snapshot history is a handful
of reads (docs/performance.md, "Streams UI"). The index is read with `update_index=False`, so
viewing never writes; a snapshot the index does not cover yet costs one manifest read. What
those reads learn is remembered in this process (`_RememberedIndex`: manifests and validation
records are write-once, and the listing still decides which snapshots exist), so a store
whose index nobody built (a DR store without retention) is slow once, not at every view; and
so is what the listings gave (`CatalogMemo`: index segments parsed, and each stream's last
listing with the keys it was worked out from; segments, manifests, validation and timeline
records are write-once), and the history last drawn from it: a page viewed again costs the
listings and a few small records, not the parsing of a thousand summaries, while anything
published, deleted, validated, pinned, cloned or replicated since shows at once. Which
snapshots are on the current timeline, and the newest there, is worked out once per listing
(`SummaryListing.current_line`), not once per use. After a change, only the entries of the
snapshots it touched are worked out again (`history_since`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from airflow_provider_streamstate.engine.catalog.index import (
    INDEX_FORMAT,
    INDEX_KIND,
    CatalogMemo,
    SnapshotSummary,
    SummaryListing,
    list_summaries,
)
from airflow_provider_streamstate.engine.catalog.retention import PIN_LABEL, pinned_ids
from airflow_provider_streamstate.engine.core.manifest import validate_stream_name
from airflow_provider_streamstate.engine.stores.base import MANIFEST_SUFFIX, STREAMS_PREFIX, SnapshotStore
from airflow_provider_streamstate.engine.streams.clones import CloneRecord, list_clones


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def age_seconds(created_at: str, now: datetime | None = None) -> float:
    """Seconds since an ISO time (0 when it is in the future: clocks differ)."""
    return max(0.0, ((now or datetime.now(UTC)) - parse_time(created_at)).total_seconds())


def known_good(validations: dict[str, bool | None]) -> bool:
    """Validated by at least one suite and passed every suite it was validated with (an
    unreadable record counts as not passed)."""
    return bool(validations) and all(ok is True for ok in validations.values())


def is_pinned(summary: SnapshotSummary, pinned: set[str]) -> bool:
    """Pinned by a record, or by a `pin` label (as retention reads them)."""
    label = summary.labels.get(PIN_LABEL, "").lower()
    return summary.snapshot_id in pinned or label not in ("", "false", "0", "no")


@dataclass(frozen=True)
class SnapshotBrief:
    """A snapshot as a table cell shows it."""

    snapshot_id: str
    batch_id: int
    timeline: int
    created_at: str
    age_s: float

    @classmethod
    def of(cls, s: SnapshotSummary, now: datetime | None = None) -> SnapshotBrief:
        return cls(s.snapshot_id, s.batch_id, s.timeline, s.created_at, round(age_seconds(s.created_at, now), 1))

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "timeline": self.timeline,
                "created_at": self.created_at, "age_s": self.age_s}


@dataclass(frozen=True)
class TimelineBranch:
    """One line of a stream's history: where it branched from (None for a root line)."""

    timeline: int
    parent_timeline: int | None
    branch_snapshot: str | None
    branch_batch: int | None
    created_at: str | None
    reason: str
    current: bool
    snapshots: int

    def to_json(self) -> dict[str, Any]:
        return {"timeline": self.timeline, "parent_timeline": self.parent_timeline,
                "branch_snapshot": self.branch_snapshot, "branch_batch": self.branch_batch,
                "created_at": self.created_at, "reason": self.reason, "current": self.current,
                "snapshots": self.snapshots}


@dataclass(frozen=True)
class HistoryEntry:
    """One snapshot on the history picture."""

    snapshot_id: str
    batch_id: int
    timeline: int
    created_at: str
    parent: str | None
    labels: dict[str, str]
    files: int
    bytes_total: int
    on_current_timeline: bool
    validations: dict[str, bool | None]  # suite -> passed (None: unreadable record)
    pinned: bool
    in_dr: bool | None  # None: no DR store to look in
    clones: list[str]  # names of the clones taken from it (recorded, not yet expired)

    @property
    def known_good(self) -> bool:
        return known_good(self.validations)

    @property
    def failed(self) -> bool:
        return any(ok is False for ok in self.validations.values())

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "timeline": self.timeline,
                "created_at": self.created_at, "parent": self.parent, "labels": self.labels, "files": self.files,
                "bytes_total": self.bytes_total, "on_current_timeline": self.on_current_timeline,
                "validations": self.validations, "known_good": self.known_good, "failed": self.failed,
                "pinned": self.pinned, "in_dr": self.in_dr, "clones": self.clones}


@dataclass(frozen=True)
class CloneBrief:
    clone: str
    snapshot_id: str
    checkpoint: str
    created_at: str
    expires_at: str

    @classmethod
    def of(cls, r: CloneRecord) -> CloneBrief:
        return cls(r.clone, r.snapshot_id, r.checkpoint, r.created_at, r.expires_at)

    def to_json(self) -> dict[str, Any]:
        return {"clone": self.clone, "snapshot_id": self.snapshot_id, "checkpoint": self.checkpoint,
                "created_at": self.created_at, "expires_at": self.expires_at}


@dataclass(frozen=True)
class StreamCatalog:
    """What one read of a stream's catalog gives every page: its summaries, timelines and
    validation outcomes (the index), pins, clones and, with a DR store, the ids there."""

    stream: str
    store: str
    listing: SummaryListing | None  # None: no snapshot in the store
    pinned: set[str]
    clones: list[CloneRecord]
    dr_store: str | None = None
    dr_ids: set[str] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def snapshots(self) -> list[SnapshotSummary]:
        return self.listing.snapshots if self.listing else []

    @property
    def current_line(self) -> list[SnapshotSummary]:
        """The snapshots on the current timeline's history, in the order of `latest` (highest
        batch, then newest, last): worked out once per listing, every part of a page asks."""
        return self.listing.current_line if self.listing else []

    def on_current(self, s: SnapshotSummary) -> bool:
        return self.listing is not None and s.snapshot_id in self.listing.current_ids

    def same_as(self, other: StreamCatalog) -> bool:
        """Whether `other` is this catalog read again with nothing changed: the same listing
        (the memo gives the same object while the keys it came from stay the same), pins,
        clones and DR copies."""
        return (self.listing is other.listing and self.listing is not None and self.store == other.store
                and self.pinned == other.pinned and self.clones == other.clones and self.dr_store == other.dr_store
                and self.dr_ids == other.dr_ids and self.problems == other.problems)

    def validations(self, snapshot_id: str) -> dict[str, bool | None]:
        return dict(self.listing.validations.get(snapshot_id, {})) if self.listing else {}

    def known_good(self, snapshot_id: str) -> bool:
        return self.listing is not None and known_good(self.listing.validations.get(snapshot_id, {}))

    def newest(self, *, good: bool = False) -> SnapshotSummary | None:
        """The newest (highest batch, then newest) on the current timeline; `good`: the
        newest of those that are known-good."""
        return next((s for s in reversed(self.current_line) if not good or self.known_good(s.snapshot_id)), None)


MEMO_STREAMS = 64  # (store, stream) pairs whose summaries a process remembers
MEMO_SUMMARIES = 20_000  # summaries of parsed index segments a process keeps (about 2 KB each)
_CATALOG = CatalogMemo(MEMO_SUMMARIES)
_MEMO: OrderedDict[tuple[str, str | None, str], tuple[str, bytes]] = OrderedDict()
_MEMO_LOCK = threading.Lock()


class _RememberedIndex:
    """A store seen with one more catalog index segment, kept in this process's memory: the
    summaries and validation outcomes earlier reads of the stream had to take from manifests
    and records. Read-only; everything else is the store's own."""

    def __init__(self, store: SnapshotStore, stream: str, name: str, segment: bytes) -> None:
        self._store = store
        self._prefix = f"{STREAMS_PREFIX}/{stream}/{INDEX_KIND}/"
        self._key = f"{self._prefix}{name}{MANIFEST_SUFFIX}"
        self._segment = segment

    def list_records(self, prefix: str) -> list[str]:
        keys = self._store.list_records(prefix)
        return [*keys, self._key] if prefix == self._prefix else keys

    def get_record(self, key: str) -> bytes | None:
        return self._segment if key == self._key else self._store.get_record(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _remember(store: SnapshotStore, stream: str, listing: SummaryListing) -> None:
    validations = {sid: {suite: ok for suite, ok in v.items() if isinstance(ok, bool)}
                   for sid, v in listing.validations.items()}
    body = {"format": INDEX_FORMAT, "stream": stream, "snapshots": [s.to_json() for s in listing.snapshots],
            "validations": {sid: v for sid, v in validations.items() if v}}
    # A new name for new contents: parsed segments are remembered by name (CatalogMemo).
    remembered = (f"in-memory-{uuid.uuid4().hex}", json.dumps(body, separators=(",", ":")).encode())
    with _MEMO_LOCK:
        _MEMO[(store.url, store.endpoint, stream)] = remembered
        _MEMO.move_to_end((store.url, store.endpoint, stream))
        while len(_MEMO) > MEMO_STREAMS:
            _MEMO.popitem(last=False)


def summaries(store: SnapshotStore, stream: str, *, parallelism: int = 8) -> SummaryListing:
    """`list_summaries` without writing the index, remembering in this process what the
    index did not cover (NotFoundError when the stream has no snapshot), and the segments it
    parsed."""
    with _MEMO_LOCK:
        remembered = _MEMO.get((store.url, store.endpoint, stream))
    view = cast(SnapshotStore, _RememberedIndex(store, stream, *remembered)) if remembered else store
    listing = list_summaries(view, stream, parallelism=parallelism, update_index=False, memo=_CATALOG)
    if listing.manifests_read:
        _remember(store, stream, listing)
    return listing


def read_catalog(store: SnapshotStore, stream: str, *, dr_store: SnapshotStore | None = None,
                 parallelism: int = 8) -> StreamCatalog:
    """Read a stream's catalog once (the index, pins, clones, the DR listing); a stream with
    no snapshot gives an empty catalog, a DR store that cannot be read a problem line."""
    from airflow_provider_streamstate.engine.core.errors import NotFoundError, StreamstateError

    validate_stream_name(stream)
    try:
        listing: SummaryListing | None = summaries(store, stream, parallelism=parallelism)
    except NotFoundError:
        listing = None
    problems: list[str] = []
    pinned = pinned_ids(store, stream) if listing else set()
    clones = list_clones(store, stream) if listing else []
    dr_ids = None
    if dr_store is not None:
        try:
            dr_ids = set(dr_store.list_snapshot_ids(stream))
        except (StreamstateError, OSError) as exc:
            why = exc.one_line() if isinstance(exc, StreamstateError) else str(exc)
            problems.append(f"DR store {dr_store.url} could not be read: {why}")
    return StreamCatalog(stream, store.url, listing, pinned, clones, dr_store.url if dr_store else None, dr_ids,
                         problems)


@dataclass(frozen=True)
class StreamHistory:
    """A stream's snapshots (oldest first) on their timelines."""

    stream: str
    store: str
    dr_store: str | None
    current_timeline: int
    timelines: list[TimelineBranch]
    snapshots: list[HistoryEntry]
    clones: list[CloneBrief]
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "store": self.store, "dr_store": self.dr_store,
                "current_timeline": self.current_timeline, "timelines": [t.to_json() for t in self.timelines],
                "snapshots": [s.to_json() for s in self.snapshots], "clones": [c.to_json() for c in self.clones],
                "problems": self.problems}


def _clones_by_snapshot(catalog: StreamCatalog) -> dict[str, list[str]]:
    by_snapshot: dict[str, list[str]] = {}
    for c in catalog.clones:
        by_snapshot.setdefault(c.snapshot_id, []).append(c.clone)
    return by_snapshot


def _entry(catalog: StreamCatalog, s: SnapshotSummary, clones: dict[str, list[str]]) -> HistoryEntry:
    return HistoryEntry(
        s.snapshot_id, s.batch_id, s.timeline, s.created_at, s.parent, dict(s.labels), s.files, s.bytes_total,
        catalog.on_current(s), catalog.validations(s.snapshot_id), is_pinned(s, catalog.pinned),
        None if catalog.dr_ids is None else s.snapshot_id in catalog.dr_ids,
        sorted(clones.get(s.snapshot_id, [])),
    )


def history_of(catalog: StreamCatalog) -> StreamHistory:
    """The history picture's data from one catalog read."""
    clones = _clones_by_snapshot(catalog)
    return _history(catalog, [_entry(catalog, s, clones) for s in catalog.snapshots])


def _changed_ids(old: StreamCatalog, new: StreamCatalog) -> set[str] | None:
    """The snapshots whose history entry can differ between two reads of a catalog listing
    the same snapshots (the same summaries, in the same order); None when the snapshots
    themselves differ, or the DR store came or went: then every entry is worked out again."""
    if old.listing is None or new.listing is None or (old.dr_ids is None) != (new.dr_ids is None):
        return None
    before, after = old.listing.snapshots, new.listing.snapshots
    if before is not after and (len(before) != len(after) or any(a is not b for a, b in zip(before, after, strict=True))):
        return None
    changed = {sid for sid in old.listing.validations.keys() | new.listing.validations.keys()
               if old.listing.validations.get(sid) != new.listing.validations.get(sid)}
    changed |= old.listing.current_ids ^ new.listing.current_ids
    changed |= old.pinned ^ new.pinned
    if old.dr_ids is not None and new.dr_ids is not None:
        changed |= old.dr_ids ^ new.dr_ids
    if old.clones != new.clones:
        changed |= {c.snapshot_id for c in (*old.clones, *new.clones)}
    return changed


def history_since(old: StreamCatalog, kept: StreamHistory, catalog: StreamCatalog) -> StreamHistory:
    """`history_of(catalog)`, given the history `kept` worked out from an earlier read `old`
    of the same stream: the entries of snapshots nothing changed for are `kept`'s own objects
    (a new validation record, pin, clone or replica changes a few of a thousand)."""
    changed = _changed_ids(old, catalog)
    if changed is None or old.stream != catalog.stream or old.store != catalog.store:
        return history_of(catalog)
    clones = _clones_by_snapshot(catalog)
    entries = [_entry(catalog, s, clones) if s.snapshot_id in changed else e
               for s, e in zip(catalog.snapshots, kept.snapshots, strict=True)]
    return _history(catalog, entries)


def _history(catalog: StreamCatalog, entries: list[HistoryEntry]) -> StreamHistory:
    current = catalog.listing.timelines.current if catalog.listing else 1
    records = catalog.listing.timelines.records if catalog.listing else {}
    counts: dict[int, int] = {}
    for e in entries:
        counts[e.timeline] = counts.get(e.timeline, 0) + 1
    numbers = sorted({*records, *counts, current})
    timelines = []
    for n in numbers:
        rec = records.get(n)
        timelines.append(TimelineBranch(
            n, rec.parent_timeline if rec else None, rec.branch_snapshot if rec else None,
            rec.branch_batch if rec else None, rec.created_at if rec else None, rec.reason if rec else "",
            n == current, counts.get(n, 0)))
    return StreamHistory(catalog.stream, catalog.store, catalog.dr_store, current, timelines, entries,
                         [CloneBrief.of(c) for c in catalog.clones], list(catalog.problems))


MEMO_HISTORIES = 16  # histories a process keeps drawn, with the catalog read they came from
_HISTORIES: OrderedDict[tuple[str, str | None, str], tuple[StreamCatalog, StreamHistory]] = OrderedDict()


def stream_history(store: SnapshotStore, stream: str, *, dr_store: SnapshotStore | None = None) -> StreamHistory:
    """A stream's history in `store` (and which snapshots `dr_store` holds too): the one this
    process worked out last when its catalog, read again, has not changed, else that one
    with the entries of what changed worked out again (`history_since`)."""
    catalog = read_catalog(store, stream, dr_store=dr_store)
    key = (store.url, store.endpoint, stream)
    with _MEMO_LOCK:
        kept = _HISTORIES.get(key)
    if kept is not None and kept[0].same_as(catalog):
        return kept[1]
    history = history_of(catalog) if kept is None else history_since(*kept, catalog)
    if catalog.listing is not None:
        with _MEMO_LOCK:
            _HISTORIES[key] = (catalog, history)
            _HISTORIES.move_to_end(key)
            while len(_HISTORIES) > MEMO_HISTORIES:
                _HISTORIES.popitem(last=False)
    return history
