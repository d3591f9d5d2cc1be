"""Bisect a stream's history for the first snapshot whose state fails a check.

Like `git bisect`, over the snapshots of one timeline (default: every snapshot on the
current timeline, oldest first), assuming that state once bad stays bad. The check is a
suite (engine/state/validation.py; results are stored, and stored results are reused instead of
validating again) or any predicate over the flattened state DataFrame. With N candidate
snapshots it runs at most ceil(log2 N) + 1 checks: the newest one (unless `bad` names it),
then a binary search between the last known good and the first known bad. Every result it
sees, stored or new, is kept; a good snapshot after a bad one means the assumption does not
hold for this history, and the report says so (the answer is then one first bad, not
necessarily the first).

The report names the last good and first bad snapshot, their batch ids and Kafka offsets:
the input between those offsets is where the bad state entered.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots, resolve_snapshot
from airflow_provider_streamstate.engine.catalog.validation_records import get_validation
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.state.reader import canonical_selector
from airflow_provider_streamstate.engine.state.validation import (
    Suite,
    same_selector,
    selector_for,
    validate_snapshot,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
    from airflow_provider_streamstate.engine.stores.base import SnapshotStore

log = logging.getLogger("streamstate.bisect")

Predicate = Callable[["DataFrame"], bool]


@dataclass(frozen=True)
class BisectStep:
    """One snapshot's verdict and where it came from: `validated` (a check ran), `stored`
    (a stored validation record), or `given` (named good/bad by the caller)."""

    snapshot_id: str
    batch_id: int
    good: bool
    source: str
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "batch_id": self.batch_id, "good": self.good,
                "source": self.source, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class BisectResult:
    check: str
    candidates: int
    first_bad: Manifest | None
    last_good: Manifest | None
    validations: int  # checks that actually ran
    steps: list[BisectStep]
    violations: list[tuple[str, str]]  # (bad snapshot, later good snapshot) pairs seen
    seconds: float

    @property
    def max_validations(self) -> int:
        return math.ceil(math.log2(self.candidates)) + 1 if self.candidates > 1 else 1

    @property
    def assumption_violated(self) -> bool:
        return bool(self.violations)

    def to_json(self) -> dict[str, Any]:
        fb, lg = self.first_bad, self.last_good
        return {
            "check": self.check,
            "candidates": self.candidates,
            "first_bad": fb.snapshot_id if fb else None,
            "last_good": lg.snapshot_id if lg else None,
            "batch_id": fb.batch_id if fb else None,
            "kafka_offsets": fb.kafka_offsets if fb else None,
            "last_good_batch_id": lg.batch_id if lg else None,
            "last_good_kafka_offsets": lg.kafka_offsets if lg else None,
            "validations": self.validations,
            "max_validations": self.max_validations,
            "steps": [s.to_json() for s in self.steps],
            "assumption_violated": self.assumption_violated,
            "violations": [{"bad": b, "good_after": g} for b, g in self.violations],
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        if self.first_bad is None:
            return f"no snapshot of the {self.candidates} fails {self.check} ({self.validations} validations)"
        lg = self.last_good
        window = (f"input between batch {lg.batch_id} ({lg.snapshot_id}) and batch {self.first_bad.batch_id}"
                  if lg else f"input up to batch {self.first_bad.batch_id} (the first snapshot in range is bad)")
        text = (f"first bad: {self.first_bad.snapshot_id} (batch {self.first_bad.batch_id}); last good: "
                f"{lg.snapshot_id if lg else '-'}; {window}; {self.validations} validations of {self.candidates} snapshots")
        if self.violations:
            text += (f"; WARNING: {len(self.violations)} good snapshot(s) after a bad one: the history does not "
                     "stay bad once bad, so an earlier bad snapshot may exist")
        return text


def _candidates(store: SnapshotStore, stream: str, good: str | None, bad: str | None) -> tuple[list[Manifest], Manifest | None]:

    listing = list_snapshots(store, stream)
    line = sorted((m for m in listing.manifests if listing.on_current_timeline(m)), key=lambda m: (m.batch_id, m.created_at))
    ids = [m.snapshot_id for m in line]
    lo, hi = 0, len(line)
    good_m = None
    if good is not None:
        good_m = resolve_snapshot(store, stream, good)
        if good_m.snapshot_id not in ids:
            raise UsageError(f"good snapshot {good_m.snapshot_id} is not on the current timeline of {stream}",
                             hint="bisect one timeline: name snapshots from `streamstate snapshot list` without an x")
        lo = ids.index(good_m.snapshot_id) + 1
    if bad is not None:
        bad_m = resolve_snapshot(store, stream, bad)
        if bad_m.snapshot_id not in ids:
            raise UsageError(f"bad snapshot {bad_m.snapshot_id} is not on the current timeline of {stream}",
                             hint="bisect one timeline: name snapshots from `streamstate snapshot list` without an x")
        hi = ids.index(bad_m.snapshot_id) + 1
    if hi <= lo:
        raise UsageError("the bad snapshot is not after the good one", hint="--good must be older than --bad")
    return line[lo:hi], good_m


def bisect_snapshots(
    reader: StateReader,
    stream: str,
    check: Suite | Predicate,
    *,
    selector: StateSelector | None = None,
    good: str | None = None,
    bad: str | None = None,
    store: SnapshotStore | None = None,
) -> BisectResult:
    """Find the first snapshot failing `check` between `good` (exclusive; default: before the
    first) and `bad` (inclusive; default: the newest) on the stream's current timeline."""
    started = time.monotonic()
    st = store or reader.store
    if st is None:
        raise UsageError("no snapshot store given", hint="pass store= to StateReader or to bisect_snapshots")
    line, good_m = _candidates(st, stream, good, bad)
    if not line:
        raise NotFoundError(f"no snapshot of {stream} to bisect after {good}", hint="name an older --good snapshot")
    is_suite = isinstance(check, Suite)
    name = check.name if isinstance(check, Suite) else getattr(check, "__name__", "predicate")
    known: dict[int, bool] = {}
    steps: list[BisectStep] = []
    validations = 0

    if is_suite:
        assert isinstance(check, Suite)

        wanted = selector_for(check, selector)
        for i, m in enumerate(line):  # stored results cost a record read, not a Spark job
            sel = canonical_selector(m, wanted)
            try:
                rec = get_validation(st, stream, m.snapshot_id, check.name)
            except UnsafeManifestError as exc:
                log.warning("ignoring %s: %s", m.snapshot_id, exc.one_line())
                continue
            if rec is not None and rec.suite_sha256 == check.sha256 and same_selector(rec.selector, sel):
                known[i] = rec.success
    if bad is not None and len(line) - 1 not in known:
        known[len(line) - 1] = False
        steps.append(BisectStep(line[-1].snapshot_id, line[-1].batch_id, False, "given"))

    def verdict(i: int) -> bool:
        nonlocal validations
        m = line[i]
        if i in known:
            if not any(s.snapshot_id == m.snapshot_id for s in steps):
                steps.append(BisectStep(m.snapshot_id, m.batch_id, known[i], "stored"))
            return known[i]
        t = time.monotonic()
        if isinstance(check, Suite):
            result = validate_snapshot(reader, stream, m.snapshot_id, check, selector=selector, store=st)
            ok = result.success
            source = "stored" if result.reused else "validated"
        else:
            ok = bool(check(reader.state(stream, m.snapshot_id, selector, store=st)))
            source = "validated"
        if source == "validated":
            validations += 1
        known[i] = ok
        steps.append(BisectStep(m.snapshot_id, m.batch_id, ok, source, time.monotonic() - t))
        log.info("bisect %s: %s (batch %d) is %s", name, m.snapshot_id, m.batch_id, "good" if ok else "bad")
        return ok

    last = len(line) - 1
    if verdict(last):
        return BisectResult(name, len(line), None, line[last], validations, steps, _violations(line, known),
                            time.monotonic() - started)
    lo, hi = -1, last  # line[lo] good (or nothing before), line[hi] bad
    while hi - lo > 1:
        # Known verdicts inside the interval narrow it for free.
        inside = sorted(i for i in known if lo < i < hi)
        bads = [i for i in inside if not known[i]]
        goods = [i for i in inside if known[i] and (not bads or i < bads[0])]
        if bads or goods:
            if bads:
                hi = bads[0]
                verdict(hi)
            if goods:
                lo = goods[-1]
                verdict(lo)
            continue
        mid = (lo + hi) // 2
        if verdict(mid):
            lo = mid
        else:
            hi = mid
    last_good = line[lo] if lo >= 0 else good_m
    return BisectResult(name, len(line), line[hi], last_good, validations, steps, _violations(line, known),
                        time.monotonic() - started)


def _violations(line: list[Manifest], known: dict[int, bool]) -> list[tuple[str, str]]:
    """(first bad, a later good) for every good verdict after the first bad one."""
    bad = [i for i in sorted(known) if not known[i]]
    if not bad:
        return []
    first = bad[0]
    return [(line[first].snapshot_id, line[i].snapshot_id) for i in sorted(known) if i > first and known[i]]
