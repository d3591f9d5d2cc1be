"""One key across a stream's snapshots, without Spark: its value in each snapshot of a
timeline (or a range of it) with the batches where it changed (`key_history`), and the
first snapshot where a condition on it became true (`bisect_key`).

    h = key_history(store, "orders", key={"account": "a-17"})
    [(v.batch_id, v.value) for v in h.changes]
    b = bisect_key(store, "orders", key=["a-17"], where="total > 1000")
    b.first.snapshot_id, b.first.batch_id

Cost grows with what changed, not with the number of snapshots: every snapshot's manifest
is read (it says which files the cut holds, with their sha256s), but a snapshot whose files
of the key's partition are those of the previous one is answered with the previous answer
(nothing read or decoded), and one whose partition grew by a few deltas or changelogs is
the previous decoded partition plus those files (engine/lookup/reading/partitions.py): each blob
of the partition is read at most once over the whole history (RocksDB tables by the ranges
the key needs, counted once per blob). A snapshot's batch says when its
state was cut, so a change seen at batch b happened in a batch after the previous
snapshot's batch and at or before b: `KeyVersion.previous_batch_id` bounds it.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_streamstate.engine.catalog.snapshots import (
    get_snapshot,
    no_snapshots_error,
    resolve_snapshot,
)
from airflow_provider_streamstate.engine.catalog.timeline import load_timelines, snapshot_refs
from airflow_provider_streamstate.engine.core.errors import NotFoundError, ReadBudgetExceeded, UsageError
from airflow_provider_streamstate.engine.core.manifest import Manifest, SnapshotRef
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.lookup.api import KeyLookup, lookup_key
from airflow_provider_streamstate.engine.lookup.encodings.values import to_jsonable
from airflow_provider_streamstate.engine.lookup.predicate import KeyPredicate, parse_predicate
from airflow_provider_streamstate.engine.lookup.reading.cache import PartitionCache
from airflow_provider_streamstate.engine.lookup.reading.sources import SnapshotSource, StateFile, Stream
from airflow_provider_streamstate.engine.stores.base import SnapshotStore

HISTORY_CACHE_BYTES = 256 << 20  # a history's own cache, when the caller gives none


@dataclass(frozen=True)
class KeyVersion:
    """The key in one snapshot. `changed`: its value (or presence) differs from the previous
    snapshot's in the range (the first is always a change); `reused`: the partition's files
    were those of the previous snapshot, so nothing was read; `blobs_read`/`bytes_read`:
    what this snapshot cost (cache misses only)."""

    snapshot_id: str
    batch_id: int
    previous_batch_id: int | None
    created_at: str
    found: bool
    value: Any
    changed: bool
    reused: bool
    partition: int
    blobs_read: int
    bytes_read: int

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id,
                "previous_batch_id": self.previous_batch_id, "created_at": self.created_at, "found": self.found,
                "value": to_jsonable(self.value), "changed": self.changed, "reused": self.reused,
                "partition": self.partition, "blobs_read": self.blobs_read, "bytes_read": self.bytes_read}


@dataclass(frozen=True)
class KeyHistory:
    """A key's value across snapshots, oldest first. `blobs_read` counts the blobs fetched
    from the store (`distinct_blobs_read` the different ones: equal, each is fetched once);
    `manifests_read` the manifests the range needed."""

    stream: str
    store: str
    key: dict[str, Any]
    operator_id: int
    operator_name: str
    kind: str
    state_var: str | None
    join_side: str | None
    timeline: int
    versions: tuple[KeyVersion, ...]
    manifests_read: int
    blobs_read: int
    distinct_blobs_read: int
    bytes_read: int
    elapsed_ms: float
    value_schema: Any = field(default=None, repr=False, compare=False)

    @property
    def changes(self) -> list[KeyVersion]:
        return [v for v in self.versions if v.changed]

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "store": self.store, "key": to_jsonable(self.key),
                "operator_id": self.operator_id, "operator_name": self.operator_name, "kind": self.kind,
                "state_var": self.state_var, "join_side": self.join_side, "timeline": self.timeline,
                "snapshots": len(self.versions), "changes": len(self.changes),
                "versions": [v.to_json() for v in self.versions], "manifests_read": self.manifests_read,
                "blobs_read": self.blobs_read, "distinct_blobs_read": self.distinct_blobs_read,
                "bytes_read": self.bytes_read, "elapsed_ms": round(self.elapsed_ms, 3)}


@dataclass(frozen=True)
class KeyBisect:
    """The first snapshot (oldest first, on one timeline) where the condition holds, found by
    binary search assuming that once it holds it keeps holding; `violations` lists pairs
    (a snapshot where it held, a later one where it did not) the search happened to see."""

    stream: str
    store: str
    key: dict[str, Any]
    condition: str
    candidates: int
    first: KeyVersion | None
    last_before: KeyVersion | None
    steps: tuple[KeyVersion, ...]
    violations: tuple[tuple[str, str], ...]
    elapsed_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "store": self.store, "key": to_jsonable(self.key),
                "condition": self.condition, "candidates": self.candidates,
                "first": self.first.to_json() if self.first else None,
                "last_before": self.last_before.to_json() if self.last_before else None,
                "checks": len(self.steps), "steps": [s.to_json() for s in self.steps],
                "violations": [{"held": a, "not_after": b} for a, b in self.violations],
                "elapsed_ms": round(self.elapsed_ms, 3)}

    def summary(self) -> str:
        if self.first is None:
            return (f"`{self.condition}` holds in none of the {self.candidates} snapshots "
                    f"({len(self.steps)} looked at)")
        before = self.last_before
        text = (f"`{self.condition}` first holds in {self.first.snapshot_id} (batch {self.first.batch_id})"
                + (f"; not in {before.snapshot_id} (batch {before.batch_id}): it became true in batches "
                   f"{before.batch_id + 1}..{self.first.batch_id}" if before else "; it holds in the first snapshot")
                + f"; {len(self.steps)} of {self.candidates} snapshots looked at")
        if self.violations:
            text += (f"; WARNING: it held and then did not ({len(self.violations)} time(s) seen): an earlier "
                     "snapshot may be the first")
        return text


# --- which snapshots ---------------------------------------------------------------------


def _bound(store: SnapshotStore, stream: str, spec: str | int | None) -> int | None:
    """A range end as a batch id: an int or digits, a snapshot id, `latest`, `latest-good:<suite>`."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, int) or str(spec).strip().isdigit():
        return int(spec)
    return resolve_snapshot(store, stream, str(spec)).batch_id


