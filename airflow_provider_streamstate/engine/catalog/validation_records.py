"""Validation records: a suite's result on one snapshot, stored write-once beside the
(immutable) manifest, and what the catalog reads from them (known-good snapshots).

    streams/<stream>/validations/<snapshot id>/<suite name>.json

holding at least `snapshot_id`, `suite`, `success` and `validated_at` (ISO UTC) — the
retention and replication workers rely on this layout. A snapshot that passed a suite is
*known-good* for it (`latest-good:<suite>` in catalog.snapshots.resolve_snapshot). A record
is never overwritten: validating again reuses it. Records are untrusted input when read back
(`ValidationRecord.from_json` checks every field, like manifest.py). Running a suite is
engine/state/validation.py's; this module needs no Spark and no Great Expectations.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_streamstate.engine.core.digest import SHA256_RE
from airflow_provider_streamstate.engine.core.errors import UnsafeManifestError, UsageError
from airflow_provider_streamstate.engine.core.manifest import (
    MAX_BATCH_ID,
    SnapshotRef,
    validate_snapshot_id,
    validate_stream_name,
)
from airflow_provider_streamstate.engine.stores.base import (
    MANIFEST_SUFFIX,
    STREAMS_PREFIX,
    ManifestExistsError,
    SnapshotStore,
    record_key,
)

log = logging.getLogger("streamstate.validation")

RECORD_FORMAT = "streamstate.validation/v1"
VALIDATIONS_KIND = "validations"
SUITE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,127}$")
EXPECTATION_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]{0,199}$")
MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_EXPECTATIONS = 10_000


def validate_suite_name(name: object) -> str:
    if not isinstance(name, str) or not SUITE_NAME_RE.match(name):
        raise UsageError(
            f"invalid suite name {name!r}",
            hint="name suites with 1-128 letters, digits, '.', '_', '=' or '-', starting with a letter or digit",
        )
    return name



@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result: what it checked and what it observed."""

    type: str
    kwargs: dict[str, Any]
    success: bool
    observed: Any  # observed_value, or a summary of unexpected values for column maps
    exception: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "kwargs": self.kwargs, "success": self.success, "observed": self.observed,
                "exception": self.exception}

    def describe(self) -> str:
        col = self.kwargs.get("column")
        where = f"({col})" if col else ""
        what = f"raised {self.exception}" if self.exception else f"observed {json.dumps(self.observed, default=str)}"
        return f"{self.type}{where} {what}"



# --- the record -----------------------------------------------------------------------------


def validation_key(stream: str, snapshot_id: str, suite: str) -> str:
    return record_key(stream, VALIDATIONS_KIND, f"{snapshot_id}/{suite}")


