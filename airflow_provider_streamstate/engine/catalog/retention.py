"""Retention (TTL) of a stream's snapshots: which manifests a policy keeps, and deleting the rest.

A policy is evaluated on each snapshot's creation time and timeline, never on id order:

- on the current timeline's history: keep the newest `keep_last`, everything younger than
  `max_age`, and the newest snapshot of each hour (for `keep_hourly`) and of each UTC day
  (for `keep_daily`) of older history;
- snapshots of abandoned timelines (history a rollback left behind) are kept only while
  younger than `abandoned_max_age` (default: `max_age`);
- always kept, whatever their age or timeline: pinned snapshots (a write-once record
  `streams/<s>/pins/<id>.json`, or a `pin` label), the newest known-good snapshot per
  validation suite (newest on the current history, else newest anywhere), the newest
  snapshot of the current timeline, and at least one snapshot.

- and every manifest a kept snapshot's delta manifest builds on (docs/manifest.md): a
  delta lists only what changed since its parent, so the manifests back to its full one
  are part of it. Deleting any snapshot therefore never breaks a kept one.

Retention deletes manifests only, never blobs: each goes aside as a tombstone carrying its
deletion time (`SnapshotStore.delete_manifest`), and garbage collection keeps its blobs
for its grace period (docs/concepts.md, "Blobs"). (Should a manifest a live delta needs be
moved aside anyway, by a retention run that did not see the delta yet, its tombstone is
where readers find it, and garbage collection keeps it and its blobs as long as a live
manifest builds on it.) A snapshot's validation records go with it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.index import SnapshotSummary, SummaryListing, list_summaries
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import get_validation
from airflow_provider_streamstate.engine.core.config.values import format_duration
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import (
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.core.parallel import run_parallel
from airflow_provider_streamstate.engine.stores.base import (
    STREAMS_PREFIX,
    ManifestExistsError,
    SnapshotStore,
    record_key,
)

log = logging.getLogger("streamstate.retention")

PIN_LABEL = "pin"
PIN_FORMAT = "streamstate.pin/v1"


@dataclass(frozen=True)
class RetentionPolicy:
    """What to keep of a stream's history (see the module docstring)."""

    keep_last: int = 1
    max_age_s: float | None = None
    keep_hourly_s: float | None = None
    keep_daily_s: float | None = None
    abandoned_max_age_s: float | None = None  # default: max_age_s

    def __post_init__(self) -> None:
        if not isinstance(self.keep_last, int) or isinstance(self.keep_last, bool) or self.keep_last < 0:
            raise UsageError(f"keep_last must be a whole number >= 0, not {self.keep_last!r}", hint="e.g. --keep-last 10")
        for name in ("max_age_s", "keep_hourly_s", "keep_daily_s", "abandoned_max_age_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise UsageError(f"{name} must be a positive duration, not {v!r}", hint="write it like 7d, 12h or 30m")

    def to_json(self) -> dict[str, Any]:
        return {
            "keep_last": self.keep_last,
            "max_age_seconds": self.max_age_s,
            "keep_hourly_seconds": self.keep_hourly_s,
            "keep_daily_seconds": self.keep_daily_s,
            "abandoned_max_age_seconds": self.abandoned_max_age_s,
        }


@dataclass(frozen=True)
class SnapshotVerdict:
    """One snapshot's fate and why: every rule that keeps it, or why none does."""

    snapshot_id: str
    created_at: str
    timeline: int
    batch_id: int
    on_current_timeline: bool
    keep: bool
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "created_at": self.created_at,
            "timeline": self.timeline,
            "batch_id": self.batch_id,
            "on_current_timeline": self.on_current_timeline,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class RetentionResult:
    stream: str
    store: str
    dry_run: bool
    policy: RetentionPolicy
    kept: tuple[SnapshotVerdict, ...]
    deleted: tuple[SnapshotVerdict, ...]  # or, on a dry run, that would be
    records_deleted: int  # validation records (and pins) of the deleted snapshots
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "store": self.store,
            "dry_run": self.dry_run,
            "policy": self.policy.to_json(),
            "snapshots_kept": len(self.kept),
            "snapshots_deleted": len(self.deleted),
            "records_deleted": self.records_deleted,
            "kept": [v.to_json() for v in self.kept],
            "deleted": [v.to_json() for v in self.deleted],
            "seconds": round(self.seconds, 3),
        }


# --- validation records and pins --------------------------------------------------------


@dataclass(frozen=True)
class Validation:
    snapshot_id: str
    suite: str
    success: bool
    validated_at: str


def validations_prefix(stream: str, snapshot_id: str) -> str:
    return f"{STREAMS_PREFIX}/{stream}/validations/{snapshot_id}/"


def pin_key(stream: str, snapshot_id: str) -> str:
    return record_key(stream, "pins", snapshot_id)