def timeline_snapshots(store: SnapshotStore, stream: str, *, start: str | int | None = None,
                       end: str | int | None = None, timeline: int | None = None) -> tuple[int, list[SnapshotRef]]:
    """(timeline, the snapshots on its history from batch `start` to batch `end`, oldest first)."""
    refs = snapshot_refs(store, stream)
    if not refs:
        raise no_snapshots_error(store, stream)
    tls = load_timelines(store, stream, refs)
    line = timeline if timeline is not None else tls.current
    lo, hi = _bound(store, stream, start), _bound(store, stream, end)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"the range starts at batch {lo}, after its end at batch {hi}", hint="swap --from and --to")
    chosen = sorted((r for r in refs if tls.contains(r, line) and (lo is None or r.batch_id >= lo)
                     and (hi is None or r.batch_id <= hi)), key=lambda r: (r.batch_id, r.created))
    if not chosen:
        raise NotFoundError(f"stream {stream} has no snapshot on timeline {line} in batches "
                            f"{'-' if lo is None else lo}..{'-' if hi is None else hi} in {store.url}",
                            hint=f"see `streamstate snapshot list --store {store.url} --stream {stream}`")
    return line, chosen


# --- one snapshot at a time, reusing what the previous one decoded --------------------------


MEMO_BLOB_BYTES = 256 << 10  # blobs up to this size are kept by digest for the walk (empty deltas recur)
MEMO_TOTAL_BYTES = 32 << 20