@dataclass(frozen=True)
class ValidationRecord:
    """A suite's result on one snapshot, as stored (write-once) beside its manifest."""

    stream: str
    snapshot_id: str
    batch_id: int
    suite: str
    suite_sha256: str
    success: bool
    validated_at: str
    gx_version: str
    duration_s: float
    selector: dict[str, Any]
    results: list[ExpectationOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [r for r in self.results if not r.success]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "stream": self.stream,
            "snapshot_id": self.snapshot_id,
            "batch_id": self.batch_id,
            "suite": self.suite,
            "suite_sha256": self.suite_sha256,
            "success": self.success,
            "validated_at": self.validated_at,
            "gx_version": self.gx_version,
            "duration_s": round(self.duration_s, 3),
            "selector": self.selector,
            "evaluated": len(self.results),
            "failed": len(self.failed),
            "results": [r.to_json() for r in self.results],
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, *, stream: str, snapshot_id: str, suite: str) -> ValidationRecord:
        """Parse an untrusted record stored as (stream, snapshot_id, suite); anything off is
        an UnsafeManifestError naming the record."""
        where = f"validation record {stream}/{snapshot_id}/{suite}"

        def bad(why: str) -> UnsafeManifestError:
            return UnsafeManifestError(
                f"{where} is invalid: {why}",
                hint="it was not written by streamstate or is damaged; compare with a replica, or validate a copy",
            )

        if len(data) > MAX_RECORD_BYTES:
            raise bad(f"{len(data)} bytes, more than {MAX_RECORD_BYTES}")
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise bad(f"not JSON ({type(exc).__name__})") from None
        if not isinstance(d, dict):
            raise bad("not a JSON object")
        if d.get("format") != RECORD_FORMAT:
            raise bad(f"format {d.get('format')!r} is not {RECORD_FORMAT!r}")
        for key, want in (("stream", stream), ("snapshot_id", snapshot_id), ("suite", suite)):
            if d.get(key) != want:
                raise bad(f"its {key} {d.get(key)!r} is not {want!r}")
        batch = d.get("batch_id")
        if not isinstance(batch, int) or isinstance(batch, bool) or not 0 <= batch <= MAX_BATCH_ID:
            raise bad(f"batch_id {batch!r}")
        if batch != SnapshotRef.parse(snapshot_id).batch_id:
            raise bad(f"batch_id {batch} is not the snapshot's")
        sha = d.get("suite_sha256")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise bad(f"suite_sha256 {sha!r}")
        success = d.get("success")
        if not isinstance(success, bool):
            raise bad(f"success {success!r} is not true or false")
        at = d.get("validated_at")
        try:
            when = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
        except ValueError:
            raise bad(f"validated_at {at!r} is not an ISO time") from None
        offset = when.utcoffset()
        if not isinstance(at, str) or offset is None or offset.total_seconds() != 0:
            raise bad(f"validated_at {at!r} is not in UTC")
        gxv = d.get("gx_version")
        if not isinstance(gxv, str) or len(gxv) > 64:
            raise bad(f"gx_version {gxv!r}")
        dur = d.get("duration_s")
        if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur) or dur < 0:
            raise bad(f"duration_s {dur!r}")
        sel = d.get("selector", {})
        if not isinstance(sel, dict):
            raise bad("selector is not an object")
        raw = d.get("results")
        if not isinstance(raw, list) or len(raw) > MAX_EXPECTATIONS:
            raise bad("results is not a list of expectation results")
        results = []
        for i, r in enumerate(raw):
            if not isinstance(r, dict):
                raise bad(f"result {i} is not an object")
            rtype, ok, kwargs, raised = r.get("type"), r.get("success"), r.get("kwargs", {}), r.get("exception")
            if not isinstance(rtype, str) or not EXPECTATION_TYPE_RE.match(rtype):
                raise bad(f"result {i} has type {rtype!r}")
            if not isinstance(ok, bool) or not isinstance(kwargs, dict) or not (raised is None or isinstance(raised, str)):
                raise bad(f"result {i} ({rtype}) has an invalid success, kwargs or exception")
            results.append(ExpectationOutcome(rtype, kwargs, ok, r.get("observed"), raised))
        if success != all(r.success for r in results):
            raise bad(f"it says success={success} while its expectations say otherwise")
        for key, n in (("evaluated", len(results)), ("failed", sum(1 for r in results if not r.success))):
            if key in d and d[key] != n:
                raise bad(f"{key} {d[key]!r} does not match its {n} results")
        return cls(stream, snapshot_id, batch, suite, sha, success, at, gxv, float(dur), sel, results)


def get_validation(store: SnapshotStore, stream: str, snapshot_id: str, suite: str) -> ValidationRecord | None:
    """The stored result of `suite` on a snapshot, or None; a damaged record is an error."""
    validate_stream_name(stream)
    validate_snapshot_id(snapshot_id)
    validate_suite_name(suite)
    data = store.get_record(validation_key(stream, snapshot_id, suite))
    if data is None:
        return None
    return ValidationRecord.from_json(data, stream=stream, snapshot_id=snapshot_id, suite=suite)


def put_validation(store: SnapshotStore, record: ValidationRecord) -> ValidationRecord:
    """Store a record write-once; when one is already there (a concurrent validation), that
    one is returned and this one dropped."""
    key = validation_key(record.stream, record.snapshot_id, record.suite)
    try:
        store.put_record(key, record.to_bytes())
        return record
    except ManifestExistsError:
        existing = get_validation(store, record.stream, record.snapshot_id, record.suite)
        if existing is None:
            raise
        return existing


def validation_status(
    store: SnapshotStore, stream: str, snapshot_ids: list[str] | None = None
) -> dict[str, dict[str, bool | None]]:
    """{snapshot id: {suite: success}} of the stored records of a stream's snapshots
    (default: all of them); a damaged record shows as None (never as passed)."""
    out: dict[str, dict[str, bool | None]] = {}
    for snapshot_id in store.list_snapshot_ids(stream) if snapshot_ids is None else snapshot_ids:
        prefix = f"{STREAMS_PREFIX}/{stream}/{VALIDATIONS_KIND}/{snapshot_id}/"
        for key in store.list_records(prefix):
            name = key[len(prefix):]
            if not name.endswith(MANIFEST_SUFFIX) or "/" in name:
                continue
            suite = name[: -len(MANIFEST_SUFFIX)]
            try:
                rec = get_validation(store, stream, snapshot_id, suite)
                out.setdefault(snapshot_id, {})[suite] = None if rec is None else rec.success
            except (UnsafeManifestError, UsageError) as exc:
                log.warning("unreadable validation record %s: %s", key, exc.one_line())
                out.setdefault(snapshot_id, {})[suite] = None
    return out
