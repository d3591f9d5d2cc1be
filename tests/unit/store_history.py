"""Hand-built snapshot histories in a store, for retention and GC tests: manifests with
chosen ids, creation times, timelines, labels and blobs, without a checkpoint."""

from __future__ import annotations

import hashlib
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from airflow_provider_streamstate.engine.core.manifest import FileEntry, Manifest, new_snapshot_id
from airflow_provider_streamstate.engine.stores.base import SnapshotStore


def at(text: str) -> datetime:
    """`2026-11-20T12:00` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def put_blob(store: SnapshotStore, content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()
    with tempfile.NamedTemporaryFile() as f:
        f.write(content)
        f.flush()
        store.put_blob(digest, Path(f.name), len(content))
    return digest


def put_snapshot(
    store: SnapshotStore, stream: str, batch: int, created: datetime, *, timeline: int = 1,
    labels: dict[str, str] | None = None, contents: list[bytes] | None = None,
) -> Manifest:
    """Publish a manifest whose files hold `contents` (default: one file unique to it)."""
    sid = new_snapshot_id(batch, created, timeline)
    contents = contents if contents is not None else [f"{stream} {sid}".encode()]
    files = [FileEntry(f"state/0/0/{i}.delta", len(c), put_blob(store, c)) for i, c in enumerate(contents)]
    m = Manifest(
        snapshot_id=sid, stream=stream, batch_id=batch, created_at=created.isoformat().replace("+00:00", "Z"),
        query_id="q", kafka_offsets={}, sources=[], watermark_ms=None, next_watermark_ms=None,
        batch_timestamp_ms=None, state_store="hdfs", operators=[], spark_conf={}, files=files, parent=None,
        spark_version=None, labels=dict(labels or {}), checkpoint="/ckpt", created_by="test", timeline=timeline,
    )
    store.put_manifest(stream, sid, m.to_json())
    return m


def put_validation(store: SnapshotStore, stream: str, snapshot_id: str, suite: str, success: bool, *,
                   data_docs: str | None = None) -> str:
    """Store a validation record of `suite` on the snapshot, as the validation task writes it
    (with `data_docs`: where its Data Docs were written)."""
    from airflow_provider_streamstate.engine.catalog import validation_records as vr
    from airflow_provider_streamstate.engine.core.manifest import SnapshotRef

    record = vr.ValidationRecord(
        stream=stream, snapshot_id=snapshot_id, batch_id=SnapshotRef.parse(snapshot_id).batch_id, suite=suite,
        suite_sha256="0" * 64, success=success, validated_at="2026-11-20T00:00:00Z", gx_version="test",
        duration_s=0.0, selector={"data_docs": data_docs} if data_docs else {},
        results=[vr.ExpectationOutcome("expect_column_values_to_not_be_null", {"column": "key"}, success, None)],
    )
    vr.put_validation(store, record)
    return vr.validation_key(stream, snapshot_id, suite)
