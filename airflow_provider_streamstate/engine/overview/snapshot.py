"""One snapshot as its page shows it: the manifest's summary (batch, offsets per partition,
watermark, state operators, files, bytes, parent), every validation result with its failed
expectations, where it sits in the history (timeline, pin, clones, DR copy).

Its own manifest and validation records are read, plus listings and a few small records
(timelines, pins, clones): never the stream's other manifests, so the page is as fast in a
store whose catalog index was never built (a DR store nobody ran retention on) as in one
whose index is warm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_streamstate.engine.catalog.retention import PIN_LABEL, pin_key, pinned_ids
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot
from airflow_provider_streamstate.engine.catalog.timeline import load_timelines, snapshot_refs
from airflow_provider_streamstate.engine.catalog.validation_records import (
    VALIDATIONS_KIND,
    ValidationRecord,
    get_validation,
)
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.engine.core.manifest import Manifest, SnapshotRef, validate_snapshot_id
from airflow_provider_streamstate.engine.overview.history import age_seconds
from airflow_provider_streamstate.engine.stores.base import MANIFEST_SUFFIX, STREAMS_PREFIX, SnapshotStore
from airflow_provider_streamstate.engine.streams.clones import list_clones

MAX_FAILED_SHOWN = 50  # failed expectations listed per suite


@dataclass(frozen=True)
class ValidationView:
    """One suite's stored result on the snapshot (or why its record could not be read)."""

    suite: str
    success: bool | None  # None: the record is unreadable
    validated_at: str | None
    evaluated: int
    failed: list[str]  # each failed expectation, described in one line
    gx_version: str | None
    duration_s: float | None
    data_docs: str | None  # where the Data Docs of this run are, when recorded
    error: str | None = None

    @classmethod
    def of(cls, rec: ValidationRecord) -> ValidationView:
        docs = rec.selector.get("data_docs") if isinstance(rec.selector, dict) else None
        return cls(rec.suite, rec.success, rec.validated_at, len(rec.results),
                   [r.describe() for r in rec.failed[:MAX_FAILED_SHOWN]], rec.gx_version, rec.duration_s,
                   docs if isinstance(docs, str) else None)

    def to_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "success": self.success, "validated_at": self.validated_at,
                "evaluated": self.evaluated, "failed": self.failed, "gx_version": self.gx_version,
                "duration_s": self.duration_s, "data_docs": self.data_docs, "error": self.error}


@dataclass(frozen=True)
class SnapshotDetail:
    """A snapshot's page."""

    stream: str
    store: str
    snapshot_id: str
    batch_id: int
    timeline: int
    created_at: str
    age_s: float
    parent: str | None
    on_current_timeline: bool
    current_timeline: int
    query_id: str
    kafka_offsets: dict[str, dict[str, int]]
    watermark_ms: int | None
    operators: list[dict[str, Any]]
    state_store: str
    files: int
    blobs: int
    bytes_total: int
    spark_version: str | None
    checkpoint: str
    labels: dict[str, str]
    validations: list[ValidationView]
    pinned: bool
    in_dr: bool | None
    dr_store: str | None
    clones: list[str]
    pin_reason: str | None = None  # why it was pinned (`streamstate pin --reason`, or a `pin` label's text)
    pinned_at: str | None = None

    @property
    def known_good(self) -> bool:
        return bool(self.validations) and all(v.success is True for v in self.validations)

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream, "store": self.store, "snapshot_id": self.snapshot_id, "batch_id": self.batch_id,
            "timeline": self.timeline, "created_at": self.created_at, "age_s": self.age_s, "parent": self.parent,
            "on_current_timeline": self.on_current_timeline,
            "current_timeline": self.current_timeline, "query_id": self.query_id,
            "kafka_offsets": self.kafka_offsets, "watermark_ms": self.watermark_ms, "operators": self.operators,
            "state_store": self.state_store, "files": self.files, "blobs": self.blobs,
            "bytes_total": self.bytes_total, "spark_version": self.spark_version, "checkpoint": self.checkpoint,
            "labels": self.labels, "validations": [v.to_json() for v in self.validations],
            "known_good": self.known_good, "pinned": self.pinned, "in_dr": self.in_dr, "dr_store": self.dr_store,
            "clones": self.clones, "pin_reason": self.pin_reason, "pinned_at": self.pinned_at,
        }