class _Walker:
    """Looks the key up snapshot after snapshot, skipping those whose partition is unchanged,
    and fetching each blob from the store once (`fetched`)."""

    def __init__(self, store: SnapshotStore, stream: str, lookup: dict[str, Any], cache: PartitionCache,
                 max_bytes: int | None = None) -> None:
        self.store, self.stream, self.lookup, self.cache = store, stream, lookup, cache
        self.max_bytes = max_bytes
        self.previous: tuple[Any, KeyLookup, int] | None = None  # (signature, answer, batch)
        self.memo: dict[str, bytes] = {}
        self.memo_bytes = 0
        self.fetched: list[str] = []  # digests of the blobs read from the store, in order
        self._touched: set[str] = set()
        self.fetched_bytes = 0
        self.first: KeyLookup | None = None

    def charge(self, n: int, what: str) -> None:
        """ReadBudgetExceeded, before the read, when it would take the walk past `max_bytes`."""
        if self.max_bytes is not None and self.fetched_bytes + n > self.max_bytes:
            raise ReadBudgetExceeded(
                f"the key's history would read more than its budget of {self.max_bytes:,} bytes "
                f"({self.fetched_bytes:,} read, {n:,} more for {what})",
                hint="narrow the range (--start/--end, a lower limit) or raise the byte budget")

    def _fetched(self, digest: str, n: int) -> None:
        if digest not in self._touched:
            self._touched.add(digest)
            self.fetched.append(digest)
        self.fetched_bytes += n

    def read_range(self, src: SnapshotSource, f: StateFile, offset: int, length: int) -> bytes:
        digest = str(f.identity[1])
        data = self.memo.get(digest)
        if data is not None:
            return data[offset:offset + length]
        self.charge(length, f.path)
        data = SnapshotSource.read_range(src, f, offset, length)
        self._fetched(digest, len(data))
        return data

    @contextmanager
    def open_stream(self, src: SnapshotSource, f: StateFile) -> Iterator[Stream]:
        digest = str(f.identity[1])
        data = self.memo.get(digest)
        if data is not None:
            view = io.BytesIO(data)
            yield Stream(view.read)
            return
        with SnapshotSource.open_stream(src, f) as raw:
            def read(n: int) -> bytes:
                self.charge(min(n, max(0, f.size - raw.bytes)), f.path)
                out = raw.read(n)
                self._fetched(digest, len(out))
                return out

            yield Stream(read, raw.done)

    def read(self, src: SnapshotSource, f: StateFile) -> bytes:
        digest = str(f.identity[1])
        data = self.memo.get(digest)
        if data is None:
            self.charge(f.size, f.path)
            data = SnapshotSource.read(src, f)
            self._fetched(digest, len(data))
            if len(data) <= MEMO_BLOB_BYTES and self.memo_bytes + len(data) <= MEMO_TOTAL_BYTES:
                self.memo[digest] = data
                self.memo_bytes += len(data)
        return data

    def _signature(self, src: SnapshotSource, partition: int) -> Any:
        op = src.operator(self.lookup.get("operator", 0))
        files = [f.identity for s in op.stores for f in src.partition_files(op.operator_id, partition, s)]
        return op.partitions, tuple(sorted(files)), tuple(sorted(f.identity for f in src.operator_files(op.operator_id)))

    def step(self, m: Manifest) -> KeyVersion:
        src = _WalkedSnapshot(self, m)
        prev = self.previous
        if prev is not None:
            sig = self._signature(src, prev[1].partition)
            if sig == prev[0]:
                hit = prev[1]
                self.previous = (sig, hit, m.batch_id)
                return self._version(m, hit, prev, reused=True, blobs=0, nbytes=0)
        blobs, nbytes = len(self.fetched), self.fetched_bytes
        hit = lookup_key(src, cache=self.cache, **self.lookup)
        version = self._version(m, hit, prev, reused=False, blobs=len(self.fetched) - blobs,
                                nbytes=self.fetched_bytes - nbytes)
        self.previous = (self._signature(src, hit.partition), hit, m.batch_id)
        self.first = self.first or hit
        return version

    @staticmethod
    def _version(m: Manifest, hit: KeyLookup, prev: tuple[Any, KeyLookup, int] | None, *, reused: bool,
                 blobs: int, nbytes: int) -> KeyVersion:
        changed = prev is None or (hit.found, to_jsonable(hit.value)) != (prev[1].found, to_jsonable(prev[1].value))
        return KeyVersion(m.snapshot_id, m.batch_id, prev[2] if prev else None, m.created_at, hit.found, hit.value,
                          changed, reused, hit.partition, blobs, nbytes)


class _WalkedSnapshot(SnapshotSource):
    """A snapshot whose blobs are read through its walker (once per digest)."""

    def __init__(self, walker: _Walker, manifest: Manifest) -> None:
        super().__init__(walker.store, walker.stream, manifest=manifest)
        self._walker = walker

    def read(self, f: StateFile) -> bytes:
        return self._walker.read(self, f)

    def read_range(self, f: StateFile, offset: int, length: int) -> bytes:
        return self._walker.read_range(self, f, offset, length)

    def open_stream(self, f: StateFile) -> AbstractContextManager[Stream]:
        return self._walker.open_stream(self, f)