def pin_snapshot(store: SnapshotStore, stream: str, snapshot_id: str, *, reason: str = "") -> bool:
    """Pin a snapshot so retention never deletes it; False when it was pinned already."""
    validate_stream_name(stream)
    store.get_manifest(stream, validate_snapshot_id(snapshot_id))  # NotFoundError names the fix
    body = {"format": PIN_FORMAT, "snapshot_id": snapshot_id, "reason": reason,
            "pinned_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    try:
        store.put_record(pin_key(stream, snapshot_id), json.dumps(body).encode())
    except ManifestExistsError:
        return False
    return True


def unpin_snapshot(store: SnapshotStore, stream: str, snapshot_id: str) -> bool:
    """Remove a pin record; False when there was none. (A `pin` label is part of the
    immutable manifest and cannot be removed.)"""
    key = pin_key(validate_stream_name(stream), validate_snapshot_id(snapshot_id))
    if store.get_record(key) is None:
        return False
    store.delete_record(key)
    return True


def pinned_ids(store: SnapshotStore, stream: str) -> set[str]:
    prefix = f"{STREAMS_PREFIX}/{stream}/pins/"
    return {k[len(prefix) :].removesuffix(".json") for k in store.list_records(prefix)}


# --- the policy ---------------------------------------------------------------------------


def _epoch(created_at: str) -> float:
    return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()


def evaluate(
    listing: SummaryListing,
    policy: RetentionPolicy,
    *,
    now: float,
    pinned: set[str],
    validations: dict[str, list[Validation]],
) -> list[SnapshotVerdict]:
    """Each snapshot of `listing` with the rules that keep it (pure: no store access)."""
    ms = listing.snapshots
    reasons: dict[str, list[str]] = {m.snapshot_id: [] for m in ms}
    current = [m for m in ms if listing.on_current_timeline(m)]
    current_ids = {m.snapshot_id for m in current}
    by_time = sorted(current, key=lambda m: (_epoch(m.created_at), m.snapshot_id), reverse=True)

    def keep(m: SnapshotSummary, why: str) -> None:
        reasons[m.snapshot_id].append(why)

    for m in ms:
        if m.snapshot_id in pinned:
            keep(m, "pinned")
        elif m.labels.get(PIN_LABEL, "").lower() not in ("", "false", "0", "no"):
            keep(m, f"pinned by its label {PIN_LABEL}={m.labels[PIN_LABEL]}")
    if current:
        newest = max(current, key=lambda m: (SnapshotRef.parse(m.snapshot_id).batch_id, _epoch(m.created_at)))
        keep(newest, f"newest snapshot of the current timeline {listing.timelines.current}")
    for m in by_time[: policy.keep_last]:
        keep(m, f"one of the newest {policy.keep_last} on the current timeline")
    if policy.max_age_s is not None:
        for m in current:
            if now - _epoch(m.created_at) < policy.max_age_s:
                keep(m, f"younger than max age {format_duration(policy.max_age_s)}")
    for window, period, name in ((policy.keep_hourly_s, 3600, "hour"), (policy.keep_daily_s, 86400, "day")):
        if window is None:
            continue
        seen: set[int] = set()
        for m in by_time:  # newest first: the first seen in each period is its newest
            t = _epoch(m.created_at)
            if now - t >= window:
                continue
            bucket = int(t // period)
            if bucket not in seen:
                seen.add(bucket)
                when = datetime.fromtimestamp(bucket * period, UTC).strftime("%Y-%m-%dT%H:00Z" if name == "hour" else "%Y-%m-%d")
                keep(m, f"newest of its {name} ({when}), within {format_duration(window)}")
    abandoned_age = policy.abandoned_max_age_s or policy.max_age_s
    for m in ms:
        if m.snapshot_id in current_ids or abandoned_age is None:
            continue
        if now - _epoch(m.created_at) < abandoned_age:
            keep(m, f"abandoned timeline {m.timeline}, younger than {format_duration(abandoned_age)}")
    # The newest known-good snapshot per suite: on the current history if there is one.
    suites: dict[str, list[SnapshotSummary]] = {}
    for m in ms:
        for v in validations.get(m.snapshot_id, []):
            if v.success:
                suites.setdefault(v.suite, []).append(m)
    for suite, good in sorted(suites.items()):
        on_current = [m for m in good if m.snapshot_id in current_ids]
        best = max(on_current or good, key=lambda m: (_epoch(m.created_at), m.snapshot_id))
        keep(best, f"newest known-good for suite {suite}")
    if ms and not any(reasons.values()):
        last = max(ms, key=lambda m: (_epoch(m.created_at), m.snapshot_id))
        keep(last, "keep at least one snapshot")
    # What kept deltas build on, and what those build on (to a fixed point).
    by_id = {m.snapshot_id: m for m in ms}
    todo = [m for m in ms if reasons[m.snapshot_id]]
    while todo:
        m = todo.pop()
        for sid in m.chain:
            if sid in by_id and not any(r.startswith("a kept delta") for r in reasons[sid]):
                if not reasons[sid]:
                    todo.append(by_id[sid])
                keep(by_id[sid], f"a kept delta builds on it ({m.snapshot_id})")
    out = []
    for m in ms:
        why = reasons[m.snapshot_id]
        on = m.snapshot_id in current_ids
        if not why:
            age = format_duration(round(now - _epoch(m.created_at)))
            why = [f"not kept by any rule ({'current' if on else f'abandoned timeline {m.timeline}'}, {age} old)"]
        out.append(SnapshotVerdict(m.snapshot_id, m.created_at, m.timeline, m.batch_id, on,
                                   bool(reasons[m.snapshot_id]), tuple(dict.fromkeys(why))))
    return out


def _confirm_from_manifests(
    store: SnapshotStore, stream: str, listing: SummaryListing, ids: list[str], parallelism: int
) -> None:
    """Before deleting, the manifest and validation records of each doomed snapshot must say
    what the catalog index said of them (the index is a cache; a deletion is decided on the
    records themselves). What the index says of the snapshots kept can only keep more: their
    order is their ids' (a summary whose time is not its id's is refused), their labels and
    outcomes keep themselves, and a known-good one the index hid would be doomed, so checked."""
    by_id = {s.snapshot_id: s for s in listing.snapshots}

    def check(sid: str) -> str | None:
        try:
            actual = SnapshotSummary.of(get_snapshot(store, stream, sid))
        except NotFoundError:
            return None  # deleted meanwhile (another retention run): nothing to do
        if actual != by_id[sid]:
            return sid
        for suite, said in listing.validations.get(sid, {}).items():
            try:
                rec = get_validation(store, stream, sid, suite)
            except (UnsafeManifestError, UsageError):
                rec = None
            if (None if rec is None else rec.success) != said:
                return sid
        return None
    wrong = [sid for sid in run_parallel(check, ids, parallelism) if sid is not None]
    if wrong:
        raise UnsafeManifestError(
            f"the catalog index of {stream} in {store.url} disagrees with the manifest of {wrong[0]}"
            f"{f' (and {len(wrong) - 1} more)' if len(wrong) > 1 else ''}; nothing was deleted",
            hint=f"delete the index (streams/{stream}/index/ in the store: it is rebuilt from the manifests) and retry",
        )


def delete_snapshots(store: SnapshotStore, stream: str, snapshot_ids: list[str], *, parallelism: int = 8) -> int:
    """Move manifests aside as tombstones, then remove their validation records and pins.
    Returns the number of records removed."""
    def one(sid: str) -> int:
        store.delete_manifest(stream, sid)
        keys = store.list_records(validations_prefix(stream, sid))
        for key in keys:
            store.delete_record(key)
        pin = pin_key(stream, sid)
        if store.get_record(pin) is not None:
            store.delete_record(pin)
            return len(keys) + 1
        return len(keys)

    return sum(run_parallel(one, snapshot_ids, parallelism))


def apply_retention(
    store: SnapshotStore,
    stream: str,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    parallelism: int = 8,
    now: float | None = None,
) -> RetentionResult:
    """Evaluate `policy` on `stream`'s snapshots and delete (unless `dry_run`) what it does not keep."""
    started = time.monotonic()
    validate_stream_name(stream)
    try:
        listing = list_summaries(store, stream, parallelism=parallelism, update_index=not dry_run)
    except NotFoundError:
        if store.list_snapshot_ids(stream):
            raise
        return RetentionResult(stream, store.url, dry_run, policy, (), (), 0, time.monotonic() - started)
    validations = {sid: [Validation(sid, suite, ok is True, "") for suite, ok in sorted(v.items())]
                   for sid, v in listing.validations.items()}
    verdicts = evaluate(listing, policy, now=time.time() if now is None else now,
                        pinned=pinned_ids(store, stream), validations=validations)
    doomed = [v for v in verdicts if not v.keep]
    records = 0
    if not dry_run and doomed:
        _confirm_from_manifests(store, stream, listing, [v.snapshot_id for v in doomed], parallelism)
        records = delete_snapshots(store, stream, [v.snapshot_id for v in doomed], parallelism=parallelism)
    result = RetentionResult(stream, store.url, dry_run, policy, tuple(v for v in verdicts if v.keep), tuple(doomed),
                             records, time.monotonic() - started)
    log.info("retention %s/%s%s: kept %d, deleted %d snapshots", store.url, stream, " (dry run)" if dry_run else "",
             len(result.kept), len(doomed))
    return result