def _operators(m: Manifest) -> list[dict[str, Any]]:
    return [{"operator_id": o.operator_id, "name": o.name, "stores": list(o.stores), "partitions": o.partitions,
             "state_version": o.state_version, "state_variables": [v.get("name") for v in o.state_variables]}
            for o in m.operators]


def validation_views(store: SnapshotStore, stream: str, snapshot_id: str) -> list[ValidationView]:
    """Every stored suite result on the snapshot, by suite name; a damaged record is shown as such."""
    prefix = f"{STREAMS_PREFIX}/{stream}/{VALIDATIONS_KIND}/{snapshot_id}/"
    out = []
    for key in store.list_records(prefix):
        name = key[len(prefix):]
        if "/" in name or not name.endswith(MANIFEST_SUFFIX):
            continue
        suite = name[: -len(MANIFEST_SUFFIX)]
        try:
            rec = get_validation(store, stream, snapshot_id, suite)
        except StreamstateError as exc:
            out.append(ValidationView(suite, None, None, 0, [], None, None, None, exc.one_line()))
            continue
        if rec is not None:
            out.append(ValidationView.of(rec))
    return sorted(out, key=lambda v: v.suite)


def snapshot_detail(store: SnapshotStore, stream: str, snapshot_id: str, *,
                    dr_store: SnapshotStore | None = None, now: datetime | None = None) -> SnapshotDetail:
    """One snapshot of `stream` in `store`, as its page shows it; NotFoundError when the store
    does not hold it. A DR store that cannot be listed leaves `in_dr` unknown (None)."""
    m = get_snapshot(store, stream, validate_snapshot_id(snapshot_id))
    refs = snapshot_refs(store, stream)
    timelines = load_timelines(store, stream, refs)
    label_text = m.labels.get(PIN_LABEL, "")
    label = label_text.lower() not in ("", "false", "0", "no")
    pinned = label or snapshot_id in pinned_ids(store, stream)
    reason, pinned_at = _pin_record(store, stream, snapshot_id) if pinned else (None, None)
    if reason is None and label and label_text.lower() not in ("true", "1", "yes"):
        reason = f"label {PIN_LABEL}={label_text}"
    in_dr: bool | None = None
    if dr_store is not None:
        try:
            in_dr = snapshot_id in dr_store.list_snapshot_ids(stream)
        except (StreamstateError, OSError):
            in_dr = None
    return SnapshotDetail(
        stream, store.url, m.snapshot_id, m.batch_id, m.timeline, m.created_at,
        round(age_seconds(m.created_at, now), 1), m.parent, timelines.contains(SnapshotRef.parse(snapshot_id)),
        timelines.current, m.query_id, {t: dict(p) for t, p in m.kafka_offsets.items()}, m.watermark_ms,
        _operators(m), m.state_store, m.totals.files, m.totals.blobs, m.bytes_total, m.spark_version, m.checkpoint,
        dict(m.labels), validation_views(store, stream, snapshot_id), pinned,
        in_dr, dr_store.url if dr_store is not None else None,
        sorted(c.clone for c in list_clones(store, stream) if c.snapshot_id == snapshot_id), reason, pinned_at,
    )


def _pin_record(store: SnapshotStore, stream: str, snapshot_id: str) -> tuple[str | None, str | None]:
    """(reason, pinned_at) of the snapshot's pin record; (None, None) without a readable one."""
    raw = store.get_record(pin_key(stream, snapshot_id))
    if raw is None:
        return None, None
    try:
        body = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    reason, at = body.get("reason"), body.get("pinned_at")
    return (reason if isinstance(reason, str) and reason else None), (at if isinstance(at, str) else None)