def _lookup_args(operator: int | str, store_name: str | None, join_side: str | None, state_var: str | None,
                 key: Any) -> dict[str, Any]:
    return {"key": key, "operator": operator, "store_name": store_name, "join_side": join_side,
            "state_var": state_var}


def key_history(
    store: SnapshotStore,
    stream: str,
    *,
    key: dict[str, Any] | Sequence[Any] | Any,
    operator: int | str = 0,
    store_name: str | None = None,
    join_side: str | None = None,
    state_var: str | None = None,
    start: str | int | None = None,
    end: str | int | None = None,
    timeline: int | None = None,
    limit: int | None = None,
    cache: PartitionCache | None = None,
    parallelism: int = 8,
    max_bytes: int | None = None,
) -> KeyHistory:
    """The key in every snapshot on the history of `timeline` (default: the current one)
    whose batch is in `start`..`end` (batch ids, snapshot ids, `latest`), oldest first;
    `limit`: only the newest that many. The key and selectors are as `lookup_key` takes them;
    `max_bytes`: the most the whole walk may read from the store."""
    started = time.perf_counter()
    line, refs = timeline_snapshots(store, stream, start=start, end=end, timeline=timeline)
    if limit is not None:
        if limit < 1:
            raise UsageError("the limit must be at least 1")
        refs = refs[-limit:]
    manifests = run_parallel(lambda r: get_snapshot(store, stream, r.snapshot_id), refs, parallelism)
    walker = _Walker(store, stream, _lookup_args(operator, store_name, join_side, state_var, key),
                     cache if cache is not None else PartitionCache(max_bytes=HISTORY_CACHE_BYTES), max_bytes)
    versions = tuple(walker.step(m) for m in manifests)
    first = walker.first
    assert first is not None
    return KeyHistory(stream, store.url, first.key, first.operator_id, first.operator_name, first.kind,
                      first.state_var, first.join_side, line, versions, len(manifests), len(walker.fetched),
                      len(set(walker.fetched)), walker.fetched_bytes, (time.perf_counter() - started) * 1000,
                      first.value_schema)


def bisect_key(
    store: SnapshotStore,
    stream: str,
    *,
    key: dict[str, Any] | Sequence[Any] | Any,
    where: str | KeyPredicate | Callable[[KeyLookup], bool],
    operator: int | str = 0,
    store_name: str | None = None,
    join_side: str | None = None,
    state_var: str | None = None,
    start: str | int | None = None,
    end: str | int | None = None,
    timeline: int | None = None,
    cache: PartitionCache | None = None,
    max_bytes: int | None = None,
) -> KeyBisect:
    """The first snapshot in the range where `where` (a condition's text, a `KeyPredicate`
    or any callable on a `KeyLookup`) holds for the key: the newest snapshot is checked
    first, then a binary search, about log2(N) + 1 lookups of N snapshots."""
    started = time.perf_counter()
    check = parse_predicate(where) if isinstance(where, str) else where
    text = where if isinstance(where, str) else getattr(where, "text", getattr(where, "__name__", "condition"))
    _, refs = timeline_snapshots(store, stream, start=start, end=end, timeline=timeline)
    walker = _Walker(store, stream, _lookup_args(operator, store_name, join_side, state_var, key),
                     cache if cache is not None else PartitionCache(max_bytes=HISTORY_CACHE_BYTES), max_bytes)
    seen: dict[int, tuple[bool, KeyVersion]] = {}

    def holds(i: int) -> bool:
        if i not in seen:
            walker.previous = None  # snapshots are visited out of order: no reuse by adjacency
            version = walker.step(get_snapshot(store, stream, refs[i].snapshot_id))
            hit = walker.previous[1] if walker.previous else None
            assert hit is not None
            seen[i] = (bool(check(hit)), version)
        return seen[i][0]

    first: int | None = None
    if holds(len(refs) - 1):
        lo, hi = -1, len(refs) - 1  # holds(hi); lo: not known to hold (-1: before the range)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if holds(mid):
                hi = mid
            else:
                lo = mid
        first = hi
    order = sorted(seen)
    violations = tuple((refs[a].snapshot_id, refs[b].snapshot_id) for a in order for b in order
                       if a < b and seen[a][0] and not seen[b][0])
    key_dict = walker.first.key if walker.first else {}
    return KeyBisect(stream, store.url, key_dict, str(text), len(refs),
                     seen[first][1] if first is not None else None,
                     seen[first - 1][1] if first is not None and first - 1 in seen else None,
                     tuple(seen[i][1] for i in order), violations, (time.perf_counter() - started) * 1000)
