"""Snapshot cost grows with what changed: no new batch uploads nothing but the manifest.

"Nothing changed" is about the checkpoint, not the query: after a query stops, Spark's
state store maintenance may still upload a RocksDB snapshot (a `<v>.zip` and its SSTs)
queued at an earlier commit. A second cut of the same batch then starts from that zip;
it may hash and upload exactly those files, and nothing else (`late_maintenance_files`).
"""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce
from tests.streams import late_maintenance_files, run_to_end, use_state_store

pytestmark = pytest.mark.integration


def _new_blob_bytes(files, known_blobs: dict[str, int]) -> int:  # noqa: ANN001
    return sum({f.sha256: f.size for f in files if f.sha256 not in known_blobs}.values())


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_snapshot_uploads_only_what_changed(stack, spark, topic, tmp_path, make_store, store_kind) -> None:
    use_state_store(spark, "rocksdb-changelog")
    store, _, _ = make_store(store_kind)
    checkpoint = str(tmp_path / "ckpt")
    spec = GeneratorSpec(seed=3, accounts=40, events=600)
    produce(stack.kafka_bootstrap, topic, spec)
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)

    s1 = create_snapshot(checkpoint, store, "incr")
    # A first snapshot uploads each distinct content once (identical files share a blob).
    assert s1.bytes_uploaded == sum(s1.manifest.blobs.values()) > 0
    assert s1.manifest.parent is None

    # Same batch again: reused as is, unless asked for a new snapshot (`always`).
    assert create_snapshot(checkpoint, store, "incr").reused
    s2 = create_snapshot(checkpoint, store, "incr", always=True)
    assert s2.manifest.parent == s1.manifest.snapshot_id
    late = late_maintenance_files(s1.manifest, s2.manifest)
    if not late:  # the usual case: the checkpoint did not change
        assert (s2.bytes_uploaded, s2.blobs_uploaded, s2.files_hashed) == (0, 0, 0)
        assert s2.manifest.files == s1.manifest.files
    assert s2.files_hashed == len(late)
    assert s2.bytes_uploaded == _new_blob_bytes(late, s1.manifest.blobs)

    produce(stack.kafka_bootstrap, topic, spec.next_round(300))
    last = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    s3 = create_snapshot(checkpoint, store, "incr")
    assert s3.manifest.batch_id == last > s1.manifest.batch_id

    before = {(f.path, f.size, f.mtime_ns) for f in s2.manifest.files}
    changed = [f for f in s3.manifest.files if (f.path, f.size, f.mtime_ns) not in before]
    assert s3.files_hashed == len(changed)
    assert s3.bytes_uploaded == _new_blob_bytes(changed, s2.manifest.blobs)
    assert 0 < s3.bytes_uploaded < s3.manifest.bytes_total


def test_streams_share_identical_blobs(stack, spark, topic, tmp_path, make_store) -> None:
    use_state_store(spark, "rocksdb-changelog")
    store, _, _ = make_store("local")
    checkpoint = str(tmp_path / "ckpt")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=4, accounts=10, events=200))
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    a = create_snapshot(checkpoint, store, "stream-a")
    b = create_snapshot(checkpoint, store, "stream-b")  # a different stream, same content
    late = late_maintenance_files(a.manifest, b.manifest)
    assert a.bytes_uploaded > 0
    assert b.bytes_uploaded == _new_blob_bytes(late, a.manifest.blobs)  # 0 unless maintenance wrote meanwhile
    assert sum(1 for _ in store.iter_blobs()) == len(a.manifest.blobs.keys() | b.manifest.blobs.keys())
